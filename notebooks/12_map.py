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
# # 12 · The break-even map: what acceptance pays at each load?
#
# A drafter's speedup is what it accepts over what it costs, and the cost belongs to the
# hardware, the engine and the drafter's *kind* (its proposer and K), not to the traffic. vLLM
# sets acceptance by construction (`rejection_sample_method = "synthetic"` with
# `synthetic_acceptance_length`; on the CPU build through specnb's plugin): the proposer runs
# for real, only whether its tokens are accepted is set. A grid of such arms per kind (a *cell*
# per acceptance length and K), each paired with the same baseline at each level, traces the
# speedup against acceptance length; where it crosses 1.0 is the **break-even**: the least
# acceptance length a drafter of that kind must reach at that load. Any drafter of the kind is
# then placed on the map by its measured acceptance alone, before anyone trains or tunes it.
#
# Every cell is an ordinary pair (same prompts, same engine build, same sampling; the one
# interval of docs/statistics.md). The sweep checks each cell's measured acceptance length
# against the one set (a cell that does not match is recorded as a failure and said). With
# `acceptance_map.real`, each kind's own drafter runs beside its cells, and the map predicts its
# speedup from its measured acceptance.
#
# The CPU default (`make measure-map`): n-gram at K=4 and the EAGLE-3 head trained here at K=3,
# acceptance lengths 1.25 to 4.5, copy-style work at c=1 and 4, four server starts per arm: 10
# servers per start, about 39 minutes on two cores (the committed run: 29.5 min for three starts,
# 10 for the fourth); `-p` or a parameter file with `acceptance_map.real = False` leaves the two
# real drafters out (8 servers per start, about 31 minutes). `notebooks/params/gpu/map.yaml` is the
# same study for a GPU: the map is what a GPU user measures first (one baseline and a few cells
# answer for every drafter of a kind they might train).

# %% tags=["parameters"]
measure = False  # True: start vLLM and measure a new run before the analysis (minutes)
study = "cpu"  # ledgers/map/<study>/<run>/
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
drafters = {}  # more arms beside the map's (arm -> --speculative-config)
acceptance_map = {"kinds": {"ngram": {"method": "ngram", "prompt_lookup_max": 4, "num_speculative_tokens": 4}, "eagle3": {"method": "eagle3", "model": "drafters/SmolLM2-135M-Instruct-eagle3", "num_speculative_tokens": 3}}, "lengths": [1.25, 2.0, 3.0, 4.5], "real": True}  # drafter kinds (proposer config; its K or a list of K), acceptance lengths set (those above K + 1 are left out for that K), real: each kind's own drafter beside its cells
conditions = {}  # condition name -> what it changes; empty: one condition
workloads = ["copy"]  # bundled prompt sets or JSONL files
concurrency = [1, 4]  # concurrency levels (requests in flight)
search = None  # adaptive search for each curve's crossing (SearchSpec settings such as budget_s), or None: the levels only
repeats = 4  # server restarts per arm; arm order alternates (4: both orders equally often, the starts then give the interval 3 degrees of freedom; 3 starts give it 1)
panel_size = 10  # prompts every point sends, balanced over categories, in whole passes
work_floor_tokens = 400  # output tokens a point's steady window holds at least (sizes the passes)
warmup_requests = 2  # per server start, not measured
max_tokens = 64  # output tokens per request
temperature = 0.0  # sampling temperature (0 is greedy)
seed = 0  # sampling seed (per request: seed + prompt index)
drafter_study = "cpu"  # ledgers/drafter/<this>/: real drafters measured elsewhere, predicted through this map (empty: skip)

# %%
from specnb import paths
from specnb.analysis.breakeven import (break_even, break_even_lines, drafted_share, drafter_rows, map_cells, predict,
                                       prediction_lines)
from specnb.ledger import usable
from specnb.figures import breakeven as mapfig
from specnb.ledger import arm_configs
from specnb.notebooks import open_axis, show

nb = open_axis("map", globals())
configs = arm_configs(nb.df)
cells = map_cells(nb.table, configs)
be = break_even(cells)

# %% [markdown]
# ## Speedup against acceptance length, and the break-even
#
# Left: each kind and K, one line per level, each cell its measured acceptance length and paired
# speedup with the table's interval; stars are the kind's real drafter in the same run. Right:
# the break-even acceptance length against concurrency, the band where the cells' intervals
# cannot tell paying from costing; the real drafters' measured acceptance marked.

# %%
fig = mapfig.map_figure(cells, be)
nb.save(fig, "map-breakeven",
        caption="Paired speedup against measured acceptance length per drafter kind and K (lines: levels; "
                "stars: the kind's real drafter), and the break-even acceptance length against concurrency "
                "with its band (where the cells' intervals include 1.0).")
show("```\n" + "\n".join(break_even_lines(be)) + "\n```")

# %% [markdown]
# ## Any drafter from its acceptance
#
# The map's prediction of a real drafter's speedup: its kind's cells read at its own measured
# acceptance length (linear between the two cells around it; the band from the cells' interval
# ends). First the real drafters of this run, then those of the drafter notebook's run
# (`drafter_study`: other server starts and other work, free-form included, predicted through a
# map measured on copy-style work only). Where a prediction misses by more than 10 %, the line
# says how often each drafted: forced acceptance changes the text, and with it how often an n-gram
# proposer finds a match.

# %%
pr = predict(cells, drafted_share(usable(nb.df)))
show("```\n" + "\n".join(prediction_lines(pr) or ["no real drafter of a mapped kind in this run"]) + "\n```")
if drafter_study:
    from specnb.analysis import summarize
    from specnb.ledger import load_ledgers
    from specnb.ledger.runs import RunError, find_run

    try:
        other = find_run("drafter", drafter_study, "", paths.resolve(ledger_root))
    except RunError:
        other = None
    if other is None:
        show(f"No `{drafter_study}` run under {ledger_root}/drafter/: nothing more to predict.")
    else:
        odf = load_ledgers(other)
        pr_other = predict(cells, drafted_share(usable(odf)), real=drafter_rows(summarize(odf), arm_configs(odf)),
                           cell_shares=drafted_share(usable(nb.df)))
        show(f"Run `{paths.portable(str(other))}` through this map:\n\n```\n"
             + "\n".join(prediction_lines(pr_other) or ["no drafter of a mapped kind and K there"]) + "\n```")

# %% [markdown]
# ## The report
#
# What `specnb report` prints for this run: the same pipeline and the same text (a test holds
# the executed notebook's copy against the command).

# %%
nb.report()
