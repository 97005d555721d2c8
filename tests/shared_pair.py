"""The session's shared vLLM pair and the server arguments every real-server test uses: a
harness module (not a conftest), so the integration fixtures, the root conftest's early launch
and the harness's own unit tests read one definition.

The pair is a plain server and an n-gram server (NGRAM), launched side by side; ``make test``'s
second pass launches it early, beside the browser tests (``launch_pair_early``), and the
integration conftest's session fixture takes it (or makes it) and stops it at the session's end.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any

from specnb import paths
from specnb.engine.kernels import machine_dtype
from specnb.engine.server import VllmServer
from specnb.sweep.runner import PROMPT_DETAILS_FLAG

MODEL = paths.MODELS / "SmolLM2-135M-Instruct"
K = 4
NGRAM = {"method": "ngram", "num_speculative_tokens": K, "prompt_lookup_max": 4}
# Every server of the suite serves in the dtype this CPU has a oneDNN kernel for: bf16 on AVX-512,
# fp32 on an AVX2-only CPU, where bf16 runs on torch's fallback linear (the baseline 2.1x slower at
# c=4 there, an n-gram arm up to 3.4x: docs/cpu.md). The tests check what specnb does, and the
# fallback made the AVX2 machines' suite 2.7x the AVX-512 ones'. The fallback route itself is
# tested through the probe (test_checkpoints_real.py) and the emulated quantization notebook.
# SPECNB_TEST_DTYPE=float32 runs the AVX2 machines' choice on any machine.
DTYPE = os.environ.get("SPECNB_TEST_DTYPE") or machine_dtype()
SERVER_ARGS = ["--enforce-eager", "--dtype", DTYPE, "--max-model-len", "2048"]


@dataclass
class Shared:
    """A server several test modules attach to (started once per session, stopped at its end)."""

    server: Any
    endpoint: Any


def shared_server(tmp_path_factory, name: str, speculative_config: dict | None,
                  env: dict[str, str] | None = None) -> VllmServer:
    # per-request cached prompt tokens in the usage (the conversation replay's per-turn counts)
    return VllmServer(str(MODEL), args=[*SERVER_ARGS, PROMPT_DETAILS_FLAG], speculative_config=speculative_config,
                      served_model_name="smol", env={"VLLM_CPU_KVCACHE_SPACE": "1", **(env or {})},
                      log_path=tmp_path_factory.mktemp(f"shared-{name}") / "server.log", ready_timeout_s=300)


def make_pair(tmp_path_factory) -> dict[str, VllmServer]:
    return {
        # vLLM's own three-process layout; every other server of the suite runs two (tests/conftest.py)
        "baseline": shared_server(tmp_path_factory, "baseline", None, env={"VLLM_ENABLE_V1_MULTIPROCESSING": "1"}),
        "ngram": shared_server(tmp_path_factory, "ngram", NGRAM),
    }


# the shared pair when launched before the first test (launch_pair_early), until the session fixture
# (tests/integration/conftest.py) takes it; "claimed" once the session fixture made or took its pair (no second one is launched then)
EARLY: dict[str, VllmServer] = {}
PAIR_CLAIMED: list[bool] = []


class PairLauncher(threading.Thread):
    """Launches the early pair off the test's thread (the first launch of a session may wait for
    the fork server's imports, specnb.engine.forkserver: some 10 s the browser test need not wait),
    then lives until the pair is stopped: a server launched afresh asks for SIGTERM when the thread
    that launched it ends (PR_SET_PDEATHSIG)."""

    def __init__(self, servers: dict[str, VllmServer]):
        super().__init__(name="shared-pair-launcher", daemon=True)
        self.servers = servers
        self.environ = dict(os.environ)  # taken here: the test's thread changes os.environ meanwhile
        self.launched = threading.Event()
        self.release = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for srv in self.servers.values():
                srv.launch(base_env=self.environ)
        except BaseException as exc:  # noqa: BLE001 - handed to whoever waits for the pair
            self.error = exc
        finally:
            self.launched.set()
        self.release.wait()

    def wait_launched(self) -> None:
        """Until both are launched; re-raises what stopped the launch."""
        self.launched.wait()
        if self.error is not None:
            raise self.error


LAUNCHER: list[PairLauncher] = []


def launch_pair_early(tmp_path_factory) -> None:
    """Launch the shared pair now, without waiting: ``make test``'s second pass calls it after
    collection when the browser tests run first (they start no vLLM), so the pair's start runs
    beside them instead of before the first real-server test that needs it."""
    if EARLY or PAIR_CLAIMED or not (MODEL / "config.json").exists():
        return
    EARLY.update(make_pair(tmp_path_factory))
    LAUNCHER.append(PairLauncher(dict(EARLY)))
    LAUNCHER[-1].start()


def take_early_pair() -> dict[str, VllmServer]:
    """The early pair, launched (waits for its launcher thread); empty when none was launched early
    or its launch failed (stopped then: the session makes its own)."""
    servers = dict(EARLY)
    EARLY.clear()
    if not servers:
        return {}
    try:
        LAUNCHER[-1].wait_launched()
    except Exception as exc:  # noqa: BLE001 - the fixture launches a pair of its own instead
        print(f"the shared vLLM pair was not launched early ({exc}); launching it now")
        for srv in servers.values():
            srv.stop()
        release_launcher()
        return {}
    return servers


def release_launcher() -> None:
    """The pair is stopped: its launcher thread may end."""
    while LAUNCHER:
        LAUNCHER.pop().release.set()


def stop_early_pair() -> None:
    """The session's end: stop a pair launched early that no test took (stopped by its ids)."""
    if LAUNCHER:
        LAUNCHER[-1].launched.wait()
    while EARLY:
        EARLY.popitem()[1].stop()
    release_launcher()
