"""``specnb predict``: the acceptance an n-gram or EAGLE-3 arm must show, from the target's own probabilities.

For a measured run (one sweep folder, or a study's run of condition folders), every ok
baseline point is replayed through each n-gram arm's proposer (:mod:`specnb.analysis.predicted`)
and each EAGLE-3 arm's head (:mod:`specnb.drafter.replay`: the head and its target in
``transformers``, which needs speculators: ``make drafter`` installs it):
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
from specnb.analysis.lossless import MARGINS_DIR, MARGINS_KIND, divergence_margin, lossless, top_gaps
from specnb.analysis.predicted import (
    PREDICTED_DIR,
    PREDICTED_KIND,
    Step,
    eagle_walk,
    head_of,
    summarize_path_steps,
    summarize_steps,
    tempered,
    walk,
)
from specnb.engine import logprobs as lp
from specnb.engine.server import Endpoint, VllmServer, attach
from specnb.errors import SpecnbError
from specnb.ledger import load_ledgers, load_requests, read_ledger, write_once
from specnb.ledger import provenance as prov
from specnb.ledger.frame import ledger_files
from specnb.ledger.names import Status
from specnb.ledger.store import LedgerError, read_json
from specnb.prompts import WorkloadError, resolve
from specnb.sweep.arm import Arm
from specnb.sweep.progress import progress_bar
from specnb.sweep.runner import server_args_for
from specnb.sweep.spec import SweepSpec

__all__ = ["PredictOutcome", "ngram_settings", "predict_run", "fill_step", "prediction_path"]

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


def _eagle_settings(arm: Arm) -> dict[str, Any] | None:
    """An EAGLE-3 arm with a fixed K: its head and K (None for a schedule or a ceiling)."""
    got = head_of(arm.speculative_config)
    if got is None or arm.schedule or arm.ceiling:
        return None
    return {"method": "eagle3", "model": got[0], "num_speculative_tokens": got[1]}


@dataclass
class _Job:
    cond_dir: Path
    spec: SweepSpec
    arm: Arm
    ngram: dict[str, Any]  # the proposer: n-gram settings, or {"method": "eagle3", "model": head, ...}
    ledger: Path
    out: Path
    head_loader: Any = None  # an EAGLE-3 arm's: see predict_run


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


@dataclass
class _MarginJob:
    """A greedy pair (a drafter's point, or a baseline restart) whose outputs differ from the
    baseline point it is compared with: the baseline's logprobs at each first difference."""

    cond_dir: Path
    spec: SweepSpec
    row: dict[str, Any]  # the pair's lossless row, divergences included
    out: Path


def _margin_jobs(cond: Path, spec: SweepSpec, outcome: PredictOutcome) -> list[_MarginJob]:
    df = load_ledgers(cond)
    if df.empty:
        return []
    table = lossless(df, divergences=True)
    jobs = []
    for row in table.to_dict("records") if len(table) else []:
        if not row.get("divergences"):
            continue
        point = Path(row["path"])
        out = cond / PREDICTED_DIR / MARGINS_DIR / point.relative_to(cond)
        if out.exists():
            outcome.existing += 1
            continue
        jobs.append(_MarginJob(cond, spec, row, out))
    return jobs


def _jobs(folder: Path, outcome: PredictOutcome) -> tuple[list[_Job], list[_MarginJob]]:
    jobs: list[_Job] = []
    margins: list[_MarginJob] = []
    for cond in _conditions(folder):
        spec = SweepSpec.parse(read_json(cond / "sweep.json")["spec"], where=str(cond / "sweep.json"))
        base = next((a for a in spec.arms if a.speculative_config is None), None)
        if base is None:
            outcome.skipped.append(f"{cond.name}: no arm without a drafter (nothing to replay)")
            continue
        if spec.load.replays_conversations:  # a turn's prompt is its whole history, not a panel prompt
            outcome.skipped.append(f"{cond.name}: a conversation replay (the prediction replays single prompts; "
                                   "a turn's prompt is its conversation's history)")
            continue
        if spec.sampling.structured_output:  # the grammar picks tokens the plain logprobs know nothing of
            outcome.skipped.append(f"{cond.name}: structured output ({spec.sampling.structured_output}): the "
                                   "prediction models no grammar")
            continue
        margins += _margin_jobs(cond, spec, outcome)
        arms = [(a, ngram_settings(a) or _eagle_settings(a)) for a in spec.arms]
        arms = [(a, s) for a, s in arms if s]
        if not arms:
            continue
        t, top_p = spec.sampling.temperature, spec.sampling.top_p
        if top_p is not None and top_p < 1:
            outcome.skipped.append(f"{cond.name}: top_p {top_p} (the prediction models temperature only)")
            continue
        if t > 1:
            outcome.skipped.append(f"{cond.name}: temperature {t} > 1 (the top logprobs do not bound the tail)")
            continue
        if not (cond / base.name).is_dir():
            outcome.skipped.append(f"{cond.name}: no baseline points")
            continue
        measured = [(a, s) for a, s in arms if (cond / a.name).is_dir()
                    and any(read_ledger(f).status == Status.OK for f in ledger_files(cond / a.name))]
        for led in ledger_files(cond / base.name):
            rel = led.relative_to(cond / base.name)
            for arm, s in measured:
                out = prediction_path(cond / PREDICTED_DIR / arm.name / rel, led)
                if out is None:
                    outcome.existing += 1
                    continue
                jobs.append(_Job(cond, spec, arm, s, led, out))
    return jobs, margins


def prediction_path(canonical: Path, baseline: Path) -> Path | None:
    """Where the prediction of this baseline measurement goes; None when it is already there.
    A prediction is of one measurement (the baseline ledger's ``started_at``): a point measured
    again after it was predicted gets a prediction of its own, beside the stale one (records are
    write-once), named by the new measurement's start; the analysis reads the current one."""
    started = read_ledger(baseline).started_at
    if not canonical.exists():
        return canonical
    try:
        doc = read_json(canonical)
    except (OSError, ValueError):
        return None  # unreadable: said where the records are read, not measured again here
    of = doc.get("baseline_started_at")
    # a record made before measurements were named: current unless the point was measured after it
    current = of == started if of else str(doc.get("created_at") or "") >= str(read_ledger(baseline).finished_at or "")
    if current:
        return None
    again = canonical.with_name(f"{canonical.stem}.{''.join(ch for ch in started if ch.isdigit())[:14]}.json")
    return None if again.exists() else again


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


def fill_step(step: Step, path_lp: list[dict[int, float] | None], off: list[dict[int, float] | None] | None,
          ctx_len: int, t: float, top: int = 20) -> None:
    """p_T of each draft of ``step``: from the path's logprobs up to its first mismatch, then from
    the step's own request (``off``) or bounded by the chance of getting there. A position's
    entry holds the ``top`` most likely tokens and the prompt's own token there (which may rank
    below them): only the top ones bound the tokens not listed."""
    step.probs_lo, step.probs_hi = [], []
    for j, tok in enumerate(step.drafts):
        pos = ctx_len + j
        src = path_lp if j <= step.matched else off
        if src is None:  # beyond the mismatch, never asked: anything from 0 to certain
            lo, hi = 0.0, 1.0
        else:
            at = src[pos] or {}
            best = dict(sorted(at.items(), key=lambda kv: -kv[1])[:top])
            if tok in at:
                lo, hi = tempered(tok, at[tok], best, t)
            else:  # not listed there: at most as likely as the least likely of the top
                floor = min(best.values()) if best else 0.0
                lo, hi = 0.0, tempered(tok, floor, best, t)[1]
        step.probs_lo.append(lo)
        step.probs_hi.append(hi)


def _prompt(prompts: dict[str, Any], row: Any, where: Any) -> Any:
    got = prompts.get(row["prompt_id"])
    if got is None:
        raise PredictError(f"{where}: prompt {row['prompt_id']!r} is not in the workload any more")
    return got


def _ids(row: Any, where: Any) -> list[int]:
    ids = row["output_token_ids"]
    if ids is None or (isinstance(ids, float) and math.isnan(ids)):
        raise PredictError(f"{where}: request {row['index'] if 'index' in row else '?'} has no output token ids "
                           "(a server that does not send return_token_ids?)")
    return [int(x) for x in ids]


_HEADS: dict[tuple[str, str], Any] = {}
# (target folder, head folder) -> an object whose drafts(ids, k) gives the head's drafts along a text
HeadLoader = Callable[[Path, Path], Any]


def _head(job: _Job) -> Any:
    """The arm's head and its target, loaded once per process."""
    loader = job.head_loader
    key = (job.spec.model, job.ngram["model"])
    if key not in _HEADS:
        if loader is None:
            raise PredictError(f"{job.arm.name}: no way to run an EAGLE-3 head here (specnb predict passes one)")
        try:
            _HEADS[key] = loader(paths.resolve(job.spec.model), paths.resolve(job.ngram["model"]))
        except ImportError as exc:
            raise PredictError(f"{job.arm.name}: an EAGLE-3 head is replayed with speculators ({exc}): make drafter "
                               "installs it") from None
        except (OSError, ValueError, KeyError, RuntimeError) as exc:  # RuntimeError: weights of another shape
            _HEADS[key] = PredictError(f"{job.arm.name}: head {job.ngram['model']} not loaded: {exc}")
    if isinstance(_HEADS[key], PredictError):  # said once per point, loaded once
        raise _HEADS[key]
    return _HEADS[key]


def _sequences(job: _Job, ep: Endpoint, req: Any, wl_name: str, prompts: dict[str, Any], max_len: int,
               tokenized: dict[tuple[str, str], list[int]]) -> list[tuple[list[int], list[int], list[Step], Any]]:
    """Per request: the engine's prompt tokens, the baseline's output and the arm's drafting steps
    along it (vLLM's n-gram rule, or the head's drafts)."""
    s = job.ngram
    eagle = s.get("method") == "eagle3"
    seqs: list[tuple[list[int], list[int], list[Step], Any]] = []
    for row in req.to_dict("records"):
        key = (wl_name, row["prompt_id"])
        if key not in tokenized:
            tokenized[key] = lp.tokenize_chat(ep.base_url, ep.model, _prompt(prompts, row, job.ledger).messages,
                                              headers=ep.headers)
        ids = tokenized[key]
        measured = row.get("prompt_tokens")
        if measured is not None and not (isinstance(measured, float) and math.isnan(measured)) and int(measured) != len(ids):
            raise PredictError(f"{job.ledger}: prompt {row['prompt_id']} is {len(ids)} tokens through /tokenize but "
                               f"{int(row['prompt_tokens'])} in the measured request: not the same prompt")
        out = _ids(row, job.ledger)
        if eagle:
            k = s["num_speculative_tokens"]
            steps = eagle_walk(ids, out, _head(job).drafts(ids + out, k), k)
        else:
            steps = walk(ids, out, min_n=s["prompt_lookup_min"], max_n=s["prompt_lookup_max"],
                         k=s["num_speculative_tokens"], max_model_len=max_len)
        seqs.append((ids, out, steps, row))
    return seqs


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
    eagle = s.get("method") == "eagle3"
    seqs = _sequences(job, ep, req, wl_name, prompts, max_len, tokenized)
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
            fill_step(st, full, None, len(ids) + st.position, t, top)
            reach = float(np.prod(st.probs_hi[: st.matched + 1]))
            if not eagle and st.matched + 1 < len(st.drafts) and reach > OFF_PATH_CHANCE:
                off_keys[tuple(ids + out[: st.position] + st.drafts)] = None
    off_list = list(off_keys)
    got = lp.prompt_logprobs(ep.base_url, ep.model, [list(k) for k in off_list], top=top, headers=ep.headers,
                             parallel=parallel) if off_list else []
    off_lp = dict(zip(off_list, got, strict=True))
    per_request, all_steps = [], []
    summarize = summarize_path_steps if eagle else summarize_steps
    for ids, out, steps, row in seqs:
        full = path_lp[tuple(ids + out)]
        for st in steps:
            fill_step(st, full, off_lp.get(tuple(ids + out[: st.position] + st.drafts)), len(ids) + st.position, t, top)
        all_steps += steps
        per_request.append({"index": int(row["index"]), "prompt_id": row["prompt_id"], "output_tokens": len(out),
                            **summarize(steps)})
    return {
        "kind": PREDICTED_KIND,
        "arm": job.arm.name,
        "proposer": job.ngram if eagle else {"method": "ngram", **job.ngram},
        "estimator": "path: p_T of each draft up to the step's first mismatch" if eagle else
                     "proposal: the product of p_T over each step's drafts",
        "baseline_point": led.point_id,
        "baseline_ledger": paths.portable(str(job.ledger)),
        "baseline_started_at": led.started_at,  # which measurement of that point was replayed
        "condition": (led.parameters or {}).get("condition"),
        "workload": wl_name,
        "concurrency": led.in_flight,
        "repeat": led.repeat,
        "temperature": t,
        "top_logprobs": top,
        "requests": len(seqs),
        "engine_requests": {"path": len(path_keys), "off_path": len(off_list)},
        "off_path_chance": OFF_PATH_CHANCE,
        "results": summarize(all_steps),
        "per_request": per_request,
        "server": {"base_url": ep.base_url, "model": ep.model, "engine_version": led.server.engine_version,
                   "argv": [paths.portable(a) for a in (led.server.argv or [])]},
        "provenance": {"git": prov.git_state(), "versions": prov.versions()},
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _margins(job: _MarginJob, ep: Endpoint, top: int, parallel: int,
             tokenized: dict[tuple[str, str], list[int]]) -> dict[str, Any]:
    """The baseline's raw logprobs at every first difference of one greedy pair (one request per
    differing baseline output: prompt + the baseline's output, ``prompt_logprobs``)."""
    row = job.row
    ref = load_requests(row["path_ref"]).set_index("index")
    led = read_ledger(row["path_ref"])
    wl = next((w for w in map(resolve, job.spec.workloads) if w.name == led.workload.name), None)
    if wl is None or wl.content_hash != led.workload.content_hash:
        raise PredictError(f"{row['path_ref']}: workload {led.workload.name!r} is not the one measured")
    prompts = {p.id: p for p in wl.prompts}
    seqs, items = [], []
    for d in row["divergences"]:
        base_row = ref.loc[d["index"]]
        key = (wl.name, base_row["prompt_id"])
        if key not in tokenized:
            tokenized[key] = lp.tokenize_chat(ep.base_url, ep.model, _prompt(prompts, base_row, row["path_ref"]).messages,
                                              headers=ep.headers)
        ids, out = tokenized[key], _ids(base_row, row["path_ref"])
        seqs.append(ids + out)
        items.append((d, len(ids)))
    got = lp.prompt_logprobs(ep.base_url, ep.model, seqs, top=top, headers=ep.headers, parallel=parallel)
    divs = []
    for (d, n_prompt), path_lp in zip(items, got, strict=True):
        pos = n_prompt + d["position"]
        info = {**d, "margin": None, "margin_is_bound": False, "argmax_is_base": None, "as_close_share": None}
        if d["token_a"] is not None and pos < len(path_lp):
            info.update(divergence_margin(d["token_a"], d["token_b"], path_lp[pos]))
            gaps = top_gaps(path_lp, n_prompt)
            if info["margin"] is not None and len(gaps):
                info["as_close_share"] = float((gaps <= abs(info["margin"])).mean())
                info["typical_gap_p50"] = float(np.median(gaps))
        divs.append(info)
    return {
        "kind": MARGINS_KIND,
        "condition": (led.parameters or {}).get("condition"),
        "arm": row["arm"], "workload": row["workload"], "concurrency": row["concurrency"], "repeat": row["repeat"],
        "reference": bool(row["reference"]),
        "point": paths.portable(str(row["path"])), "baseline_point": paths.portable(str(row["path_ref"])),
        "requests": row["requests"], "identical": row["identical"], "top_logprobs": top,
        "divergences": divs,
        "server": {"base_url": ep.base_url, "model": ep.model, "engine_version": led.server.engine_version},
        "provenance": {"git": prov.git_state(), "versions": prov.versions()},
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.0f}%"


def predict_run(folder: Path | str, *, endpoint: str | None = None, top: int = 20, parallel: int = 4,
                progress: bool = True, echo: Callable[[str], None] = print,
                head_loader: HeadLoader | None = None) -> PredictOutcome:
    """Predict the n-gram and EAGLE-3 arms' acceptance for every ok baseline point of ``folder`` that
    has no prediction yet (see the module doc). ``head_loader(target, head)`` loads an EAGLE-3 arm's
    head (:class:`specnb.drafter.replay.HeadDrafter`; without one those arms are skipped, said).
    Failed baseline points are left out (named in ``skipped``); the server is stopped by its id on
    any exit."""
    folder = Path(folder)
    if not folder.is_dir():
        raise PredictError(f"{folder} is not a folder")
    if not 1 <= top <= 20:
        raise PredictError(f"top {top}: vLLM serves 1 to 20 prompt logprobs by default (--max-logprobs)")
    outcome = PredictOutcome(folder)
    jobs, margin_jobs = _jobs(folder, outcome)
    ok_jobs = []
    for j in jobs:
        j.head_loader = head_loader
        led = read_ledger(j.ledger)
        if led.status != Status.OK:
            outcome.skipped.append(f"{j.ledger.name}: baseline point {led.status}")
        else:
            ok_jobs.append(j)
    if not ok_jobs and not margin_jobs:
        return outcome
    by_server: dict[str, tuple[SweepSpec, Path, list[Any]]] = {}
    for j in [*ok_jobs, *margin_jobs]:
        base = next(a for a in j.spec.arms if a.speculative_config is None)
        by_server.setdefault(_server_key(j.spec, base), (j.spec, j.cond_dir, []))[2].append(j)
    if endpoint and len(by_server) > 1:
        raise PredictError(f"--endpoint {endpoint}: this run's conditions use {len(by_server)} different baseline "
                           "servers (model, arguments or environment): predict each condition folder on its own")
    echo(f"predicting {len(ok_jobs)} point(s) and the first differences of {len(margin_jobs)} greedy pair(s) "
         f"on {len(by_server)} baseline server(s)")
    bar = progress_bar(len(ok_jobs) + len(margin_jobs), desc="predict", enabled=progress, unit="point")
    try:
        for spec, cond_dir, group in by_server.values():
            with _engine(spec, endpoint, cond_dir / PREDICTED_DIR / "logs") as ep:
                max_len = _max_model_len(ep)
                tokenized: dict[tuple[str, str], list[int]] = {}
                for job in group:
                    try:
                        doc, note = _one_job(job, ep, max_len, top, parallel, tokenized)
                    except (PredictError, lp.LogprobError, LedgerError, WorkloadError) as exc:
                        outcome.skipped.append(f"{job.out}: {exc}")
                        bar.update(1)
                        bar.set_postfix_str(f"not predicted: {exc}")
                        continue
                    doc["server"]["launched"] = endpoint is None
                    write_once(job.out, (json.dumps(doc, indent=1) + "\n").encode())
                    outcome.written.append(job.out)
                    bar.update(1)
                    bar.set_postfix_str(note)
    finally:
        bar.close()
    return outcome


def _one_job(job: Any, ep: Endpoint, max_len: int, top: int, parallel: int,
             tokenized: dict[tuple[str, str], list[int]]) -> tuple[dict[str, Any], str]:
    """One record and its progress note: a greedy pair's margins or a point's prediction."""
    if isinstance(job, _MarginJob):
        doc = _margins(job, ep, top, parallel, tokenized)
        got = [d["margin"] for d in doc["divergences"] if d["margin"] is not None]
        note = (f"{job.row['arm']} {Path(job.row['path']).name}: {len(doc['divergences'])} first difference(s), "
                f"median margin {np.median(got):.2f} nats" if got else "no margin")
        return doc, note
    doc = _predict_point(job, ep, max_len, top, parallel, tokenized)
    r = doc["results"]
    note = (f"{job.arm.name} {doc['baseline_point']} T {doc['temperature']:g}: replayed "
            f"{_pct(r['replayed_rate'])}, expected {_pct(r['expected_rate_lo'])}-{_pct(r['expected_rate_hi'])}")
    return doc, note
