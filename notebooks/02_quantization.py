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
#
# Which CPU a run needs (docs/cpu.md): the W4A16 kernel (`cpu_gemm_wna16`) is in the AVX-512
# extensions of the CPU wheel only, so on an AVX2-only CPU that condition is refused before any
# server starts and recorded as such (the other conditions are measured); there, bf16 layers run on
# torch's fallback (points flagged `engine_fallback`). The committed run was measured with AVX-512.
# Unlike the other notebooks this one pins the dtype, not the machine's (`--dtype machine`): every
# checkpoint is served in bf16, the dtype they were made in, so the checkpoint stays the one thing
# that changes between conditions; `10_serving` measures the dtype on its own.

# %% tags=["parameters"]
measure = False  # True: start vLLM and measure a new run before the analysis (minutes)
study = "cpu"  # ledgers/quantization/<study>/<run>/
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
conditions = {"bf16": {"server_args": ["--dtype", "bfloat16"], "label": "bf16"}, "w8a8": {"model": "models/SmolLM2-135M-Instruct-W8A8", "server_args": ["--dtype", "bfloat16"], "label": "INT8 W8A8"}, "w4a16": {"model": "models/SmolLM2-135M-Instruct-W4A16-G64", "server_args": ["--dtype", "bfloat16"], "label": "INT4 W4A16 g64"}}  # checkpoint -> its folder; every one served in bf16, the dtype the checkpoints were made in (the checkpoint is the one variable here)
workloads = ["copy"]  # bundled prompt sets or JSONL files
concurrency = [1, 4]  # concurrency levels (requests in flight)
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

from specnb.analysis import absolute
from specnb.figures import arm_colors, panels
from specnb.figures import published as seeds
from specnb.notebooks import open_axis

nb = open_axis("quantization", globals())
table = nb.table

# %% [markdown]
# ## Multiplier and absolute throughput per checkpoint
#
# Left: the paired speedup per checkpoint (interval over repeats). Right: absolute output
# tok/s with and without the drafter; the star marks the best absolute configuration at
# each concurrency. Error bars are min-max over repeats (separate server starts).

# %%
ab = absolute(nb.df)
order = list(nb.labels.values())
levels = sorted(table.concurrency.unique())
fig, axes = panels.new_figure(ncols=2, nrows=len(levels), width=4.6, height=2.8)
colors = arm_colors(ab["arm"])
notes = []
for i, c in enumerate(levels):
    t = table[table.concurrency == c]
    panels.grouped_bars(axes[i][0], t, group="condition_label", hue="arm", y="speedup", lo="speedup_lo",
                        hi="speedup_hi", order=order, colors=colors, ylabel="speedup (on / off)",
                        title=f"multiplier, c={c}", ratio=True)
    axes[i][0].axhline(1.0, color="0.3", lw=0.9, ls=":")
    a = ab[ab.concurrency == c]
    panels.grouped_bars(axes[i][1], a, group="condition_label", hue="arm", y="output_tok_s",
                        lo="output_tok_s_min", hi="output_tok_s_max", order=order, colors=colors,
                        ylabel="output tok/s", title=f"absolute throughput, c={c}")
    best = panels.mark_best(axes[i][1], a, group="condition_label", hue="arm", y="output_tok_s",
                            top="output_tok_s_max", order=order)
    notes.append(f"- c={c}: best absolute is **{best.condition_label} / {best.arm}** at "
                 f"{best.output_tok_s:.1f} tok/s (repeats {best.output_tok_s_min:.1f}–{best.output_tok_s_max:.1f})")
axes[0][1].legend(loc="upper left")
nb.save(fig, "quantization-multiplier-vs-absolute", caption="Per checkpoint: the paired multiplier (left) and "
        "absolute tok/s (right); star = best absolute configuration.")
display(Markdown("\n".join(notes)))

# %%
table[["condition_label", "arm", "concurrency", "n_repeats", "base_tok_s", "spec_tok_s", "speedup", "speedup_lo",
       "speedup_hi", "acceptance_length", "accepted_output_share"]].round(3)

# %% [markdown]
# ## Throughput against interactivity, across checkpoints
#
# Each point is one checkpoint and arm at one concurrency: per-user decode speed against aggregate
# output tok/s; rings mark the Pareto front over all of them, the configurations nothing else
# beats on both. A multiplier can hide a slower server; this shows what each checkpoint delivers.

# %%
nb.condition_frontier("quantization-frontier", "checkpoint")

# %% [markdown]
# ## What seed 000 published (a separate panel: a different model, engine and GPU)
#
# Transcribed from seed 000's text; never drawn on the same axis as our measurements.

# %%
fig, sources = seeds.quantization_seed000()
nb.save(fig, "quantization-published-seed000", sources=sources,
        caption="Seed 000's bf16 vs 4-bit numbers, transcribed (not measured here).")

# %% [markdown]
# ## How to read this
#
# If the quantized checkpoint has the smaller multiplier but the larger absolute throughput
# with the drafter on, seed 000's reading holds here too: keep both. On the CPU build the
# quantized kernels differ from the GPU ones (INT8 W8A8 and INT4 W4A16 run on oneDNN / a
# CPU WNA16 kernel), so the *direction* is what to compare, within the intervals shown.

# %% [markdown]
# ## The report
#
# What `specnb report` prints for this run: the same pipeline and the same text (a test holds
# the executed notebook's copy against the command), for a reviewer who wants every number in one place.

# %%
nb.report()
