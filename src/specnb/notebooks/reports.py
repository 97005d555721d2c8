"""HTML reports: one self-contained page per executed notebook, and a gallery of every figure.

Colleagues who will never open JupyterLab get the analysis as web pages (``make reports``):

- ``reports/<notebook>.html``: the executed copy through nbconvert's ``lab`` template via
  ``templates/specnb_report``: figures inline as ``data:`` URIs, each code cell folded in a
  ``<details>`` (one click opens it), no script at all (the stock template loads require.js,
  MathJax, mermaid and the widget manager from a CDN; the notebooks need none of them), no
  widget views (they carry a random id per build) and no stderr;
- ``reports/index.html``: every figure of ``figures/`` from its sidecar (:mod:`specnb.figures.save`):
  the PNG, its caption, the ledgers it was drawn from with their digest, links to its SVG and
  PNG, and to the report page at the cell that saved it (``#cell-id=...``; the executed copies
  carry content-derived cell ids, :func:`specnb.notebooks.runner.stable_cell_ids`);
- ``reports/figures/``: copies of the figure files, so the folder can be zipped and sent.

The build is deterministic: the same executed notebooks and figures give the same bytes
(sorted inputs, no time stamps, no random ids). New notebooks and figures are picked up by
the globs; a sidecar that names a missing file stops the build.

``python -m specnb.notebooks.reports [--executed DIR] [--figures DIR] [--out DIR]``
"""

from __future__ import annotations

import base64
import html
import json
import mimetypes
import re
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specnb import paths
from specnb.errors import SpecnbError, exit_code

__all__ = ["ReportError", "build", "build_page", "make_exporter", "TEMPLATES"]

TEMPLATES = Path(__file__).resolve().parent / "templates"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
IMAGE_ORDER = (".png", ".svg", ".jpg", ".jpeg", ".gif", ".webp")
MD_IMAGE = re.compile(r'!\[([^\]]*)\]\(\s*([^)\s]+)(?:\s+"[^"]*")?\s*\)')


class ReportError(SpecnbError):
    """Reports that cannot be built; one line for the user."""


def _inline_image(m: re.Match[str], bases: Sequence[Path]) -> str:
    """``![alt](relative.png)`` -> ``<img src="data:...">`` when the file is found under a base.

    nbconvert's own ``embed_images`` refuses files outside the notebook's folder (a
    path-traversal guard), so ``![](../figures/x.png)`` would stay a dead link in the page.
    """
    alt, url = m.group(1), m.group(2)
    if ":" in url.split("/")[0] or url.startswith("/"):
        return m.group(0)  # data:, http:, absolute: left alone
    for base in bases:
        f = (base / url).resolve()
        mime = mimetypes.guess_type(f.name)[0]
        if f.is_file() and mime and mime.startswith("image/"):
            data = base64.b64encode(f.read_bytes()).decode("ascii")
            return f'<img src="data:{mime};base64,{data}" alt="{html.escape(alt)}">'
    return m.group(0)


def make_exporter() -> Any:
    """nbconvert's HTML exporter with specnb's template and clean-up (see the module doc)."""
    from nbconvert import HTMLExporter
    from nbconvert.preprocessors import Preprocessor

    class ReportPreprocessor(Preprocessor):
        def preprocess(self, nb, resources):
            nb.metadata.pop("widgets", None)
            return super().preprocess(nb, resources)

        def preprocess_cell(self, cell, resources, index):
            if cell.cell_type == "markdown":
                bases = resources.get("image_bases", [])
                cell.source = MD_IMAGE.sub(lambda m: _inline_image(m, bases), cell.source)
            elif cell.cell_type == "code":
                cell.outputs = [o for o in cell.outputs
                                if WIDGET_VIEW not in o.get("data", {})
                                and not (o.get("output_type") == "stream" and o.get("name") == "stderr")]
            return cell, resources

    exp = HTMLExporter(template_name="specnb_report", extra_template_basedirs=[str(TEMPLATES)],
                       embed_images=True, exclude_input_prompt=True, exclude_output_prompt=True,
                       theme="light")
    exp.register_preprocessor(ReportPreprocessor(), enabled=True)
    return exp


def build_page(exp: Any, src: Path, out: Path) -> Any:
    """One executed notebook -> one HTML page; returns the notebook (for the gallery's links)."""
    import nbformat

    nb = nbformat.read(src, as_version=4)
    # markdown images are written relative to the source (notebooks/NN.py); the executed copy
    # sits one folder below it (notebooks/executed/NN.ipynb): try both
    resources = {"metadata": {"name": src.stem, "path": str(src.parent)},
                 "image_bases": [src.parent, src.parent.parent]}
    body, _ = exp.from_notebook_node(nb, resources=resources)
    out.write_text(body if body.endswith("\n") else body + "\n", encoding="utf-8", newline="\n")
    return nb


def _saving_cell(nb: Any, fig_id: str) -> str | None:
    """The id of the code cell whose source names the figure id (for a ``#cell-id=`` link)."""
    if nb is None:
        return None
    for cell in nb.cells:
        if cell.cell_type == "code" and cell.get("id") and (f'"{fig_id}"' in cell.source
                                                             or f"'{fig_id}'" in cell.source):
            return cell.id
    return None


def _order(name: str) -> tuple[int, str]:
    suffix = Path(name).suffix.lower()
    return (IMAGE_ORDER.index(suffix) if suffix in IMAGE_ORDER else len(IMAGE_ORDER), name)


def _card(meta: dict[str, Any], page: str | None, anchor: str | None) -> str:
    e = html.escape
    files = sorted(meta.get("files", []), key=_order)
    shown = next((f for f in files if Path(f).suffix.lower() in IMAGE_ORDER), None)
    out = [f'<figure class="card" id="fig-{e(meta["id"])}">']
    if shown:
        out.append(f'<a href="figures/{e(shown)}"><img src="figures/{e(shown)}" '
                   f'alt="{e(meta.get("caption") or meta["id"])}"></a>')
    out.append(f'<figcaption><b>{e(meta["id"])}</b> &mdash; {e(meta.get("caption", ""))}')
    nb_name = meta.get("notebook") or ""
    if page:
        href = page + (f"#cell-id={anchor}" if anchor else "")
        out.append(f'<div>notebook: <a href="{e(href)}">{e(nb_name)}</a></div>')
    elif nb_name:
        out.append(f"<div>notebook: {e(nb_name)} (no executed copy)</div>")
    sources = meta.get("sources", [])
    if sources:
        out.append("<div>drawn from:<ul>" + "".join(f"<li><code>{e(s)}</code></li>" for s in sources)
                   + "</ul></div>")
    else:
        out.append("<div>drawn from: no ledgers (formulas only)</div>")
    if "sources_sha256" in meta:
        out.append(f'<div class="small">{e(str(meta.get("source_files", "?")))} ledger files, '
                   f'sha256 <code>{e(str(meta["sources_sha256"]))}</code></div>')
    out.append("<div>files: " + " ".join(f'<a href="figures/{e(f)}">{e(Path(f).suffix[1:])}</a>' for f in files)
               + "</div>")
    out.append("</figcaption></figure>")
    return "\n".join(out)


GALLERY_CSS = """
body { font-family: system-ui, sans-serif; margin: 24px; color: #222; max-width: 1800px; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; }
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(420px, 1fr)); gap: 16px; }
.card { margin: 0; border: 1px solid #ddd; border-radius: 6px; padding: 10px; background: #fff; }
.card img { width: 100%; height: auto; display: block; }
figcaption { font-size: 0.9em; margin-top: 6px; } figcaption ul { margin: 2px 0 2px 1em; padding: 0; }
.small { color: #666; font-size: 0.85em; }
"""


def _sidecars(figures: Path) -> list[dict[str, Any]]:
    metas = []
    for side in sorted(figures.glob("*.json")):
        try:
            meta = json.loads(side.read_text())
        except (OSError, ValueError) as exc:
            raise ReportError(f"{side}: not a figure sidecar ({exc})") from None
        if not isinstance(meta, dict) or "files" not in meta:
            continue  # not a sidecar of save_figure
        meta.setdefault("id", side.stem)
        metas.append(meta)
    missing = [f"{m['id']}: {f}" for m in metas for f in m["files"] if not (figures / f).is_file()]
    if missing:
        raise ReportError(f"figure sidecars in {figures} list missing files: {', '.join(missing)} "
                          "(run `make figures`)")
    return metas


def build(executed: Path | str | None = None, figures: Path | str | None = None,
          out: Path | str | None = None) -> dict[str, Any]:
    """Write every report page and the gallery; returns what was built."""
    executed = paths.resolve(executed or "notebooks/executed")
    figures = paths.resolve(figures or "figures")
    out = paths.resolve(out or "reports")
    sources = sorted(executed.glob("*.ipynb"))
    if not sources:
        raise ReportError(f"no executed notebooks in {executed} (run `make figures`)")
    metas = _sidecars(figures)
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("*.html"):
        stale.unlink()  # a page of a notebook that is gone must not stay linked
    exp = make_exporter()
    notebooks = {src.stem: build_page(exp, src, out / f"{src.stem}.html") for src in sources}

    fig_out = out / "figures"
    if fig_out.exists():
        shutil.rmtree(fig_out)
    fig_out.mkdir()
    for m in metas:
        for f in m["files"]:
            shutil.copyfile(figures / f, fig_out / f)

    by_nb: dict[str, list[dict[str, Any]]] = {}
    for m in metas:
        by_nb.setdefault(m.get("notebook") or "", []).append(m)
    e = html.escape
    body = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1.0">',
            "<title>specnb figures</title>", f"<style>{GALLERY_CSS}</style>", "</head>", "<body>",
            "<h1>specnb figures</h1>",
            "<p>Every figure of <code>figures/</code>, grouped by the notebook that drew it, with its caption "
            "and the ledgers it was drawn from. Reports (code folded, figures embedded): "
            + " &middot; ".join(f'<a href="{e(n)}.html">{e(n)}</a>' for n in notebooks) + "</p>"]
    for nb_name in sorted(by_nb):
        page = f"{nb_name}.html" if nb_name in notebooks else None
        title = f'<a href="{e(page)}">{e(nb_name)}</a>' if page else e(nb_name or "(no notebook)")
        body += [f"<h2>{title}</h2>", '<div class="grid">']
        for m in sorted(by_nb[nb_name], key=lambda m: m["id"]):
            body.append(_card(m, page, _saving_cell(notebooks.get(nb_name), m["id"])))
        body.append("</div>")
    body += ["</body>", "</html>", ""]
    (out / "index.html").write_text("\n".join(body), encoding="utf-8", newline="\n")
    return {"out": out, "pages": sorted(notebooks), "figures": len(metas)}


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m specnb.notebooks.reports",
                                description="HTML reports of the executed notebooks and a figure gallery.")
    p.add_argument("--executed", type=Path, default=None, help="executed notebooks (default notebooks/executed)")
    p.add_argument("--figures", type=Path, default=None, help="figures with sidecars (default figures/)")
    p.add_argument("--out", type=Path, default=None, help="output folder (default reports/)")
    a = p.parse_args(argv)

    def run() -> int:
        res = build(a.executed, a.figures, a.out)
        print(f"{len(res['pages'])} report pages and a gallery of {res['figures']} figures: "
              f"{res['out'] / 'index.html'}")
        return 0

    return exit_code(run, "rerun `make reports`")


if __name__ == "__main__":
    sys.exit(main())
