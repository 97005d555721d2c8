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
endpoint = ""  # URL of a running server to attach every arm to instead of launching, or {arm: URL} for some (empty: launch)
executor = "local"  # where the pairing blocks run: "local" (here, one after another), "ray" or a Ray address (docs/fleet.md)
start_together = False  # True: launch a repeat's servers side by side, then measure them one at a time (about one start per repeat, not one per arm; every arm's server in memory at once)
server_args = ["--enforce-eager", "--dtype", "machine", "--max-model-len", "2048"]  # every launch (--dtype machine: bf16 where this CPU has a oneDNN bf16 kernel, fp32 where it has none, as on AVX2-only CPUs: docs/cpu.md)
env = {"VLLM_CPU_KVCACHE_SPACE": "1"}  # environment for every launch (CPU KV pool in GiB)
drafters = {"ngram-k4": {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}}  # arm -> --speculative-config
conditions = {}  # condition name -> what it changes (model, server_args, env, temperature); empty: one condition
workloads = ["copy", "freeform"]  # bundled prompt sets or JSONL files
concurrency = [1, 2, 4, 8]  # concurrency levels (requests in flight); the search may add more
search = {"target_log2_width": 1.0, "budget_s": 1800, "max_rounds": 3}  # look for the crossing beyond and between the levels (None: the levels only)
load = "concurrency"  # "concurrency": closed loop at the levels above; "rate": open-loop arrivals at `rates`, measured into `rate_study`
rates = [0.5, 1.0, 2.0, 3.0]  # offered requests per second in open-loop mode (around the CPU baseline's saturation)
burstiness = 1.0  # gamma shape of the gaps between arrivals (1: Poisson; below 1 burstier)
max_in_flight = 32  # open loop: cap on requests in flight (recorded)
rate_study = "cpu-rate"  # ledgers/concurrency/<rate_study>/: the open-loop runs this notebook draws when present
slos = {"ttft_ms": 1000, "decode_tok_s": 20}  # goodput: a request counts when it meets every bound (ttft_ms, itl_p99_ms, e2el_ms at most; decode_tok_s at least)
repeats = 3  # server restarts per arm; arm order alternates (with sequential: the repeats before the first look)
sequential = None  # {"max_repeats": 6, "alpha": 0.05}: then one more repeat per round for the levels still undecided, looked at after every even count of repeats, stopped once decided (None: every level gets every repeat)
budget_s = None  # seconds per sweep: no later round (search or sequential) starts that would end past it (None: no budget)
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

from specnb.analysis import (
    by_category,
    category_speedups,
    expected_speedup,
    lossless,
    lossless_summary,
    paired,
    usable,
)
from specnb.analysis.latency import (
    best_goodput,
    format_goodput,
    format_latency_threshold,
    frontier,
    goodput,
    latency_by_rate,
    latency_threshold,
)
from specnb.analysis.schedule import derive_policies, format_policy
from specnb.figures import arm_colors, panels
from specnb.figures import published as seeds
from specnb.ledger import PLAIN_CONDITION, load_spec_by_category
from specnb.ledger.runs import search_lines, sequential_lines
from specnb.notebooks import open_axis
from specnb.prompts.copyshare import MixError

closed_loop = load == "concurrency"
nb = open_axis("concurrency", {**globals(), "load": "concurrency", "measure": measure and closed_loop})
rate_nb = open_axis("concurrency", {**globals(), "study": rate_study, "load": "rate", "measure": measure and not closed_loop,
                                    "run": "" if closed_loop else run}, missing_ok=True)
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
fig.suptitle(f"Paired speedup vs concurrency ({table.n_repeats.max()} repeats; band = 95 % interval over server starts and the panel's prompts)")
nb.save(fig, "concurrency-speedup", caption="Aggregate (solid) and per-user (dashed) paired speedup vs "
        "concurrency; bar on 1.0: the crossing's bracket (the last level shown to pay, the first shown to lose, "
        "family-wise); open triangle: the estimates' interpolated crossing.")
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
# ## Throughput against interactivity, and goodput under your latency targets
#
# The crossing of 1.0 answers "does the drafter raise aggregate throughput at concurrency c";
# an operator decides "at my latency target, which configuration serves the most traffic?".
# Each point below is one arm at one level: per-user decode speed (mean of each request's
# 1 / TPOT) against aggregate output tok/s; rings mark the Pareto front over every arm, the
# points no other point beats on both. Goodput counts only the requests that met every SLO
# of the parameters cell (vLLM bench's definition), with an interval over repeats and prompts.

# %%
front = frontier(nb.df)
fig, axes = panels.new_figure(ncols=front.workload.nunique(), width=4.6, height=3.6)
for ax, (wl, g) in zip(axes[0], front.groupby("workload", sort=True)):
    panels.frontier(ax, g, colors=colors, title=wl)
axes[0][0].legend(loc="lower left")
nb.save(fig, "concurrency-frontier", caption="Per-user decode tok/s against aggregate output tok/s per arm and "
        "concurrency (labels); rings: the Pareto front over both arms; bars: min-max over repeats.")
good = goodput(nb.df, slos)
display(Markdown(format_goodput(best_goodput(good))))
fig, axes = panels.new_figure(ncols=good.workload.nunique(), width=4.2, height=3.0, sharey=True)
for ax, (wl, g) in zip(axes[0], good.groupby("workload", sort=True)):
    panels.curves(ax, g, "goodput_tok_s", lo="goodput_tok_s_lo", hi="goodput_tok_s_hi", colors=colors,
                  ylabel="goodput, tok/s", title=wl)
axes[0][0].legend(loc="upper left")
fig.suptitle("Goodput under " + ", ".join(f"{k} {'>=' if k == 'decode_tok_s' else '<='} {v:g}" for k, v in slos.items()))
nb.save(fig, "concurrency-goodput", caption="Output tok/s of the requests that met every SLO, per arm and concurrency; "
        "band: 95 % interval over server starts and the panel's prompts (docs/statistics.md).")
good.round(3)

# %% [markdown]
# ## Where the search looked, whether the drafter changed the outputs, and the schedule to deploy
#
# Levels beyond the parameters' were added by the adaptive search (each records its round and
# reason), and the search says why it stopped and what it left unmeasured. A sequential run
# (`sequential`) says, per level, the look it stopped at: decided after how many repeats, or
# still open at its last look or when the budget ran out. The lossless check
# compares every request's output token ids between the arms at
# temperature 0, against the baseline's own start-to-start reference. The schedule is vLLM's
# `num_speculative_tokens_per_batch_size`, derived with the rule printed above it.

# %%
added = nb.df[nb.df.search_round > 0].drop_duplicates(["workload", "concurrency"])
display(Markdown("\n".join(f"- {r.workload} c={r.concurrency} (round {r.search_round}): {r.search_reason}"
                            for r in added.itertuples()) or "The search added no level to this run."))
stops = search_lines(nb.folder) + sequential_lines(nb.folder)
if stops:
    display(Markdown("```\n" + "\n".join(stops) + "\n```"))
display(Markdown("```\n" + lossless_summary(lossless(nb.df)) + "\n```"))
for wl in sorted(set(nb.df.workload)):
    for label, config, chosen in derive_policies(nb.df, wl):  # one schedule per drafter method
        display(Markdown(f"**{label}**\n```\n" + format_policy(config, chosen, "lower_bound") + "\n```"))

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
acc = usable(load_spec_by_category(nb.folder))  # invalid points stay out of figures
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
notes = []
for arm in sorted(set(pairs.arm)):
    for c in levels:
        try:
            est = expected_speedup(category_speedups(pairs, arm=arm, concurrency=c), traffic_mix)
        except MixError as exc:  # a level the run did not measure for every kind of work the mix names
            notes.append(f"c={c}: {exc}")
            continue
        rows.append({"arm": arm, "concurrency": c, "expected_speedup": est.speedup, "lo": est.lo, "hi": est.hi})
display(Markdown(f"Expected speedup on a mix of {traffic_mix} (time-weighted, 95 % bootstrap over repeats)"
                 + (": " if rows else " cannot be formed: ") + "; ".join(notes[:3])))
pd.DataFrame(rows).round(3)

# %% [markdown]
# ## Open loop: latency against offered rate
#
# Production traffic arrives at a rate whether or not earlier requests finished: near the
# server's saturation queues form and latency diverges, which a closed loop never shows. This
# section draws the newest open-loop run of `rate_study` (measure one with `load = "rate"`):
# TTFT and TPOT percentiles per arm against the offered rate (same arrival times for both
# arms; a cap on requests in flight is recorded), the rate the server achieved, and the rate
# above which the drafter stops lowering per-token latency.

# %%
if rate_nb is None:
    display(Markdown(f"No open-loop run under `ledgers/concurrency/{rate_study}/` yet: measure one with "
                     f"`load = \"rate\"` and `rate_study = \"{rate_study}\"` "
                     "(`make measure-concurrency PARAMS=notebooks/params/rate/concurrency.yaml` measures the "
                     "`cpu-rate` study)."))
else:
    display(Markdown(rate_nb.summary))
    lat = latency_by_rate(rate_nb.df)
    fig, axes = panels.new_figure(ncols=4, width=3.2, height=2.9)
    for ax, metric in zip(axes[0], ["p50_ttft_ms", "p99_ttft_ms", "p50_tpot_ms", "p99_tpot_ms"]):
        panels.latency_vs_rate(ax, lat, metric, colors=colors, title=metric.replace("_", " "))
    axes[0][0].legend(loc="upper left")
    rate_nb.save(fig, "concurrency-latency-vs-rate", caption="TTFT and TPOT percentiles against offered rate per arm "
                 "(open-loop Poisson arrivals, the same schedule for both arms); band: min-max over repeats.")
    display(Markdown("\n".join(f"- {format_latency_threshold(t)}" for t in latency_threshold(rate_nb.df))))
    display(lat[["workload", "arm", "rate_rps", "achieved_rate_rps", "peak_in_flight", "p50_ttft_ms", "p99_ttft_ms",
                 "p50_tpot_ms", "p99_tpot_ms", "p99_send_lateness_ms"]].round(2))

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

# %% [markdown]
# ## Into production: the alerts this run would set
#
# `specnb alerts <run> --out DIR` turns this run into Prometheus rules and a dashboard, and
# `specnb watch URL --run <run>` holds a live endpoint to it (docs/watch.md). What they would carry,
# per drafter arm and workload, in the scheduler's units (running requests, not client concurrency):

# %%
from specnb import paths as _paths
from specnb.analysis.alerts import threshold_of
from specnb.analysis.pairing import AnalysisError
from specnb.analysis.watch import expectation

rows = []
for (arm, wl), _g in usable(nb.df)[usable(nb.df)["speculative"].astype(bool)].groupby(["arm", "workload"]):
    try:
        exp = expectation(nb.df, _paths.portable(str(nb.folder)), arm=arm, workload=wl)
    except AnalysisError as exc:
        rows.append({"arm": arm, "workload": wl, "alert above (running)": None, "meaning": str(exc)})
        continue
    th, meaning = threshold_of(exp)
    rows.append({"arm": arm, "workload": wl, "alert above (running)": None if th is None else round(th, 1),
                 "threshold interval": (f"{exp.threshold_lo:.1f} to {exp.threshold_hi:.1f}"
                                        if exp.threshold_lo is not None and exp.threshold_hi is not None else "-"),
                 "acceptance floor": f"{exp.acceptance_floor:.0%}" if exp.acceptance_floor is not None else "-",
                 "meaning": meaning})
display(pd.DataFrame(rows))

# %% [markdown]
# ## The report
#
# What `specnb report` prints for this run: the same pipeline and the same text (a test holds
# the executed notebook's copy against the command), for a reviewer who wants every number in one place.

# %%
nb.report()
if rate_nb is not None:
    rate_nb.report()
