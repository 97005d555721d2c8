"""A fake vLLM launched like the real one (a Python process with vLLM's arguments, log lines,
``/metrics`` and OpenAI streaming; ``tests/unit/fakevllm.py``), shared by the sweep tests that
need the runner's whole server life cycle in seconds: faults, timing records."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import specnb.sweep.measure as measure
import specnb.sweep.servers as servers
from specnb.engine.server import VllmServer
from tests.unit.fakevllm import fake_model, fake_python


class QuietHost:
    """Other agents share these machines: a busy neighbour must not reorder or flag these tests."""

    threshold = 0.3  # a 2-core host's

    def __init__(self, pid):
        pass

    def other_cores(self):
        return 0.0


@pytest.fixture
def fake_vllm(tmp_path, monkeypatch):
    """The runner launches the fake (``exe``) instead of vLLM; ``started`` lists every server it
    made; ``state`` is the folder the fake reads its injected faults from."""
    exe = fake_python(tmp_path)
    started: list[VllmServer] = []

    class Server(VllmServer):
        def __init__(self, *a, **kw):
            super().__init__(*a, python=str(exe), stop_grace_s=3, **kw)
            started.append(self)

    monkeypatch.setattr(servers, "VllmServer", Server)
    monkeypatch.setattr(measure, "HostLoad", QuietHost)
    state = tmp_path / "state"
    state.mkdir()
    return SimpleNamespace(model=fake_model(tmp_path / "model"), state=state, started=started, exe=exe)
