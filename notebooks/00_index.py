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
# # specnb notebooks: which one answers which question
#
# Speculative decoding is a trade: a drafter spends spare compute (and KV cache) to emit
# several tokens per step of the target. Whether it pays depends on conditions, not on the
# feature. Each notebook measures one axis on a real vLLM server, with the drafter-on and
# drafter-off arms paired inside one run, and finds where the speedup crosses 1.0.
#
# | notebook | question | seed |
# | --- | --- | --- |
# | `01_concurrency` | Below which concurrency does the drafter pay (threshold with its interval, found by an adaptive search)? Which arm and level serve the most traffic under a latency target (frontier, goodput)? Latency against offered rate (open loop). | 000, 002 |
# | `02_quantization` | Does a quantized checkpoint keep the gain? Judge on final throughput, not the multiplier. | 000 |
# | `03_drafter` | n-gram or a trained drafter, on which kind of prompts (per category)? Where does a step's time go with each (step anatomy from the engine's profiler, `specnb anatomy`)? | 000, 002, 004 |
# | `04_temperature` | Does the drafter still pay at the temperature the service samples at? | 000 |
# | `05_kv` | How many KV seats does the drafter take; what happens under a small pool? | 000, 002 |
# | `06_parallelism` | Tensor vs data parallel x drafter: which lever is worth more? | 002 |
# | `07_calculator` | The seeds' formulas: acceptance length, best K, Amdahl, KV sessions, a step-cost model. | 000, 002, 004 |
# | `08_proposal` | Which K at which concurrency, how sure is that choice, and the schedule to deploy (vLLM's K per batch size)? | 002, 004 |
# | `09_policy` | Does the derived schedule reach the better of always-on and always-off at every concurrency? And the loop closed (`make tune`): the config re-derived round after round until it is verified to win. | 002 |
# | `10_serving` | Run it first: which serving config (compiled or eager, bf16 or fp32, the process layout; CUDA-graph and compile modes on a GPU) serves fastest here, and is fixing it worth more than the drafter? | 000 |
# | `11_context` | Does the crossing move with the traffic's shape? Speedup, prefill, decode and acceptance against the prompt's length (prompts grown with real text to a length in the target's tokens), the KV sessions each length leaves with and without a drafter, and conversations replayed turn by turn with a warm prefix cache (speedup on output, total and computed tokens). | 000, 002 |
# | `12_map` | The break-even map: what acceptance length pays at each load, per drafter kind and K (synthetic acceptance set on the real proposer, every cell a pair with its interval), the break-even line with its band, any drafter's speedup predicted from its measured acceptance, and the live endpoint judged against it (`specnb watch --map`, `specnb alerts --map`). | 002 |
#
# Every axis notebook has one `parameters` cell. `measure = False` (the default) reads the
# newest committed run under `ledgers/<axis>/<study>/`; `make measure-<axis>` runs it with
# `measure = True` and the CPU defaults (the notebook's own parameters cell), or with
# `PARAMS=notebooks/params/gpu/<axis>.yaml` on a GPU machine. `make figures` re-executes all of
# them on the committed ledgers and writes `figures/` and `notebooks/executed/`.
#
# Published numbers from the seeds are in `ledgers/published/` and are drawn in separate
# panels, never on the axes of a measurement.

# %% tags=["parameters"]
ledger_root = "ledgers"  # folder holding the <axis>/<study>/<run> tree

# %% [markdown]
# ## The runs the notebooks read now

# %%
import pandas as pd

from specnb import paths
from specnb.ledger import load_ledgers
from specnb.ledger.published import list_published
from specnb.ledger.runs import AXES

rows = []
for axis in AXES:
    for study_dir in sorted(p for p in (paths.resolve(ledger_root) / axis).glob("*") if p.is_dir()):
        runs = sorted(p for p in study_dir.iterdir() if p.is_dir())
        if not runs:
            continue
        df = load_ledgers(runs[-1])
        rows.append({"axis": axis, "study": study_dir.name, "newest run": runs[-1].name, "runs": len(runs),
                     "points": int((df.status == "ok").sum()) if len(df) else 0,
                     "failure records": int((df.status != "ok").sum()) if len(df) else 0,
                     "engine": df.engine_version.dropna().iloc[0] if len(df) and df.engine_version.notna().any() else None})
pd.DataFrame(rows)

# %%
pd.DataFrame({"published ledger": list_published()})
