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
# # 4 · Temperature: does the drafter still pay when the service samples?
#
# Published speedup tables are usually measured at temperature 0; many services run at 1.0
# because the model card says so. A drafter proposes the most plausible continuation; at a
# higher temperature the target samples something else more often, the draft is rejected and
# only the checking cost remains. Seed 000 (ThakiCloud) saw its board-reading (n-gram-like)
# drafter fall from 1.3x-4.2x on math at temperature 0 to 0.3x-1.0x at 1.0, and warns that
# this was measured on that drafter only.
#
# Each temperature is one condition (one server per arm and repeat); the drafter-on/off pair
# is formed inside it with the same sampling on both arms.

# %% tags=["parameters"]
measure = False  # True: start vLLM and measure a new run before the analysis (minutes)
study = "cpu"  # ledgers/temperature/<study>/<run>/
run = ""  # empty: the newest run (or a new time-stamped one when measuring); a run name reads or resumes it
ledger_root = "ledgers"  # folder holding the <axis>/<study>/<run> tree
figures_dir = "figures"  # where figures are written (SVG + PNG + sidecar)
model = "models/SmolLM2-135M-Instruct"  # target checkpoint: local folder or hub id
served_model_name = "smollm2-135m"  # name the server answers to
endpoint = ""  # URL of a running server to attach to instead of launching (empty: launch)
server_args = ["--enforce-eager", "--dtype", "bfloat16", "--max-model-len", "2048"]  # every launch
env = {"VLLM_CPU_KVCACHE_SPACE": "1"}  # environment for every launch (CPU KV pool in GiB)
drafters = {"ngram-k4": {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}, "draft-noise0.05": {"model": "models/SmolLM2-135M-Instruct-noise0.05", "num_speculative_tokens": 3}}  # arm -> --speculative-config
conditions = {"t0": {"temperature": 0.0, "label": "T 0"}, "t0.5": {"temperature": 0.5, "label": "T 0.5"}, "t1": {"temperature": 1.0, "label": "T 1"}}  # temperature conditions
workloads = ["copy"]  # bundled prompt sets or JSONL files
concurrency = [1, 4]  # concurrency levels (requests in flight)
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

AXIS, NB = "temperature", "04_temperature"
st = Study.from_namespace(AXIS, globals())
folder = st.open_run(measure, run, ledger_root)
df = st.load(folder)
table = st.summarize(df)
failed = df[df.status != "ok"]
display(Markdown(st.describe_run(folder, df)))

# %% [markdown]
# ## Speedup and acceptance across temperatures
#
# One line per drafter and concurrency; x is the sampling temperature of both arms. The band
# is the interval over repeats. Acceptance rate is accepted / drafted tokens (vLLM's formula).

# %%
temps = {c: st.specs()[c].sampling.temperature for c in st.condition_names()}
table["temperature"] = table.condition.map(temps)
fig, axes = plots.new_figure(ncols=3, width=3.5)
colors = figures.arm_colors(table["arm"])
styles = ["-", "--", "-.", ":"]
for (arm, c), g in table.sort_values("temperature").groupby(["arm", "concurrency"]):
    ls = styles[sorted(table.concurrency.unique()).index(c) % 4]
    lab = f"{arm}, c={c}"
    axes[0][0].plot(g.temperature, g.speedup, ls=ls, marker="o", ms=4, color=colors[arm], label=lab)
    axes[0][0].fill_between(g.temperature, g.speedup_lo, g.speedup_hi, color=colors[arm], alpha=0.12, lw=0)
    axes[0][1].plot(g.temperature, g.acceptance_rate * 100, ls=ls, marker="o", ms=4, color=colors[arm], label=lab)
    axes[0][2].plot(g.temperature, g.acceptance_length, ls=ls, marker="o", ms=4, color=colors[arm], label=lab)
axes[0][0].axhline(1.0, color="0.3", lw=0.9, ls=":")
axes[0][0].set(xlabel="temperature", ylabel="speedup (on / off)", title="paired speedup")
axes[0][1].set(xlabel="temperature", ylabel="draft tokens accepted, %", title="acceptance rate", ylim=(0, 100))
axes[0][2].set(xlabel="temperature", ylabel="tokens per step", title="mean acceptance length")
axes[0][2].set_ylim(bottom=1.0)
axes[0][0].legend(loc="best")
figures.save_figure(fig, "temperature-speedup-acceptance", [folder], out_dir=figures_dir, notebook=NB,
                    caption="Paired speedup, acceptance rate and acceptance length vs sampling temperature.")

# %%
table[["condition_label", "arm", "concurrency", "n_repeats", "base_tok_s", "spec_tok_s", "speedup", "speedup_lo",
       "speedup_hi", "acceptance_rate", "acceptance_length"]].round(3)

# %% [markdown]
# ## What seed 000 published (separate panel)
#
# Seed 000 gives ranges over math problems for its board-reading drafter, not points.

# %%
from specnb.published import load_published

pub = load_published("thakicloud-temperature")
fig, axes = plots.new_figure(width=4.0)
ax = axes[0][0]
for i, r in enumerate(pub.itertuples()):
    ax.plot([r.temperature, r.temperature], [r.low, r.high], lw=6, alpha=0.6, color="#D55E00", solid_capstyle="butt")
ax.axhline(1.0, color="0.3", lw=0.9, ls=":")
ax.set(xlabel="temperature", ylabel="speedup range", title="seed 000: n-gram-like drafter, math", xlim=(-0.3, 1.3))
plots.published_note(ax, "published: seed 000 (ThakiCloud); ranges, B200")
figures.save_figure(fig, "temperature-published-seed000", sorted(set(pub.path)), out_dir=figures_dir,
                    notebook=NB, caption="Seed 000's temperature ranges, transcribed.")

# %% [markdown]
# ## How to read this
#
# On the CPU default (SmolLM2-135M) acceptance collapses at temperature 1: a 135M model's
# next-token distribution is flat, so a sampled token rarely matches the proposal. That is a
# real result for a tiny model, not a prediction for a large one; what carries over is the
# method: measure at the temperature your service uses.
