"""``specnb tune``: measure -> derive -> deploy -> verify, round after round, until the config
specnb tells an operator to deploy is verified to win (or the report says where it does not).

A tune run folder (``ledgers/tune/<name>/<run>/``)::

    proposal/            the K sweep: baseline, one arm per K, and the off arm (drafter loaded,
                         K = 0 at every batch size: what "off inside a schedule" costs)
    round-01/            a sweep: baseline, static (the proposal's best static K), tuned (the candidate)
    tune/candidate-01.json   the candidate, written before its round is measured (a policy file)
    tune/round-01.json       the round's verdict, per-level check and what it changes next
    ...
    tune/result.json     the config to deploy and the claim it earned

Every file is written once; a run that dies resumes with the same ``--out``: a written
candidate is measured as it is, a finished round is read back, not measured again.

The derivation (:func:`specnb.analysis.schedule.derive_policy`) compares each K against the
better of the off arm and the best static K; each round measures the candidate on one run with
the baseline and the best static K, at the proposal's levels and both sides of every switch, and
:mod:`specnb.analysis.tune` gives its verdict and the next candidate. The loop stops when a
candidate meets the envelope at every level, when the next candidate is one already measured
(or the static config itself, already measured as ``static``), at ``max_rounds`` or after
``budget_s``. Where no candidate verified, the static config is what is deployed, with the
claim its own measurement in the last round supports.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from specnb import paths
from specnb.analysis.schedule import (
    DEFAULT_MARGIN,
    RULES,
    SCHEDULE_KEY,
    Deploy,
    ScheduleError,
    derive_policy,
    off_arms,
    policy_config,
)
from specnb.analysis.tables import summarize
from specnb.analysis.tune import (
    STATIC,
    TUNED,
    claim_text,
    k_scheduled,
    rederive,
    round_check,
    schedule_levels,
)
from specnb.errors import SpecnbError, first_error, read_toml
from specnb.ledger import load_ledgers, read_ledger, utcnow, write_once
from specnb.ledger.names import BASELINE
from specnb.ledger.store import read_json
from specnb.prompts.sources import resolve
from specnb.sweep.policy import boundary_levels
from specnb.sweep.preflight import flag_value
from specnb.sweep.spec import SweepSpec

__all__ = ["Stop", "TuneError", "TuneSettings", "TuneSpec", "run_tune", "TuneOutcome", "judge_tuned"]

ROUND_KIND = "tune_round"
RESULT_KIND = "tune_result"


class TuneError(SpecnbError):
    """A tune that cannot start or go on; one line."""


class TuneSettings(BaseModel):
    """The ``[tune]`` table of a tune config."""

    model_config = ConfigDict(extra="forbid")

    workload: str | None = Field(None, description="the workload the config is tuned for (needed when the "
                                 "proposal has several)")
    method: str | None = Field(None, description="the drafter method (needed when the proposal's arms use several)")
    rule: Literal[RULES] = Field("lower_bound", description="how the first derivation keeps a K (specnb policy --rule)")
    max_rounds: int = Field(3, ge=1, le=20, description="verification rounds at most")
    budget_s: float | None = Field(None, gt=0, description="no new round once the tune has run this long")
    round_repeats: int | None = Field(None, ge=1, description="server starts per arm in a round (default: the "
                                      "proposal's repeats)")
    off_arm: bool = Field(True, description="add the off arm (drafter loaded, K = 0 at every batch size) to "
                          "the proposal when it has none")
    proposal: str | None = Field(None, description="an existing proposal run folder to start from instead of "
                                 "measuring one (its sweep.json gives the settings of the rounds)")
    max_batch: int | None = Field(None, ge=1, description="end of the schedule's last range (default: "
                                  "--max-num-seqs, else 256)")
    margin: float = Field(DEFAULT_MARGIN, ge=0.0, lt=0.5, description="non-inferiority margin: a candidate is verified "
                          "where its paired ratio against static K has a lower bound above 1 - margin (and its speedup "
                          "a lower bound above 1.0)")
    alpha: float = Field(0.05, gt=0.0, lt=0.5, description="the chance that the deployed candidate is verified wrongly, "
                         "over every round: each round's tests at alpha / max_rounds (two-sided)")


class TuneSpec(BaseModel):
    """A proposal sweep and the tune settings."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    proposal: SweepSpec
    settings: TuneSettings
    proposal_dir: Path | None = None  # an existing proposal run (settings.proposal) or None: measure one

    @classmethod
    def from_toml(cls, path: str | Path, overrides: dict[str, Any] | None = None) -> TuneSpec:
        data = read_toml(path, TuneError)
        return cls.parse(data, overrides, where=str(path))

    @classmethod
    def parse(cls, data: dict[str, Any], overrides: dict[str, Any] | None = None, where: str = "tune") -> TuneSpec:
        data = dict(data)
        tune = dict(data.pop("tune", None) or {})
        for key, value in (overrides or {}).items():
            if key.startswith("tune."):
                tune[key[5:]] = value
            else:
                data[key] = value
        try:
            settings = TuneSettings.model_validate(tune)
        except ValidationError as exc:
            raise TuneError(f"{where} [tune]: {first_error(exc, model=TuneSettings)}") from None
        proposal_dir = None
        if settings.proposal:
            proposal_dir = Path(settings.proposal)
            spec_doc = _sweep_json(proposal_dir)
            # the rounds measure what the proposal run measured: a --set of anything else would be
            # dropped without a word, so it is refused here instead
            fixed = sorted(k for k in (overrides or {}) if not k.startswith("tune.") and k not in _OWN_WITH_PROPOSAL)
            if fixed:
                raise TuneError(f"--set {fixed[0]}: tune.proposal {str(proposal_dir)!r} fixes every sweep setting but "
                                f"{', '.join(_OWN_WITH_PROPOSAL)} (the rounds measure what that run measured); set it "
                                "in a new proposal run instead")
            data = {**spec_doc, **{k: v for k, v in data.items() if k in _OWN_WITH_PROPOSAL}}
        spec = SweepSpec.parse(data, where=where)
        if not spec.load.concurrency_levels:
            raise TuneError(f"{where}: a schedule is tuned on closed-loop levels (concurrency), not on rates")
        dp = next((v for arm in spec.arms for v in (flag_value([*spec.server_args, *arm.server_args], flag)
                                                      for flag in ("--data-parallel-size", "-dp"))
                   if v is not None and v.strip() != "1"), None)
        if dp is not None:
            raise TuneError(f"{where}: vLLM turns a dynamic speculation schedule off under --data-parallel-size {dp} "
                            "(vLLM #45963): tune on one engine, then deploy the schedule per engine")
        if not any(a.speculative_config is None for a in spec.arms):
            raise TuneError(f"{where}: the proposal needs the arm without a drafter ('{BASELINE}')")
        drafters = [a for a in spec.arms if a.speculative_config is not None and not a.schedule]
        if not drafters:
            raise TuneError(f"{where}: the proposal needs at least one drafter arm with a fixed K")
        methods = sorted({str(a.speculative_config.get("method")) for a in drafters})
        if settings.method is None and len(methods) > 1:
            raise TuneError(f"{where}: the proposal's drafter arms use {len(methods)} methods ({', '.join(methods)}): "
                            "a schedule sets K for one drafter; set tune.method (one tune per method)")
        if settings.method is not None and settings.method not in methods:
            raise TuneError(f"{where}: tune.method {settings.method!r} is no drafter arm's method (they use {methods})")
        if proposal_dir is None and settings.off_arm:
            spec = _with_off_arm(spec, settings.method or methods[0], settings.max_batch)
        return cls(proposal=spec, settings=settings, proposal_dir=proposal_dir)


# what a tune that starts from an existing proposal run sets for itself (everything else is that run's)
_OWN_WITH_PROPOSAL = ("name", "repeats", "start_together")


def _sweep_json(folder: Path) -> dict[str, Any]:
    """The sweep definition of a proposal run: ``sweep.json`` in it or in its one condition folder."""
    if not folder.is_dir():
        raise TuneError(f"tune.proposal {str(folder)!r} is not a folder")
    found = [folder / "sweep.json"] if (folder / "sweep.json").is_file() else sorted(folder.glob("*/sweep.json"))
    if len(found) != 1:
        raise TuneError(f"tune.proposal {str(folder)!r}: expected one sweep.json in it or in one condition folder, "
                        f"found {len(found)}")
    spec = read_json(found[0])["spec"]
    return {k: v for k, v in spec.items() if k != "search"}


def _max_batch(spec: SweepSpec, given: int | None) -> int:
    if given:
        return given
    seqs = flag_value(spec.server_args, "--max-num-seqs")
    return int(seqs) if seqs and seqs.isdigit() else 256


def _with_off_arm(spec: SweepSpec, method: str, max_batch: int | None) -> SweepSpec:
    """The proposal with an off arm for ``method`` (the largest-K arm's config with K = 0 at every
    batch size) unless it already has one."""
    arms = spec.arms
    if any(a.schedule and all(int(r[2]) == 0 for r in a.speculative_config[SCHEDULE_KEY]) for a in arms):
        return spec
    same = [a for a in arms if a.speculative_config and not a.schedule
            and a.speculative_config.get("method") == method]
    top = max(same, key=lambda a: int(a.speculative_config.get("num_speculative_tokens", 1)))
    cfg = {**top.speculative_config, SCHEDULE_KEY: [[1, _max_batch(spec, max_batch), 0]]}
    off = top.model_copy(update={"name": f"{method}-off", "speculative_config": cfg})
    data = spec.model_dump(mode="json")
    data["arms"] = [*data["arms"], off.model_dump(mode="json")]
    return SweepSpec.parse(data, where="tune proposal")


class TuneOutcome(BaseModel):
    folder: Path
    result: dict[str, Any]
    failed_points: list[str] = Field(default_factory=list)

    def summary(self) -> str:
        r = self.result
        if not r:
            return f"tune {self.folder}: unfinished ({len(self.failed_points)} failed point(s)); rerun with the same --out"
        return (f"tune {self.folder}: {r['rounds']} round(s); deploy {r['deploy']}: "
                f"--speculative-config '{json.dumps(r['speculative_config'])}'; {r['claim']}")


def _workload_entry(spec: SweepSpec, name: str | None) -> tuple[str, Any]:
    names = {resolve(w).name: w for w in spec.workloads}
    if name is None:
        if len(names) != 1:
            raise TuneError(f"the proposal has workloads {sorted(names)}: name the one your traffic looks like "
                            "(tune.workload)")
        name = next(iter(names))
    if name not in names:
        raise TuneError(f"tune.workload {name!r} is not a workload of the proposal ({sorted(names)})")
    return name, names[name]


def _arm_with(spec: SweepSpec, cfg: dict[str, Any] | None) -> dict[str, Any] | None:
    """The proposal arm with this speculative config (its endpoint and own args are reused)."""
    for a in spec.arms:
        if a.speculative_config == cfg:
            return a.model_dump(mode="json", exclude={"name"})
    return None


def _round_spec(prop: SweepSpec, n: int, workload: Any, levels: list[int], repeats: int,
                static_cfg: dict[str, Any], candidate: Path, candidate_cfg: dict[str, Any]) -> SweepSpec:
    data = prop.model_dump(mode="json")
    base = _arm_with(prop, None) or {}
    arms = [{**base, "name": BASELINE}]
    if candidate_cfg != static_cfg:
        arms.append({**(_arm_with(prop, static_cfg) or {}), "name": STATIC, "speculative_config": static_cfg})
    # the candidate runs with the drafter arm's own args and environment; an attached endpoint only
    # where it serves exactly the candidate's config
    tuned = _arm_with(prop, candidate_cfg) or {k: v for k, v in (_arm_with(prop, static_cfg) or {}).items()
                                               if k != "endpoint"}
    arms.append({**tuned, "name": TUNED, "speculative_config": {"policy_file": str(candidate)}})
    # a round is one look at every repeat (its verdict is tune's, at its own level): no search, no
    # sequential rounds of its own
    data.update(name=f"{prop.name}-round-{n:02d}", arms=arms, concurrency=levels, repeats=repeats,
                workloads=[workload], search=None, sequential=None,
                parameters={**prop.parameters, "tune_round": n})
    return SweepSpec.parse(data, where=f"tune round {n}")


def _doc(kind: str, **kw: Any) -> bytes:
    return (json.dumps({"kind": kind, **kw, "created_at": utcnow()}, indent=2, default=_plain) + "\n").encode()


def _plain(v: Any) -> Any:
    return v.item() if hasattr(v, "item") else str(v)


def _records(df: Any) -> list[dict[str, Any]]:
    return json.loads(df.to_json(orient="records"))


class Stop(StrEnum):
    """Why a tune's loop of rounds ended (a round record's and the result's ``stop``)."""

    VERIFIED = "verified"  # a candidate met the envelope at every level
    MAX_ROUNDS = "max_rounds"
    BUDGET = "budget"  # budget_s spent: no new round
    UNJUDGED = "unjudged"  # a round had an arm without a usable point
    STATIC = "static"  # the next candidate is the static config, already measured as static
    REPEATED = "repeated"  # the next candidate was measured in an earlier round


@dataclass(frozen=True)
class _Derived:
    """What the proposal gives the rounds: the first candidate, the static config every round
    measures beside it, the levels, and the derivation as the first candidate records it."""

    prop_dir: Path
    workload: str
    entry: Any  # the workload as the proposal names it
    config: dict[str, Any]  # the first candidate
    static_cfg: dict[str, Any]
    static_k: int
    max_batch: int
    levels: list[int]
    derivation: dict[str, Any]
    actions: list[str]
    margin: float = DEFAULT_MARGIN  # non-inferiority margin against static K
    confidence: float = 0.95  # each round's tests: 1 - alpha / max_rounds


@dataclass
class _Loop:
    """The rounds so far (read back on a resume, or measured now) and what the next one tries."""

    config: dict[str, Any]
    actions: list[str]
    tried: list[dict[str, Any]] = field(default_factory=list)
    rounds: list[dict[str, Any]] = field(default_factory=list)
    stop: str = Stop.MAX_ROUNDS
    spent: float = 0.0  # tune seconds spent by earlier invocations (recorded in each round), for the budget


def run_tune(spec: TuneSpec, out: Path | str, *, progress: bool = True,
             echo: Callable[[str], None] | None = None, executor: Any = None) -> TuneOutcome:
    """Run (or resume) a tune into ``out``; its sweeps run on ``executor`` (here by default, or
    on Ray: :func:`specnb.sweep.executor.run_sweep`)."""
    echo = echo or print
    out = Path(out)
    rec = out / "tune"
    if (rec / "result.json").is_file():
        result = read_json(rec / "result.json")
        echo(f"{out} is finished (tune/result.json); nothing to measure")
        return TuneOutcome(folder=out, result=result)
    t0 = time.monotonic()

    def sweep(sspec: SweepSpec, folder: Path) -> Any:
        from specnb.sweep.executor import run_sweep  # the engine side (here or on Ray), only when measuring

        return run_sweep(sspec, folder, progress=progress, echo=echo, executor=executor)

    prop_dir = spec.proposal_dir or out / "proposal"
    if spec.proposal_dir is None:
        failed = _measure_proposal(spec.proposal, prop_dir, sweep, echo)
        if failed:
            return TuneOutcome(folder=out, result={}, failed_points=failed)
    d = _derive(spec, prop_dir, out)
    loop = _Loop(config=d.config, actions=d.actions)
    for n in range(1, spec.settings.max_rounds + 1):
        round_file = rec / f"round-{n:02d}.json"
        if round_file.is_file():  # finished before a resume: read, not measured again
            if _read_round(loop, read_json(round_file)):
                continue
            break
        if spec.settings.budget_s is not None and loop.spent + time.monotonic() - t0 > spec.settings.budget_s and n > 1:
            loop.stop = Stop.BUDGET
            echo(f"tune: budget of {spec.settings.budget_s:.0f} s spent; no round {n}")
            break
        o, measured, is_static = _measure_round(spec, d, loop, n, out, sweep, echo)
        if o.failed_points:  # judge a complete round only: a rerun measures the missing points first
            echo(f"tune round {n}: {len(o.failed_points)} point(s) failed; not judged (rerun with the same --out)")
            return TuneOutcome(folder=out, result={}, failed_points=[f"round {n}: {p}" for p in o.failed_points])
        doc = _judge_round(d, loop, n, measured, is_static, load_ledgers(out / f"round-{n:02d}"))
        doc["tune_elapsed_s"] = loop.spent + time.monotonic() - t0
        write_once(round_file, _doc(ROUND_KIND, **doc))
        loop.rounds.append(json.loads(json.dumps(doc, default=_plain)))
        echo(f"tune round {n}: {doc['claim']}" if loop.stop == Stop.UNJUDGED else
             f"tune round {n}: {'verified' if doc['verified'] else 'short'}: {doc['claim']}")
        if doc["next_config"] is None:
            break
        loop.config = doc["next_config"]
    result = _result(out, loop.rounds, d.static_cfg, d.static_k, loop.stop, d.derivation)
    write_once(rec / "result.json", _doc(RESULT_KIND, **result))
    return TuneOutcome(folder=out, result=result, failed_points=[])


def _measure_proposal(prop: SweepSpec, prop_dir: Path, sweep: Callable[[SweepSpec, Path], Any],
                      echo: Callable[[str], None]) -> list[str]:
    """The proposal measured (or resumed); its points still without a measurement (none: derive)."""
    echo(f"tune: measuring the proposal ({', '.join(a.name for a in prop.arms)}) into {prop_dir}")
    o = sweep(prop, prop_dir)
    failed = [f"proposal: {p}" for p in o.failed_points]
    if failed:  # derive from a complete proposal only: a rerun measures the missing points first
        echo(f"tune: {len(failed)} proposal point(s) failed; nothing derived (rerun with the same --out)")
    return failed


def _derive(spec: TuneSpec, prop_dir: Path, out: Path) -> _Derived:
    """The first candidate and the static config from the proposal's ledgers."""
    s, prop = spec.settings, spec.proposal
    workload, entry = _workload_entry(prop, s.workload)
    pdf = load_ledgers(prop_dir)
    max_batch = _max_batch(prop, s.max_batch)
    try:
        config, chosen, _ = derive_policy(pdf, workload=workload, rule=s.rule, max_batch=max_batch,
                                          source=str(prop_dir), method=s.method)
    except ScheduleError as exc:
        raise TuneError(f"the proposal {prop_dir}: {exc}") from None
    static_arm = chosen.attrs.get("static_arm")
    if static_arm is None:
        raise TuneError(f"the proposal {prop_dir} has no drafter arm measured at every level: nothing to compare a "
                        "schedule with")
    ok = pdf[(pdf["arm"] == static_arm) & (pdf["status"] == "ok")]

    static_cfg = dict(read_ledger(ok["path"].iloc[0]).arm.speculative_config)
    first = out / "tune" / "round-01.json"
    if first.is_file() and read_json(first)["static_config"] != static_cfg:  # a resume must not switch it
        raise TuneError(f"{out}: the proposal's best static K is now {static_cfg}, the rounds measured "
                        f"{read_json(first)['static_config']}; tune into a new --out")
    offs = sorted(off_arms(pdf[pdf["workload"] == workload]))
    derivation = {"from": paths.portable(str(prop_dir)), "workload": workload, "rule": s.rule, "static_arm": static_arm, "off_arms": offs,
                  "levels": _records(chosen), "deploy": chosen.attrs.get("deploy"), "claim": chosen.attrs.get("claim"),
                  "margin": s.margin, "confidence": 1.0 - s.alpha / s.max_rounds}
    return _Derived(prop_dir=prop_dir, workload=workload, entry=entry, config=config, static_cfg=static_cfg,
                    static_k=int(static_cfg["num_speculative_tokens"]), max_batch=max_batch,
                    levels=sorted(int(c) for c in chosen["concurrency"]), derivation=derivation, margin=s.margin,
                    confidence=1.0 - s.alpha / s.max_rounds,
                    actions=[f"derived from the proposal ({chosen.attrs.get('deploy')}): {chosen.attrs.get('claim')}"])


def _read_round(loop: _Loop, done: dict[str, Any]) -> bool:
    """A round finished before a resume, into the loop; False when the loop ended there."""
    loop.rounds.append(done)
    loop.spent = float(done.get("tune_elapsed_s") or 0.0)
    loop.tried.append(done["speculative_config"])
    if done.get("next_config") is None:
        loop.stop = done.get("stop", Stop.VERIFIED)
        return False
    loop.config = done["next_config"]
    loop.actions = done.get("actions", [])
    return True


def _measure_round(spec: TuneSpec, d: _Derived, loop: _Loop, n: int, out: Path,
                   sweep: Callable[[SweepSpec, Path], Any], echo: Callable[[str], None]) -> tuple[Any, list[int], bool]:
    """Round ``n``: its candidate written (once) as a policy file, then its sweep measured; returns
    the sweep's outcome, the levels measured and whether the candidate is the static config."""
    cand = out / "tune" / f"candidate-{n:02d}.json"
    if cand.is_file():
        loop.config = read_json(cand)["speculative_config"]
    else:
        write_once(cand, _doc("policy", speculative_config=loop.config, derived_from=paths.portable(str(d.prop_dir)),
                              workload=d.workload,
                              round=n, why=loop.actions, derivation=d.derivation if n == 1 else None))
    config = loop.config
    loop.tried.append(config)
    is_static = config == d.static_cfg
    measured = boundary_levels(cand, d.levels)
    repeats = spec.settings.round_repeats or spec.proposal.repeats
    rspec = _round_spec(spec.proposal, n, d.entry, measured, repeats, d.static_cfg, cand, config)
    echo(f"tune round {n}: {TUNED} --speculative-config '{json.dumps(config)}' against {BASELINE}"
         + ("" if is_static else f" and {STATIC} (K={d.static_k})") + f" at c={measured}, {repeats} repeat(s)")
    return sweep(rspec, out / f"round-{n:02d}"), measured, is_static


def _judge_round(d: _Derived, loop: _Loop, n: int, measured: list[int], is_static: bool, rdf: Any) -> dict[str, Any]:
    """Round ``n``'s record from its ledgers: the verdict, its per-level check and the next
    candidate (None: the loop stops, ``loop.stop`` says why)."""
    config = loop.config
    check, why_not = judge_tuned(rdf, static=None if is_static else STATIC, margin=d.margin, confidence=d.confidence)
    doc: dict[str, Any] = {"round": n, "speculative_config": config, "static_config": d.static_cfg,
                           "folder": f"round-{n:02d}", "levels": measured}
    if check is None:  # an arm without a usable point: recorded as unjudged, the loop stops
        loop.stop = Stop.UNJUDGED
        doc.update(verified=False, claim=f"round {n} could not be judged: {why_not}", check=[], thrash=[],
                   next_config=None, stop=loop.stop)
        return doc
    unmeasured = sorted(set(measured) - set(int(c) for c in check["concurrency"]))
    claim = claim_text(check, config, d.static_k, static_is_candidate=is_static)
    if unmeasured:
        claim += f"; unmeasured at c={', '.join(map(str, unmeasured))} (no usable pair there)"
    verified = not check["short"].any() and not unmeasured
    doc.update(verified=verified, claim=claim, check=_records(check), unmeasured=unmeasured,
               thrash=[int(c) for c in check.loc[check["thrash"], "concurrency"]])
    nxt = None
    if verified:
        loop.stop = Stop.VERIFIED
    else:
        red = rederive(k_scheduled(check) or {c: d.static_k for c in measured}, check, d.static_k)
        batch = {int(r.concurrency): r.running_mean for r in check.itertuples(index=False)}
        ks = set(red.k.values())
        if ks == {d.static_k}:
            nxt = d.static_cfg
        else:
            nxt = policy_config(d.static_cfg, schedule_levels(red.k, batch, d.max_batch))
        doc.update(actions=red.actions, unreachable=red.unreachable, noise=red.noise)
        if any(nxt == t for t in loop.tried) or (nxt == d.static_cfg and not is_static):
            # the static config was measured in this very round (as static): nothing new to try
            loop.stop = Stop.STATIC if nxt == d.static_cfg else Stop.REPEATED
            nxt = None
        loop.actions = red.actions
    doc.update(next_config=nxt, stop=loop.stop if nxt is None else None)
    return doc


def judge_tuned(df: Any, *, tuned: str = TUNED, static: str | None = STATIC,
                margin: float = DEFAULT_MARGIN, confidence: float = 0.95) -> tuple[Any, str | None]:
    """A round's per-level check (non-inferiority to static K within ``margin`` and a speedup
    shown above 1.0, each at ``confidence``: :func:`specnb.analysis.schedule.policy_check`), or
    None and why (an arm without a usable point)."""
    try:
        table = summarize(df, confidence=confidence)
        if table.empty:
            return None, "no usable pair (every point failed or was flagged)"
        return round_check(table, df, tuned=tuned, static=static, margin=margin), None
    except (ScheduleError, KeyError) as exc:
        return None, str(exc)


def _result(out: Path, rounds: list[dict[str, Any]], static_cfg: dict[str, Any], static_k: int, stop: str,
            derivation: dict[str, Any]) -> dict[str, Any]:
    """What to deploy: the verified candidate, else the static config with the claim its own
    measurement in the last round earned."""
    ver = [r for r in rounds if r["verified"]]
    base = {"rounds": len(rounds), "stop": stop, "static_config": static_cfg, "derivation": derivation,
            "history": [{"round": r["round"], "speculative_config": r["speculative_config"], "verified": r["verified"],
                         "claim": r["claim"]} for r in rounds]}
    if ver:
        r = ver[-1]
        deploy = Deploy.STATIC if r["speculative_config"] == static_cfg else Deploy.SCHEDULE
        return {**base, "deploy": deploy, "speculative_config": r["speculative_config"], "claim": r["claim"],
                "verified": True, "verified_in": r["folder"]}
    if not rounds:
        return {**base, "deploy": Deploy.STATIC, "speculative_config": static_cfg, "verified": False,
                "claim": "no round was measured", "verified_in": None}
    last = rounds[-1]
    arm = TUNED if last["speculative_config"] == static_cfg else STATIC
    check, why_not = judge_tuned(load_ledgers(out / last["folder"]), tuned=arm, static=None,
                                 margin=float(derivation.get("margin", DEFAULT_MARGIN)),
                                 confidence=float(derivation.get("confidence", 0.95)))
    if check is None:
        return {**base, "deploy": Deploy.STATIC, "speculative_config": static_cfg, "verified": False,
                "claim": f"no candidate was verified and the static config cannot be judged from {last['folder']}: "
                         f"{why_not}", "verified_in": None}
    claim = claim_text(check, static_cfg, static_k, static_is_candidate=True)
    why = ("no candidate schedule was verified at every level; the static config is deployed, as measured in "
           f"{last['folder']}: ")
    return {**base, "deploy": Deploy.STATIC, "speculative_config": static_cfg, "verified": not check["short"].any(),
            "claim": why + claim, "verified_in": last["folder"]}
