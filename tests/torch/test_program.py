"""luminal/torch/program.py's per-call host work: the dims of a call are solved once per distinct
argument signature (shapes, devices, SymInt values), not per call -- solving every weight's shape
each decode step cost ~3 ms of host time a token on a 16-layer HF llama (session 7) -- and a
signature that fails is refused every time, never remembered as good."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from luminal.errors import InputError  # noqa: E402
from luminal.torch import program  # noqa: E402
from tests.torch.util import assert_close, compile_fn  # noqa: E402


def test_dims_are_solved_once_per_argument_signature(monkeypatch):
    calls = []
    solve = program.solve_dims
    monkeypatch.setattr(program, "solve_dims", lambda pairs, *a: calls.append(1) or solve(pairs, *a))
    w = torch.randn(4, 3)

    def f(x, w):
        return (x @ w).relu()

    prog = compile_fn(f, (torch.randn(5, 4), w), dynamic=[{0}, set()])
    for n in (5, 5, 5, 7, 7, 5):
        x = torch.randn(n, 4)
        assert_close(prog(x, w)[0], f(x, w), f"rows {n}")
    assert len(calls) == 2, calls  # one per distinct shape (5, then 7), not one per call
    for _ in range(2):  # a shape the graph cannot take: refused each time
        with pytest.raises(InputError):
            prog(torch.randn(5, 3), w)
    assert len(calls) == 4
