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
# # 8 · Proposal length: which K, at which concurrency?
#
# Seed 002 (PrimaLabs, *Speculative decoding under load*) writes throughput as
# MAL(alpha, K) / T(K): a longer draft raises the mean acceptance length
# MAL(alpha, K) = (1 - alpha^(K+1)) / (1 - alpha), and raises the step cost
# T(K) = t0 (1 + (v + d) K) with it; concurrency raises the overhead v + d, so the best K moves
# left as load grows. Seed 004 advises three to five tokens and says "more is not better".
# Nobody can deploy "the drafter pays below c~X"; an operator can deploy a K per batch size:
# vLLM's dynamic speculation schedule. This notebook measures K = 1, 2, 4, 8 against the same
# baseline at every concurrency, names the best K per level with its paired margin over the runner-up
# replicates in which it wins, compares the measured acceptance with seed 002's model, and
# derives the schedule (`specnb policy` writes it; notebook 9 measures it).

# %% tags=["parameters"]
measure = False  # True: start vLLM and measure a new run before the analysis (minutes)
study = "cpu"  # ledgers/proposal/<study>/<run>/
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
drafters = {"ngram-k1": {"method": "ngram", "num_speculative_tokens": 1, "prompt_lookup_max": 4}, "ngram-k2": {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 4}, "ngram-k4": {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}, "ngram-k8": {"method": "ngram", "num_speculative_tokens": 8, "prompt_lookup_max": 4}, "ngram-off": {"method": "ngram", "num_speculative_tokens": 8, "prompt_lookup_max": 4, "num_speculative_tokens_per_batch_size": [[1, 256, 0]]}}  # one arm per K, and the off arm: the drafter loaded, drafting off at every batch size (the cost of off inside a schedule)
conditions = {}  # condition name -> what it changes; empty: one condition
workloads = ["copy"]  # bundled prompt sets or JSONL files (copy-style work: where n-gram drafting pays)
concurrency = [1, 2, 4, 8]  # concurrency levels (requests in flight)
search = None  # adaptive search for the crossing (a dict of SearchSpec settings), or None: the levels only
repeats = 3  # server restarts per arm; arm order alternates
panel_size = 10  # prompts every point sends, balanced over categories, in whole passes
work_floor_tokens = 400  # output tokens a point's steady window holds at least (sizes the passes)
warmup_requests = 2  # per server start, not measured
max_tokens = 64  # output tokens per request
temperature = 0.0  # sampling temperature (0 is greedy)
seed = 0  # sampling seed (per request: seed + prompt index)
rule = "lower_bound"  # schedule rule: keep the best K or none (the off arm, else the baseline), whichever has the higher lower bound ("point": the estimates)

# %%
from IPython.display import Markdown, display

from specnb.analysis.proposal import acceptance_vs_model, k_choice, k_model
from specnb.analysis.schedule import choose_k, derive_policies, format_policy
from specnb.figures import arm_colors, panels
from specnb.notebooks import open_axis

nb = open_axis("proposal", globals())
table = nb.table

# %% [markdown]
# ## Speedup of each K against concurrency
#
# Every K is paired with the same baseline (same prompts, engine build and sampling); bands are
# the one interval of each level (95 %, over server starts and the panel's prompts: docs/statistics.md).

# %%
colors = arm_colors(table["arm"])
fig, axes = panels.new_figure(ncols=table.workload.nunique(), width=5.0, height=3.4, sharey=True)
for ax, (wl, g) in zip(axes[0], table.groupby("workload", sort=True)):
    panels.speedup_curves(ax, g, colors=colors, title=wl)
axes[0][0].legend(loc="best")
nb.save(fig, "proposal-speedup", caption="Paired speedup of n-gram drafting with K = 1, 2, 4, 8 against concurrency; "
        "band: 95 % interval over server starts and the panel's prompts.")

# %% [markdown]
# ## The best K per level, and how sure that choice is
#
# Every arm of a workload ran in the same server starts on the same prompts, so the best K can be
# set against the runner-up (the second-best K, or the baseline) repeat by repeat: their paired
# ratio with its 95 % interval says how sure the choice is (a lower end above 1.0: the best K is
# known to beat the runner-up).

# %%
choice = k_choice(table.attrs["speedups"], nb.df)
choice["margin_lo_shown"] = choice["margin_lo"].where(choice["best"])
fig, axes = panels.new_figure(ncols=2, width=4.6, height=3.0)
for ax, (value, center, cmap, title, fmt) in zip(axes[0], [
        ("speedup", 1.0, "RdBu", "paired speedup", "{:.2f}"),
        ("margin_lo_shown", 1.0, "RdBu", "the best K over the runner-up: lower bound", "{:.2f}")]):
    piv = choice.pivot_table(index="k", columns="concurrency", values=value, sort=True)
    panels.heatmap(ax, piv.sort_index(ascending=False), center=center, cmap=cmap, fmt=fmt, title=title,
                   cbar_label="on / off" if value == "speedup" else "best / runner-up")
    ax.set(xlabel="concurrency", ylabel="K (0 = no drafter)")
nb.save(fig, "proposal-best-k", caption="Left: paired speedup per K and concurrency. Right: at each concurrency, the "
        "best K's paired ratio over the runner-up (the second-best K, or the baseline), the lower end of its 95 % "
        "interval: above 1.0 the choice is known.")
choice[choice.best][["workload", "concurrency", "arm", "k", "speedup", "speedup_lo", "speedup_hi", "runner_up", "margin",
                     "margin_lo", "margin_hi"]].round(3)

# %% [markdown]
# ## Measured acceptance against MAL(alpha, K), and the step cost T(K)
#
# alpha is fitted to the per-position acceptance (vLLM's accepted at position i / drafts; under
# the model position i is accepted with probability alpha^(i+1)). The step cost each K implied
# is tokens per step / speedup = T(K) / t0; (T(K) / t0 - 1) / K is the overhead per proposed
# token, v + d in seed 002's notation, and seed 002's best K for it sits beside the measured one.
# n-gram drafts only when it finds a match: its acceptance counts only the steps that drafted.

# %%
model_table = k_model(choice, nb.df)
display(Markdown("```\n" + acceptance_vs_model(model_table) + "\n```"))
fig, axes = panels.new_figure(ncols=2, width=4.4, height=3.2)
for (c, g) in model_table.groupby("concurrency", sort=True):
    g = g.sort_values("k")
    axes[0][0].plot(g.k, g.mal_measured, marker="o", ms=4, label=f"c={c} measured")
    axes[0][1].plot(g.k, g.step_cost, marker="o", ms=4, label=f"c={c}")
ks = sorted(model_table.k.unique())
alpha = model_table.alpha.dropna().median()
axes[0][0].plot(ks, [model_table.mal_model[model_table.k == k].mean() for k in ks], "k--", lw=1.2,
                label=f"MAL(alpha, K), alpha {alpha:.2f}")
axes[0][0].set(xlabel="K", ylabel="mean acceptance length", title="acceptance length: measured vs model", xticks=ks)
axes[0][1].set(xlabel="K", ylabel="T(K) / t0 (tokens per step / speedup)", title="step cost each K implied", xticks=ks)
axes[0][0].legend(fontsize=7)
axes[0][1].legend(fontsize=7)
nb.save(fig, "proposal-acceptance-and-step-cost", caption="Left: measured acceptance length per K against "
        "MAL(alpha, K) with alpha fitted to per-position acceptance. Right: the step cost each K implied.")
model_table.round(3)

# %% [markdown]
# ## The schedule to deploy
#
# The rule in the parameters cell picks K per measured concurrency; boundaries between two
# levels whose K differ sit at their geometric mean. Batch size is not concurrency: vLLM counts
# every scheduled request, prefills included, so a closed loop at concurrency c runs batches of
# at most c; notebook 9 measures the schedule beside always-on and always-off, including at the
# boundary.

# %%
for wl in sorted(set(nb.df.workload)):
    for label, config, chosen in derive_policies(nb.df, wl, rule=rule):  # one schedule per drafter method
        display(Markdown(f"**{label}**\n```\n" + format_policy(config, chosen, rule) + "\n```"))
choose_k(choice[choice.workload == sorted(set(nb.df.workload))[0]], rule)

# %% [markdown]
# ## How to read this
#
# On 2 CPU cores a 135M model is compute-bound from the first request, so the CPU curves show
# the method, not GPU numbers: what carries over is how the best K moves with concurrency and
# how sure each choice is. The GPU parameter file sweeps K = 1 to 8 for n-gram and EAGLE-3 on
# Llama-3.1-8B.

# %% [markdown]
# ## The report
#
# What `specnb report` prints for this run: the same pipeline and the same text (a test holds
# the executed notebook's copy against the command), for a reviewer who wants every number in one place.

# %%
nb.report()
