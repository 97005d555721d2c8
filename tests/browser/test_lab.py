"""``make lab`` in a real browser: JupyterLab opens the jupytext ``.py`` notebooks as notebooks,
the kernel runs them on the committed ledgers (figures render), the calculator's sliders redraw
their figure through the kernel, and saving from Lab leaves the committed ``.py`` unchanged.

The server is started with ``make lab`` itself, on a free port with a random token and
temporary Jupyter folders, serving a copy of ``notebooks/`` (``LAB_ROOT``) beside a link to the
committed ledgers, so running the notebooks writes figures there and not into the checkout.
"""

from __future__ import annotations

import importlib.util
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import time
import urllib.request

import pytest

from specnb import paths
from tests.conftest import require
from tests.hang import guard

NOTEBOOKS = paths.ROOT / "notebooks"
RUN_TIMEOUT_MS = 240_000
CALCULATOR_RUN_TIMEOUT_MS = 600_000  # under the suite's 900 s per test
RUN_ALL_TRIES, RUN_ALL_BEGUN_MS = 3, 60_000  # Run All asked again when no cell is queued within a minute
SLIDER_VALUES = ("0.50", "0.55", "0.60", "0.65", "0.70")  # the values typed into the first slider, one at a time


def _readout_value(readout) -> float | None:
    """The number a slider's readout shows (None when it shows none)."""
    try:
        return float((readout.text_content() or "").strip())
    except ValueError:
        return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory, chromium):  # noqa: ARG001 - no server without a browser to drive it
    require(importlib.util.find_spec("jupyterlab") is not None, "JupyterLab",
            "`make test-browser` (or `make lab`) installs the lab extra")
    base = tmp_path_factory.mktemp("lab")
    root = base / "root"
    root.mkdir()
    shutil.copytree(NOTEBOOKS, root / "notebooks", ignore=shutil.ignore_patterns("executed", "__pycache__"))
    (root / "ledgers").symlink_to(paths.LEDGERS)
    (root / "figures").mkdir()
    port, token = _free_port(), secrets.token_hex(16)
    env = dict(os.environ)
    for var, sub in [("JUPYTER_CONFIG_DIR", "config"), ("JUPYTER_DATA_DIR", "data"),
                     ("JUPYTER_RUNTIME_DIR", "runtime"), ("JUPYTERLAB_SETTINGS_DIR", "settings"),
                     ("JUPYTERLAB_WORKSPACES_DIR", "workspaces"), ("IPYTHONDIR", "ipython")]:
        env[var] = str(base / sub)
    env.pop("MPLBACKEND", None)  # the kernel must use the inline backend
    env.pop("MAKEFLAGS", None)
    args = f"--no-browser --ServerApp.port_retries=0 --IdentityProvider.token={token}"
    log_path = base / "lab.log"
    log = open(log_path, "w")
    proc = subprocess.Popen(["make", "-s", "lab", f"LAB_ROOT={root}", f"LAB_PORT={port}", f"LAB_ARGS={args}"],
                            cwd=paths.ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + guard("lab_start")
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"make lab exited {proc.returncode}:\n{log_path.read_text()[-3000:]}")
            try:
                req = urllib.request.Request(f"{url}/api/status", headers={"Authorization": f"token {token}"})
                with urllib.request.urlopen(req, timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"JupyterLab did not answer within 120 s:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.3)
        yield {"url": url, "token": token, "root": root, "started": time.time(), "log": log_path}
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # our own session: make, JupyterLab and its kernels
        try:
            proc.wait(timeout=guard("lab_start"))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


@pytest.fixture(scope="module")
def page(lab, browser):
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = ctx.new_page()
    pg.goto(f"{lab['url']}/lab/tree/notebooks?token={lab['token']}")
    yield pg
    ctx.close()


def _open(page, name: str):
    """Double-click a notebook in the file browser, as a person would: it opens in the default
    viewer for Python files, which tools/jupyter makes the notebook view."""
    from playwright.sync_api import expect

    page.locator(".jp-DirListing-item", has_text=name).first.dblclick(timeout=90_000)
    expect(page.locator(".lm-TabBar-tab.jp-mod-current")).to_contain_text(name, timeout=90_000)
    panel = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)")
    expect(panel).to_be_visible(timeout=90_000)
    expect(panel.locator(".jp-KernelName")).to_contain_text("Python 3", timeout=90_000)
    return panel


def _run_all(page, panel, timeout_ms: int = RUN_TIMEOUT_MS) -> None:
    from playwright.sync_api import expect

    prompts = panel.locator(".jp-CodeCell .jp-InputPrompt")
    begun = prompts.filter(has_text=re.compile(r"\[(\*|\d+)\]"))  # a cell queued, running or run
    # the menu's click can be lost (seen once in a full CI run: no cell was ever queued in 10 min, the
    # test alone never); the run is asked for again when no cell has been queued a while after it
    for attempt in range(1, RUN_ALL_TRIES + 1):
        page.get_by_role("menuitem", name="Run", exact=True).click()
        page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
        try:
            expect(begun.first).to_be_visible(timeout=RUN_ALL_BEGUN_MS)
            break
        except AssertionError:
            if attempt == RUN_ALL_TRIES:
                shown = [t.strip() for t in prompts.all_text_contents()[:5]]
                raise AssertionError(f"Run All Cells queued no cell in {RUN_ALL_TRIES} tries (first prompts: "
                                     f"{shown}; kernel: {panel.locator('.jp-KernelName').all_text_contents()})") from None
            page.keyboard.press("Escape")  # a menu left open
    expect(prompts.filter(has_text="[1]")).to_have_count(1, timeout=timeout_ms)
    expect(prompts.filter(has_text="*")).to_have_count(0, timeout=timeout_ms)
    errors = panel.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
    tracebacks = [t for t in errors.all_text_contents() if "Error" in t or "Traceback" in t]
    assert not tracebacks, "a cell raised:\n" + tracebacks[0][-2000:]
    # Run All stops at the first exception and leaves the rest unnumbered
    assert prompts.filter(has_text="[ ]").count() == 0


def test_concurrency_notebook_opens_runs_and_draws(lab, page, shots):
    import jupytext
    from playwright.sync_api import expect

    panel = _open(page, "01_concurrency.py")
    assert page.locator(".jp-FileEditor").count() == 0, "the .py opened in the text editor"
    cells = len(jupytext.read(NOTEBOOKS / "01_concurrency.py").cells)
    # JupyterLab renders long notebooks lazily: count cells from the status bar ("Cell 1/N")
    expect(page.locator(".jp-StatusBar-Widget").get_by_text(re.compile(rf"Cell \d+/{cells}$"))).to_be_visible(
        timeout=30_000)
    assert page.locator(".jp-Dialog").count() == 0, "JupyterLab asked for a kernel"
    _run_all(page, panel)
    img = panel.locator(".jp-RenderedImage img").first
    img.scroll_into_view_if_needed()
    size = img.evaluate("i => [i.complete, i.naturalWidth, i.naturalHeight]")
    assert size[0] and size[1] > 100 and size[2] > 50, size
    # the kernel started in notebooks/ and still found the ledgers and wrote the figures to the
    # root it was given (paths resolve against the repository, not the kernel's folder)
    summary = panel.locator(".jp-OutputArea .jp-RenderedMarkdown", has_text="measured points").first
    assert re.search(r"Run \S+ .*measured points", summary.text_content() or ""), summary.text_content()
    assert (lab["root"] / "figures" / "concurrency-speedup.png").stat().st_size > 10_000
    # the README's screenshot: the speedup figure with the code above it
    panel.locator(".jp-CodeCell:has(.jp-RenderedImage)").first.evaluate("c => c.scrollIntoView({block: 'start'})")
    page.mouse.wheel(0, 260)
    time.sleep(1.0)
    page.screenshot(path=str(shots / "jupyterlab.png"))


def test_saving_from_lab_leaves_the_py_unchanged(lab, page):
    on_disk = lab["root"] / "notebooks" / "01_concurrency.py"
    page.locator(".jp-NotebookPanel .jp-Notebook").last.click(position={"x": 5, "y": 5})
    page.keyboard.press("Escape")
    page.keyboard.press("Control+s")
    deadline = time.monotonic() + guard("lab_start")
    while on_disk.stat().st_mtime <= lab["started"] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert on_disk.stat().st_mtime > lab["started"], "Ctrl+S did not save"
    time.sleep(0.5)
    if on_disk.read_bytes() != (NOTEBOOKS / "01_concurrency.py").read_bytes():
        import difflib

        diff = difflib.unified_diff((NOTEBOOKS / "01_concurrency.py").read_text().splitlines(),
                                    on_disk.read_text().splitlines(), "committed", "saved by Lab", lineterm="", n=1)
        pytest.fail("saving from JupyterLab changed the .py:\n" + "\n".join(diff))


def test_calculator_sliders_redraw_through_the_kernel(lab, page):
    # section 7's bootstrap of the published GPU fit, cut from 100 resamples to 10 in the lab's copy
    # (a parameter, edited as a user would; 8.8 s against 0.9 s on an idle AVX-512 EPYC): the
    # sliders are what this test checks, and the 100-resample fit is `make -B figures`' (the
    # figures-stable test)
    nb = lab["root"] / "notebooks" / "07_calculator.py"
    text, n = re.subn(r"^fit_resamples = 100\b", "fit_resamples = 10", nb.read_text(), count=1, flags=re.M)
    assert n == 1, "the calculator's fit_resamples parameter line moved"
    nb.write_text(text)
    page.goto(f"{lab['url']}/lab/tree/notebooks?token={lab['token']}")
    panel = _open(page, "07_calculator.py")
    _run_all(page, panel, timeout_ms=CALCULATOR_RUN_TIMEOUT_MS)  # a liveness bound, not a speed check
    interact = panel.locator(".widget-interact").first
    interact.scroll_into_view_if_needed()
    slider = interact.locator(".widget-slider").first
    img = interact.locator("img").first
    img.wait_for(timeout=60_000)
    before = img.get_attribute("src")
    readout = slider.locator(".widget-readout")
    # on a loaded 2-core machine an edit can land before the widget takes input (seen in full runs,
    # never alone: the first value then never redrew and the test waited out a notebook's guard,
    # 131 s, before the second value redrew at once). Each value gets a redraw's guard; an edit the
    # readout did not take is typed again; the figure must redraw for one of them
    redrawn = False
    for value in SLIDER_VALUES:
        readout.click()
        page.keyboard.press("Control+A")
        page.keyboard.type(value)
        page.keyboard.press("Enter")
        if _readout_value(readout) != float(value):  # the edit did not land: the widget took no input yet
            time.sleep(1)
            continue
        deadline = time.monotonic() + guard("widget_redraw")
        while not (redrawn := interact.locator("img").first.get_attribute("src") != before) \
                and time.monotonic() < deadline:
            time.sleep(0.3)
        if redrawn:
            break
    assert redrawn, f"the slider did not redraw the figure for any of {SLIDER_VALUES} (readout: {readout.text_content()!r})"
