"""Setting up a machine: the CPU engine's repairs, the default model, and derived checkpoints.

- :mod:`~specnb.setup.machine`: ``python -m specnb.setup.machine engine|model|w8a8|w4a16|noise``
  (what ``make setup`` runs);
- :mod:`~specnb.setup.checkpoints`: INT8 W8A8, INT4 W4A16 and noise-draft checkpoints built
  locally from the bf16 model (torch and compressed-tensors: imported only when asked).
"""
