"""``make reports`` in a real browser: the gallery and every page it links, loaded in headless
Chromium over HTTP and as files, must have no broken image, no dead link or anchor, and ask
for nothing outside the site (self-contained pages, no CDN). The same audit must find faults
planted in a broken copy, and two builds must be byte-identical."""

from __future__ import annotations

import filecmp
import functools
import http.server
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import unquote, urldefrag, urlparse

import pytest

from specnb import paths
from specnb.notebooks import reports

EXECUTED = paths.ROOT / "notebooks" / "executed"
FIGURES = paths.ROOT / "figures"


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """A snapshot of the executed notebooks and figures, so a `make figures` meanwhile cannot
    make two builds differ."""
    snap = tmp_path_factory.mktemp("inputs")
    shutil.copytree(EXECUTED, snap / "notebooks" / "executed")
    shutil.copytree(FIGURES, snap / "figures")
    return snap / "notebooks" / "executed", snap / "figures"


@pytest.fixture(scope="module")
def site(tmp_path_factory, inputs):
    out = tmp_path_factory.mktemp("site") / "reports"
    reports.build(*inputs, out)
    return out


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def _serve(root: Path):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(root)))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}/"


def _exists(url: str, request) -> bool:
    if url.startswith("file://"):
        return Path(unquote(urlparse(url).path)).is_file()
    return request.get(url).status == 200


def audit(browser, start: str, shot: Path | None = None) -> list[str]:
    """Crawl the site's pages from ``start``; every problem found, one line each."""
    base = start.rsplit("/", 1)[0] + "/"
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = ctx.new_page()
    outside: list[str] = []
    page.on("request", lambda r: outside.append(r.url)
            if not (r.url.startswith(base) or r.url.startswith("data:")) else None)
    problems: list[str] = []
    todo, seen, anchors, ids = [start], set(), [], {}
    ids_js = "() => Array.from(document.querySelectorAll('[id]'), e => e.id)"
    while todo:
        url = todo.pop(0)
        if url in seen:
            continue
        seen.add(url)
        resp = page.goto(url, wait_until="load")
        name = url[len(base):] or "index.html"
        if resp is not None and resp.status != 200:
            problems.append(f"{name}: HTTP {resp.status}")
            continue
        ids[url] = set(page.evaluate(ids_js))
        images = page.evaluate("() => Array.from(document.images, i => [i.currentSrc || i.src, i.complete, i.naturalWidth])")
        for src, ok, width in images:
            if not ok or width == 0:
                problems.append(f"{name}: broken image {src[len(base):] if src.startswith(base) else src[:80]}")
        if name == "index.html":
            assert images, "the gallery shows no figure"
            if shot is not None:
                page.screenshot(path=str(shot))
        for href in page.evaluate("() => Array.from(document.querySelectorAll('a[href]'), a => a.href)"):
            target, frag = urldefrag(href)
            if not target.startswith(base):
                if urlparse(target).scheme in ("http", "https", "file"):
                    problems.append(f"{name}: link leaves the site: {href}")
                continue
            if not _exists(target, ctx.request):
                problems.append(f"{name}: broken link {href[len(base):]}")
                continue
            if frag:
                anchors.append((name, target, frag))
            if target.endswith(".html"):
                todo.append(target)
    for name, target, frag in anchors:
        if target not in ids:
            page.goto(target, wait_until="load")
            ids[target] = set(page.evaluate(ids_js))
        # as browsers do: the raw fragment, then percent-decoded (nbconvert writes heading ids
        # percent-encoded and links to them the same way)
        if frag not in ids[target] and unquote(frag) not in ids[target]:
            problems.append(f"{name}: link to missing anchor {target[len(base):]}#{frag}")
    problems += [f"request outside the site: {u[:100]}" for u in sorted(set(outside))]
    ctx.close()
    return problems


def test_every_notebook_and_figure_is_in_the_site(site, inputs):
    executed, figures = inputs
    assert sorted(p.stem for p in site.glob("*.html") if p.name != "index.html") == \
        sorted(p.stem for p in executed.glob("*.ipynb"))
    index = (site / "index.html").read_text()
    for side in figures.glob("*.json"):
        assert f'id="fig-{side.stem}"' in index, side.stem
    for page in site.glob("*.html"):
        assert "<script" not in page.read_text(), f"{page.name} loads a script"


def test_build_is_deterministic(site, inputs, tmp_path):
    again = tmp_path / "again"
    subprocess.run([sys.executable, "-m", "specnb.notebooks.reports", "--executed", str(inputs[0]),
                    "--figures", str(inputs[1]), "--out", str(again)], check=True,
                   env={**os.environ, "PYTHONHASHSEED": "12345"}, stdout=subprocess.DEVNULL)
    diffs: list[str] = []

    def walk(c: filecmp.dircmp, rel: str = "") -> None:
        diffs.extend(rel + f for f in c.left_only + c.right_only + c.diff_files)
        for f in c.same_files:  # dircmp only compares sizes and times: compare contents
            if not filecmp.cmp(Path(c.left) / f, Path(c.right) / f, shallow=False):
                diffs.append(rel + f)
        for sub, sc in c.subdirs.items():
            walk(sc, rel + sub + "/")

    walk(filecmp.dircmp(site, again))
    assert not diffs, f"two builds differ in {diffs}"


def test_gallery_over_http_has_no_broken_image_or_link(site, browser, shots):
    srv, base = _serve(site)
    try:
        problems = audit(browser, base + "index.html", shot=shots / "gallery.png")
    finally:
        srv.shutdown()
    assert not problems, "\n".join(problems)


def test_gallery_as_files_has_no_broken_image_or_link(site, browser):
    problems = audit(browser, site.joinpath("index.html").as_uri())
    assert not problems, "\n".join(problems)


def test_the_audit_finds_planted_faults(site, browser, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(site, broken)
    victim = min((broken / "figures").glob("*.png"))
    victim.write_bytes(b"not a png")  # an image that does not decode
    svg = victim.with_suffix(".svg")
    svg.unlink()  # a dead link to a file
    gone = sorted(p for p in broken.glob("*.html") if p.name != "index.html")[-1]
    gone.unlink()  # a dead link to a page
    index = broken / "index.html"
    index.write_text(index.read_text().replace("</body>", '<img src="http://127.0.0.1:9/x.png">\n</body>'))
    first = sorted(p for p in broken.glob("*.html") if p.name != "index.html")[0]
    first.write_text(first.read_text().replace('href="index.html"', 'href="index.html#nowhere"'))
    text = "\n".join(audit(browser, index.as_uri()))
    assert f"broken image figures/{victim.name}" in text, text
    assert f"broken link figures/{svg.name}" in text, text
    assert f"broken link {gone.name}" in text, text
    assert "request outside the site: http://127.0.0.1:9/x.png" in text, text
    assert "link to missing anchor index.html#nowhere" in text, text
