"""One case per translated ATen op against eager torch (tests/torch/cases.py); the registry and the
cases must list the same ops, so an op cannot be added without a test."""

from __future__ import annotations

import zlib

import pytest

torch = pytest.importorskip("torch")

from luminal.torch import decompositions, registry  # noqa: E402
from tests.torch.cases import CASES, DTYPES, EXPORT_ONLY, Case, make_inputs  # noqa: E402
from tests.torch.util import assert_close, compile_fn  # noqa: E402

PARAMS = [pytest.param(case, dt, id=f"{case.name}-{dt}") for case in CASES for dt in case.dtypes]


def _eager(case: Case, args):
    ref = case.ref or case.fn
    with torch.no_grad():
        out = ref(*args)
    return out if isinstance(out, (tuple, list)) else (out,)


def _wide(x):
    return x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x


@pytest.mark.parametrize("case,dt", PARAMS)
def test_op(case: Case, dt: str):
    gen = torch.Generator().manual_seed(zlib.crc32(case.name.encode()))
    example = make_inputs(case, DTYPES[dt], case.sizes[0], gen)
    dynamic = [{i for i, d in enumerate(a.shape) if isinstance(d, str)} for a in case.args]
    prog = compile_fn(case.fn, example, dynamic)
    missing = set(case.ops) - prog.aten_ops
    assert not missing, f"{case.name}: the traced graph has no {sorted(missing)} (it has {sorted(prog.aten_ops)})"
    for sizes in case.sizes:
        args = make_inputs(case, DTYPES[dt], sizes, gen)
        got = prog(*args)
        want = _eager(case, args)
        wide = _eager(case, [_wide(a) for a in args]) if case.wide else want
        assert len(got) == len(want), f"{case.name}: {len(got)} outputs, eager has {len(want)}"
        for k, (g, w, ww) in enumerate(zip(got, want, wide, strict=True)):
            what = f"{case.name}[{dt}] output {k} at {sizes}"
            assert g.dtype == w.dtype, f"{what}: dtype {g.dtype}, eager {w.dtype}"
            assert_close(g, ww if ww.dtype.is_floating_point == g.dtype.is_floating_point else w, what, case.scale)
    assert prog.model.stats is not None


def test_every_registered_op_has_a_case():
    declared = {op for case in CASES for op in case.ops} | set(EXPORT_ONLY)
    ops = set(registry.load())
    assert not ops - declared, f"registered ATen ops without a test case: {sorted(ops - declared)}"
    assert not declared - ops, f"cases name ops that are not registered: {sorted(declared - ops)}"


def test_no_registered_op_is_decomposed_away():
    """A handler for an op the decomposition table removes would be dead code."""
    decomposed = {str(k) for k in decompositions().keys()}
    dead = sorted(set(registry.load()) & decomposed)
    assert not dead, f"these ops never reach the translator (decomposed first): {dead}"


def test_any_and_all_over_an_empty_axis_are_the_identities():
    """torch: any over nothing is False, all over nothing is True (an empty max would raise)."""
    x = torch.zeros(3, 0, dtype=torch.bool)
    fn = lambda a: (a.any(1), a.all(1), a.any())  # noqa: E731
    got = compile_fn(fn, [x])(x)
    for g, w in zip(got, fn(x), strict=True):
        assert g.dtype == w.dtype and torch.equal(g, w)


def test_leading_unit_axes_are_dropped_for_binary_ops():
    """A (1, 1, n) add / mul (a Hugging Face decode step's residual and gated product) is built as
    a (1, n) op viewed back to (1, 1, n) -- the shape the GEMV epilogue rules match -- with torch's
    values; broadcasting over a dropped axis keeps the full-rank op."""
    from luminal.hlir.elementwise import Add, Mul
    from luminal.torch.translate import translate
    from tests.torch.util import trace

    gen = torch.Generator().manual_seed(3)
    h, r, w = (torch.randn(1, 1, 8, generator=gen) for _ in range(3))
    tr = translate(trace(lambda h, r, w: (h + r) * w - r, (h, r, w)))
    ops = [n.op for n in tr.graph.nodes if isinstance(n.op, (Add, Mul))]
    shapes = {(type(op).__name__, tuple(int(d) for d in op.shape)) for op in ops}
    assert shapes == {("Add", (1, 8)), ("Mul", (1, 8))}, shapes
    prog = compile_fn(lambda h, r, w: (h + r) * w - r, (h, r, w))
    assert_close(prog(h, r, w)[0], (h + r) * w - r, "(h + r) * w - r")
    x, y = torch.randn(1, 1, 4, 8, generator=gen), torch.randn(3, 1, 8, generator=gen)  # broadcast over axis 1
    assert_close(compile_fn(lambda x, y: x + y, (x, y))(x, y)[0], x + y, "broadcast over a leading axis")


def test_rotate_half_cat_is_a_view_not_a_scatter():
    """RoPE's `cat(-x2, x1)` and `cat(f, f)` are translated as a (reversed / repeated) view times a
    sign, one elementwise expression, not a concat (zeros plus a Scatter per piece)."""

    def rope(x, f):
        h = x.shape[-1] // 2
        emb = torch.cat((f, f), -1)
        return x * emb.cos() + torch.cat((-x[..., h:], x[..., :h]), -1) * emb.sin()

    x, f = torch.randn(2, 3, 8), torch.randn(2, 3, 4)
    prog = compile_fn(rope, (x, f), [{0}, {0}])
    (got,) = prog(x, f)
    assert_close(got, rope(x, f), "rope")
    ops = prog.model.plans[0].op_counts()
    assert "Scatter" not in ops, ops
