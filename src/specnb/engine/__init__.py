"""The engine side: what talks to a vLLM server.

- :mod:`~specnb.engine.server`: start, watch and stop a server (or attach to one);
- :mod:`~specnb.engine.vllm`: what the installed vLLM is and can do, and the environment
  a launched server gets;
- :mod:`~specnb.engine.loadgen`: streaming OpenAI-compatible load at fixed concurrency;
- :mod:`~specnb.engine.wire`: the load's HTTP/1.1 streams on raw connections, every read timed;
- :mod:`~specnb.engine.clients`: one point's load over several client processes, one clock;
- :mod:`~specnb.engine.metrics`: Prometheus ``/metrics`` snapshots, deltas and gauges;
- :mod:`~specnb.engine.hostload`: how busy the rest of the machine was during a point;
- :mod:`~specnb.engine.startup`: where a server's start-up time went, read from its log;
- :mod:`~specnb.engine.plugins`: vLLM plugins specnb ships (synthetic acceptance on CPU);
- :mod:`~specnb.engine.releases`: which vLLM release has what, and the floor a sweep needs;
- :mod:`~specnb.engine.collect`: served responses for prompts that have none (``specnb mix
  --serve``), through the official ``openai`` client.

Nothing on the analysis side imports from here: figures rebuild from ledgers alone.
"""
