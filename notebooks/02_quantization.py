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
# # 2 · Quantization: judge the drafter on final throughput, not on its multiplier
#
# A quantized checkpoint reads fewer weight bytes per step, so its baseline is faster, and
# the idle time a drafter lives on shrinks with it. Seed 000 (ThakiCloud) measured the same
# drafter at 3.0x on bf16 (88.7 -> 266.4 tok/s) but 2.2x on a 4-bit checkpoint (129.0 -> 286.9):
# the multiplier fell, yet 4-bit *with* the drafter was the fastest configuration. The lesson:
# judge on final throughput.
#
# Each checkpoint is one condition: the drafter-on/off pair is formed inside it (same
# prompts, engine build, sampling); checkpoints are compared on absolute tok/s with their
# spread, since each is a different server. On the CPU build: bf16, INT8 W8A8 and INT4 W4A16
# (group 64) made locally from the bf16 model by `make setup`; NVFP4 is GPU-only, and this
# build's `--quantization fp8` is an empty stub on CPU, so neither appears in the CPU run.

# %% tags=["parameters"]
measure = False  # True: start vLLM and measure a new run before the analysis (minutes)
study = "cpu"  # ledgers/quantization/<study>/<run>/
run = ""  # empty: the newest run (or a new time-stamped one when measuring); a run name reads or resumes it
ledger_root = "ledgers"  # folder holding the <axis>/<study>/<run> tree
figures_dir = "figures"  # where figures are written (SVG + PNG + sidecar)
model = "models/SmolLM2-135M-Instruct"  # target checkpoint: local folder or hub id
served_model_name = "smollm2-135m"  # name the server answers to
endpoint = ""  # URL of a running server to attach to instead of launching (empty: launch)
server_args = ["--enforce-eager", "--dtype", "bfloat16", "--max-model-len", "2048"]  # every launch
env = {"VLLM_CPU_KVCACHE_SPACE": "1"}  # environment for every launch (CPU KV pool in GiB)
drafters = {"ngram-k4": {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}}  # arm -> --speculative-config
conditions = {"bf16": {"label": "bf16"}, "w8a8": {"model": "models/SmolLM2-135M-Instruct-W8A8", "label": "INT8 W8A8"}, "w4a16": {"model": "models/SmolLM2-135M-Instruct-W4A16-G64", "label": "INT4 W4A16 g64"}}  # checkpoint -> its folder
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

AXIS, NB = "quantization", "02_quantization"
st = Study.from_namespace(AXIS, globals())
folder = st.open_run(measure, run, ledger_root)
df = st.load(folder)
table = st.summarize(df)
failed = df[df.status != "ok"]
display(Markdown(st.describe_run(folder, df)))

# %% [markdown]
# ## Multiplier and absolute throughput per checkpoint
#
# Left: the paired speedup per checkpoint (interval over repeats). Right: absolute output
# tok/s with and without the drafter; the star marks the best absolute configuration at
# each concurrency. Error bars are min-max over repeats (separate server starts).

# %%
ab = absolute(df)
order = [st.label(c) for c in st.condition_names()]
levels = sorted(table.concurrency.unique())
fig, axes = plots.new_figure(ncols=2, nrows=len(levels), width=4.6, height=2.8)
colors = figures.arm_colors(ab["arm"])
notes = []
for i, c in enumerate(levels):
    t = table[table.concurrency == c]
    plots.grouped_bars(axes[i][0], t, group="condition_label", hue="arm", y="speedup", lo="speedup_lo",
                       hi="speedup_hi", order=order, colors=colors, ylabel="speedup (on / off)",
                       title=f"multiplier, c={c}")
    axes[i][0].axhline(1.0, color="0.3", lw=0.9, ls=":")
    a = ab[ab.concurrency == c]
    plots.grouped_bars(axes[i][1], a, group="condition_label", hue="arm", y="output_tok_s",
                       lo="output_tok_s_min", hi="output_tok_s_max", order=order, colors=colors,
                       ylabel="output tok/s", title=f"absolute throughput, c={c}")
    best = a.loc[a.output_tok_s.idxmax()]
    x = order.index(best.condition_label)
    hues = list(dict.fromkeys(a.arm))
    xoff = (hues.index(best.arm) - (len(hues) - 1) / 2) * 0.8 / len(hues)
    axes[i][1].plot([x + xoff], [best.output_tok_s_max * 1.04], marker="*", ms=11, color="k", ls="none")
    notes.append(f"- c={c}: best absolute is **{best.condition_label} / {best.arm}** at "
                 f"{best.output_tok_s:.1f} tok/s (repeats {best.output_tok_s_min:.1f}–{best.output_tok_s_max:.1f})")
axes[0][1].legend(loc="upper left")
figures.save_figure(fig, "quantization-multiplier-vs-absolute", [folder], out_dir=figures_dir, notebook=NB,
                    caption="Per checkpoint: the paired multiplier (left) and absolute tok/s (right); "
                            "star = best absolute configuration.")
display(Markdown("\n".join(notes)))

# %%
table[["condition_label", "arm", "concurrency", "n_repeats", "base_tok_s", "spec_tok_s", "speedup", "speedup_lo",
       "speedup_hi", "acceptance_length", "accepted_output_share"]].round(3)

# %% [markdown]
# ## What seed 000 published (a separate panel: a different model, engine and GPU)
#
# Transcribed from seed 000's text; never drawn on the same axis as our measurements.

# %%
from specnb.published import load_published

pub = load_published("thakicloud-quantization")
tput = pub[pub.metric == "throughput_tok_s"].assign(
    arm=lambda d: d.arm.map({"baseline": "no drafter", "speculative": "with drafter"}))
mult = pub[pub.metric == "speedup_x"]
fig, axes = plots.new_figure(ncols=2, width=3.6)
plots.grouped_bars(axes[0][0], tput, group="condition", hue="arm", y="value", ylabel="output tok/s",
                   title="seed 000: absolute", colors={"no drafter": "0.55", "with drafter": "#0072B2"})
axes[0][1].bar(mult.condition, mult.value, color="#0072B2", alpha=0.8)
axes[0][1].axhline(1.0, color="0.3", lw=0.9, ls=":")
axes[0][1].set(title="seed 000: multiplier", ylabel="speedup (on / off)")
axes[0][0].legend(loc="upper left")
for ax in axes[0]:
    plots.published_note(ax, "published: seed 000 (ThakiCloud), 27B target, B200")
figures.save_figure(fig, "quantization-published-seed000", sorted(set(pub.path)), out_dir=figures_dir,
                    notebook=NB, caption="Seed 000's bf16 vs 4-bit numbers, transcribed (not measured here).")

# %% [markdown]
# ## How to read this
#
# If the quantized checkpoint has the smaller multiplier but the larger absolute throughput
# with the drafter on, seed 000's reading holds here too: keep both. On the CPU build the
# quantized kernels differ from the GPU ones (INT8 W8A8 and INT4 W4A16 run on oneDNN / a
# CPU WNA16 kernel), so the *direction* is what to compare, within the intervals shown.
