"""Shared pieces of the client benchmark: prompts, the normalized result every client is
reduced to, the analysis (chunks/s in the steady window, ITL/TPOT), and stub control.

Normalized result (one ``.npz`` per client run), all times absolute ``time.perf_counter()``
seconds (CLOCK_MONOTONIC on Linux: one clock for every process on the host, the stub's
``perf_counter_ns`` log included):

* per request: ``idx``, ``worker`` (-1 when unknown), ``start``, ``end``, ``first`` (NaN if
  none), ``nchunks`` (token-bearing chunks), ``out_tokens``, ``ok``;
* flat per chunk (requests concatenated in ``idx`` order): ``chunk_t``, ``chunk_k`` (tokens);
* ``meta``: a JSON string (client, concurrency, wall, CPU seconds, ...).
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
from dataclasses import dataclass
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
PROMPTS_PATH = os.path.join(HERE, "data_freeform.jsonl")

# what run_load gets from a sweep: specnb's ledger Sampling model dumped (seed per prompt)
SAMPLING = {"temperature": 0.0, "top_p": None, "max_tokens": 128, "seed": 0, "ignore_eos": True}


@dataclass(frozen=True)
class Prompt:
    """What specnb.prompts.workload.Prompt carries (id, category, messages)."""

    id: str
    category: str | None
    messages: list[dict[str, Any]]
    response: str | None = None


def load_prompts(path: str = PROMPTS_PATH) -> list[Prompt]:
    out = []
    with open(path) as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                out.append(Prompt(r["id"], r.get("category"), [{"role": "user", "content": r["prompt"]}]))
    return out


# ---- normalized results -------------------------------------------------------------------

def save_result(path: str, *, idx, worker, start, end, first, nchunks, out_tokens, ok,
                chunk_t, chunk_k, meta: dict[str, Any]) -> None:
    np.savez(
        path,
        idx=np.asarray(idx, dtype=np.int64), worker=np.asarray(worker, dtype=np.int64),
        start=np.asarray(start, dtype=np.float64), end=np.asarray(end, dtype=np.float64),
        first=np.asarray(first, dtype=np.float64), nchunks=np.asarray(nchunks, dtype=np.int64),
        out_tokens=np.asarray(out_tokens, dtype=np.int64), ok=np.asarray(ok, dtype=bool),
        chunk_t=np.asarray(chunk_t, dtype=np.float64), chunk_k=np.asarray(chunk_k, dtype=np.int32),
        meta=np.array(json.dumps(meta)),
    )


def load_result(path: str) -> dict[str, Any]:
    with np.load(path) as z:
        d = {k: z[k] for k in z.files}
    d["meta"] = json.loads(str(d["meta"]))
    return d


def from_records(records, t0: float) -> dict[str, Any]:
    """specnb RequestRecord-like objects (times relative to t0) -> normalized arrays."""
    idx, worker, start, end, first, nch, out, ok = [], [], [], [], [], [], [], []
    ct, ck = [], []
    for r in records:
        idx.append(r.index)
        worker.append(getattr(r, "slot", getattr(r, "worker", -1)))  # a connection slot (older clients: worker)
        start.append(r.start_s + t0)
        end.append(r.end_s + t0)
        first.append(np.nan if r.first_token_s is None else r.first_token_s + t0)
        nch.append(len(r.chunk_times_s))
        out.append(r.output_tokens)
        ok.append(r.error is None and r.output_tokens > 0)
        ct.extend(r.chunk_times_s)
        ck.extend(r.chunk_tokens)
    ct = np.asarray(ct, dtype=np.float64) + t0
    return dict(idx=idx, worker=worker, start=start, end=end, first=first, nchunks=nch,
                out_tokens=out, ok=ok, chunk_t=ct, chunk_k=ck)


def from_vllm_bench(path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``vllm bench serve --save-result --save-detailed`` JSON -> normalized arrays.

    vLLM bench times the role chunk (``delta.role``, sent together with the first token) as
    the first token and records one ITL per later choice chunk, so chunk j's (token chunk j,
    the role chunk dropped) arrival is start + ttft + sum(itl[:j+1]). It does not record
    tokens per chunk: 1 is assumed (the stub sends 1 per chunk in every timing test).
    """
    with open(path) as f:
        d = json.load(f)
    idx, start, end, first, nch, out, ok, ct = [], [], [], [], [], [], [], []
    for i, (st, ttft, itl, lat, ol, err) in enumerate(zip(
            d["start_times"], d["ttfts"], d["itls"], d["latencies"], d["output_lens"], d["errors"], strict=True)):
        idx.append(i)
        start.append(st)
        end.append(st + (lat or 0.0))
        good = not err and ttft is not None and ttft > 0
        ok.append(good)
        if good and itl:
            ts = st + ttft + np.cumsum(itl)
            first.append(ts[0])
            ct.append(ts)
            nch.append(len(itl))
        else:
            first.append(np.nan)
            nch.append(0)
        out.append(ol or 0)
    chunk_t = np.concatenate(ct) if ct else np.zeros(0)
    norm = dict(idx=idx, worker=[-1] * len(idx), start=start, end=end, first=first, nchunks=nch,
                out_tokens=out, ok=ok, chunk_t=chunk_t, chunk_k=np.ones(len(chunk_t), dtype=np.int32))
    own = {k: d.get(k) for k in ("duration", "completed", "failed", "total_output_tokens", "output_throughput",
                                 "median_itl_ms", "mean_itl_ms", "median_tpot_ms", "median_ttft_ms")}
    return norm, own


# ---- analysis -----------------------------------------------------------------------------

def steady_window(start: np.ndarray, end: np.ndarray, worker: np.ndarray, c: int) -> tuple[float, float]:
    """Closed-loop steady window: from the last worker's first start to the first worker's
    last end. Without worker ids (vLLM bench's semaphore) the same instants: the c-th start,
    and the first end at or after the last start (in-flight first drops below c)."""
    if len(start) == 0:
        return (np.nan, np.nan)
    if (worker >= 0).all():
        firsts, lasts = [], []
        for w in np.unique(worker):
            m = worker == w
            firsts.append(start[m].min())
            lasts.append(end[m].max())
        if len(firsts) < c:
            return (np.nan, np.nan)
        return (max(firsts), min(lasts))
    s = np.sort(start)
    if len(s) < c:
        return (np.nan, np.nan)
    lo = s[c - 1]
    later = end[end >= s[-1]]
    hi = later.min() if len(later) else np.nan
    return (lo, hi)


def _per_request_chunks(r: dict[str, Any]):
    off = np.concatenate([[0], np.cumsum(r["nchunks"])])
    for j in range(len(r["nchunks"])):
        yield j, r["chunk_t"][off[j]:off[j + 1]], r["chunk_k"][off[j]:off[j + 1]]


def timing_stats(r: dict[str, Any]) -> dict[str, float | None]:
    """ITL per chunk (gap between token chunks), ITL per token (gap / tokens of the later
    chunk, repeated per token: specnb's definition), TPOT per request ((last - first) /
    (tokens - 1)), TTFT; p50 in ms, ok requests only."""
    itl_c, itl_t, tpot, ttft = [], [], [], []
    ok = r["ok"]
    for j, t, k in _per_request_chunks(r):
        if not ok[j] or len(t) == 0:
            continue
        g = np.diff(t)
        itl_c.append(g)
        itl_t.append(np.repeat(g / k[1:], k[1:]))
        n = int(k.sum())
        if n >= 2 and len(t) >= 2:
            tpot.append((t[-1] - t[0]) / (n - 1))
        ttft.append(t[0] - r["start"][j])

    def p50(parts):
        if not parts:
            return None
        a = np.concatenate(parts) if isinstance(parts[0], np.ndarray) else np.asarray(parts)
        return float(np.percentile(a, 50) * 1e3) if a.size else None

    return {"itl_chunk_p50_ms": p50(itl_c), "itl_token_p50_ms": p50(itl_t),
            "tpot_p50_ms": p50(tpot), "ttft_p50_ms": p50(ttft),
            "itl_chunk_mean_ms": float(np.concatenate(itl_c).mean() * 1e3) if itl_c else None}


def throughput(r: dict[str, Any], c: int) -> dict[str, Any]:
    start, end, worker = r["start"], r["end"], r["worker"]
    lo, hi = steady_window(start, end, worker, c)
    t = r["chunk_t"]
    wall = float(end.max() - start.min()) if len(start) else np.nan
    out = {"requests": int(len(start)), "ok": int(r["ok"].sum()), "chunks": int(len(t)),
           "tokens": int(r["chunk_k"].sum()), "wall_s": wall,
           "chunks_per_s_wall": len(t) / wall if wall > 0 else None,
           "steady_s": None, "chunks_per_s": None}
    if np.isfinite(lo) and np.isfinite(hi) and hi > lo:
        n = int(((t >= lo) & (t <= hi)).sum())
        out.update(steady_lo=float(lo), steady_hi=float(hi), steady_s=float(hi - lo), chunks_per_s=n / (hi - lo))
    return out


def stub_log_stats(log: dict[str, Any]) -> dict[str, float | None]:
    """The stub's own ITL/TPOT from its emission log (the truth a client is checked against)."""
    req = np.asarray(log["req"], dtype=np.int64)
    t = np.asarray(log["t_ns"], dtype=np.float64) / 1e9
    k = np.asarray(log["tokens"], dtype=np.int64)
    if req.size == 0:
        return {"itl_chunk_p50_ms": None, "itl_token_p50_ms": None, "tpot_p50_ms": None, "chunks": 0}
    order = np.lexsort((t, req))
    req, t, k = req[order], t[order], k[order]
    cut = np.flatnonzero(np.diff(req)) + 1
    itl_c, itl_t, tpot = [], [], []
    for tt, kk in zip(np.split(t, cut), np.split(k, cut), strict=True):
        g = np.diff(tt)
        itl_c.append(g)
        itl_t.append(np.repeat(g / kk[1:], kk[1:]))
        n = int(kk.sum())
        if n >= 2 and len(tt) >= 2:
            tpot.append((tt[-1] - tt[0]) / (n - 1))
    ic, it = np.concatenate(itl_c), np.concatenate(itl_t)
    return {"itl_chunk_p50_ms": float(np.percentile(ic, 50) * 1e3) if ic.size else None,
            "itl_token_p50_ms": float(np.percentile(it, 50) * 1e3) if it.size else None,
            "tpot_p50_ms": float(np.percentile(tpot, 50) * 1e3) if tpot else None,
            "itl_chunk_mean_ms": float(ic.mean() * 1e3) if ic.size else None,
            "chunks": int(req.size)}


# ---- stub control -------------------------------------------------------------------------

def http_json(url: str, method: str = "GET", timeout: float = 30.0) -> Any:
    req = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read() or b"null")


def wait_ready(base: str, timeout: float = 30.0) -> None:
    t_end = time.time() + timeout
    while True:
        try:
            http_json(base + "/health")
            return
        except Exception:  # noqa: BLE001
            if time.time() > t_end:
                raise
            time.sleep(0.1)
