"""torch's symbolic sizes as luminal dims, and solving dims from concrete shapes."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import sympy  # noqa: E402
from torch.utils._sympy.functions import FloorDiv, Max, Min, PythonMod  # noqa: E402

from luminal.errors import InputError, ShapeError  # noqa: E402
from luminal.shape.expr import dim  # noqa: E402
from luminal.torch.symbolic import solve_dims, to_expr  # noqa: E402

s, t = sympy.symbols("s t", integer=True, positive=True)


@pytest.mark.parametrize(
    "e,env,value",
    [
        (s, {"s": 5}, 5),
        (2 * s + 1, {"s": 5}, 11),
        (s * t - 3, {"s": 4, "t": 2}, 5),
        (FloorDiv(s, 2), {"s": 7}, 3),
        (PythonMod(s, 3), {"s": 7}, 1),
        (Max(s, 4), {"s": 2}, 4),
        (Min(s, 4, t), {"s": 6, "t": 5}, 4),
        (sympy.Integer(7), {}, 7),
    ],
)
def test_to_expr_evaluates_like_sympy(e, env, value):
    assert int(to_expr(e).evaluate(env)) == value
    assert int(e.subs({sympy.Symbol(k, integer=True, positive=True): v for k, v in env.items()})) == value


def test_to_expr_rejects_what_luminal_cannot_express():
    with pytest.raises(ShapeError):
        to_expr(sympy.sqrt(s))


def test_solve_bare_then_affine():
    s_, t_ = dim("s"), dim("t")
    assert solve_dims([(s_ * 2 + 1, 11), (t_ + s_, 9)]) == {"s": 5, "t": 4}
    assert solve_dims([(s_, 3), (s_ * 2, 6)]) == {"s": 3}


def test_solve_rejects_contradictions_and_unknowns():
    s_ = dim("s")
    with pytest.raises(InputError, match="does not fit"):
        solve_dims([(s_, 3), (s_ * 2, 7)])
    with pytest.raises(InputError):
        solve_dims([(s_ * 2, 7)])  # 7 is odd: no integer s
    with pytest.raises(InputError, match="cannot determine"):
        solve_dims([(s_ * dim("t"), 12)])
