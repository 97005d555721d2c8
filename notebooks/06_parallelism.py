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
endpoint = ""  # URL of a running server to attach to instead of launching (empty: launch)
server_args = ["--enforce-eager", "--dtype", "bfloat16", "--max-model-len", "2048"]  # every launch
env = {"VLLM_CPU_KVCACHE_SPACE": "1"}  # environment for every launch (CPU KV pool in GiB)
drafters = {"ngram-k4": {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}}  # arm -> --speculative-config
conditions = {"single": {"label": "1 engine"}, "dp2": {"server_args": ["--data-parallel-size", "2"], "env": {"VLLM_CPU_OMP_THREADS_BIND": "0|1"}, "label": "DP 2"}, "tp2": {"server_args": ["--tensor-parallel-size", "2"], "env": {"VLLM_CPU_OMP_THREADS_BIND": "0|1"}, "label": "TP 2"}}  # layout -> server changes
workloads = ["copy"]  # bundled prompt sets or JSONL files
concurrency = [1, 4, 8]  # concurrency levels (requests in flight)
repeats = 2  # server restarts per arm; arm order alternates
requests_per_user = 3  # requests per point: concurrency x this ...
min_requests = 6  # ... but at least this many
warmup_requests = 2  # per server start, not measured
max_tokens = 64  # output tokens per request
temperature = 0.0  # sampling temperature (0 is greedy)
seed = 0  # sampling seed (per request: seed + prompt index)

# %%
import pandas as pd
from IPython.display import Markdown, display

from specnb import figures, plots
from specnb.study import Study, absolute

AXIS, NB = "parallelism", "06_parallelism"
st = Study.from_namespace(AXIS, globals())
folder = st.open_run(measure, run, ledger_root)
df = st.load(folder)
table = st.summarize(df)
failed = df[df.status != "ok"]
display(Markdown(st.describe_run(folder, df)))

# %% [markdown]
# ## Layouts that could not run
#
# A failed start is recorded as a failure ledger with the engine's own reason.

# %%
if len(failed):
    reasons = (failed.assign(label=failed.condition.map(st.label))
               .groupby("label").error_type.agg(lambda s: ", ".join(sorted(set(map(str, s))))))
    for label, err in reasons.items():
        from specnb.ledger import read_ledger
        p = failed[failed.condition.map(st.label) == label].path.iloc[0]
        tail = (read_ledger(p).failure.log_tail or read_ledger(p).failure.message or "").strip().splitlines()
        why = next((ln for ln in reversed(tail) if ("Error" in ln or "error" in ln)
                    and "For further information" not in ln), tail[-1] if tail else "")
        display(Markdown(f"- **{label}** failed ({err}): `{why.strip()[:300]}`"))
else:
    display(Markdown("Every layout ran."))

# %% [markdown]
# ## Throughput indexed to the best configuration

# %%
ab = absolute(df)
ab["relative"] = ab.output_tok_s / ab.groupby("concurrency").output_tok_s.transform("max")
ab["relative_min"] = ab.output_tok_s_min / ab.groupby("concurrency").output_tok_s.transform("max")
ab["relative_max"] = ab.output_tok_s_max / ab.groupby("concurrency").output_tok_s.transform("max")
levels = sorted(ab.concurrency.unique())
order = [st.label(c) for c in st.condition_names() if st.label(c) in set(ab.condition_label)]
fig, axes = plots.new_figure(ncols=len(levels), width=3.3, sharey=True)
colors = figures.arm_colors(ab["arm"])
for ax, c in zip(axes[0], levels):
    plots.grouped_bars(ax, ab[ab.concurrency == c], group="condition_label", hue="arm", y="relative",
                       lo="relative_min", hi="relative_max", order=order, colors=colors,
                       ylabel="throughput / best", title=f"c={c}")
    ax.set_ylim(0, 1.15)
axes[0][0].legend(loc="lower left")
figures.save_figure(fig, "parallelism-relative-throughput", [folder], out_dir=figures_dir, notebook=NB,
                    caption="Output tok/s per layout and arm, indexed to the best configuration at each "
                            "concurrency; error bars = repeats.")

# %%
table[["condition_label", "arm", "concurrency", "n_repeats", "base_tok_s", "spec_tok_s", "speedup", "speedup_lo",
       "speedup_hi", "acceptance_length"]].round(3)

# %% [markdown]
# ## What seed 002 published (separate panel)
#
# Seed 002 publishes only relative ranges (its figure 5 bars are not given as numbers).

# %%
from specnb.published import load_published

pub = load_published("primalabs-parallelism")
fig, axes = plots.new_figure(width=4.6)
ax = axes[0][0]
for i, r in enumerate(pub.itertuples()):
    ax.plot([r.low, r.high], [i, i], lw=7, alpha=0.6, color="#009E73", solid_capstyle="butt")
ax.set_yticks(range(len(pub)), [c.replace(", either", "\n(either") + ")" for c in pub.condition])
ax.set(xlabel="advantage, %", title="seed 002: layout vs drafter (2x H100, K=3)")
ax.set_xlim(0, max(pub.high) * 1.3)
plots.published_note(ax, "published: seed 002 (PrimaLabs); ranges only")
figures.save_figure(fig, "parallelism-published-seed002", sorted(set(pub.path)), out_dir=figures_dir,
                    notebook=NB, caption="Seed 002's parallelism comparison, transcribed as ranges.")

# %% [markdown]
# ## How to read this
#
# On two CPU cores, data parallel 2 gives each engine one core; a single request then runs on
# one core, so c=1 favours the single engine and higher concurrency favours the layout that
# keeps both cores busy. Compare the layout gap with the drafter gap at each concurrency:
# that is seed 002's question, asked of your stack.
