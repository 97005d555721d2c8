"""``specnb predict``: the acceptance an n-gram arm must show, from the target's own probabilities.

For a measured run (one sweep folder, or a study's run of condition folders), every ok
baseline point is replayed through each n-gram arm's proposer (:mod:`specnb.analysis.predicted`):
its requests' prompts are tokenized by the engine (``/tokenize``), the drafts the proposer
would make along the baseline's output are reconstructed, and the target's probability of each
drafted token is read from the engine (prompt logprobs of the context followed by the drafts,
:mod:`specnb.engine.logprobs`), then rescaled to the point's sampling temperature.

The engine is the run's own baseline server (the sweep's model, arguments and environment,
launched once per distinct configuration, or ``--endpoint`` to attach to one), started after
the measurement: prompt-logprob requests are never sent while a point is measured. Each
prediction is written once, beside the run's ledgers, as
``<condition>/predicted/<n-gram arm>/<workload>/<baseline point>.json``; a rerun predicts only
what is missing.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from specnb import paths
from specnb.analysis.predicted import PREDICTED_DIR, PREDICTED_KIND, Step, summarize_steps, tempered, walk
from specnb.engine import logprobs as lp
from specnb.engine.server import Endpoint, VllmServer, attach
from specnb.errors import SpecnbError
from specnb.ledger import load_requests, read_ledger, write_once
from specnb.ledger import provenance as prov
from specnb.ledger.frame import ledger_files
from specnb.ledger.names import Status
from specnb.ledger.store import read_json
from specnb.prompts import resolve
from specnb.sweep.arm import Arm
from specnb.sweep.progress import progress_bar
from specnb.sweep.runner import server_args_for
from specnb.sweep.spec import SweepSpec

__all__ = ["PredictOutcome", "ngram_settings", "predict_run"]

# a step's drafts beyond its first mismatch are asked of the engine (one request with the whole
# proposal) when the chance of reaching them is above this; below, they add at most this much
# per draft to the expected count and are bounded instead ([0, chance] per draft)
OFF_PATH_CHANCE = 0.01


class PredictError(SpecnbError):
    pass


def ngram_settings(arm: Arm) -> dict[str, int] | None:
    """(prompt_lookup_min, prompt_lookup_max, K) of an n-gram arm with a fixed K, vLLM's defaults
    filled in (both unset: 5 and 5; one unset: the other); None for any other arm (a synthetic
    ceiling's acceptance is forced, a schedule's K varies)."""
    cfg = arm.speculative_config or {}
    if cfg.get("method") != "ngram" or arm.schedule or arm.ceiling:
        return None
    lo, hi = cfg.get("prompt_lookup_min"), cfg.get("prompt_lookup_max")
    if lo is None and hi is None:
        lo = hi = 5
    lo, hi = int(lo if lo is not None else hi), int(hi if hi is not None else lo)
    return {"prompt_lookup_min": lo, "prompt_lookup_max": hi, "num_speculative_tokens": int(cfg.get("num_speculative_tokens", 1))}


@dataclass
class _Job:
    cond_dir: Path
    spec: SweepSpec
    arm: Arm
    ngram: dict[str, int]
    ledger: Path
    out: Path


@dataclass
class PredictOutcome:
    folder: Path
    written: list[Path] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # why a condition or point was not predicted
    existing: int = 0

    def summary(self) -> str:
        parts = [f"predict {self.folder}: {len(self.written)} prediction(s) written", f"{self.existing} already there"]
        if self.skipped:
            parts.append(f"{len(self.skipped)} not predicted ({self.skipped[0]}{' ...' if len(self.skipped) > 1 else ''})")
        return "; ".join(parts)


def _conditions(folder: Path) -> list[Path]:
    if (folder / "sweep.json").is_file():
        return [folder]
    found = sorted(p.parent for p in folder.glob("*/sweep.json"))
    if not found:
        raise PredictError(f"{folder}: no sweep.json in it or in its condition folders (not a measured run)")
    return found


def _jobs(folder: Path, outcome: PredictOutcome) -> list[_Job]:
    jobs: list[_Job] = []
    for cond in _conditions(folder):
        spec = SweepSpec.parse(read_json(cond / "sweep.json")["spec"], where=str(cond / "sweep.json"))
        arms = [(a, ngram_settings(a)) for a in spec.arms]
        arms = [(a, s) for a, s in arms if s]
        base = next((a for a in spec.arms if a.speculative_config is None), None)
        if not arms or base is None:
            outcome.skipped.append(f"{cond.name}: no n-gram arm with a fixed K beside a baseline")
            continue
        t, top_p = spec.sampling.temperature, spec.sampling.top_p
        if top_p is not None and top_p < 1:
            outcome.skipped.append(f"{cond.name}: top_p {top_p} (the prediction models temperature only)")
            continue
        if t > 1:
            outcome.skipped.append(f"{cond.name}: temperature {t} > 1 (the top logprobs do not bound the tail)")
            continue
        for led in ledger_files(cond / base.name):
            rel = led.relative_to(cond / base.name)
            for arm, s in arms:
                out = cond / PREDICTED_DIR / arm.name / rel
                if out.exists():
                    outcome.existing += 1
                    continue
                jobs.append(_Job(cond, spec, arm, s, led, out))
    return jobs


def _server_key(spec: SweepSpec, base: Arm) -> str:
    return json.dumps([spec.model, server_args_for(spec, base), {**spec.env, **base.env}], sort_keys=True)


@contextmanager
def _engine(spec: SweepSpec, endpoint: str | None, log_dir: Path) -> Iterator[Endpoint]:
    if endpoint:
        yield attach(endpoint, spec.served_model_name)
        return
    base = next(a for a in spec.arms if a.speculative_config is None)
    srv = VllmServer(spec.model, args=server_args_for(spec, base), speculative_config=None,
                     served_model_name=spec.served_model_name or Path(spec.model).name, env={**spec.env, **base.env},
                     log_path=log_dir / f"server-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.log",
                     ready_timeout_s=spec.ready_timeout_s)
    with srv as ep:
        yield ep


def _max_model_len(ep: Endpoint) -> int:
    from specnb.engine.server import _get_json

    try:
        for m in _get_json(f"{ep.base_url}/v1/models", api_key=None).get("data", []):
            if m.get("id") == ep.model and m.get("max_model_len"):
                return int(m["max_model_len"])
    except (OSError, ValueError, AttributeError):
        pass
    return 1 << 30


def _fill(step: Step, path_lp: list[dict[int, float] | None], off: list[dict[int, float] | None] | None,
          ctx_len: int, t: float) -> None:
    """p_T of each draft of ``step``: from the path's logprobs up to its first mismatch, then from
    the step's own request (``off``) or bounded by the chance of getting there."""
    step.probs_lo, step.probs_hi = [], []
    for j, tok in enumerate(step.drafts):
        pos = ctx_len + j
        src = path_lp if j <= step.matched else off
        if src is None:  # beyond the mismatch, never asked: anything from 0 to certain
            lo, hi = 0.0, 1.0
        else:
            at = src[pos] or {}
            if tok in at:
                lo, hi = tempered(tok, at[tok], at, t)
            else:  # not in the top k there: at most as likely as the least likely listed
                floor = min(at.values()) if at else 0.0
                lo, hi = 0.0, tempered(tok, floor, at, t)[1]
        step.probs_lo.append(lo)
        step.probs_hi.append(hi)


def _predict_point(job: _Job, ep: Endpoint, max_len: int, top: int, parallel: int,
                   tokenized: dict[tuple[str, str], list[int]]) -> dict[str, Any]:
    led = read_ledger(job.ledger)
    req = load_requests(job.ledger)
    if req.empty or "output_token_ids" not in req.columns:
        raise PredictError(f"{job.ledger}: no output token ids in its requests (measured with return_token_ids off?)")
    req = req[req["error"].isna()] if "error" in req.columns else req
    wl_name = led.workload.name
    wl = next((w for w in map(resolve, job.spec.workloads) if w.name == wl_name), None)
    if wl is None or wl.content_hash != led.workload.content_hash:
        raise PredictError(f"{job.ledger}: workload {wl_name!r} is not the one measured (missing or changed since)")
    prompts = {p.id: p for p in wl.prompts}
    t = float(led.sampling.temperature)
    s = job.ngram
    seqs: list[tuple[list[int], list[int], list[Step], Any]] = []
    for row in req.to_dict("records"):
        key = (wl_name, row["prompt_id"])
        if key not in tokenized:
            tokenized[key] = lp.tokenize_chat(ep.base_url, ep.model, prompts[row["prompt_id"]].messages,
                                              headers=ep.headers)
        ids = tokenized[key]
        measured = row.get("prompt_tokens")
        if measured is not None and not (isinstance(measured, float) and math.isnan(measured)) and int(measured) != len(ids):
            raise PredictError(f"{job.ledger}: prompt {row['prompt_id']} is {len(ids)} tokens through /tokenize but "
                               f"{int(row['prompt_tokens'])} in the measured request: not the same prompt")
        out = [int(x) for x in row["output_token_ids"]]
        steps = walk(ids, out, min_n=s["prompt_lookup_min"], max_n=s["prompt_lookup_max"],
                     k=s["num_speculative_tokens"], max_model_len=max_len)
        seqs.append((ids, out, steps, row))
    # one request per distinct sequence gives every on-path probability; a step whose drafts go
    # on past its first mismatch with a fair chance of getting there gets a request of its own
    uniq = {tuple(ids + out): None for ids, out, _, _ in seqs}
    path_keys = list(uniq)
    got = lp.prompt_logprobs(ep.base_url, ep.model, [list(k) for k in path_keys], top=top, headers=ep.headers,
                             parallel=parallel)
    path_lp = dict(zip(path_keys, got, strict=True))
    off_keys: dict[tuple[int, ...], None] = {}
    for ids, out, steps, _ in seqs:
        full = path_lp[tuple(ids + out)]
        for st in steps:
            _fill(st, full, None, len(ids) + st.position, t)
            reach = float(np.prod(st.probs_hi[: st.matched + 1]))
            if st.matched + 1 < len(st.drafts) and reach > OFF_PATH_CHANCE:
                off_keys[tuple(ids + out[: st.position] + st.drafts)] = None
    off_list = list(off_keys)
    got = lp.prompt_logprobs(ep.base_url, ep.model, [list(k) for k in off_list], top=top, headers=ep.headers,
                             parallel=parallel) if off_list else []
    off_lp = dict(zip(off_list, got, strict=True))
    per_request, all_steps = [], []
    for ids, out, steps, row in seqs:
        full = path_lp[tuple(ids + out)]
        for st in steps:
            _fill(st, full, off_lp.get(tuple(ids + out[: st.position] + st.drafts)), len(ids) + st.position, t)
        all_steps += steps
        per_request.append({"index": int(row["index"]), "prompt_id": row["prompt_id"], "output_tokens": len(out),
                            **summarize_steps(steps)})
    return {
        "kind": PREDICTED_KIND,
        "arm": job.arm.name,
        "proposer": {"method": "ngram", **job.ngram},
        "baseline_point": led.point_id,
        "baseline_ledger": paths.portable(str(job.ledger)),
        "condition": (led.parameters or {}).get("condition"),
        "workload": wl_name,
        "concurrency": led.concurrency,
        "repeat": led.repeat,
        "temperature": t,
        "top_logprobs": top,
        "requests": len(seqs),
        "engine_requests": {"path": len(path_keys), "off_path": len(off_list)},
        "off_path_chance": OFF_PATH_CHANCE,
        "results": summarize_steps(all_steps),
        "per_request": per_request,
        "server": {"base_url": ep.base_url, "model": ep.model, "engine_version": led.server.engine_version,
                   "argv": [paths.portable(a) for a in (led.server.argv or [])]},
        "provenance": {"git": prov.git_state(), "versions": prov.versions()},
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.0f}%"


def predict_run(folder: Path | str, *, endpoint: str | None = None, top: int = 20, parallel: int = 4,
                progress: bool = True, echo: Callable[[str], None] = print) -> PredictOutcome:
    """Predict the n-gram arms' acceptance for every ok baseline point of ``folder`` that has no
    prediction yet (see the module doc). Failed baseline points are left out (named in
    ``skipped``); the server is stopped by its id on any exit."""
    folder = Path(folder)
    if not folder.is_dir():
        raise PredictError(f"{folder} is not a folder")
    if not 1 <= top <= 20:
        raise PredictError(f"top {top}: vLLM serves 1 to 20 prompt logprobs by default (--max-logprobs)")
    outcome = PredictOutcome(folder)
    jobs = _jobs(folder, outcome)
    ok_jobs = []
    for j in jobs:
        led = read_ledger(j.ledger)
        if led.status != Status.OK:
            outcome.skipped.append(f"{j.ledger.name}: baseline point {led.status}")
        else:
            ok_jobs.append(j)
    if not ok_jobs:
        return outcome
    by_server: dict[str, list[_Job]] = {}
    for j in ok_jobs:
        base = next(a for a in j.spec.arms if a.speculative_config is None)
        by_server.setdefault(_server_key(j.spec, base), []).append(j)
    echo(f"predicting {len(ok_jobs)} point(s) on {len(by_server)} baseline server(s)")
    bar = progress_bar(len(ok_jobs), desc="predict", enabled=progress, unit="point")
    try:
        for group in by_server.values():
            first = group[0]
            with _engine(first.spec, endpoint, first.cond_dir / PREDICTED_DIR / "logs") as ep:
                max_len = _max_model_len(ep)
                tokenized: dict[tuple[str, str], list[int]] = {}
                for job in group:
                    doc = _predict_point(job, ep, max_len, top, parallel, tokenized)
                    doc["server"]["launched"] = endpoint is None
                    write_once(job.out, (json.dumps(doc, indent=1) + "\n").encode())
                    outcome.written.append(job.out)
                    bar.update(1)
                    r = doc["results"]
                    bar.set_postfix_str(f"{job.arm.name} {doc['baseline_point']} T {doc['temperature']:g}: replayed "
                                        f"{_pct(r['replayed_rate'])}, expected {_pct(r['expected_rate_lo'])}-"
                                        f"{_pct(r['expected_rate_hi'])}")
    finally:
        bar.close()
    return outcome
