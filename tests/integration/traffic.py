"""Steady chat traffic on a real server for the watch and alert tests: ``users`` closed-loop
clients cycling through a bundled prompt set, greedy unless told, until the block ends (each client finishes
its request in flight). The load the tests put on a server, not a measurement (specnb's own
client measures, in the sweeps)."""

from __future__ import annotations

import json
import threading
import urllib.request

from specnb.prompts.workload import bundled


class Traffic:
    def __init__(self, url: str, model: str, prompt_set: str, users: int, *, max_tokens: int = 64,
                 prompts: int = 40, temperature: float = 0.0, texts: list[str] | None = None):
        """``prompt_set``: a bundled set, or ``texts``' user messages where given."""
        self.url, self.model, self.users, self.max_tokens = url, model, users, max_tokens
        self.temperature = temperature
        self.prompts = ([[{"role": "user", "content": t}] for t in texts] if texts
                        else [p.messages for p in bundled(prompt_set).prompts][:prompts])
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.threads = [threading.Thread(target=self._user, args=(i,), daemon=True) for i in range(users)]

    def _user(self, i: int) -> None:
        n = i
        while not self.stop.is_set():
            body = json.dumps({"model": self.model, "messages": self.prompts[n % len(self.prompts)],
                               "max_tokens": self.max_tokens, "temperature": self.temperature,
                               "seed": n}).encode()
            req = urllib.request.Request(self.url + "/v1/chat/completions", body, {"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=300) as r:
                    r.read()
            except OSError as exc:
                self.errors.append(str(exc))
                return
            n += self.users

    def __enter__(self) -> Traffic:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=300)
        assert not self.errors, self.errors[:3]
