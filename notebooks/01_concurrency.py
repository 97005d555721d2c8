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
# # 1 · Concurrency: where does the drafter stop paying?
#
# Speculative decoding spends spare compute: at low concurrency a decode step is bound by
# reading the weights, and verifying K drafted tokens costs about as much as producing one.
# As concurrent requests fill the batch that spare compute disappears, and every rejected
# draft token becomes work taken from real requests. Seed 000 (ThakiCloud, *We Left the
# Feature On and the Speedup Went From 1.4x to 0.8x*) saw one drafter fall from 1.4x at one
# user to 0.8x at eight; seed 002 (PrimaLabs, *Speculative decoding under load*) saw 1.29x at
# concurrency 10 turn into 0.91x at 16 with the acceptance length unchanged.
#
# This notebook measures that curve on your server: drafter-off and drafter-on arms paired
# inside one run (same prompts, engine build and sampling; arm order alternating A B / B A over
# repeats, each repeat a fresh server start), at fixed concurrency levels, and finds the
# **threshold concurrency** where the speedup crosses 1.0.
#
# With `measure = False` (the default) it only reads committed ledgers; `make measure-concurrency`
# (or `measure = True`) starts vLLM and measures a new run first.

# %% tags=["parameters"]
measure = False  # True: start vLLM and measure a new run before the analysis (minutes)
study = "cpu"  # ledgers/concurrency/<study>/<run>/
run = ""  # empty: the newest run (or a new time-stamped one when measuring); a run name reads or resumes it
ledger_root = "ledgers"  # folder holding the <axis>/<study>/<run> tree
figures_dir = "figures"  # where figures are written (SVG + PNG + sidecar)
model = "models/SmolLM2-135M-Instruct"  # target checkpoint: local folder or hub id
served_model_name = "smollm2-135m"  # name the server answers to
endpoint = ""  # URL of a running server to attach to instead of launching (empty: launch)
server_args = ["--enforce-eager", "--dtype", "bfloat16", "--max-model-len", "2048"]  # every launch
env = {"VLLM_CPU_KVCACHE_SPACE": "1"}  # environment for every launch (CPU KV pool in GiB)
drafters = {"ngram-k4": {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}}  # arm -> --speculative-config
conditions = {}  # condition name -> what it changes (model, server_args, env, temperature); empty: one condition
workloads = ["copy", "freeform"]  # bundled prompt sets or JSONL files
concurrency = [1, 2, 4, 8]  # concurrency levels (requests in flight)
repeats = 3  # server restarts per arm; arm order alternates
panel_size = 10  # prompts every point sends, balanced over categories, in whole passes
work_floor_tokens = 400  # output tokens a point's steady window holds at least (sizes the passes)
warmup_requests = 2  # per server start, not measured
max_tokens = 64  # output tokens per request
temperature = 0.0  # sampling temperature (0 is greedy)
seed = 0  # sampling seed (per request: seed + prompt index)
traffic_mix = {"copy-style": 0.065, "free-form": 0.935}  # your traffic by class (specnb mix measures it); default: seed 000's 93.5 % free-form

# %%
import pandas as pd
from IPython.display import Markdown, display

from specnb.analysis import by_category, category_speedups, expected_speedup, paired
from specnb.figures import arm_colors, panels
from specnb.figures import published as seeds
from specnb.ledger import PLAIN_CONDITION, load_spec_by_category
from specnb.notebooks import open_axis
from specnb.prompts.copyshare import MixError

nb = open_axis("concurrency", globals())
table = nb.table

# %% [markdown]
# ## The paired table
#
# `speedup` is drafter-on over drafter-off output tokens per second in the steady window
# (all requests in flight), paired per repeat; `[lo, hi]` is its interval over repeats;
# `per_user` is the same ratio for one user's decode speed. Acceptance length counts tokens per
# verification step (1 = no gain); the share of output supplied by the drafter sits beside it
# because an n-gram drafter only drafts when it finds a match, so its acceptance length alone
# reads high on work it rarely helps.

# %%
cols = ["condition_label", "arm", "workload", "concurrency", "n_repeats", "base_tok_s", "spec_tok_s", "speedup",
        "speedup_lo", "speedup_hi", "per_user_speedup", "acceptance_length", "accepted_output_share"]
table[cols].round(3)

# %% [markdown]
# ## Speedup vs concurrency, and where it crosses 1.0

# %%
panels_by = list(table.groupby(["condition_label", "workload"], sort=False))
fig, axes = panels.new_figure(ncols=len(panels_by), sharey=True)
colors = arm_colors(table["arm"])
lines = []
for ax, ((cond, wl), g) in zip(axes[0], panels_by):
    title = wl if cond == PLAIN_CONDITION else f"{cond} · {wl}"
    panels.speedup_curves(ax, g, colors=colors, title=title)
    panels.speedup_curves(ax, g, y="per_user_speedup", lo=None, hi=None, colors=colors, ls="--",
                          label_suffix=" (per user)")
    lines += panels.crossings(ax, g, title, colors=colors)
axes[0][0].legend(loc="best")
fig.suptitle(f"Paired speedup vs concurrency ({table.n_repeats.max()} repeats; band = 95 % bootstrap interval over server starts and prompts)")
nb.save(fig, "concurrency-speedup", caption="Aggregate (solid) and per-user (dashed) paired speedup vs "
        "concurrency; triangle = crossing of 1.0 with its interval.")
display(Markdown("\n".join(lines)))

# %% [markdown]
# ## Absolute throughput and acceptance
#
# A multiplier hides the baseline it divides by; seed 000 asks to judge on final throughput.
# Acceptance length is the numerator of the speedup; under load the denominator (step cost)
# grows, which is why the curve falls even when acceptance holds (seed 002).

# %%
fig, axes = panels.new_figure(ncols=len(panels_by), nrows=2, height=2.9)
for k, ((cond, wl), g) in enumerate(panels_by):
    title = wl if cond == PLAIN_CONDITION else f"{cond} · {wl}"
    panels.throughput_curves(axes[0][k], g, colors=colors, title=title)
    panels.acceptance_curves(axes[1][k], g, colors=colors)
axes[0][0].legend(loc="upper left")
nb.save(fig, "concurrency-throughput-acceptance", caption="Top: output tok/s with and without the drafter. "
        "Bottom: acceptance length and the share of output tokens the drafter supplied.")

# %% [markdown]
# ## By prompt category, and on your traffic mix
#
# The bundled sets hold five categories each. Acceptance per category comes from vLLM's
# per-request counts (`--per-request-spec-decode-metrics`, added to speculative arms when the
# engine has it); the per-user decode speedup splits by category because it is per request.
# Seed 000: public benchmarks lean copy-style, and 93.5 % of its own tokens were free-form:
# the benchmark column is not your column. The last table weights the per-workload speedups
# by `traffic_mix` (measure yours with `specnb mix your-log.jsonl`).

# %%
cat = by_category(nb.df)
acc = load_spec_by_category(nb.folder)
levels = sorted(table.concurrency.unique())
fig, axes = panels.new_figure(ncols=2, width=5.2, height=3.0)
for ax, c in zip(axes[0], (levels[0], levels[-1])):
    cc = cat[cat.concurrency == c]
    if len(cc):
        piv = cc.pivot_table(index="arm", columns="category", values="per_user_speedup", sort=False)
        panels.heatmap(ax, piv, title=f"per-user decode speedup by category, c={c}", cbar_label="on / off")
if len(acc):
    fig2, ax2 = panels.new_figure(width=6.0, height=2.6)
    piv = acc.pivot_table(index=["arm", "concurrency"], columns="category", values="mean_acceptance_length", sort=False)
    panels.heatmap(ax2[0][0], piv, center=None, cmap="viridis", fmt="{:.2f}",
                   title="mean acceptance length by category (per-request counts)", cbar_label="tokens/step")
    nb.save(fig2, "concurrency-acceptance-by-category",
            caption="Mean acceptance length per prompt category, from vLLM's per-request counts.")
else:
    display(Markdown("This run's ledgers carry no per-request acceptance (measured before specnb asked "
                     "vLLM for it, or an engine without the flag): per-category acceptance is not shown."))
nb.save(fig, "concurrency-by-category",
        caption="Per-user decode speedup per prompt category at the lowest and highest concurrency.")

pairs = paired(nb.df)
rows = []
try:
    for arm in sorted(set(pairs.arm)):
        for c in levels:
            est = expected_speedup(category_speedups(pairs, arm=arm, concurrency=c), traffic_mix)
            rows.append({"arm": arm, "concurrency": c, "expected_speedup": est.speedup, "lo": est.lo, "hi": est.hi})
    display(Markdown(f"Expected speedup on a mix of {traffic_mix} (time-weighted, 95 % bootstrap over repeats):"))
except MixError as exc:  # the run did not measure every kind of work the mix names
    display(Markdown(f"No expected speedup for the mix {traffic_mix}: {exc}"))
pd.DataFrame(rows).round(3)

# %% [markdown]
# ## What the seeds published (separate panels)
#
# Transcribed from the write-ups (`ledgers/published/`), never drawn on the axes above: each
# series ran a different serving configuration, and the seeds themselves warn against
# comparing absolute values across them. Compare where the curves cross 1.0, not their height.

# %%
fig, sources = seeds.concurrency_seeds()
nb.save(fig, "concurrency-published-seeds", sources=sources,
        caption="The seeds' concurrency results, transcribed (not measured here).")

# %% [markdown]
# ## How to read this run
#
# Every ratio above is within a pair. The interval is the spread over repeats, each a fresh
# server start; on the 2-core CPU machines the same server measures up to 1.5x apart between
# starts, so a CPU curve says no more than its interval allows. A tiny model on two CPU cores
# is not your GPU: the shape (falling with concurrency, and the sign set by the workload) is what
# may carry over, not the numbers. Failed points are kept as failure records and are left out of
# the pairs.
