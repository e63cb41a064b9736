"""Interval bounds and the min/max normal form (luminal/shape/bounds.py): bounds always contain the
value (property test over random trees), and the folds that keep repeated clamps small."""

from __future__ import annotations

from hypothesis import assume, given

from luminal.shape import expr as E
from luminal.shape.expr import INF, bounds, maximum, minimum, num, var, z
from tests.shape.test_expr import build_raw, envs, trees, try_folded, value


@given(t=trees, env=envs)
def test_bounds_contain_the_value(t, env):
    """For the raw tree and its folded form, at every non-negative assignment where it is defined."""
    for e in (build_raw(t), try_folded(t)):
        assume(e is not None)
        v = value(e, env)
        if v is not None:
            lo, hi = bounds(e)
            assert lo <= v <= hi, f"{e} = {v} at {env}, outside {lo, hi}"


def test_bounds_of_common_forms():
    s, n = var("s"), var("n")
    assert bounds(s) == (0, float("inf")) and bounds(num(-3)) == (-3, -3)
    assert bounds(z % 4) == (0, 3) and bounds((z // 4) % 8) == (0, 7) and bounds(s - 1)[0] == -1
    assert bounds(minimum(s, 7)) == (0, 7) and bounds(maximum(s - 5, 2)) == (2, float("inf"))
    assert bounds(E.lt(s, n)) == (0, 1) and bounds(s * -2)[1] == 0


def test_min_max_normal_form():
    s, a, b, c = var("s"), var("a"), var("b"), var("c")
    assert maximum(s - 1, s - 2) is s - 1 and minimum(s - 1, s) is s - 1  # differ by a constant
    assert maximum(s, 0) is s and minimum(z % 4, 3) is z % 4 and maximum(s - 1, 0) is not s - 1  # by bounds
    assert maximum(maximum(a, b), c) is maximum(a, maximum(c, b)) is maximum(maximum(c, a), b)  # flat, sorted
    assert maximum(a, maximum(b, a)) is maximum(a, b)
    assert maximum(maximum(s - 1, 0) - 1, 0) is maximum(s - 2, 0)  # a constant moves into a nested max
    assert s - minimum(1, s) is maximum(s - 1, 0)  # the sum moves in where it cancels
    assert maximum(s, 0) - 1 is s - 1 and (maximum(s - 1, 0) - 1).op == "add"  # otherwise it stays outside
    assert maximum(s, INF) == INF and minimum(s, INF) is s


def test_repeated_clamps_stay_small():
    """y = y[1:] and y = y[:-1] on a symbolic dim, 64 times, by the slice-length formula."""
    d = var("s")
    for _ in range(64):
        d = maximum(d - minimum(1, d), 0)  # [1:]: start min(1, d), stop d
        d = maximum(maximum(minimum(d - 1, d), 0), 0)  # [:-1]: start 0, stop max(min(d - 1, d), 0)
    assert d is maximum(var("s") - 128, 0)


def test_div_mod_folds_need_every_term_non_negative():
    """(2x - m) // 2 with x >= 1, m in [0, 1]: the sum is >= 1 by its interval, but the fold
    (n*q + r) // n -> q + r // n needs r >= 0 itself; it must not fire here."""
    x, m = maximum(var("t"), 1), minimum(var("s"), 1)
    e = (2 * x - m) // 2
    for t in range(4):
        for s in range(3):
            env = {"t": t, "s": s}
            xv, mv = max(t, 1), min(s, 1)
            assert e.evaluate(env) == (2 * xv - mv) // 2 and ((2 * x - m) % 2).evaluate(env) == (2 * xv - mv) % 2
