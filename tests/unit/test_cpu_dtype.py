"""Every CPU file a README or docs command runs serves the machine's dtype (`--dtype machine`:
bf16 where this CPU has a oneDNN bf16 kernel, fp32 where it has none, as on AVX2-only CPUs),
unless the file measures dtype itself and says so in a comment ("pins the dtype")."""

from __future__ import annotations

import re

from specnb import paths

MARK = "pins the dtype"
# --dtype followed by its value, as TOML, Python or YAML lists write it, or --dtype=value
DTYPE = re.compile(r"""--dtype(?:=|["']?\s*,\s*["']?)([A-Za-z0-9_]+)""")


def cpu_files() -> list:
    root = paths.ROOT
    files = sorted((root / "configs").glob("cpu-*.toml"))
    files += sorted(p for p in (root / "notebooks" / "params").glob("*/*.yaml") if p.parent.name != "gpu")
    files += sorted((root / "notebooks").glob("[0-9][0-9]_*.py"))
    return files


def pinned(text: str) -> list[str]:
    return [m for m in DTYPE.findall(text) if m != "machine"]


def test_the_pattern_reads_every_way_a_file_writes_a_dtype():
    assert pinned('server_args = ["--enforce-eager", "--dtype", "bfloat16"]') == ["bfloat16"]
    assert pinned("server_args: [--dtype, float32]") == ["float32"]
    assert pinned("args = ['--dtype=half']") == ["half"]
    assert pinned('["--dtype", "machine", "--max-model-len", "2048"]') == []


def test_every_cpu_file_serves_the_machines_dtype_or_says_why_it_pins_one():
    files = cpu_files()
    assert len(files) > 15 and any(p.name == "cpu-tune.toml" for p in files)
    for path in files:
        text = path.read_text()
        if pinned(text):
            comments = [line for line in text.splitlines() if line.lstrip().startswith("#") or " # " in line]
            assert any(MARK in c for c in comments), (
                f"{path.relative_to(paths.ROOT)} pins --dtype {pinned(text)} with no comment saying it "
                f"{MARK} (it measures dtype itself); else serve --dtype machine")
