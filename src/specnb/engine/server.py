"""Start, watch and stop a vLLM OpenAI-compatible server, or attach to a running one.

A launched server runs ``vllm serve`` from the current interpreter's environment where the
installed build has the CLI (the ordinary ``vllm`` package; the CPU build with the metadata
shim ``make setup`` adds), else the deprecated ``python -m vllm.entrypoints.openai.api_server``
(:func:`specnb.engine.vllm.serve_command`), in its own process group, bound to 127.0.0.1 on a
free port, with its log in a file. :meth:`VllmServer.start` waits for ``/health`` and
``/v1/models``; if the process dies first it raises with the log's tail. Stopping sends
SIGTERM to the whole group, then SIGKILL after a grace period; it runs on normal exit, on
exceptions, on Ctrl-C and (through an ``atexit`` hook and a SIGTERM handler) when the
Python process itself is told to stop.

Nothing here assumes CPU or GPU: the environment comes from
:func:`specnb.engine.vllm.engine_environment`.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from specnb import paths
from specnb.engine import forkserver
from specnb.engine.vllm import (
    LOCALHOST,
    TWO_PROCESSES,
    TWO_PROCESSES_OPT_IN,
    engine_environment,
    installed_vllm,
    recorded_environment,
    serve_command,
    single_worker,
)
from specnb.ledger.names import EndpointMode

__all__ = [
    "stop_group",
    "live_servers",
    "ServerError",
    "ServerStartError",
    "EngineDiedError",
    "engine_cause",
    "EndpointAuthError",
    "KvCapacity",
    "bearer",
    "Endpoint",
    "VllmServer",
    "attach",
    "parse_kv_capacity",
    "free_port",
]



class ServerError(RuntimeError):
    """The server could not be used."""


class EngineDiedError(ServerError):
    """The server came up but its engine failed at its first requests; the message names the
    cause read from the server's log."""


# "(EngineCore pid=12) ERROR 12-01 09:58:03 [core.py:1001] " before each line of a vLLM log
_LOG_PREFIX = re.compile(r"^(?:\([^)]*\)\s+)?(?:[A-Z]+\s+\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\s+\[[^\]]*\]\s+)?")
_EXC_LINE = re.compile(r"^((?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Failure))(?::\s*(.*))?$")
# what the API server says after the engine died: the consequence, never the cause
_GENERIC = ("EngineDeadError", "EngineGenerateError", "CancelledError", "ClientDisconnectedError")


def engine_cause(log_text: str) -> str | None:
    """The root cause of an engine failure in a vLLM server log, as ``"Type: message"``: the
    first exception line of the first traceback that is not the API server's "engine is dead"
    consequence; None when the log holds no traceback."""
    lines = [_LOG_PREFIX.sub("", ln).rstrip() for ln in log_text.splitlines()]
    start = next((i for i, ln in enumerate(lines) if ln.startswith("Traceback (most recent call last)")), None)
    if start is None:
        return None
    found = []
    for ln in lines[start:]:
        m = _EXC_LINE.match(ln.strip())
        if m:
            found.append((m.group(1), m.group(2) or ""))
    for name, msg in found:
        if name.rsplit(".", 1)[-1] not in _GENERIC:
            return f"{name.rsplit('.', 1)[-1]}: {msg}".strip().rstrip(":")
    return f"{found[0][0].rsplit('.', 1)[-1]}: {found[0][1]}".strip().rstrip(":") if found else None


class ServerStartError(ServerError):
    """The server died or timed out while starting; ``log_tail`` says why."""

    def __init__(self, message: str, log_tail: str = ""):
        super().__init__(message + (f"\n--- server log tail ---\n{log_tail}" if log_tail else ""))
        self.short = message
        self.log_tail = log_tail


# --------------------------------------------------------------------------- KV capacity

_KV_SIZE = re.compile(r"\b(?P<device>[A-Z]+) KV cache size: (?P<tokens>[\d,]+) tokens")
_MAX_CONC = re.compile(
    r"Maximum concurrency for (?P<per_req>[\d,]+) tokens per request: (?P<x>[\d,]*\.?\d+)x"
)


@dataclass
class KvCapacity:
    """KV pool as the engine logged it at start, one entry per engine (data parallel)."""

    device: str | None = None
    tokens: list[int] = field(default_factory=list)
    tokens_per_request: int | None = None
    max_concurrency: list[float] = field(default_factory=list)

    @property
    def total_tokens(self) -> int | None:
        return sum(self.tokens) if self.tokens else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "tokens_per_engine": self.tokens,
            "total_tokens": self.total_tokens,
            "tokens_per_request": self.tokens_per_request,
            "max_concurrency_per_engine": self.max_concurrency,
        }


def _num(s: str) -> float:
    return float(s.replace(",", ""))


def parse_kv_capacity(log_text: str) -> KvCapacity:
    """Parse ``<DEV> KV cache size: N tokens`` and ``Maximum concurrency for M tokens per
    request: X.XXx``, on one line (vLLM >= 0.11, CPU and GPU) or two (older GPU builds)."""
    kv = KvCapacity()
    for m in _KV_SIZE.finditer(log_text):
        kv.device = m.group("device")
        kv.tokens.append(int(_num(m.group("tokens"))))
    for m in _MAX_CONC.finditer(log_text):
        kv.tokens_per_request = int(_num(m.group("per_req")))
        kv.max_concurrency.append(_num(m.group("x")))
    return kv


# how often a starting server is asked whether it answers: a refused connection costs microseconds,
# and every start waits half of this on average past the moment it could serve
READY_POLL_S = 0.2


def free_port(host: str = LOCALHOST) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def bearer(api_key: str | None) -> dict[str, str]:
    """The request headers for an API key (none without one). The key goes only into headers:
    never into a URL, a log line, a ledger or an error message."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def _get_json(url: str, timeout: float = 5.0, api_key: str | None = None) -> Any:
    req = urllib.request.Request(url, headers=bearer(api_key))
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read().decode())


def _post(url: str, timeout: float = 10.0, api_key: str | None = None) -> int:
    req = urllib.request.Request(url, method="POST", data=b"", headers=bearer(api_key))
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


# --------------------------------------------------------------------------- endpoint

@dataclass
class Endpoint:
    """A server that can be measured: launched by specnb or attached to."""

    base_url: str
    model: str
    mode: EndpointMode
    engine_version: str | None = None
    argv: list[str] | None = None
    env: dict[str, str] = field(default_factory=dict)
    kv: KvCapacity = field(default_factory=KvCapacity)
    pid: int | None = None
    ready_s: float | None = None
    # a launched server's start: "exec" (afresh), "fork-server+engine-core" (its API server forked from a fork
    # server and its engine core from that), "fork-server" (the engine core spawned); None: attached
    launcher: str | None = None
    api_key: str | None = field(default=None, repr=False)  # sent as a bearer token, never described

    @property
    def headers(self) -> dict[str, str]:
        return bearer(self.api_key)

    def reset_prefix_cache(self) -> bool:
        """Empty the server's prefix cache (dev-mode route); False if it refused."""
        try:
            return _post(self.base_url + "/reset_prefix_cache", api_key=self.api_key) == 200
        except (urllib.error.URLError, OSError):
            return False

    def describe(self) -> dict[str, Any]:
        return {
            "mode": str(self.mode),
            "base_url": self.base_url,
            "model": self.model,
            "engine_version": self.engine_version,
            "argv": None if self.argv is None else [paths.portable(a) for a in self.argv],
            "env": self.env,
            "kv_capacity": self.kv.as_dict(),
            "ready_s": self.ready_s,
            "launcher": self.launcher,
        }


class EndpointAuthError(ServerError):
    """The endpoint refused the request for want of a (valid) API key: HTTP 401 or 403."""


def attach(base_url: str, model: str | None = None, timeout: float = 10.0, api_key: str | None = None) -> Endpoint:
    """Measure an already running endpoint; the model defaults to the first it serves.

    ``api_key`` is sent as a bearer token to every route (vLLM's ``--api-key`` guards ``/v1``)."""
    base_url = base_url.rstrip("/")
    try:
        models = _get_json(base_url + "/v1/models", timeout, api_key)
    except urllib.error.HTTPError as exc:
        cls = EndpointAuthError if exc.code in (401, 403) else ServerError
        raise cls(f"{base_url}/v1/models answered HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        why = getattr(exc, "reason", None) or exc
        raise ServerError(f"cannot reach {base_url}/v1/models: {why}") from None
    if not isinstance(models, dict) or not isinstance(models.get("data"), list):
        raise ServerError(f"{base_url}/v1/models did not answer as an OpenAI-compatible server")
    served = [m.get("id") for m in models["data"] if isinstance(m, dict)]
    if model is None:
        if not served:
            raise ServerError(f"{base_url} serves no models")
        model = served[0]
    elif model not in served:
        raise ServerError(f"{base_url} does not serve {model!r} (it serves {served})")
    ep = Endpoint(base_url=base_url, model=model, mode=EndpointMode.ATTACHED, api_key=api_key)
    try:
        ep.engine_version = _get_json(base_url + "/version", timeout, api_key).get("version")
    except (urllib.error.URLError, OSError, ValueError):
        pass
    return ep


# --------------------------------------------------------------------------- launched server

_LIVE: dict[int, VllmServer] = {}
_HOOKS_INSTALLED = False
_SIGTERM_HOOKED = False


def live_servers() -> dict[int, VllmServer]:
    """The servers this process launched and has not stopped yet, by process id (a copy)."""
    return dict(_LIVE)


def _stop_all() -> None:
    for srv in list(_LIVE.values()):
        srv.stop()
    forkserver.close_all()


def _install_hooks() -> None:
    """Stop every launched server when this process exits or is told to stop (the SIGTERM handler
    at the first launch from the main thread: a handler can only be set there)."""
    global _HOOKS_INSTALLED, _SIGTERM_HOOKED
    if not _HOOKS_INSTALLED:
        _HOOKS_INSTALLED = True
        atexit.register(_stop_all)
    if not _SIGTERM_HOOKED and threading.current_thread() is threading.main_thread():
        _SIGTERM_HOOKED = True
        if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
            def _on_term(signum, frame):  # noqa: ARG001
                raise SystemExit(128 + signum)  # unwinds through every `with VllmServer`

            signal.signal(signal.SIGTERM, _on_term)


def stop_group(proc: subprocess.Popen, grace_s: float = 20.0, sig: int = signal.SIGTERM) -> None:
    """Stop a process started with ``start_new_session=True`` and everything in its group (its
    leader's pid is the group id): ``sig`` to the group, KILL to whatever is left after ``grace_s``.
    Returns once the leader is reaped (or 10 s after the KILL)."""
    pgid = proc.pid
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    deadline = time.monotonic() + grace_s
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if _group_alive(pgid):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


class VllmServer:
    """A vLLM server process owned by specnb. Use as a context manager."""

    def __init__(
        self,
        model: str,
        *,
        args: list[str] | None = None,
        speculative_config: dict[str, Any] | None = None,
        served_model_name: str | None = None,
        env: dict[str, str] | None = None,
        log_path: Path | str,
        host: str = LOCALHOST,
        port: int | None = None,
        ready_timeout_s: float = 600.0,
        stop_grace_s: float = 20.0,
        python: str | None = None,
    ):
        self.model = model
        self.served_model_name = served_model_name or model
        self.args = list(args or [])
        self.speculative_config = speculative_config
        self.host = host
        self.port = port
        self.ready_timeout_s = ready_timeout_s
        self.stop_grace_s = stop_grace_s
        self.python = python or sys.executable
        self.log_path = Path(log_path)
        self.env_overrides = dict(env or {})
        self.proc: subprocess.Popen | forkserver.ForkedProcess | None = None
        self.endpoint: Endpoint | None = None
        self._log_offset = 0
        self._stopped = False
        self.pid: int | None = None
        self.launched_at: float | None = None  # wall time (epoch s) of the last launch: start-up breakdown
        self._launch: dict[str, Any] | None = None  # what wait_ready() needs of the last launch
        self.launcher: str | None = None  # how the last launch started it (Endpoint.launcher)

    # argv and env are pure, so they are recorded in ledgers and tested without a server
    def argv(self, port: int) -> list[str]:
        entry = serve_command(self.python)
        # `vllm serve` takes the model as its first argument; the module entry point as --model
        model = [self.model] if entry[-1] == "serve" else ["--model", self.model]
        argv = [
            *entry, *model,
            "--served-model-name", self.served_model_name,
            "--host", self.host,
            "--port", str(port),
            *self.args,
        ]
        if self.speculative_config is not None:
            argv += ["--speculative-config", json.dumps(self.speculative_config, sort_keys=True)]
        return argv

    def environment(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """Defaults for this engine, then the caller's environment (``base``: a copy of it taken
        elsewhere, for a launch from another thread), then explicit overrides."""
        base = os.environ if base is None else base
        env = engine_environment()
        env.update(base)
        env.update(self.env_overrides)
        if (base.get(TWO_PROCESSES_OPT_IN) == "1" and installed_vllm()["cpu_build"] and single_worker(self.args)
                and not set(TWO_PROCESSES) & set(env)):
            env.update(TWO_PROCESSES)  # asked for (the test suite's servers); recorded in the ledgers' env
        return env

    def start(self) -> Endpoint:
        """Launch the server and wait until it answers (stopped again if it never does)."""
        self.launch()
        return self.wait_ready()

    def launch(self, base_env: Mapping[str, str] | None = None) -> None:
        """Start the server's process and return at once; :meth:`wait_ready` then waits for it.
        Several servers launched before any is waited for start side by side (a start is mostly
        one core importing torch and vLLM). Call it from the thread that will outlive the server:
        on Linux the server is told to stop when that thread ends (``PR_SET_PDEATHSIG``). ``base_env``:
        the environment to start from instead of ``os.environ`` (a copy taken on the main thread,
        which may change it meanwhile)."""
        _install_hooks()
        port = self.port or free_port(self.host)
        argv = self.argv(port)
        env = self.environment(base_env)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        log.write(f"# specnb: {' '.join(argv)}\n".encode())
        log.flush()
        self._log_offset = log.tell()  # a reused log holds earlier starts: parse only this one
        t0 = time.monotonic()
        self.launched_at = time.time()
        self.proc = self._forked(argv, env, log)
        if self.proc is None:
            self.proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=env, start_new_session=True, cwd=str(paths.ROOT), preexec_fn=forkserver.die_with_parent,
            )
        log.close()
        self.pid = self.proc.pid
        self._stopped = False
        _LIVE[self.proc.pid] = self
        self._launch = {"base_url": f"http://{self.host}:{port}", "t0": t0, "argv": argv, "env": env}

    def _forked(self, argv: list[str], env: dict[str, str], log) -> forkserver.ForkedProcess | None:
        """The server forked from a fork server where one is asked for (:mod:`specnb.engine.forkserver`);
        None: launch it afresh (not asked for, or the fork server failed: its log line says why)."""
        self.launcher = "exec"
        if not forkserver.wanted(self.python, argv):
            return None
        try:
            proc = forkserver.fork_launch(argv, len(serve_command(self.python)), env, str(paths.ROOT), self.log_path)
        except forkserver.ForkServerError as exc:
            log.write(f"# specnb: launched afresh: {exc}\n".encode())
            log.flush()
            return None
        self.launcher = "fork-server"  # "+engine-core" once its log shows the engine core forked (wait_ready)
        return proc

    def wait_ready(self) -> Endpoint:
        """Wait for the launched server to answer; on any error (or Ctrl-C) it is stopped first."""
        if self.proc is None or self._launch is None:
            raise RuntimeError("wait_ready() before launch()")
        base_url, t0 = self._launch["base_url"], self._launch["t0"]
        argv, env = self._launch["argv"], self._launch["env"]
        try:
            self._wait_ready(base_url, t0)
        except BaseException:
            self.stop()
            raise
        log_text = self.start_log()
        if self.launcher == "fork-server" and forkserver.FORK_LINE in log_text:
            self.launcher = "fork-server+engine-core"  # vLLM forked its engine core (forkserver._fork_engine_core)
        ep = Endpoint(
            base_url=base_url, model=self.served_model_name, mode=EndpointMode.LAUNCHED,
            argv=argv, env=recorded_environment(env), kv=parse_kv_capacity(log_text),
            pid=self.proc.pid, ready_s=time.monotonic() - t0, launcher=self.launcher,
        )
        try:
            ep.engine_version = _get_json(base_url + "/version").get("version")
        except (urllib.error.URLError, OSError, ValueError):
            pass
        self.endpoint = ep
        return ep

    def _wait_ready(self, base_url: str, t0: float) -> None:
        while not self._answers(base_url, t0):
            time.sleep(READY_POLL_S)

    def ready_now(self) -> bool:
        """One look, no wait: whether the launched server answers now; raises ServerStartError when
        it exited or its ready timeout passed (several servers launched together are polled in
        turn, so each one's ``ready_s`` is its own)."""
        if self.proc is None or self._launch is None:
            raise RuntimeError("ready_now() before launch()")
        return self._answers(self._launch["base_url"], self._launch["t0"])

    def _answers(self, base_url: str, t0: float) -> bool:
        code = self.proc.poll()
        if code is not None:
            raise ServerStartError(
                f"vLLM server exited with code {code} while starting (log: {self.log_path})",
                self.log_tail(),
            )
        try:
            with urllib.request.urlopen(base_url + "/health", timeout=2) as r:
                if r.status == 200:
                    _get_json(base_url + "/v1/models")
                    return True
        except urllib.error.HTTPError as exc:
            if exc.code in (401, 403):  # up, and guarding /v1 with an API key (VLLM_API_KEY)
                return True
        except (urllib.error.URLError, OSError, ValueError):
            pass
        # only a server that does not answer is late: one launched long before anyone waits for it
        # (started together with others, or early) is up, not timed out
        if time.monotonic() - t0 > self.ready_timeout_s:
            raise ServerStartError(
                f"vLLM server not ready after {self.ready_timeout_s:.0f} s (log: {self.log_path})",
                self.log_tail(),
            )
        return False

    def start_log(self) -> str:
        """The log of the last start only (a restarted server appends to the same file)."""
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(self._log_offset)
                return fh.read().decode(errors="replace")
        except OSError:
            return ""

    def alive(self, grace_s: float = 0.0) -> bool:
        """Whether the server's leader still runs. With ``grace_s`` (after a point that failed),
        a leader whose ``/health`` does not answer gets that long to finish exiting: the kernel
        closes a killed server's listening socket before its exit can be collected, so a point
        can fail on refused connections while ``poll()`` still sees the process."""
        if self.proc is None or self.proc.poll() is not None:
            return False
        if grace_s <= 0 or self.endpoint is None:
            return True
        try:
            with urllib.request.urlopen(self.endpoint.base_url + "/health", timeout=2) as r:
                if r.status == 200:
                    return True
        except urllib.error.HTTPError as exc:
            if exc.code in (401, 403):
                return True
        except (urllib.error.URLError, OSError, ValueError):
            pass
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            return True
        return False

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    @property
    def stopped(self) -> bool:
        """Whether :meth:`stop` has stopped the launched process (False before a launch)."""
        return self._stopped

    def stop(self) -> None:
        """TERM the process group, then KILL it after the grace period. Idempotent."""
        proc = self.proc
        if proc is None or self._stopped:
            return
        stop_group(proc, self.stop_grace_s)
        _LIVE.pop(proc.pid, None)
        self._stopped = True  # a later stop() must not signal a group id the OS may have reused

    def __enter__(self) -> Endpoint:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def started_together(servers: Mapping[str, VllmServer], launched: bool = False) -> Iterator[dict[str, Endpoint]]:
    """Launch every server, then wait for each: they start side by side (a start is mostly one
    core importing torch and vLLM). Yields name -> endpoint; every server is stopped on the way
    out, also when one of them never came up. Enter it from the thread that outlives the servers
    (:meth:`VllmServer.launch`). ``launched``: the caller launched them already; only wait."""
    try:
        for srv in servers.values():
            if not launched:
                srv.launch()
        yield {name: srv.wait_ready() for name, srv in servers.items()}
    finally:
        for srv in servers.values():
            srv.stop()


def _group_alive(pgid: int) -> bool:
    """True while any non-zombie process of the group remains."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    for p in psutil.process_iter(["status"]):
        try:
            if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.Error):
            continue
    return False
