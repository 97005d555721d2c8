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
repeats = 2  # server restarts per arm; arm order alternates
requests_per_user = 4  # requests per point: concurrency x this ...
min_requests = 10  # ... but at least this many
warmup_requests = 2  # per server start, not measured
max_tokens = 64  # output tokens per request
temperature = 0.0  # sampling temperature (0 is greedy)
seed = 0  # sampling seed (per request: seed + prompt index)
traffic_mix = {"copy-style": 0.065, "free-form": 0.935}  # your traffic by class (specnb mix measures it); default: seed 000's 93.5 % free-form

# %%
import pandas as pd
from IPython.display import Markdown, display

from specnb import figures, plots
from specnb.study import Study

AXIS, NB = "concurrency", "01_concurrency"
st = Study.from_namespace(AXIS, globals())
folder = st.open_run(measure, run, ledger_root)
df = st.load(folder)
table = st.summarize(df)
display(Markdown(st.describe_run(folder, df)))

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
panels = list(table.groupby(["condition_label", "workload"], sort=False))
fig, axes = plots.new_figure(ncols=len(panels), sharey=True)
colors = figures.arm_colors(table["arm"])
lines = []
for ax, ((cond, wl), g) in zip(axes[0], panels):
    title = wl if cond == "default" else f"{cond} · {wl}"
    plots.speedup_curves(ax, g, colors=colors, title=title)
    plots.speedup_curves(ax, g, y="per_user_speedup", lo=None, hi=None, colors=colors, ls="--",
                         label_suffix=" (per user)")
    lines += plots.crossings(ax, g, title, colors=colors)
axes[0][0].legend(loc="best")
fig.suptitle(f"Paired speedup vs concurrency ({table.n_repeats.max()} repeats; band = 95 % bootstrap interval over server starts and prompts)")
figures.save_figure(fig, "concurrency-speedup", [folder], out_dir=figures_dir, notebook=NB,
                    caption="Aggregate (solid) and per-user (dashed) paired speedup vs concurrency; "
                            "triangle = crossing of 1.0 with its interval.")
display(Markdown("\n".join(lines)))

# %% [markdown]
# ## Absolute throughput and acceptance
#
# A multiplier hides the baseline it divides by; seed 000 asks to judge on final throughput.
# Acceptance length is the numerator of the speedup; under load the denominator (step cost)
# grows, which is why the curve falls even when acceptance holds (seed 002).

# %%
fig, axes = plots.new_figure(ncols=len(panels), nrows=2, height=2.9)
for k, ((cond, wl), g) in enumerate(panels):
    title = wl if cond == "default" else f"{cond} · {wl}"
    plots.throughput_curves(axes[0][k], g, colors=colors, title=title)
    plots.acceptance_curves(axes[1][k], g, colors=colors)
axes[0][0].legend(loc="upper left")
figures.save_figure(fig, "concurrency-throughput-acceptance", [folder], out_dir=figures_dir, notebook=NB,
                    caption="Top: output tok/s with and without the drafter. Bottom: acceptance length "
                            "and the share of output tokens the drafter supplied.")

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
from specnb.ledger import load_spec_by_category
from specnb.mix import category_speedups, expected_speedup
from specnb.report import paired
from specnb.study import by_category

cat = by_category(df)
acc = load_spec_by_category(folder)
levels = sorted(table.concurrency.unique())
fig, axes = plots.new_figure(ncols=2, width=5.2, height=3.0)
for ax, c in zip(axes[0], (levels[0], levels[-1])):
    cc = cat[cat.concurrency == c]
    if len(cc):
        piv = cc.pivot_table(index="arm", columns="category", values="per_user_speedup", sort=False)
        plots.heatmap(ax, piv, title=f"per-user decode speedup by category, c={c}", cbar_label="on / off")
if len(acc):
    fig2, ax2 = plots.new_figure(width=6.0, height=2.6)
    piv = acc.pivot_table(index=["arm", "concurrency"], columns="category", values="mean_acceptance_length", sort=False)
    plots.heatmap(ax2[0][0], piv, center=None, cmap="viridis", fmt="{:.2f}",
                  title="mean acceptance length by category (per-request counts)", cbar_label="tokens/step")
    figures.save_figure(fig2, "concurrency-acceptance-by-category", [folder], out_dir=figures_dir, notebook=NB,
                        caption="Mean acceptance length per prompt category, from vLLM's per-request counts.")
else:
    display(Markdown("This run's ledgers carry no per-request acceptance (measured before specnb asked "
                     "vLLM for it, or an engine without the flag): per-category acceptance is not shown."))
figures.save_figure(fig, "concurrency-by-category", [folder], out_dir=figures_dir, notebook=NB,
                    caption="Per-user decode speedup per prompt category at the lowest and highest concurrency.")
from specnb.mix import MixError

pairs = paired(df)
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
from specnb.published import load_published

t0 = load_published("thakicloud-concurrency-speedup")
t0 = t0[(t0.metric == "speedup_x") & t0.condition.isin(["NVFP4-GPTQ, 131k, batch 256", "KV fp8, 256k, edge budget",
                                                        "INT4, 256k, edge budget"])].dropna(subset=["value"])
t2 = load_published("primalabs-crossover")
fig, axes = plots.new_figure(ncols=2, width=4.4)
pcol = figures.arm_colors(t0.condition)
for cond, g in t0.groupby("condition"):
    axes[0][0].plot(g.concurrency.astype(int), g.value, color=pcol[cond], label=cond, **figures.PUBLISHED_STYLE)
axes[0][0].axhline(1.0, color="0.3", lw=0.9, ls=":")
plots.concurrency_axis(axes[0][0], t0.concurrency.astype(int))
axes[0][0].set(ylabel="speedup (on / off)", title="seed 000: one drafter, three checkpoints")
axes[0][0].legend(loc="lower left", fontsize=7)
for metric, lab in [("aggregate_throughput_x", "aggregate"), ("aggregate_computed_throughput_x", "computed tokens only"),
                    ("per_user_decode_speed_x", "per user")]:
    g = t2[t2.metric == metric]
    axes[0][1].plot(g.concurrency.astype(int), g.value, label=lab, **figures.PUBLISHED_STYLE)
axes[0][1].axhline(1.0, color="0.3", lw=0.9, ls=":")
axes[0][1].set(xlabel="concurrent requests", ylabel="speedup (on / off)", title="seed 002: block drafter, K=7",
               xticks=[10, 16])
axes[0][1].legend(loc="upper right", fontsize=7)
plots.published_note(axes[0][0], "published: seed 000 (ThakiCloud), single runs, B200")
plots.published_note(axes[0][1], "published: seed 002 (PrimaLabs), B200, MoE, agentic trace")
figures.save_figure(fig, "concurrency-published-seeds", sorted(set(t0.path) | set(t2.path)), out_dir=figures_dir,
                    notebook=NB, caption="The seeds' concurrency results, transcribed (not measured here).")

# %% [markdown]
# ## How to read this run
#
# Every ratio above is within a pair. The interval is the spread over repeats, each a fresh
# server start; on the 2-core CPU machines the same server measures up to 1.5x apart between
# starts, so a CPU curve says no more than its interval allows. A tiny model on two CPU cores
# is not your GPU: the shape (falling with concurrency, and the sign set by the workload) is what
# may carry over, not the numbers. Failed points are kept as failure records and are left out of
# the pairs.
