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
# # 11 · Context length and conversations: does the crossing move with the traffic's shape?
#
# Every other notebook sends prompts of a few hundred tokens. Seed 000's caveat: its edge-budget
# numbers used a fixed 8k prompt, "how the drafter behaves on a real 256k prompt is still
# unmeasured"; seed 002's measured crossover replayed long-prompt agentic conversations; vLLM's
# users ask for a context-length dimension in the dynamic schedule (RFC #48627). A longer context
# makes every decode step read more KV cache (attention grows with the context, the weights do
# not), so verifying K extra positions costs a different share of the step, and a drafter that
# looks into the prompt (n-gram) has more text to match.
#
# Each length is a workload of its own (`specnb.prompts.context`): every prompt of `context_base`
# keeps its request at the end and gets, in front of it, reference material (earlier requests of
# the bundled sets: real text written for specnb, not padding, a different rotation per prompt)
# until the chat-templated prompt is `context_tokens` long in the target's own tokenizer. The
# answers asked for are the base's at every length; the ledgers record the lengths measured
# (`workload.context`) and the engine's prompt-token counts. Speedups are paired per length and
# level as everywhere (same prompts, same server build, same sampling), with the one interval.
#
# On the CPU build the model's limit is 2,048 tokens (`--max-model-len 2048`), so the lengths go
# from 512 to 1,984 (prompt plus `max_tokens` must fit). The GPU file
# (`notebooks/params/gpu/context.yaml`) goes from 1k to 64k on a 128k-context target.

# %% tags=["parameters"]
measure = False  # True: start vLLM and measure a new run before the analysis (minutes)
study = "cpu"  # ledgers/context/<study>/<run>/
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
conditions = {}  # condition name -> what it changes; empty: one condition
context_base = "copy"  # the workload whose requests end every prompt: a bundled set, '<set>:<category>' or a JSONL file
context_tokens = [512, 1024, 1984]  # prompt lengths in the target's tokens, chat template included (each one a workload)
tokenizer = ""  # the tokenizer that counts them; empty: the target's (model)
context_corpus = []  # JSONL prompt files of your own documents: more reference material than the bundled sets' ~58k tokens
concurrency = [1, 4]  # concurrency levels (requests in flight)
search = None  # adaptive search for each curve's crossing (SearchSpec settings such as budget_s), or None: the levels only
repeats = 2  # server restarts per arm; arm order alternates
panel_size = 10  # prompts every point sends, balanced over categories, in whole passes
work_floor_tokens = 400  # output tokens a point's steady window holds at least (sizes the passes)
warmup_requests = 2  # per server start, not measured
max_tokens = 64  # output tokens per request
temperature = 0.0  # sampling temperature (0 is greedy)
seed = 0  # sampling seed (per request: seed + prompt index)
kv_study = "cpu"  # ledgers/kv/<this>/: a draft model's KV pool for the sessions table (empty: this run's arms only)
kv_condition = "pool"  # the condition of that run whose pool matches this run's (CPU: 1 GiB)
conversation_runs = "ledgers/conversation/cpu"  # folder of conversation-replay runs (specnb sweep configs/cpu-conversation.toml): the newest is drawn (empty: skip)

# %%
import numpy as np
import pandas as pd

from specnb import paths
from specnb.analysis import kv_capacity
from specnb.figures import arm_colors, panels
from specnb.ledger import load_ledgers
from specnb.ledger.runs import RunError, find_run
from specnb.models.crossing import crossing
from specnb.notebooks import open_axis
from specnb.notebooks.axis import show

nb = open_axis("context", globals())  # a workload per length: specnb.sweep.study.context_workloads
ok = nb.df[nb.df.status == "ok"].copy()
# the prompt length each point really sent, as the engine counted it
ok["prompt_tokens_mean"] = ok.prompt_tokens / ok.num_requests
length = ok.groupby("workload").prompt_tokens_mean.mean()
table = nb.table.assign(prompt_tokens=nb.table.workload.map(length)).sort_values(["arm", "concurrency",
                                                                                   "prompt_tokens"])

# %% [markdown]
# ## Speedup against the prompt's length
#
# Left: the drafter's paired speedup at each length, a line per concurrency (95 %
# intervals over server starts and prompts). Middle: each arm's per-user decode speed, which
# falls as the context grows (every step reads more KV). Right: acceptance: how much of the
# answer the drafter found.

# %%
levels = sorted(table.concurrency.unique())
fig, axes = panels.new_figure(ncols=3, width=4.4, height=3.2)
ax = axes[0][0]
for i, c in enumerate(levels):
    for arm, t in table[table.concurrency == c].groupby("arm"):
        t = t.sort_values("prompt_tokens")
        line = ax.plot(t.prompt_tokens, t.speedup, marker="o", label=f"{arm}, c={c}", color=f"C{i}")[0]
        ax.fill_between(t.prompt_tokens, t.speedup_lo, t.speedup_hi, color=line.get_color(), alpha=0.15, lw=0)
        panels.fit_ratio_axis(ax, t.speedup, t.speedup_lo, t.speedup_hi)
ax.axhline(1.0, color="0.3", lw=0.9, ls=":")
ax.set_xscale("log", base=2)
ax.set_xlabel("prompt tokens (engine's count)")
ax.set_ylabel("speedup (on / off)")
ax.set_title("the drafter's gain by context length")
ax.legend(fontsize=7)
ax = axes[0][1]
speed = ok.groupby(["arm", "concurrency", "workload"], as_index=False).agg(
    decode=("per_user_decode_tok_s_mean", "mean"), prompt_tokens=("prompt_tokens_mean", "mean"))
colors = arm_colors(speed["arm"])
for (arm, c), t in speed.groupby(["arm", "concurrency"]):
    t = t.sort_values("prompt_tokens")
    ax.plot(t.prompt_tokens, t.decode, marker="o", color=colors[arm], ls="-" if c == levels[0] else "--",
            label=f"{arm}, c={c}")
ax.set_xscale("log", base=2)
ax.set_xlabel("prompt tokens")
ax.set_ylabel("per-user decode tok/s")
ax.set_title("each arm's decode speed")
ax.legend(fontsize=7)
ax = axes[0][2]
for i, c in enumerate(levels):
    t = table[table.concurrency == c].sort_values("prompt_tokens")
    ax.plot(t.prompt_tokens, t.acceptance_rate, marker="o", color=f"C{i}", label=f"c={c}")
ax.set_xscale("log", base=2)
ax.set_ylim(0, 1)
ax.set_xlabel("prompt tokens")
ax.set_ylabel("draft acceptance rate")
ax.set_title("what the drafter found")
ax.legend(fontsize=7)
for ax in axes[0]:  # the measured lengths, in tokens
    ax.set_xticks(sorted(length), [f"{v:,.0f}" for v in sorted(length)])
    ax.minorticks_off()
nb.save(fig, "context-length", caption="Speedup, per-user decode speed and acceptance against the prompt's length "
        "(the engine's count), per concurrency; 95 % intervals over server starts and prompts.")

# %%
table[["arm", "workload", "prompt_tokens", "concurrency", "n_repeats", "speedup", "speedup_lo", "speedup_hi",
       "per_user_speedup", "acceptance_rate", "acceptance_length"]].round(3)

# %% [markdown]
# ## Prefill against decode
#
# A request's time is its prefill (time to first token, which grows with the prompt) and its
# decode (which the drafter speeds up). Per length and level, each arm's mean time to first token
# and per-user decode speed (means over server starts), and their ratios drafter / baseline: the
# speedup above is what remains of the decode gain once the prefill is paid.

# %%
parts = ok.groupby(["workload", "concurrency", "arm"], as_index=False).agg(
    prompt_tokens=("prompt_tokens_mean", "mean"), ttft_ms=("mean_ttft_ms", "mean"),
    decode_tok_s=("per_user_decode_tok_s_mean", "mean"))
base = parts[parts.arm == nb.df.loc[~nb.df.speculative.astype(bool), "arm"].iloc[0]].set_index(
    ["workload", "concurrency"])
spec = parts[parts.arm.isin(list(drafters))].copy()
key = list(zip(spec.workload, spec.concurrency, strict=True))
spec["baseline_ttft_ms"] = base.reindex(key).ttft_ms.to_numpy()
spec["ttft_ratio"] = spec.ttft_ms / spec.baseline_ttft_ms
spec["decode_ratio"] = spec.decode_tok_s / base.reindex(key).decode_tok_s.to_numpy()
spec.sort_values(["arm", "concurrency", "prompt_tokens"])[
    ["arm", "concurrency", "prompt_tokens", "baseline_ttft_ms", "ttft_ms", "ttft_ratio", "decode_ratio"]].round(2)

# %% [markdown]
# ## Where the crossing sits in context
#
# Per concurrency, where the speedup curve crosses 1.0 along the prompt's length (interpolated in
# log2 of the length between the measured lengths), and whether the intervals at the two ends
# tell: a crossing between two lengths whose intervals both include 1.0 is not a finding.

# %%
lines = []
for (arm, c), t in table.groupby(["arm", "concurrency"]):
    t = t.sort_values("prompt_tokens")
    kind, at = crossing(list(t.prompt_tokens), list(t.speedup))
    lo, hi = t.iloc[0], t.iloc[-1]
    told = [f"{r.speedup:.2f}x [{r.speedup_lo:.2f}, {r.speedup_hi:.2f}] at {r.prompt_tokens:.0f}" for r in (lo, hi)]
    if kind in ("crosses", "rises"):
        where = f"{'crosses' if kind == 'crosses' else 'rises through'} 1.0 near **{at:.0f}** prompt tokens"
    else:
        where = f"stays {kind} 1.0 at every length measured"
    lines.append(f"- {arm}, c={c}: {where} ({told[0]}; {told[1]})")
show("\n".join(lines) or "- nothing measured")

# %% [markdown]
# ## KV sessions at each length, with and without a drafter
#
# Seed 000: under an edge memory budget 6.7 sessions of 256k context became 4.3 with the drafter
# attached. The pool each server reported at start (`kv_cache_tokens`) divided by one session's
# context (prompt plus `max_tokens`) at each length. n-gram keeps no weights or KV of its own, so
# its pool is the baseline's; a draft model's pool is read from the KV notebook's run (`kv_study`,
# the same 1 GiB pool on the CPU build) where there is one.

# %%
pools = [kv_capacity(nb.df)]
if kv_study:
    try:
        kv_df = load_ledgers(find_run("kv", kv_study, "", paths.resolve(ledger_root)))
    except RunError as exc:
        kv_df = None
        show(f"- {exc}")
    if kv_df is not None:
        if kv_condition and "condition" in kv_df:
            kv_df = kv_df[kv_df.condition == kv_condition]
        kv = kv_capacity(kv_df)
        if len(kv):
            pools.append(kv[kv.speculative.astype(bool)].assign(arm=lambda d: d.arm + f" (kv/{kv_study})"))
pool = pd.concat([p for p in pools if len(p)], ignore_index=True).drop_duplicates("arm")
rows = []
for n in sorted(length):
    per = n + max_tokens
    for r in pool.itertuples():
        rows.append({"prompt_tokens": round(n), "arm": r.arm, "kv_cache_tokens": r.kv_cache_tokens,
                     "sessions": r.kv_cache_tokens / per})
sessions = pd.DataFrame(rows)
sessions.pivot(index="prompt_tokens", columns="arm", values="sessions").round(1) if len(sessions) else sessions

# %% [markdown]
# ## The committed CPU run
#
# Read from the newest run the parameters name (above); the committed run and what it says are
# in README and `docs/answers.md`.

# %%
show(f"run `{paths.portable(str(nb.folder))}`: {len(ok)} usable points, lengths "
     + ", ".join(f"{v:.0f}" for v in sorted(length)) + f" prompt tokens; {np.unique(ok.repeat).size} server starts per arm")

# %% [markdown]
# ## Conversations with a warm prefix cache
#
# Seed 002's crossover replayed long agentic conversations whose history the prefix cache served,
# and reported the speedup on total tokens *and* on computed tokens (uncached prompt + output),
# because cached history changes the apparent effect. `specnb sweep configs/cpu-conversation.toml`
# replays the bundled `edit-chat-recorded` set (multi-step editing, later turns refer to and repeat
# earlier versions): each user sends a conversation's turns one after another with the whole
# history, the prefix cache emptied once per point and never between turns. Left: the share of
# each turn's prompt the cache served, per arm and users. Right: the drafter's speedup on output,
# total and computed tokens per level (paired per server start, bars: the range over starts).

# %%
from IPython.display import display

from specnb.analysis.conversation import conversation_gains, turn_table
from specnb.ledger import load_turns

conv_root = paths.resolve(conversation_runs) if conversation_runs else None
conv_runs = sorted(p for p in conv_root.iterdir() if p.is_dir()) if conv_root and conv_root.is_dir() else []
conv_folder = conv_runs[-1] if conv_runs else None
turns = gains = pd.DataFrame()
if conv_folder is not None:
    turns = turn_table(load_turns(conv_folder))
    gains = conversation_gains(load_ledgers(conv_folder))
if turns.empty or gains.empty:
    show(f"- no usable conversation run under {conversation_runs or '(none named)'}: this section is skipped")
else:
    fig, axes = panels.new_figure(ncols=2, width=4.8, height=3.2)
    ax = axes[0][0]
    colors = arm_colors(turns["arm"])
    for (arm, wl, users), t in turns.groupby(["arm", "workload", "users"]):
        ax.plot(t.turn, t.cached_share, marker="o", color=colors[arm], ls="-" if users == turns.users.min() else "--",
                label=f"{arm}, {wl}, {users} user(s)")
    ax.set_ylim(0, 1)
    ax.set_xticks(sorted(turns.turn.unique()))
    ax.set_xlabel("turn of the conversation")
    ax.set_ylabel("share of the prompt served from the prefix cache")
    ax.set_title("what the cache served, turn by turn")
    ax.legend(fontsize=7)
    ax = axes[0][1]
    kinds = [("output", "output tokens (steady window)"), ("total", "total: prompt + output (wall)"),
             ("computed", "computed: uncached prompt + output (wall)")]
    groups = list(gains.groupby(["users", "arm", "workload"]))
    width = 0.8 / len(kinds)
    for i, (_, g) in enumerate(groups):
        r = g.iloc[0]
        for j, (k, label) in enumerate(kinds):
            x = i + (j - 1) * width
            ax.bar(x, r[f"{k}_mean"], width, color=f"C{j}", label=label if i == 0 else None)
            ax.errorbar(x, r[f"{k}_mean"], yerr=[[r[f"{k}_mean"] - r[f"{k}_min"]], [r[f"{k}_max"] - r[f"{k}_mean"]]],
                        color="0.2", capsize=3, lw=1)
    ax.axhline(1.0, color="0.3", lw=0.9, ls=":")
    ax.set_xticks(range(len(groups)), [f"{arm}\n{users} user(s)" for (users, arm, _), _ in groups], fontsize=7)
    ax.set_ylabel("speedup (drafter / baseline)")
    ax.set_title("the drafter's gain, three ways")
    ax.legend(fontsize=7)
    nb.save(fig, "conversation-replay", sources=[conv_folder],
            caption="Conversation replay: the share of each turn's prompt the prefix cache served (left) and the "
                    "drafter's speedup on output, total and computed tokens (right; bars: range over server starts).")
    show(f"run `{paths.portable(str(conv_folder))}`")
    display(gains.round(3))

# %% [markdown]
# ## The report
#
# What `specnb report` prints for this run: the same pipeline and the same text (a test holds
# the executed notebook's copy against the command), for a reviewer who wants every number in one place.

# %%
nb.report()
