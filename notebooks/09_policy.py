# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 9 · The policy: measure the schedule you would deploy
#
# Notebook 8 derives a speculative config from a K sweep: vLLM's dynamic speculation schedule
# (`num_speculative_tokens_per_batch_size`), a K per batch-size range, 0 where no K pays. A
# derived policy is a claim until it is measured. This notebook measures it as its own arm,
# paired with the baseline (always off) and always-on, in one run; the policy should be at
# least the better of the two at every concurrency: on the envelope max(1, always-on speedup).
#
# Where it falls short the table says by how much and why. Batch size is not concurrency:
# vLLM picks K from the requests it schedules in a step, prefills included, with no hysteresis,
# so near a boundary the batch flips between two ranges (vLLM issue #49548 reports throughput
# collapsing there on GPU); the run measures both sides of every switch and records how often
# the policy arm drafted and what batch the server really ran.

# %% tags=["parameters"]
measure = False  # True: start vLLM and measure a new run before the analysis (minutes)
study = "cpu"  # ledgers/policy/<study>/<run>/
run = ""  # empty: the newest run (or a new time-stamped one when measuring); a run name reads or resumes it
ledger_root = "ledgers"  # folder holding the <axis>/<study>/<run> tree
figures_dir = "figures"  # where figures are written (SVG + PNG + sidecar)
model = "models/SmolLM2-135M-Instruct"  # target checkpoint: local folder or hub id
served_model_name = "smollm2-135m"  # name the server answers to
endpoint = ""  # URL of a running server to attach every arm to instead of launching, or {arm: URL} for some (empty: launch)
executor = "local"  # where the pairing blocks run: "local" (here, one after another), "ray" or a Ray address (docs/fleet.md)
start_together = False  # True: launch a repeat's servers side by side, then measure them one at a time (about one start per repeat, not one per arm; every arm's server in memory at once)
server_args = ["--enforce-eager", "--dtype", "machine", "--max-model-len", "2048"]  # every launch (--dtype machine: bf16 where this CPU has a oneDNN bf16 kernel, fp32 where it has none, as on AVX2-only CPUs: docs/cpu.md)
env = {"VLLM_CPU_KVCACHE_SPACE": "1"}  # environment for every launch (CPU KV pool in GiB)
drafters = {"always-on": {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}}  # the drafter always on; the policy arm is added from policy_from
policy_from = "proposal/cpu"  # the schedule to measure: a policy .json, a run folder, or <axis>/<study> (its newest run)
policy_workload = "copy"  # the workload the schedule is derived for
rule = "lower_bound"  # how the schedule keeps a K: the best K or none (the off arm), whichever has the higher lower bound ("point": the estimates)
conditions = {}  # condition name -> what it changes; empty: one condition
workloads = ["copy"]  # bundled prompt sets or JSONL files
concurrency = [1, 2, 4, 8]  # concurrency levels; both sides of every switch of the schedule are added
search = None  # adaptive search for the crossing (SearchSpec settings), or None: the levels only
repeats = 3  # server restarts per arm; arm order alternates
panel_size = 10  # prompts every point sends, balanced over categories, in whole passes
work_floor_tokens = 400  # output tokens a point's steady window holds at least (sizes the passes)
warmup_requests = 2  # per server start, not measured
max_tokens = 64  # output tokens per request
temperature = 0.0  # sampling temperature (0 is greedy)
seed = 0  # sampling seed (per request: seed + prompt index)
tune_study = "cpu"  # the last section draws the newest finished run under ledgers/tune/<tune_study>/ (`make tune`)

# %%
import json

import pandas as pd
from IPython.display import Markdown, display

from specnb.analysis.schedule import policy_check
from specnb.figures import arm_colors, panels
from specnb.notebooks import open_axis
from specnb.sweep.policy import boundary_levels, policy_file_for

policy = policy_file_for(policy_from, policy_workload, rule, ledger_root, method=drafters["always-on"].get("method"))
levels = boundary_levels(policy, concurrency)
nb = open_axis("policy", {**globals(), "drafters": {**drafters, "policy": {"policy_file": str(policy)}},
                          "concurrency": levels})
table = nb.table
config = json.loads(policy.read_text())["speculative_config"]
display(Markdown(f"Policy `{policy}`: `--speculative-config '{json.dumps(config)}'`"))

# %% [markdown]
# ## Three curves and the envelope
#
# Speedup against the baseline (always off, 1.0) of always-on and of the policy, with the one 95 %
# interval per level; the dashed line is the envelope max(1, always-on): the better of the two
# fixed choices at each concurrency. The policy *meets* it where the evidence shows it: its paired
# ratio against always-on has a lower bound above 1 - 2 % (non-inferior) and its speedup a lower
# bound above 1.0 (`failed` says which test did not pass).

# %%
check = policy_check(table, nb.df, policy="policy", always_on="always-on")
colors = arm_colors(table["arm"])
fig, axes = panels.new_figure(width=5.2, height=3.6)
ax = axes[0][0]
panels.speedup_curves(ax, table, colors=colors, title=policy_workload)
ax.plot(check.concurrency, check.envelope, ls="--", color="0.3", lw=1.0, label="envelope max(off, on)")
for r in check[check.k_scheduled.notna()].itertuples():
    ax.annotate(f"K={int(r.k_scheduled)}", (r.concurrency, r.policy), textcoords="offset points", xytext=(0, -12),
                fontsize=7, ha="center", color=colors.get("policy", "k"))
ax.legend(loc="best")
nb.save(fig, "policy-vs-always", caption="Speedup of always-on n-gram and of the derived schedule (K labelled) against "
        "the baseline; dashed: the envelope max(baseline, always-on); bands: 95 % intervals over starts and prompts.")
met = check.meets_envelope.all()
display(Markdown(("At every measured concurrency the policy is shown within 2 % of always-on or better and faster "
                  "than the baseline." if met else
                  "The policy is not shown to meet the envelope at c=" + ", ".join(
                      f"{r.concurrency} ({r.failed}; K={r.k_scheduled}, batch {r.running_mean:.1f}, "
                      f"{r.drafts_per_output_token or 0:.2f} drafts per output token)"
                      for r in check[~check.meets_envelope].itertuples()))))
check.round(3)

# %% [markdown]
# ## At the boundary
#
# Both sides of every switch are measured. `running_mean` is the batch vLLM really ran (the
# mean of `num_requests_running`); `drafts_per_output_token` shows how often the policy arm
# drafted: near a boundary the batch crosses it as requests finish and new ones prefill, so the
# arm drafts at some steps and not at others.

# %%
check[["concurrency", "k_scheduled", "running_mean", "drafts_per_output_token", "always_on", "policy", "policy_lo",
       "policy_hi", "vs_static", "vs_static_lo", "vs_static_hi", "envelope", "meets_envelope"]].round(3)

# %% [markdown]
# ## Tuned: the loop closed (`make tune`)
#
# The run above measured one derived schedule once; where it fell short nothing learned from it.
# `specnb tune` (`make tune`, `configs/cpu-tune.toml`) closes the loop: a proposal with the
# baseline, every static K and the *off arm* (the drafter loaded, K = 0 at every batch size:
# vLLM still runs the drafter there, so "off inside a schedule" has a cost of its own), a
# derivation that compares each K with the better of the off arm and the best static K, then
# rounds: the candidate measured against the baseline and the best static K at the proposal's
# levels and both sides of every switch, re-derived where it falls short of the envelope or
# thrashes, until a candidate is verified, the next one is a config already measured, or the
# round budget is spent. Every round is written once (`tune/round-NN.json`).
#
# The figure: the proposal's curves (every static K and the K = 0 schedule, each against the
# proposal's own baseline) and the deployed config with the static K it was measured beside
# (against that round's baseline), and the envelope max(1, static K) of that round.

# %%
from specnb.analysis.tables import summarize
from specnb.analysis.tune import tune_lines
from specnb.ledger import load_ledgers
from specnb.ledger.runs import read_tune
from specnb.paths import resolve

tune_runs = sorted(p for p in (resolve(ledger_root) / "tune" / tune_study).glob("*")
                   if (t := read_tune(p)) is not None and t.result is not None) \
    if (resolve(ledger_root) / "tune" / tune_study).is_dir() else []
if not tune_runs:
    display(Markdown(f"No finished tune run under `{ledger_root}/tune/{tune_study}/`: `make tune` measures one."))
else:
    tune_run = tune_runs[-1]
    result = read_tune(tune_run).result
    rnd = result["verified_in"] or f"round-{result['rounds']:02d}"
    last = summarize(load_ledgers(tune_run / rnd))
    prop = summarize(load_ledgers(resolve(result["derivation"]["from"])))  # the proposal the tune derived from
    prop = prop[prop["workload"].isin(set(last["workload"]))]  # the workload the config is tuned for
    parts = [prop.assign(arm=prop["arm"] + " (proposal)"), last.assign(arm=last["arm"] + f" ({rnd})")]
    for part in parts:
        part.attrs = {}  # the speedups kept in attrs are per run; the curves are drawn, not compared
    curves = pd.concat(parts, ignore_index=True)
    tcolors = arm_colors(curves["arm"])
    fig, axes = panels.new_figure(width=5.6, height=3.8)
    ax = axes[0][0]
    panels.speedup_curves(ax, curves, colors=tcolors, title=f"{policy_workload}: tuned ({result['deploy']})")
    envelope = last[last["arm"] == ("static" if (last["arm"] == "static").any() else "tuned")]
    ax.plot(envelope["concurrency"], envelope["speedup"].clip(lower=1.0), ls="--", color="0.3", lw=1.0,
            label=f"envelope max(1, static K) ({rnd})")
    ax.legend(loc="best", fontsize=7)
    nb.save(fig, "tune-envelope", sources=[tune_run],
            caption="The tune loop on copy-style work: every static K and the K = 0 schedule (the drafter loaded, "
            "drafting off) from the proposal, and the deployed config beside the best static K from the round that "
            "verified it; each against its own run's baseline; dashed: the envelope max(1, static K) of that round; "
            "bands: 95 % intervals over starts and prompts.")
    display(Markdown("\n".join(f"    {line}" for line in tune_lines(read_tune(tune_run)))))

# %% [markdown]
# ## The report
#
# What `specnb report` prints for this run: the same pipeline and the same text (a test holds
# the executed notebook's copy against the command), for a reviewer who wants every number in one place.

# %%
nb.report()
