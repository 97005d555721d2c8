"""Adding a load mode takes three files: its value in :class:`specnb.ledger.LoadMode`
(``ledger/names.py``), its profile in ``sweep/load.py`` (levels, file tag, requests in flight,
ledger shape, driver shape) and its driver in ``engine/loadgen.py``. This test makes exactly
those three edits to a copy of the package, adding a ``burst`` mode, and runs a sweep of it
against the fake vLLM: the spec, plan, measurer, ledgers and frame take it with no other file
touched (docs/design.md, "A load mode", is the recipe)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from specnb import paths
from tests.hang import guard
from tests.unit.fakevllm import fake_model, fake_python

EDITS = {
    "ledger/names.py": [('    CONVERSATION = "conversation"\n',
                         '    CONVERSATION = "conversation"\n    BURST = "burst"\n')],
    "sweep/load.py": [
        ("# every mode's profile: a new mode", '''class BurstLoad(LoadProfile):
    """Bursts of requests: all of a level's slots busy from the first instant."""

    mode: ClassVar[LoadMode] = LoadMode.BURST
    no_levels: ClassVar[str] = "a burst sweep needs burst sizes (bursts = [2, 4])"
    load: Literal["burst"] = "burst"
    bursts: list[int] = Field(default_factory=list)

    def levels(self) -> list[float]:
        return list(self.bursts)

    @classmethod
    def tag(cls, level: float) -> str:
        return f"b{int(level):03d}"

    def shape(self, level, *, client_workers=None, history=None, conversations=None) -> LoadShape:
        return LoadShape(mode=self.mode.shape, concurrency=int(level))

    def point(self, level, n, *, history=None, prompt_offset=0, client_workers=1):
        from specnb.engine.loadgen import Burst

        return Burst(int(level), n)


# every mode's profile: a new mode'''),
        ("MODES: tuple[type[LoadProfile], ...] = (ConcurrencyLoad, RateLoad, ConversationLoad)",
         "MODES: tuple[type[LoadProfile], ...] = (ConcurrencyLoad, RateLoad, ConversationLoad, BurstLoad)"),
    ],
    "engine/loadgen.py": [(None, '''

@dataclass(frozen=True)
class Burst:
    mode: ClassVar[LoadMode] = LoadMode.BURST
    size: int
    num_requests: int


@_drives(Burst)
async def drive_burst(target, load, prompts, sampling, on_done=None):
    return await drive_closed(target, ClosedLoop(load.size, load.num_requests), prompts, sampling, on_done)
''')],
}

SCRIPT = r"""
import json, sys
from pathlib import Path
import specnb.sweep.measure as measure, specnb.sweep.servers as servers
from specnb.engine.server import VllmServer
exe, model, state, out = sys.argv[1:5]

class Server(VllmServer):
    def __init__(self, *a, **kw):
        super().__init__(*a, python=exe, stop_grace_s=3, **kw)

class Quiet:
    threshold = 0.3
    def __init__(self, pid): pass
    def other_cores(self): return 0.0

servers.VllmServer, measure.HostLoad = Server, Quiet
from specnb.ledger import load_ledgers, read_ledger
from specnb.sweep import SweepSpec, run_sweep
s = SweepSpec.parse(dict(
    name="burst", model=model, served_model_name="fake", load="burst", bursts=[2], workloads=["copy"], repeats=1,
    panel_size=4, work_floor_tokens=0, warmup_requests=0, request_timeout_s=5, metrics_interval_s=0.05,
    ready_timeout_s=30, sampling={"max_tokens": 4}, env={"FAKE_VLLM_STATE": state}, arms=[{"name": "baseline"}]))
o = run_sweep(s, Path(out), progress=False, echo=lambda _line: None)
led = read_ledger(o.written[0])
df = load_ledgers(out)
print(json.dumps({"ok": o.ok, "written": [p.name for p in o.written], "mode": led.load.mode,
                  "concurrency": led.concurrency, "frame_mode": list(df["load_mode"]),
                  "dumped": json.loads((Path(out) / "sweep.json").read_text())["spec"]["bursts"]}))
"""


def test_a_new_load_mode_is_three_files(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(paths.ROOT / "src" / "specnb", src / "specnb", ignore=shutil.ignore_patterns("__pycache__"))
    for rel, edits in EDITS.items():
        f = src / "specnb" / rel
        text = f.read_text()
        for old, new in edits:
            if old is None:
                text += new
            else:
                assert text.count(old) == 1, f"{rel}: the anchor {old[:40]!r} moved (update this test's edits)"
                text = text.replace(old, new)
        f.write_text(text)
    state = tmp_path / "state"
    state.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), str(paths.ROOT)]), "SPECNB_ROOT": str(paths.ROOT)}
    res = subprocess.run([sys.executable, "-c", SCRIPT, str(fake_python(tmp_path)), str(fake_model(tmp_path / "m")),
                          str(state), str(tmp_path / "out")], capture_output=True, text=True, env=env,
                         timeout=guard("fake_sweep"), cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got == {"ok": True, "written": ["b002-r00.json"], "mode": "burst", "concurrency": 2,
                   "frame_mode": ["burst"], "dumped": [2]}
