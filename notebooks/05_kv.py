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
# # 5 · KV budget: the drafter also takes seats
#
# A draft model is a model too and keeps its own KV cache. Seed 000 (ThakiCloud) saw the KV
# pool shrink by about 36 % under an edge memory budget when the drafter was attached: at a
# 256k context, 6.7 concurrent sessions became 4.3. Seed 002 (PrimaLabs) saw a heavier drafter
# cut KV tokens enough to cap the users a server could hold. A service of short chats never
# notices; one working through long documents may feel the lost seats before the speed gain.
#
# Part A reads the KV pool each server reported at start (tokens, and sessions at a context
# length), with and without the drafter, per pool condition. Part B runs a deliberately small
# pool and shows throughput and preemptions as concurrency rises.
#
# On the CPU build: `VLLM_CPU_KVCACHE_SPACE` sets the pool in GiB, `--kv-cache-dtype fp8`
# halves the bytes per token (AVX-512 machines), and `--num-gpu-blocks-override N` fixes the
# pool at N blocks of 128 tokens. The draft model is a noise-perturbed copy of the target
# (`make setup` builds it): as large as the target, so its KV share is large too.

# %% tags=["parameters"]
measure = False  # True: start vLLM and measure a new run before the analysis (minutes)
study = "cpu"  # ledgers/kv/<study>/<run>/
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
drafters = {"draft-noise0.05": {"model": "models/SmolLM2-135M-Instruct-noise0.05", "num_speculative_tokens": 3}}  # arm -> --speculative-config
conditions = {"pool": {"label": "1 GiB pool", "concurrency": [4]}, "fp8": {"server_args": ["--kv-cache-dtype", "fp8"], "label": "1 GiB, fp8 KV", "concurrency": [4]}, "tight": {"server_args": ["--max-model-len", "1024", "--num-gpu-blocks-override", "9"], "max_tokens": 128, "label": "9 blocks (1,152 tokens)"}}  # pool conditions
workloads = ["copy"]  # bundled prompt sets or JSONL files
concurrency = [1, 4, 8]  # concurrency levels (requests in flight)
search = None  # adaptive search for each curve's crossing (SearchSpec settings such as budget_s), or None: the levels only
context_tokens = 2048  # context length for the sessions-per-pool reading
repeats = 2  # server restarts per arm; arm order alternates (3 would narrow the intervals; 2 bounds this CPU run's time)
panel_size = 10  # prompts every point sends, balanced over categories, in whole passes
work_floor_tokens = 400  # output tokens a point's steady window holds at least (sizes the passes)
warmup_requests = 2  # per server start, not measured
max_tokens = 64  # output tokens per request
temperature = 0.0  # sampling temperature (0 is greedy)
seed = 0  # sampling seed (per request: seed + prompt index)

# %%
from IPython.display import Markdown, display

from specnb.analysis import kv_capacity, usable
from specnb.figures import arm_colors, facets, panels
from specnb.ledger import BASELINE
from specnb.ledger.published import load_published
from specnb.notebooks import open_axis

nb = open_axis("kv", globals())
table = nb.table

# %% [markdown]
# ## A · KV tokens and sessions, with and without the drafter

# %%
kv = kv_capacity(usable(nb.df), context_tokens=context_tokens)
kv["condition_label"] = kv.condition.map(nb.labels)
display(kv[["condition_label", "arm", "kv_cache_tokens", "kv_cache_tokens_min", "kv_cache_tokens_max",
            "drafter_kv_share", "sessions", "baseline_sessions"]].round(3))
fig, axes = panels.new_figure(ncols=2, width=4.2)
colors = arm_colors(kv["arm"])
panels.grouped_bars(axes[0][0], kv, group="condition_label", hue="arm", y="kv_cache_tokens", colors=colors,
                    ylabel="KV cache tokens", title="KV pool at server start")
panels.grouped_bars(axes[0][1], kv, group="condition_label", hue="arm", y="sessions", colors=colors,
                    ylabel=f"sessions at {context_tokens:,} tokens", title="concurrent sessions that fit")
for ax in axes[0]:
    ax.tick_params(axis="x", labelrotation=15)
axes[0][1].legend(loc="upper right")
nb.save(fig, "kv-capacity", caption="KV tokens each server reported at start and sessions at a context length, "
        "with and without the drafter.")
for r in kv[kv.arm != BASELINE].itertuples():
    display(Markdown(f"- **{r.condition_label}**: the drafter takes **{100 * r.drafter_kv_share:.0f} %** of the "
                     f"pool ({r.baseline_kv_cache_tokens:,.0f} -> {r.kv_cache_tokens:,.0f} tokens; "
                     f"{r.baseline_sessions:.1f} -> {r.sessions:.1f} sessions at {context_tokens:,})."))

# %% [markdown]
# ## B · A small pool under rising concurrency
#
# With the pool fixed small, more concurrent requests than fit force preemptions (a request
# is evicted and recomputed later). A drafter that shares the pool makes that happen sooner.

# %%
tight = [c for c, spec in nb.study.specs().items() if len(spec.levels()) > 1]
ok = usable(nb.df)[lambda d: d.condition.isin(tight)]
agg = (ok.groupby(["condition_label", "arm", "concurrency"]).agg(
    output_tok_s=("output_tok_s", "mean"), lo=("output_tok_s", "min"), hi=("output_tok_s", "max"),
    preemptions=("preemptions", "mean"), kv_usage_max=("kv_cache_usage_max", "max")).reset_index())
grid = facets.metric_lines(ok.assign(kv_use_pct=100 * ok.kv_cache_usage_max), colors=colors, height=3.0,
                           metrics={"output_tok_s": "output tok/s", "preemptions": "preemptions per point",
                                    "kv_use_pct": "peak KV use, %"})
grid.figure.suptitle(", ".join(nb.labels[c] for c in tight), y=1.03)
nb.save(grid.figure, "kv-constrained-pool", caption="Under a small fixed pool: throughput, preemptions and peak "
        "KV use vs concurrency, with and without the drafter (line = mean, band = range over repeats).")
agg.round(2)

# %% [markdown]
# ## What seed 000 published (separate panel)

# %%
pub = load_published("thakicloud-kv-capacity")
pub[["condition", "arm", "metric", "value", "context_length", "text"]]

# %% [markdown]
# ## How to read this
#
# The KV tokens come from the server's own start-up report, so they are exact for that
# server; the sessions figure is the pool divided by one context, an upper bound that ignores
# fragmentation. Throughput under the small pool is paired like every other speedup; its
# interval is over repeats.

# %% [markdown]
# ## The report
#
# What `specnb report` prints for this run: the same pipeline and the same text (a test holds
# the executed notebook's copy against the command), for a reviewer who wants every number in one place.

# %%
nb.report()
