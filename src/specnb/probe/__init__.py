"""The step-time probe: one engine step of a decoder shape (random weights, no vLLM) timed over
batch size, new tokens per sequence and cached length, on a GPU or a CPU (:mod:`.run`; the model
in :mod:`.model`, the shapes in :mod:`.shapes`). torch and the standard library only, so it runs
with a GPU machine's own python: ``PYTHONPATH=src python3 -m specnb.probe --device cuda``."""
