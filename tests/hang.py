"""Hang guards: how long the suite waits for something before it calls it hung.

A guard catches a hang; it never measures speed. Each is ``FACTOR`` (10) times a figure measured on
the project's machines, named here with where it was measured, so a machine ten times slower than
the slowest measured still passes, and a test that fails on a guard has found a hang, not a slow
hour. On an AVX2-only machine a figure measured there is used where there is one, else the
AVX-512 figure times ``AVX2_RATIO`` (the larger of the two passes' measured ratios, docs/timing.md).

Every wait of the suite on a clock, a child process or a server start takes its bound from
:func:`guard`; ``tests/unit/test_harness.py`` parses every test file (:func:`written_bounds`) and
fails on an elapsed-time comparison, a deadline, a child's timeout, a server's start timeout or a
test's timeout mark written as a number. A test whose behaviour *is* a timeout (a request that
must time out after 1 s against a stalled fake server) passes that timeout as its input, which
is not a wait of the suite's and is not checked here.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import FAMILY

FACTOR = 10
# AVX2-only machines' second pass over AVX-512's, 1.54 (docs/timing.md, "the AVX2 figure from
# same-content pairs": the larger of the measured first- and second-pass ratios)
AVX2_RATIO = 1.54


@dataclass(frozen=True)
class Figure:
    avx512_s: float
    where: str
    avx2_s: float | None = None  # measured on an AVX2-only machine, where it was

    def seconds(self, family: str = FAMILY) -> float:
        if family == "avx2":
            return self.avx2_s if self.avx2_s is not None else self.avx512_s * AVX2_RATIO
        return self.avx512_s


FIGURES: dict[str, Figure] = {
    "child_start": Figure(
        3.05, "the slowest child the tests start and wait for that does not import vLLM: a Python importing "
        "jupytext and specnb's report, 3.05 s with both cores busy (make test's first pass), 2-core AVX-512 EPYC, "
        "2026-12-05 (specnb's CLI refusing a file 1.05 s, make -n 1.65 s, the fake vLLM's start 0.22 s, "
        "Prometheus ready 0.16 s)"),
    "vllm_child": Figure(
        16.3, "a Python child importing vLLM's bench client, 16.3 s with both cores busy (the sampler repair's "
        "reproduction 8.8 s), 2-core AVX-512 EPYC, 2026-12-05"),
    "vllm_start": Figure(
        51.6, "the shared sweep's servers started side by side, launch to the last one ready: 51.6 s in the clean "
        "clone of 60153d9 (2026-12-05 21:20, a slow hour); 64.3 s on an AVX2-only EPYC (f0b25a2, 2026-12-03)",
        avx2_s=64.3),
    "test_phase": Figure(
        132.3, "the longest phase of any test (set-up, call or tear-down): test_categories_real's set-up, 132.3 s "
        "in the clean clone of 60153d9 (2026-12-05); test_fleet_real's set-up, 185 s on an AVX2-only EPYC "
        "(3a0f8b4, 2026-12-04)", avx2_s=185.0),
    "lab_start": Figure(
        6.45, "JupyterLab started and the notebook test's page open: test_lab's set-up, 6.45 s in the clean clone "
        "of 60153d9 (2026-12-05)"),
    "notebook": Figure(
        13.1, "the calculator notebook executed and its figures saved: test_calculator's longest case, 13.1 s in "
        "the clean clone of 60153d9 (2026-12-05)"),
    "widget_redraw": Figure(
        1.33, "a calculator slider's edit to its figure redrawn through the kernel: test_lab's slider test, 1.33 s "
        "alone on a 2-core AVX-512 EPYC (2026-12-06)"),
    "fake_sweep": Figure(
        9.82, "the longest unit test on fake vLLM servers: test_sequential_rounds, 9.82 s in the clean clone of "
        "60153d9 (2026-12-05)"),
    "make_figures": Figure(
        94.1, "make -B figures twice in a copy of the checkout: test_figures_stable, 94.1 s in the clean clone of "
        "60153d9 (2026-12-05)"),
    "bench_smoke": Figure(
        38.0, "make bench's smoke mode: test_bench_smoke, 38.0 s in the clean clone of 60153d9 (2026-12-05)"),
}


def guard(name: str, family: str = FAMILY) -> float:
    """Seconds to wait before calling the named kind of wait hung: FACTOR x its measured figure."""
    return FACTOR * FIGURES[name].seconds(family)


# ---------------------------------------------------------------- the check of the suite's sources

_CLOCKS = {"monotonic", "perf_counter", "time", "monotonic_ns", "perf_counter_ns"}
_WAITS = {"run", "wait", "communicate", "check_output", "check_call"}


def _clock_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    if isinstance(f, ast.Attribute):
        return f.attr in _CLOCKS and isinstance(f.value, ast.Name) and f.value.id == "time"
    return isinstance(f, ast.Name) and f.id in ("monotonic", "perf_counter")


def _number(node: ast.AST) -> bool:
    """A number written in the code, or arithmetic of numbers."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
    if isinstance(node, ast.UnaryOp):
        return _number(node.operand)
    if isinstance(node, ast.BinOp):
        return _number(node.left) and _number(node.right)
    return False


class _Bounds(ast.NodeVisitor):
    def __init__(self, path: Path, real: bool):
        self.path, self.real = path, real
        self.clocked: set[str] = set()  # names holding a clock reading, a deadline or an elapsed time
        self.found: list[str] = []

    def _clocky(self, node: ast.AST) -> bool:
        return any(_clock_call(n) or (isinstance(n, ast.Name) and n.id in self.clocked) for n in ast.walk(node))

    def _flag(self, node: ast.AST, what: str) -> None:
        self.found.append(f"{self.path}:{node.lineno}: {what}: {ast.unparse(node)[:160]}")

    def visit_FunctionDef(self, node):
        outer, self.clocked = self.clocked, set(self.clocked)
        self.generic_visit(node)
        self.clocked = outer

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Assign(self, node):
        self.generic_visit(node)
        # a rate (work over elapsed time: a share of a core) is not an elapsed time
        rate = isinstance(node.value, ast.BinOp) and isinstance(node.value.op, ast.Div)
        if self._clocky(node.value) and not rate:
            self.clocked |= {t.id for t in node.targets if isinstance(t, ast.Name)}

    def visit_Compare(self, node):
        self.generic_visit(node)
        sides = [node.left, *node.comparators]
        if any(self._clocky(s) for s in sides) and any(_number(s) for s in sides):
            self._flag(node, "an elapsed time held to a number")

    def visit_BinOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, (ast.Add, ast.Sub)) and (
                (_clock_call(node.left) and _number(node.right)) or (_clock_call(node.right) and _number(node.left))):
            self._flag(node, "a deadline a number of seconds away")

    def visit_Call(self, node):
        self.generic_visit(node)
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
        if name == "timeout" and "mark" in ast.unparse(f) and node.args and _number(node.args[0]):
            self._flag(node, "a test's timeout written as a number")
        for kw in node.keywords:
            if not _number(kw.value):
                continue
            if kw.arg == "timeout" and name in _WAITS:
                self._flag(node, "a child process's timeout written as a number")
            if kw.arg == "ready_timeout_s" and self.real:
                self._flag(node, "a real server's start timeout written as a number")


def written_bounds(paths) -> list[str]:
    """Every wait written as a number in these test files, one line each (file:line: what: code).
    A server's start timeout counts in the real-server and browser tests only (a fake server's
    start timeout is often the input a unit test checks)."""
    out: list[str] = []
    for p in paths:
        p = Path(p)
        v = _Bounds(p, real=bool({"integration", "browser"} & set(p.parts)))
        v.visit(ast.parse(p.read_text(), filename=str(p)))
        out += v.found
    return out
