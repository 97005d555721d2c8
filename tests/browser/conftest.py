"""Headless Chromium for the browser tests: Debian's ``chromium`` driven by PyPI ``playwright``.

Playwright is pointed at the system binary (``executable_path``); it never downloads a browser
(``playwright install`` is never run). A missing chromium is installed once per session with
``tools/install_chromium.sh`` (apt-get; ``make test`` runs it too); where that cannot work (no
apt-get, not root) every browser test fails under CI=true with that one line, and skips with it
elsewhere (tests/conftest.py: require).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from specnb import paths
from tests.conftest import require

# without the background-networking flags Chromium keeps trying to reach Google services
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage",
]


def find_chromium() -> str | None:
    env = os.environ.get("SPECNB_CHROMIUM")  # when set, the only candidate (SPECNB_CHROMIUM=none: skip)
    for cand in ([env] if env else [shutil.which("chromium"), "/usr/bin/chromium"]):
        if cand and Path(cand).is_file() and os.access(cand, os.X_OK):
            return cand
    return None


@pytest.fixture(scope="session")
def chromium() -> str:
    found = find_chromium()
    if found is None and not os.environ.get("SPECNB_CHROMIUM"):
        subprocess.run(["bash", str(paths.ROOT / "tools" / "install_chromium.sh")], check=False)
        found = find_chromium()
    require(found is not None, "chromium (Debian's, for the browser tests)",
            "tools/install_chromium.sh installs it with apt-get as root: `make chromium`")
    return found


@pytest.fixture(scope="package")
def browser(chromium):
    # package scope: playwright's sync API keeps an event loop marked running in the main thread
    # while it is open, and the tests after this package call asyncio.run
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
    require(sync_playwright is not None, "playwright", "`make test-browser` installs the browser extra")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="session")
def shots(tmp_path_factory) -> Path:
    """Where screenshots go: ``SPECNB_SCREENSHOTS`` (``make screenshots``: docs/) or a temp folder."""
    out = Path(os.environ["SPECNB_SCREENSHOTS"]) if os.environ.get("SPECNB_SCREENSHOTS") else \
        tmp_path_factory.mktemp("screenshots")
    out.mkdir(parents=True, exist_ok=True)
    return out
