# ---
# jupyter:
#   jupytext:
#     notebook_metadata_filter: -jupytext.text_representation.jupytext_version,-jupytext.text_representation.format_version
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 7 · Calculator: put your own numbers in
#
# The seeds carry a handful of closed-form models: the expected acceptance length from the
# acceptance rate (seed 000, *We Left the Feature On and the Speedup Went From 1.4x to 0.8x*,
# "put your own acceptance rate in"), the best draft length for a step overhead, Amdahl's law
# for the end-to-end gain and the step-cost argument for why speculation stops paying under
# load (seed 002, PrimaLabs, *Speculative decoding under load*, Figures 2, 3 and 7), and the KV
# seats a drafter takes (seed 000). This notebook draws each of them for the values in the
# parameters cell, marks the published and the measured numbers on them, checks the
# step-cost model against measured ledgers, and fits its GPU terms to published GPU curves
# (section 7), held out source by source.
#
# In JupyterLab every figure also gets sliders (`interactive = None` detects a Jupyter server's
# kernel; papermill and `make figures` never get them). The saved figures always use the
# parameter values, so they are the same however the notebook runs.
#
# These are models, not measurements: they show which way a knob moves the answer and let a
# measurement be checked against them. The threshold concurrency of *your* server comes from
# notebook 1.

# %% tags=["parameters"]
alpha = 0.906  # conditional acceptance probability of one draft token (CPU demo, copy: MAL 4.14 at K = 4; seed 002 measured about 0.74)
k = 4  # draft length K: tokens the drafter proposes per step (the demo's n-gram k=4)
k_values = [1, 3, 5, 7]  # draft lengths drawn as acceptance-length curves
published_k = 7  # draft length behind seed 000's published acceptance lengths (DFlash2, seven tokens)
published_copy_mal = 3.1  # seed 000: acceptance length on copy-style work (published)
published_freeform_mal = 2.2  # seed 000: acceptance length on free-form writing (published)
overhead = 0.12  # per-token step overhead v + d relative to one plain decode step (seed 002, Figure 3)
overheads = [0.02, 0.05, 0.3]  # further overheads drawn for comparison
decode_fraction = 0.83  # share f of request time spent in decode (seed 002's agentic workload)
decode_fractions = [0.70, 0.83, 0.93]  # decode shares of seed 002's Amdahl table
target_gain = 1.5  # end-to-end speedup you want
target_gains = [1.2, 1.5, 2.0]  # end-to-end targets of seed 002's Amdahl table
kv_sessions = 6.7  # sessions the KV pool holds without a drafter (seed 000)
kv_context_tokens = 256000  # context length those sessions have, tokens (seed 000: 256k)
drafter_kv_share = 0.36  # share of the KV pool the drafter takes (seed 000: about 36 %)
preset = "cpu-demo"  # hardware preset, a name in src/specnb/models/data/hardware.toml (GPU: params/gpu/calculator.yaml)
compute_dtype = "bf16"  # precision the target's matmuls run at, picks the preset's peak: bf16, fp8 (FP8 W8A8) or fp4 (NVFP4 W4A4)
step_overhead_ms = None  # fixed cost per engine step, ms; None: the preset's value
probe = None  # a step-time probe ledger of this device (specnb probe; a file, or a run folder holding one): the bandwidth, FLOP/s and step overhead its cells give replace the preset's; None: the preset's
target_name = "SmolLM2-135M-Instruct (bf16)"  # label of the target model
target_params_b = 0.134515008  # target parameters, billions (counted from models/SmolLM2-135M-Instruct/config.json)
target_bytes_per_param = 2.0  # bytes per target weight: 2 for bf16, 1 for fp8
target_kv_bytes_per_token = 23040  # target K+V bytes per token of context, all layers (2 * 30 layers * 3 KV heads * 64 * 2 bytes)
drafter_name = "ngram-k4"  # label of the drafter
drafter_params_b = 0.0  # drafter parameters, billions (0 for n-gram: no weights)
drafter_bytes_per_param = 2.0  # bytes per drafter weight
drafter_kv_bytes_per_token = 0  # drafter K+V bytes per token of context (0: no KV cache of its own)
drafter_parallel = False  # True: a block drafter proposes all K tokens in one pass
draft_fraction = 0.26  # share of steps that carry a draft (n-gram drafts only on a prompt match; demo ledgers, copy)
drafter_step_overhead_ms = 5.7  # drafting cost per step independent of the batch, ms (fitted to the demo's n-gram arm: models/data/cpu-demo-calibration.json)
drafter_per_request_ms = 0.0  # drafting cost per request per step, ms
drafter_per_token_ms = 4.2  # cost per proposed draft token beyond its compute (rejection sampling, bookkeeping), ms (likewise fitted)
drafter_method = "ngram"  # the drafter's kind as vLLM names it (ngram, eagle3, draft_model): which arms of drafter_costs_from to read
drafter_costs_from = None  # an anatomy run (specnb anatomy) on the preset's machine with arms of drafter_method's kind: the drafter becomes the costs its profiled steps show over the baseline's (a fixed and a per-proposed-token cost, everything it adds, its own passes included) and its profiled draft share, replacing drafter_params_b .. drafter_per_token_ms and draft_fraction; None: those values
gpu_engine = "vllm"  # the serving engine (vllm, sglang, ...): with gpu_costs = "published-fit" its drafting pass cost is the one fitted to its sources (all sources' where none measured it)
gpu_costs = None  # where a GPU preset's speculative costs come from: "published-fit" (fitted to ledgers/published, section 7) or a sentence naming the measurement behind drafter_*_ms; None: drafter_*_ms as they are
fit_resamples = 100  # bootstrap resamples of the published GPU fit (whole curves drawn with replacement)
prompt_tokens = 184  # prompt tokens per request (demo copy prompts, mean)
output_tokens = 49  # output tokens per request (demo copy outputs, mean; max_tokens 64)
cached_prompt_share = 0.0  # share of prompt tokens served by the prefix cache (not prefilled)
concurrency_max = 32  # largest concurrency drawn
ledgers = "ledgers/concurrency/cpu/20261129-cpu-demo"  # measured ledgers: acceptance marks and the model check
cpu_preset = "cpu-demo"  # measured hardware preset the ledgers are checked against
cost_map = "cpu"  # ledgers/map/<this>/: a measured break-even map (notebooks/12_map.py) as the cost side of section 8, read for drafter_method at K = k (empty: skip)
interactive = None  # sliders: None only in a kernel a Jupyter server started; True or False to force
figures_dir = "figures"  # where save_figure writes

# %%
import dataclasses
import math

import ipywidgets as w
import numpy as np
import pandas as pd
from IPython.display import Markdown, display

from specnb import paths
from specnb.analysis import kv_capacity, speedup_table
from specnb.figures import calculator as calc
from specnb.figures import save_figure
from specnb.ledger import load_ledgers
from specnb.ledger.published import PUBLISHED_DIR, published_curves
from specnb.models import calibration, gpufit, probefit
from specnb.models import hardware, theory
from specnb.models import stepcost as sc

NB = "07_calculator"
SLIDERS = calc.interactive_mode(interactive)
folder = paths.resolve(ledgers)  # relative to the repository, wherever the kernel runs
df = load_ledgers(folder) if folder.is_dir() else None
if df is None:
    print(f"note: no ledgers at {folder}; measured marks and the model check are skipped "
          "(set `ledgers` to a sweep folder)")
measured = calibration.workload_acceptance(df) if df is not None else None
sources = [folder] if df is not None else []

# %% [markdown]
# ## 1 · Acceptance length from the acceptance rate (seed 000)
#
# With a chance alpha that each draft token is accepted and K tokens proposed, a verification
# step emits on average MAL = (1 - alpha^(K+1)) / (1 - alpha) tokens, the verifier's own token
# included. The curves are the formula. Left: your alpha, and seed 000's published lengths
# (3.1 on copy-style work, 2.2 on free-form, K = 7; dashed) with the alpha each implies:
# free-form sits where the curve is flat, so a small drop in alpha costs a lot of length.
# Right: the lengths measured in `ledgers` (vLLM's 1 + accepted / drafts, dotted), each on the
# curve of its own K. An n-gram drafter drafts only when it finds a match in the prompt, so the
# legend also gives tokens per step counting the steps with no draft, which is what the
# throughput sees.

# %%
published = {"copy": published_copy_mal, "free-form": published_freeform_mal}
fig = calc.mal_figure(alpha, k, k_values, published, published_k, measured)
save_figure(fig, "calculator-acceptance-length", sources, out_dir=figures_dir, notebook=NB,
            caption="MAL(alpha, K); published lengths (seed 000) and measured ones in separate panels")
if measured is not None and len(measured):
    display(measured[["arm", "workload", "k", "mean_acceptance_length", "alpha", "tokens_per_step",
                      "draft_fraction"]].round(3))
if SLIDERS:
    calc.explore(lambda alpha, k: calc.mal_figure(alpha, k, k_values, published, published_k, measured),
                 alpha=w.FloatSlider(value=alpha, min=0.0, max=0.99, step=0.01), k=w.IntSlider(value=k, min=0, max=16))

# %% [markdown]
# ## 2 · The best draft length for an overhead (seed 002, Figure 3)
#
# Throughput goes as MAL(alpha, K) / T(K) with T(K) = t0 (1 + (v + d) K): each proposed token
# adds verification and drafting work v + d, relative to one plain step. MAL keeps rising with
# K, the step cost rises with it, and the best K is where their ratio peaks. Concurrency raises
# v + d (the spare compute is gone), which moves the best K left (right panel). Seed 002 marks
# the overhead term as illustrative; so is it here.

# %%
fig = calc.best_k_figure(alpha, overhead, overheads)
save_figure(fig, "calculator-best-k", [], out_dir=figures_dir, notebook=NB,
            caption="relative throughput MAL / T(K) against K and the best K against v + d (seed 002 Figure 3)")
kb, score = theory.best_k(alpha, overhead)
display(Markdown(f"At alpha = {alpha:g} and v + d = {overhead:g} the best K is **{kb}** "
                 f"({score:.2f}x relative throughput; MAL {theory.acceptance_length(alpha, kb):.2f})."))
if SLIDERS:
    calc.explore(lambda alpha, overhead: calc.best_k_figure(alpha, overhead, overheads),
                 alpha=w.FloatSlider(value=alpha, min=0.0, max=0.99, step=0.01),
                 overhead=w.FloatSlider(value=overhead, min=0.0, max=1.0, step=0.01))

# %% [markdown]
# ## 3 · Work backwards from the end-to-end target (seed 002, Figure 7)
#
# Decode is only part of a request's time. If it is a share f and gets x times faster, the
# request gets G = 1 / ((1 - f) + f / x) faster, never more than 1 / (1 - f) (about 5.9x at
# f = 83 %). The table reproduces seed 002's: the decode speedup each end-to-end target needs.
# A decode speedup equals an acceptance-length gain only while the step cost stays constant,
# and the step cost grows with K and with concurrency (section 5).

# %%
display(calc.amdahl_table(decode_fractions, target_gains).map(lambda v: f"{v:.2f}x"))
fig = calc.amdahl_figure(decode_fractions, decode_fraction, target_gain)
save_figure(fig, "calculator-amdahl", [], out_dir=figures_dir, notebook=NB,
            caption="end-to-end speedup against decode speedup, Amdahl's law (seed 002 Figure 7)")
if SLIDERS:
    calc.explore(lambda decode_fraction, target_gain: calc.amdahl_figure(decode_fractions, decode_fraction,
                                                                         target_gain),
                 decode_fraction=w.FloatSlider(value=decode_fraction, min=0.05, max=0.99, step=0.01),
                 target_gain=w.FloatSlider(value=target_gain, min=1.0, max=5.0, step=0.05))

# %% [markdown]
# ## 4 · The seats a drafter takes (seed 000)
#
# A drafter keeps its own KV cache (and its weights take memory), so the pool for requests
# shrinks: seed 000 lost about 36 % of it, and what held 6.7 sessions at a 256k context held
# 4.3. Sessions at a context length are pool tokens / context tokens. A service of short chats
# never notices; a service of long documents may feel this before it feels the speed. Right:
# the KV pools the ledgers recorded per arm (an n-gram drafter has no KV cache, so its pool
# matches the baseline's).

# %%
kv = kv_capacity(df) if df is not None else None
pools = dict(zip(kv.arm, kv.kv_cache_tokens)) if kv is not None and len(kv) else None
fig = calc.kv_sessions_figure(kv_sessions, kv_context_tokens, drafter_kv_share, pools)
save_figure(fig, "calculator-kv-sessions", sources if pools else [], out_dir=figures_dir, notebook=NB,
            caption="concurrent sessions against context length, without and with a drafter (seed 000)")
without = kv_sessions * kv_context_tokens
display(Markdown(f"{kv_sessions:g} sessions at {kv_context_tokens:,} tokens without a drafter become "
                 f"**{theory.kv_sessions(without * (1 - drafter_kv_share), kv_context_tokens):.1f}** "
                 f"when the drafter takes {100 * drafter_kv_share:.0f} % of the pool."))
if SLIDERS:
    # the pool stays the parameters' one; the slider moves the context length it is split into
    calc.explore(lambda drafter_kv_share, context: calc.kv_sessions_figure(without / context, context,
                                                                          drafter_kv_share, pools),
                 drafter_kv_share=w.FloatSlider(value=drafter_kv_share, min=0.0, max=0.9, step=0.01),
                 context=w.IntSlider(value=kv_context_tokens, min=8192, max=1048576, step=8192))

# %% [markdown]
# ## 5 · Speedup against concurrency from the step cost (seed 002, Figure 2)
#
# One decode step of B requests costs a memory floor (all weights plus each request's KV cache
# read once), the compute of every token through the target (1 per request without a drafter,
# 1 + K when verifying, plus the prompt tokens a closed loop prefills per step), drafting, and
# a fixed per-step overhead; the step takes the larger of memory and compute. At low B the
# floor dominates and verification is nearly free; once compute dominates, every proposed
# token costs time and the ratio falls, here through 1.0 at the marked concurrency. Grey: the
# KV pool cannot hold that many requests beside the weights. The hardware numbers of GPU
# presets are spec-sheet peaks, which no server reaches: calibrate (section 6) before trusting
# an absolute concurrency. With `gpu_costs = "published-fit"` (the GPU file) the speculative
# costs and the compute efficiency are the fit to published GPU curves (section 7), and the
# answer carries the error that fit made on curves it had not seen. The model leaves out
# attention FLOPs, the drafter's own prefill and scheduling effects (`specnb.models.stepcost`
# says why).

# %%
hw = hardware.load_hardware(preset).for_dtype(compute_dtype)
probe_fit = None
if probe is not None:  # this card's own step times, fitted (specnb.models.probefit)
    probe_fit = probefit.fit_probe(paths.resolve(probe), like=hardware.load_hardware(preset))
    hw = probe_fit.hardware.for_dtype(compute_dtype)
    print(f"hardware from the probe: {probe_fit.summary()}")
if step_overhead_ms is not None:
    hw = dataclasses.replace(hw, step_overhead_s=step_overhead_ms / 1e3)
target = sc.TargetModel(target_name, target_params_b * 1e9, target_params_b * 1e9 * target_bytes_per_param,
                        target_kv_bytes_per_token)
drafter = sc.Drafter(drafter_name, params=drafter_params_b * 1e9,
                     weight_bytes=drafter_params_b * 1e9 * drafter_bytes_per_param,
                     kv_bytes_per_token=drafter_kv_bytes_per_token, parallel=drafter_parallel,
                     per_request_s=drafter_per_request_ms / 1e3, step_overhead_s=drafter_step_overhead_ms / 1e3,
                     per_token_s=drafter_per_token_ms / 1e3, draft_fraction=draft_fraction,
                     host=sc.runs_on_host(drafter_method, drafter_params_b))  # n-gram: no pass on the device
if drafter_costs_from is not None:  # the drafter's costs learned from the engine's own profile of it
    from specnb.analysis.anatomy import anatomy_frame, load_anatomy

    if gpu_costs == "published-fit":
        raise ValueError("drafter_costs_from and gpu_costs = 'published-fit' both set the drafter's costs: choose one")
    learned = calibration.drafter_terms_from_anatomy(anatomy_frame(load_anatomy(paths.resolve(drafter_costs_from))),
                                                     hw, target, drafter_method)
    # the learned terms hold everything the drafter adds: a drafter of no size, drafting as often as profiled
    drafter = sc.Drafter(drafter_name, step_overhead_s=learned["step_overhead_ms"] / 1e3,
                         per_token_s=learned["per_token_ms"] / 1e3, draft_fraction=learned["draft_fraction"])
    print(f"{drafter_name}: {learned['step_overhead_ms']:.1f} ms a step + {learned['per_token_ms']:.2f} ms per proposed "
          f"token beyond the target's verification on {preset}, drafting on {100 * learned['draft_fraction']:.0f} % of "
          f"a request's steps, refitted to {learned['windows']} profiled windows of {', '.join(learned['arms'])} in "
          f"{drafter_costs_from} (rms {learned['rms_error_ms']:.1f} ms)")
points = published_curves()  # the published GPU curves (ledgers/published), for the fit here and in section 7
presets = hardware.hardware_presets()
held_out = None
hw_given, drafter_given = hw, drafter  # before any published fit: what section 6 holds the fit against
if gpu_costs == "published-fit":
    engine_fits = gpufit.fit_by_engine(points, presets)
    gterms, gwhose = gpufit.terms_for(engine_fits, gpu_engine)
    if probe_fit is not None or step_overhead_ms is not None:
        # the hardware already says what this device reaches and costs a step: only speculation's terms apply
        gterms = dataclasses.replace(gterms, bandwidth_efficiency=1.0, compute_efficiency=1.0, step_ms=0.0)
    hw, drafter = gterms.apply(hw, target, drafter)
    held_out = gpufit.leave_one_source_out(points, presets)


def scenario(alpha=alpha, k=k, prompt_tokens=prompt_tokens):
    # the published fit's steps add memory and compute (the published step-time model's form)
    return sc.Scenario(hw, target, drafter, k=k, alpha=alpha, prompt_tokens=prompt_tokens,
                       output_tokens=output_tokens, cached_prompt_share=cached_prompt_share,
                       sharpness=gpufit.SHARPNESS if gpu_costs == "published-fit" else None)


fig = calc.stepcost_figure(scenario(), c_max=concurrency_max)
save_figure(fig, "calculator-stepcost", [], out_dir=figures_dir, notebook=NB,
            caption=f"step-cost model: {target_name} on {preset}, drafter {drafter_name}, alpha {alpha}, K {k}")
kind, at = sc.predicted_crossing(scenario(), c_max=concurrency_max)
fits = sc.max_concurrency(scenario(), speculative=True)
display(Markdown(
    f"**{preset}** ({hw.bandwidth_bytes_s / 1e12:.3g} TB/s, {hw.flop_s / 1e12:.4g} TFLOP/s {compute_dtype}, "
    f"{1e3 * hw.step_overhead_s:.3g} ms per step; {hw.source}): "
    + (f"speculation pays below about **c~{at:.0f}** concurrent requests" if kind == "crosses" else
       f"the predicted curve stays {kind} 1.0 up to {concurrency_max}")
    + (f"; the KV pool holds about {fits:.0f} requests with the drafter." if fits != float("inf") else ".")
    + f" This answer's basis: {probefit.answer_basis(hardware.preset_kind(preset), probe_fit, gpu_costs)}."))
if held_out is not None:
    err = held_out["log_error"].abs()
    worst = gpufit.loso_summary(held_out).sort_values("median_abs_log_error").iloc[-1]
    band = gpufit.band_width(held_out)
    banded = gpufit.prediction_band(held_out)
    curve = sc.predict(scenario(), 2.0 ** np.linspace(0.0, math.log2(concurrency_max), 161))
    ends = gpufit.crossing_band(list(curve["concurrency"]), list(curve["speedup"]), band)
    display(Markdown(
        f"Speculative costs from the published GPU fit (section 7) for {gpu_engine} ({gwhose}'s curves): "
        f"{gterms.step_ms:.3g} ms per engine step, {gterms.spec_step_ms:.3g} ms per speculative step, "
        f"{gterms.draft_pass_ms:.3g} ms per drafting pass on the device, bandwidth at {gterms.bandwidth_efficiency:.2f} "
        f"and compute at {gterms.compute_efficiency:.2f} of the preset's peaks. "
        f"Its 90 % band: the speedup within x{math.exp(band):.2f} either way, so the crossing lies between "
        f"**{ends[0]} and {ends[1]}** (where the band's lower and upper ends reach 1.0). "
        f"On held-out published curves this model was off by a factor **{math.exp(err.median()):.2f}** (median over "
        f"{len(err)} points of {held_out['ledger_id'].nunique()} sources; worst source {worst['ledger_id']}: "
        f"x{worst['median_factor']:.2f}), put {100 * held_out['same_side'].mean():.0f} % of the points on the "
        f"published side of 1.0, and each source's band, sized from the other sources alone, held "
        f"{100 * banded['covered'].mean():.0f} % of the points ({100 * banded.groupby('ledger_id')['covered'].mean().mean():.0f} % "
        "counting each source once)."))
if SLIDERS:
    calc.explore(lambda alpha, k, prompt_tokens: calc.stepcost_figure(scenario(alpha, k, prompt_tokens),
                                                                      c_max=concurrency_max),
                 alpha=w.FloatSlider(value=alpha, min=0.0, max=0.99, step=0.01), k=w.IntSlider(value=k, min=0, max=16),
                 prompt_tokens=w.IntSlider(value=prompt_tokens, min=0, max=32768, step=128))

# %% [markdown]
# ## 6 · The model against measured ledgers
#
# The `cpu_preset` hardware was derived from the demo ledgers (`src/specnb/models/data/hardware.toml`
# says how): a bandwidth measured on the machine, and FLOP/s and a fixed step overhead fitted
# to the drafter-off points. Here the fit is redone on `ledgers` (bandwidth held at the
# preset's), then the speculative arm is *predicted* from its measured acceptance (tokens per
# step, draft fraction, K, per workload) with no drafting cost (dashed), and again with a fixed
# per-step cost and a cost per proposed token fitted to the speculative points (solid). The gap
# between the two is what the roofline of the step does not explain on this engine: on the CPU
# build speculation also turns off asynchronous scheduling, and each verified draft token costs
# more than a decoded one. Bottom: paired measured speedups with their spread over repeats.
#
# These terms are effective, fitted in-sample to throughput. Checked out of sample against the
# engine's own decode steps (the step anatomy with unprofiled twins, drafter notebook,
# `docs/timing.md`): the preset's step is 47-87 % (baseline) and 73-97 % (n-gram) slower than the
# engine's decode step (the fixed cost holds each request's prefill and turnaround, which the model
# books per step), its n-gram terms refitted to the steps are 5.7 ms + 0.6 ms per proposed token,
# and the proposer itself takes 0.13-0.19 ms: the "drafting" terms stand for a slower speculative
# engine, not for proposing.
#
# With `gpu_costs = "published-fit"` and `ledgers` measured on a GPU (your own baseline and drafter
# sweep), the published fit of section 5 is also held against it: each measured pair predicted at
# its own acceptance, and how far the fit was from your machine printed beside this refit.

# %%
if df is None:
    print(f"note: no ledgers at {folder}; nothing to check the model against")
else:
    cpu = hardware.load_hardware(cpu_preset)
    record = hardware.calibration_record(cpu_preset)
    t = record["target"]
    cpu_target = sc.TargetModel(t["name"], t["params"], t["weight_bytes"], t["kv_bytes_per_token"])
    cal = calibration.calibrate(df, cpu_target, fixed={"bandwidth_bytes_s": cpu.bandwidth_bytes_s}, name=cpu_preset)
    print(cal.summary())
    print(f"preset {cpu_preset}: {cpu.flop_s / 1e12:.4g} TFLOP/s, {1e3 * cpu.step_overhead_s:.4g} ms per step")
    scen, scen_fit = {}, {}
    for r in measured.itertuples():
        d = sc.Drafter("ngram", draft_fraction=r.draft_fraction)
        kw = dict(k=int(r.k), alpha=r.alpha, prompt_tokens=r.prompt_tokens_mean, output_tokens=r.output_tokens_mean)
        scen[r.workload] = sc.Scenario(cpu, cpu_target, d, **kw)
        scen_fit[r.workload] = sc.Scenario(cpu, cpu_target, dataclasses.replace(
            d, step_overhead_s=cal.drafter.step_overhead_s, per_request_s=cal.drafter.per_request_s,
            per_token_s=cal.drafter.per_token_s), **kw)
    table = speedup_table(df)
    fig = calc.calibration_figure(cal, scen, scen_fit, table)
    save_figure(fig, "calculator-stepcost-vs-measured", sources, out_dir=figures_dir, notebook=NB,
                caption=f"step-cost model with the {cpu_preset} preset against the measured ledgers")
    display(cal.points[["arm", "workload", "concurrency", "repeat", "output_tok_s", "predicted_tok_s_before_spec_fit",
                        "predicted_tok_s"]].round(1))
    if gpu_costs == "published-fit":
        if gpufit.measured_on_gpu(df):
            gap = gpufit.published_fit_gap(table, measured, hw_given, target, drafter_given, gterms)
            print(gpufit.gap_line(gap))
            display(gap.round(3))
        else:
            print(f"note: {folder} was measured without a GPU: the published GPU fit of section 5 is not held "
                  "against it (point `ledgers` at a sweep from your GPU, and `cpu_preset` at its preset)")

# %% [markdown]
# ## 7 · The GPU terms, fitted to published GPU curves and held out source by source
#
# On a GPU the model prices a step from the spec sheet (the weights it reads, for a mixture of experts
# the experts its tokens touch; each request's KV reads; the FLOPs of its tokens, attention's growing
# with context) and knows nothing of what an engine adds. `ledgers/published` holds speedup curves
# published for named GPUs, targets, drafters and K (seed 000's B200 rows; SpecDecode-Bench's
# Llama-3.1-8B EAGLE and n-gram curves on H100; a vLLM issue's EAGLE K sweep; the EAGLE-3 paper's SGLang batch
# table; MagicDec's long-context self-speculation on 8 A100s and 8 H100s), each input the source does
# not state listed as inferred (`specnb.ledger.published.published_curves`). The engine's own terms
# (bandwidth and compute efficiency, a fixed cost per step) cannot be told apart by speedup ratios:
# they are fixed from a published step-time model (SpecDecode-Bench's simulator, fitted to vLLM's H100
# steps: `gpufit.anchor_terms`), and so is a speculative step's own fixed cost (none there: its
# constant per step is the same in both arms). The fit (`specnb.models.gpufit`) sets the one cost left,
# a drafting pass's fixed cost on the device in milliseconds, each drafter costed as it runs (n-gram
# on the host; an EAGLE head its layer and LM head per pass, K passes; a draft model its own forward per
# pass; MTP or block one pass). The spread is a bootstrap
# over whole curves; then each source is left out in turn: the terms are fitted to the others and the
# held-out curves predicted (dashed; by the pass cost fitted to the other sources of the same engine where
# there are any, as an answer for an engine reads it), with a 90 % band sized from the *other* sources' held-out errors,
# so whether a source's points fall inside it is itself out of sample.

# %%
gfit_all = gpufit.fit_gpu_terms(points, presets)
print(gfit_all.summary())
samples = gpufit.bootstrap_terms(points, presets, gfit_all, n=fit_resamples, seed=0)
display(gpufit.term_summary(gfit_all, samples).round(3))
per_engine = gpufit.fit_by_engine(points, presets)
display(pd.DataFrame([{"engine": name or "all sources", "sources": int(f.points["ledger_id"].nunique()),
                       "points": len(f.points), **{t: getattr(f.terms, t) for t in f.free},
                       "rms_log_error": f.rms_log_error} for name, f in per_engine.items()]).round(3))
loso = held_out if held_out is not None else gpufit.leave_one_source_out(points, presets)
loso_table = gpufit.loso_summary(loso)
display(loso_table.round(3))
banded_all = gpufit.prediction_band(loso)
display(gpufit.band_summary(banded_all).round(3))
err_all = loso["log_error"].abs()
print(f"held out over {loso['ledger_id'].nunique()} sources: median |log error| {err_all.median():.3f} (a factor "
      f"{math.exp(err_all.median()):.2f}; goal <= 0.20), same side of 1.0 at {100 * loso['same_side'].mean():.0f} % of "
      f"{len(loso)} levels (goal >= 90 %), {100 * banded_all['covered'].mean():.0f} % inside their out-of-sample 90 % band "
      f"({100 * banded_all.groupby('ledger_id')['covered'].mean().mean():.0f} % counting each source once)")
display(gpufit.loso_levels(loso).round(3))
fig = calc.published_fit_figure(banded_all, loso_table)
save_figure(fig, "calculator-published-fit", [PUBLISHED_DIR / f"{i}.json" for i in sorted(points["ledger_id"].unique())],
            out_dir=figures_dir, notebook=NB,
            caption="step-cost model with the GPU terms fitted without each source, against that source's published "
                    "curves, with its 90 % band sized from the other sources")

# %% [markdown]
# ## 8 · The cost side measured: a break-even map
#
# Sections 5 to 7 model what speculation costs; a break-even map (`notebooks/12_map.py`, `make
# measure-map`) measures it for a drafter kind and K on the machine itself: acceptance set by
# construction on the real proposer, every cell a pair with its interval. Here the map replaces the
# model: the acceptance length `alpha` and `k` give is read off the map's curve of `drafter_method`'s
# kind at K = `k` at each level (with the band from the cells' interval ends), beside the map's
# break-even length and the acceptance rate that reaches it. A length outside the cells' range is
# not predicted (the map does not extrapolate: measure a cell there).

# %%
from specnb.analysis import summarize
from specnb.analysis.breakeven import at_length, map_cells
from specnb.ledger import arm_configs
from specnb.ledger.runs import RunError, find_run

try:
    map_folder = find_run("map", cost_map, "", paths.resolve("ledgers")) if cost_map else None
except RunError:
    map_folder = None
if map_folder is None:
    display(Markdown(f"No `{cost_map}` map run under ledgers/map/: this section is skipped."))
    from_map = None
else:
    mdf = load_ledgers(map_folder)
    length = theory.acceptance_length(alpha, k)
    from_map = at_length(map_cells(summarize(mdf), arm_configs(mdf)), length, k, drafter_method)
    if from_map.empty:
        display(Markdown(f"Map `{paths.portable(str(map_folder))}` has no {drafter_method} curve at K={k}."))
    else:
        from_map["break_even_alpha"] = [theory.alpha_from_acceptance_length(b, k) if b is not None and b == b else None
                                        for b in from_map["break_even"]]
        display(Markdown(f"Map `{paths.portable(str(map_folder))}`: {drafter_method} at K={k}, acceptance rate "
                         f"{alpha:g} gives acceptance length {length:.2f}."))
from_map.round(3) if from_map is not None and len(from_map) else None
