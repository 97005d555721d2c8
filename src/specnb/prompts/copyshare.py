"""Your traffic's mix: how much of its output an n-gram drafter could have copied, and what
speedup that mix implies.

Why: n-gram (prompt-lookup) drafting only helps where the answer continues text already in
the context; seed 000 measured acceptance length 3.1 on copy-style work and 2.2 on
free-form, and found 93.5 % of its real output tokens free-form: "the benchmark column is
not your column". So before trusting a speedup measured on one kind of prompt, measure
the kind of traffic you serve, then weight the per-kind speedups by it.

**Copy share.** For a request logged with the response it was served, response token i
counts as *copied* when, for some n in ``[n_min, n_max]``, the n response tokens before it
followed by token i (an (n+1)-gram) already occur earlier in the context. The context is
the prompt plus the response before token i (``context="prompt+response"``, the default),
because that is where vLLM's n-gram proposer looks: it matches the sequence's suffix
against the whole token sequence so far, prompt and generated output alike, so a response
that repeats itself (a list, a table) feeds the drafter too. ``context="prompt"`` counts
only continuations of the prompt: the stricter "copies from its input". Every request
gets both. Details and limits:

- the n-gram lies inside the response, so the first ``n_min`` tokens never count (vLLM can
  match across the prompt/response boundary; that is a handful of tokens per request);
- n-grams do not span two messages (each message is tokenized on its own);
- "occurs somewhere" is an upper bound on vLLM's hit: it proposes the continuation of one
  match (the longest n, its earliest position), which may differ from the token served;
- the default n range is vLLM's: ``prompt_lookup_min`` and ``prompt_lookup_max`` both 5
  when neither is set, and one set alone sets the other (:func:`lookup_range`).

Tokens are the target's (``transformers.AutoTokenizer`` from a local folder, so shares
match what the server counts) or, without one, words and punctuation marks
(:func:`word_tokenizer`).

**Classifier.** A request is ``copy-style`` when its copy share is at least
:data:`COPY_THRESHOLD` (0.5: most of its output could have come from prompt lookup),
otherwise ``free-form``. The mix is reported by output tokens (what throughput is made of)
and by requests.

The speedup a mix implies is :func:`specnb.analysis.mix.expected_speedup`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from specnb.errors import SpecnbError
from specnb.prompts.traffic import message_text
from specnb.prompts.workload import UNCATEGORIZED, Workload

__all__ = [
    "COPY_STYLE",
    "FREE_FORM",
    "COPY_THRESHOLD",
    "CLASS_OF",
    "MixError",
    "Tokenizer",
    "word_tokenizer",
    "load_tokenizer",
    "lookup_range",
    "CopyShare",
    "copy_share",
    "classify",
    "MixReport",
    "measure_mix",
    "format_mix",
]

COPY_STYLE = "copy-style"
FREE_FORM = "free-form"
COPY_THRESHOLD = 0.5
CONTEXTS = ("prompt+response", "prompt")

# The bundled sets and their categories, by the kind of work they are.
CLASS_OF: dict[str, str] = {
    "copy": COPY_STYLE, "edit-code": COPY_STYLE, "fix-json": COPY_STYLE, "quote-summary": COPY_STYLE,
    "extract-fields": COPY_STYLE, "list-transform": COPY_STYLE,
    "json": COPY_STYLE, "json-extract": COPY_STYLE, "json-copy": COPY_STYLE,
    "freeform": FREE_FORM, "chat": FREE_FORM, "creative": FREE_FORM, "explanation": FREE_FORM,
    "reasoning": FREE_FORM, "math": FREE_FORM,
    COPY_STYLE: COPY_STYLE, FREE_FORM: FREE_FORM,
}


class MixError(SpecnbError):
    """Input the mix or the estimate cannot use; the message says which and why."""


# --------------------------------------------------------------------------- tokens


class Tokenizer(Protocol):
    name: str

    def encode(self, text: str) -> list[Any]: ...


@dataclass(frozen=True)
class _Words:
    name: str = "words"
    _pattern: re.Pattern[str] = field(default=re.compile(r"\w+|[^\w\s]"), repr=False)

    def encode(self, text: str) -> list[Any]:
        return self._pattern.findall(text)


@dataclass(frozen=True)
class _HF:
    name: str
    tok: Any = field(repr=False)

    def encode(self, text: str) -> list[Any]:
        return self.tok.encode(text, add_special_tokens=False)


def word_tokenizer() -> Tokenizer:
    """Words (``\\w+``) and single punctuation marks; whitespace is dropped."""
    return _Words()


def load_tokenizer(path: str | Path | None) -> Tokenizer:
    """The target's tokenizer from a local model folder, or the word tokenizer for ``None``."""
    if path is None:
        return word_tokenizer()
    folder = Path(path)
    if not folder.is_dir():
        raise MixError(f"tokenizer folder {folder} does not exist (give a local model folder)")
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise MixError("transformers is not installed: install it, or leave out --tokenizer to count words") from None
    try:
        tok = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError) as exc:
        raise MixError(f"cannot load a tokenizer from {folder}: {str(exc).splitlines()[0]}") from None
    return _HF(name=f"{folder.name} tokenizer", tok=tok)


def lookup_range(prompt_lookup_min: int | None = None, prompt_lookup_max: int | None = None) -> tuple[int, int]:
    """vLLM's defaulting of the n-gram range: 5..5 when neither is set; one set sets the other."""
    lo, hi = prompt_lookup_min, prompt_lookup_max
    if lo is None and hi is None:
        lo = hi = 5
    elif lo is None:
        lo = hi
    elif hi is None:
        hi = lo
    if lo < 1 or hi < lo:
        raise MixError(f"n-gram range must satisfy 1 <= min <= max, got {lo}..{hi}")
    return lo, hi


# --------------------------------------------------------------------------- copy share


@dataclass(frozen=True)
class CopyShare:
    """One response: how many of its tokens continue an n-gram of the context."""

    tokens: int
    copied: int  # continuing the prompt or the response so far
    copied_from_prompt: int  # continuing the prompt

    @property
    def share(self) -> float | None:
        return self.copied / self.tokens if self.tokens else None

    @property
    def prompt_share(self) -> float | None:
        return self.copied_from_prompt / self.tokens if self.tokens else None


def copy_share(prompt: Sequence[Sequence[Any]], response: Sequence[Any], n_min: int = 5,
               n_max: int | None = None) -> CopyShare:
    """Count response tokens that continue an n-gram (``n_min <= n <= n_max``) of the context.

    ``prompt`` is one token sequence per message (n-grams never span two). Token i counts
    as copied when ``response[i-n:i+1]`` occurs in a prompt message, or ends earlier in the
    response (``response[j-n:j+1]`` with ``j < i``).
    """
    n_max = n_min if n_max is None else n_max
    if n_min < 1 or n_max < n_min:
        raise MixError(f"n-gram range must satisfy 1 <= min <= max, got {n_min}..{n_max}")
    ns = range(n_min, n_max + 1)
    in_prompt: dict[int, set[tuple[Any, ...]]] = {n: set() for n in ns}
    for seg in prompt:
        seg = list(seg)
        for n in ns:
            in_prompt[n].update(tuple(seg[j:j + n + 1]) for j in range(len(seg) - n))
    earlier: dict[int, set[tuple[Any, ...]]] = {n: set() for n in ns}
    resp = list(response)
    copied = from_prompt = 0
    for i in range(len(resp)):
        grams = {n: tuple(resp[i - n:i + 1]) for n in ns if i >= n}
        if any(g in in_prompt[n] for n, g in grams.items()):
            copied += 1
            from_prompt += 1
        elif any(g in earlier[n] for n, g in grams.items()):
            copied += 1
        for n, g in grams.items():
            earlier[n].add(g)
    return CopyShare(tokens=len(resp), copied=copied, copied_from_prompt=from_prompt)


def classify(share: float | None, threshold: float = COPY_THRESHOLD) -> str | None:
    """``copy-style`` at or above the threshold, ``free-form`` below, ``None`` for no tokens."""
    if share is None:
        return None
    return COPY_STYLE if share >= threshold else FREE_FORM


@dataclass
class MixReport:
    """Per-request copy shares of a traffic workload, and the mix they add up to."""

    requests: pd.DataFrame  # one row per request with a response
    skipped_no_response: int
    tokenizer: str
    n_range: tuple[int, int]
    threshold: float
    context: str

    @property
    def output_tokens(self) -> int:
        return int(self.requests["response_tokens"].sum()) if len(self.requests) else 0

    @property
    def copy_share(self) -> float | None:
        """Share of all output tokens that were copied (token-weighted over requests)."""
        col = "copied_tokens" if self.context == "prompt+response" else "prompt_copied_tokens"
        tokens = self.output_tokens
        return float(self.requests[col].sum()) / tokens if tokens else None

    @property
    def prompt_copy_share(self) -> float | None:
        tokens = self.output_tokens
        return float(self.requests["prompt_copied_tokens"].sum()) / tokens if tokens else None

    def mix(self, by: str = "tokens") -> dict[str, float]:
        """Shares of ``copy-style`` and ``free-form``, by output ``tokens`` or by ``requests``."""
        df = self.requests[self.requests["label"].notna()]
        if df.empty:
            return {COPY_STYLE: 0.0, FREE_FORM: 0.0}
        if by == "tokens":
            w = df.groupby("label")["response_tokens"].sum()
        elif by == "requests":
            w = df.groupby("label").size()
        else:
            raise MixError(f"mix by 'tokens' or 'requests', not {by!r}")
        total = float(w.sum())
        return {k: float(w.get(k, 0)) / total for k in (COPY_STYLE, FREE_FORM)}

    def by_category(self) -> pd.DataFrame:
        """Per request category: requests, output tokens, copy share, share labelled copy-style."""
        if self.requests.empty:
            return pd.DataFrame()
        col = "copied_tokens" if self.context == "prompt+response" else "prompt_copied_tokens"
        g = self.requests.groupby("category", sort=True)
        out = g.agg(requests=("id", "size"), output_tokens=("response_tokens", "sum"), copied=(col, "sum"))
        out["copy_share"] = out["copied"] / out["output_tokens"].where(out["output_tokens"] > 0)
        out["copy_style_requests"] = g["label"].apply(lambda s: float((s == COPY_STYLE).mean()))
        return out.drop(columns="copied").reset_index()


def _prompt_segments(messages: Sequence[Mapping[str, Any]], tok: Tokenizer) -> list[list[Any]]:
    return [tok.encode(message_text(m.get("content")) or "") for m in messages]


def measure_mix(
    workload: Workload,
    tokenizer: Tokenizer | None = None,
    *,
    n_min: int | None = None,
    n_max: int | None = None,
    threshold: float = COPY_THRESHOLD,
    context: str = "prompt+response",
) -> MixReport:
    """Copy share and label of every prompt that carries the response served."""
    if context not in CONTEXTS:
        raise MixError(f"context must be one of {CONTEXTS}, not {context!r}")
    if not 0.0 <= threshold <= 1.0:
        raise MixError(f"threshold must be between 0 and 1, got {threshold}")
    lo, hi = lookup_range(n_min, n_max)
    tok = tokenizer or word_tokenizer()
    rows, skipped = [], 0
    for p in workload.prompts:
        if p.response is None:
            skipped += 1
            continue
        segs = _prompt_segments(p.messages, tok)
        cs = copy_share(segs, tok.encode(p.response), lo, hi)
        share = cs.share if context == "prompt+response" else cs.prompt_share
        rows.append({
            "id": p.id, "category": p.category or UNCATEGORIZED,
            "prompt_tokens": sum(len(s) for s in segs), "response_tokens": cs.tokens,
            "copied_tokens": cs.copied, "copy_share": cs.share,
            "prompt_copied_tokens": cs.copied_from_prompt, "prompt_copy_share": cs.prompt_share,
            "label": classify(share, threshold),
        })
    if not rows:
        raise MixError(f"workload {workload.name!r} has no responses to measure: log the response served "
                       "('response', or a final assistant message) with each prompt")
    return MixReport(requests=pd.DataFrame(rows), skipped_no_response=skipped, tokenizer=tok.name,
                     n_range=(lo, hi), threshold=threshold, context=context)


def format_mix(report: MixReport) -> str:
    """The text ``specnb mix`` prints."""
    def pct(v: float | None) -> str:
        return "-" if v is None or pd.isna(v) else f"{100 * v:.1f} %"

    lo, hi = report.n_range
    n = f"{lo}" if lo == hi else f"{lo}..{hi}"
    by_tok, by_req = report.mix("tokens"), report.mix("requests")
    lines = [
        f"{len(report.requests)} requests with a response, {report.output_tokens} output tokens "
        f"({report.tokenizer}; n-gram n={n}; context {report.context})"
        + (f"; {report.skipped_no_response} without a response skipped" if report.skipped_no_response else ""),
        f"copy share (output tokens continuing an n-gram of the context): {pct(report.copy_share)}"
        + (f"   from the prompt alone: {pct(report.prompt_copy_share)}" if report.context != "prompt" else ""),
        f"mix by output tokens:  {COPY_STYLE} {pct(by_tok[COPY_STYLE])}   {FREE_FORM} {pct(by_tok[FREE_FORM])}",
        f"mix by requests:       {COPY_STYLE} {pct(by_req[COPY_STYLE])}   {FREE_FORM} {pct(by_req[FREE_FORM])}",
        f"(a request is {COPY_STYLE} when its copy share is >= {report.threshold:g})",
    ]
    cats = report.by_category()
    if len(cats) > 1 or (len(cats) == 1 and cats["category"].iloc[0] != UNCATEGORIZED):
        lines.append("")
        lines.append(f"{'category':<20} {'requests':>8} {'out tokens':>10} {'copy share':>10} {'copy-style':>10}")
        for r in cats.itertuples(index=False):
            lines.append(f"{r.category:<20} {r.requests:>8} {r.output_tokens:>10} {pct(r.copy_share):>10} "
                         f"{pct(r.copy_style_requests):>10}")
    return "\n".join(lines)
