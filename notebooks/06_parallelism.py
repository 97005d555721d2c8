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
# # 6 · Parallelism layout x drafter: which lever is worth more?
#
# Seed 002 (PrimaLabs) compared tensor vs data parallelism with two drafters on a two-GPU
# H100 node: tensor parallelism beat data parallelism by 9-10 % with either drafter, and the
# better drafter beat the other by 3-4 % under either layout: the layout decision was worth
# more than the drafter decision. Each layout changes the step cost the drafter sees, so
# evaluate them together.
#
# Each layout is one condition; the drafter-on/off pair is formed inside it. Throughput is
# indexed to the best configuration of the run at each concurrency, like seed 002's figure 5.
#
# On the CPU build: one engine on both cores vs `--data-parallel-size 2` (one engine per core,
# each with its own KV pool). Tensor parallel 2 is refused for SmolLM2-135M (9 attention heads
# do not split in two): the CPU run includes it so the refusal is recorded as a failure, not
# left out silently.

# %% tags=["parameters"]
measure = False  # True: start vLLM and measure a new run before the analysis (minutes)
study = "cpu"  # ledgers/parallelism/<study>/<run>/
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
conditions = {"single": {"label": "1 engine"}, "dp2": {"server_args": ["--data-parallel-size", "2"], "env": {"VLLM_CPU_OMP_THREADS_BIND": "0|1"}, "label": "DP 2"}, "tp2": {"server_args": ["--tensor-parallel-size", "2"], "env": {"VLLM_CPU_OMP_THREADS_BIND": "0|1"}, "label": "TP 2"}}  # layout -> server changes
workloads = ["copy"]  # bundled prompt sets or JSONL files
concurrency = [1, 4, 8]  # concurrency levels (requests in flight)
search = None  # adaptive search for each curve's crossing (SearchSpec settings such as budget_s), or None: the levels only
repeats = 2  # server restarts per arm; arm order alternates (3 would narrow the intervals; 2 bounds this CPU run's time)
panel_size = 10  # prompts every point sends, balanced over categories, in whole passes
work_floor_tokens = 400  # output tokens a point's steady window holds at least (sizes the passes)
warmup_requests = 2  # per server start, not measured
max_tokens = 64  # output tokens per request
temperature = 0.0  # sampling temperature (0 is greedy)
seed = 0  # sampling seed (per request: seed + prompt index)

# %%
from IPython.display import Markdown, display

from specnb.analysis import absolute, failure_reasons
from specnb.figures import arm_colors, panels
from specnb.figures import published as seeds
from specnb.notebooks import open_axis

nb = open_axis("parallelism", globals())
table = nb.table

# %% [markdown]
# ## Layouts that could not run
#
# A failed start is recorded as a failure ledger with the engine's own reason.

# %%
reasons = failure_reasons(nb.df, nb.labels)
for r in reasons.itertuples():
    display(Markdown(f"- **{r.condition_label}** failed ({r.error_types}): `{r.reason}`"))
if reasons.empty:
    display(Markdown("Every layout ran."))

# %% [markdown]
# ## Throughput indexed to the best configuration

# %%
ab = absolute(nb.df)
ab["relative"] = ab.output_tok_s / ab.groupby("concurrency").output_tok_s.transform("max")
ab["relative_min"] = ab.output_tok_s_min / ab.groupby("concurrency").output_tok_s.transform("max")
ab["relative_max"] = ab.output_tok_s_max / ab.groupby("concurrency").output_tok_s.transform("max")
levels = sorted(ab.concurrency.unique())
order = [label for label in nb.labels.values() if label in set(ab.condition_label)]
fig, axes = panels.new_figure(ncols=len(levels), width=3.3, sharey=True)
colors = arm_colors(ab["arm"])
for ax, c in zip(axes[0], levels):
    panels.grouped_bars(ax, ab[ab.concurrency == c], group="condition_label", hue="arm", y="relative",
                        lo="relative_min", hi="relative_max", order=order, colors=colors,
                        ylabel="throughput / best", title=f"c={c}")
    ax.set_ylim(0, 1.15)
axes[0][0].legend(loc="lower left")
nb.save(fig, "parallelism-relative-throughput", caption="Output tok/s per layout and arm, indexed to the best "
        "configuration at each concurrency; error bars = repeats.")

# %%
table[["condition_label", "arm", "concurrency", "n_repeats", "base_tok_s", "spec_tok_s", "speedup", "speedup_lo",
       "speedup_hi", "acceptance_length"]].round(3)

# %% [markdown]
# ## Throughput against interactivity, across layouts
#
# Each point is one layout and arm at one concurrency: per-user decode speed against aggregate
# output tok/s; rings mark the Pareto front over all of them, the configurations nothing else
# beats on both. A multiplier can hide a slower server; this shows what each layout delivers.

# %%
nb.condition_frontier("parallelism-frontier", "layout")

# %% [markdown]
# ## What seed 002 published (separate panel)
#
# Seed 002 publishes only relative ranges (its figure 5 bars are not given as numbers).

# %%
fig, sources = seeds.parallelism_seed002()
nb.save(fig, "parallelism-published-seed002", sources=sources,
        caption="Seed 002's parallelism comparison, transcribed as ranges.")

# %% [markdown]
# ## How to read this
#
# On two CPU cores, data parallel 2 gives each engine one core; a single request then runs on
# one core, so c=1 favours the single engine and higher concurrency favours the layout that
# keeps both cores busy. Compare the layout gap with the drafter gap at each concurrency:
# that is seed 002's question, asked of your stack.

# %% [markdown]
# ## The report
#
# What `specnb report` prints for this run: the same pipeline and the same text (a test holds
# the executed notebook's copy against the command), for a reviewer who wants every number in one place.

# %%
nb.report()
