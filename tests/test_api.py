"""The public API contract of DESIGN.md: the README example, symbolic shapes, dtype spellings,
operators, persistent inputs, compile once / run at many sizes, empty (size-0) dims."""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
from luminal.shape.expr import Expression

PUBLIC_METHODS = """exp exp2 log log2 sin cos sqrt rsqrt reciprocal square abs sign relu sigmoid silu tanh gelu
gelu_tanh softplus sum max min mean var std prod argmax argmin softmax log_softmax cumsum topk reshape permute transpose
unsqueeze squeeze flatten expand pad repeat gather take_along_axis scatter cast astype maximum minimum clip
pow where matmul layer_norm rms_norm tril triu eq ne output persist __getitem__ __add__ __sub__ __mul__
__truediv__ __mod__ __neg__ __matmul__ __lt__ __le__ __gt__ __ge__ __and__ __or__ __invert__ __radd__ __rsub__
__rmul__ __rtruediv__""".split()


def test_every_public_op_exists():
    missing = [m for m in PUBLIC_METHODS if not callable(getattr(lm.GraphTensor, m, None))]
    assert not missing
    for fn in ("concat", "stack", "where"):
        assert callable(getattr(lm, fn))
    for fn in ("arange", "full", "zeros", "ones", "constant", "tensor", "compile"):
        assert callable(getattr(lm.Graph, fn))


def test_design_example():
    g = lm.Graph()
    x = g.tensor("x", ("s", 8))
    w = g.tensor("w", (8, 4)).persist()
    y = (x @ w).relu().sum(axis=1).output("y")
    assert [str(d) for d in y.shape] == ["s"] and y.dtype == lm.f32 and y.ndim == 1
    model = g.compile(backend="reference")
    rng = np.random.default_rng(0)
    w_np = rng.standard_normal((8, 4)).astype(np.float32)
    for s in (3, 5, 1):
        xv = rng.standard_normal((s, 8)).astype(np.float32)
        out = model.run({"x": xv, "w": w_np} if s == 3 else {"x": xv})
        assert out["y"].shape == (s,) and out["y"].dtype == np.float32
        np.testing.assert_allclose(out["y"], np.maximum(xv @ w_np, 0).sum(1), rtol=1e-5, atol=1e-5)
    assert isinstance(model.stats, dict) and model.stats


def test_auto_backend_runs_without_gpu():
    g = lm.Graph()
    (g.tensor("x", (2,)) * 3).output("y")
    assert g.compile().run({"x": np.ones(2, np.float32)})["y"].tolist() == [3, 3]


def test_explicit_dims_and_default_output_names():
    g = lm.Graph()
    a = g.arange("n")
    a.output()
    (a * 2).output()
    m = g.compile("reference")
    out = m.run({}, dims={"n": 4})
    assert sorted(out) == ["out0", "out1"] and out["out1"].tolist() == [0, 2, 4, 6]


@pytest.mark.parametrize("spelling", [lm.bf16, "bf16", "bfloat16", np.float16, "f16", np.dtype("int32"), "i8", "u8",
                                      lm.f8e4m3, "f8e5m2", "bool", np.bool_, "f64", lm.i64])  # fmt: skip
def test_dtype_spellings(spelling):
    g = lm.Graph()
    x = g.tensor("x", (2,), dtype=spelling)
    assert x.dtype == lm.to_dtype(spelling) and isinstance(x.dtype, lm.DType)
    x.output("y")
    v = np.zeros(2, x.dtype.np)
    assert g.compile("reference").run({"x": v})["y"].dtype == x.dtype.np


def test_shapes_are_symbolic_expressions():
    g = lm.Graph()
    x = g.tensor("x", ("s", 4, "h"))
    assert all(isinstance(d, Expression) for d in x.shape)
    assert x.shape[0] == "s" and x.shape[1] == 4
    y = x.reshape("s", -1)
    assert str(y.shape[1]) in ("4*h", "h*4")
    assert x[1:].shape[0].evaluate({"s": 5}) == 4


def test_tensors_are_dict_keys():
    """Hashing is identity; `==` itself raises (tests/test_tensor.py), dict lookups never call it."""
    g = lm.Graph()
    x, y = g.tensor("x", (2,)), g.tensor("y", (2,))
    d = {x: 1, y: 2}
    assert d[x] == 1 and d[y] == 2
    assert x.eq(y).dtype == lm.bool


def test_python_scalars_either_side():
    g = lm.Graph()
    x = g.tensor("x", (3,))
    for name, t in {"a": 2 - x, "b": 2 / x, "c": 2 * x + 1, "d": x**2, "e": 1 < x, "f": 3 % x}.items():
        t.output(name)
    v = np.array([1, 2, 4], np.float32)
    out = g.compile("reference").run({"x": v})
    np.testing.assert_allclose(out["a"], 2 - v)
    np.testing.assert_allclose(out["b"], 2 / v)
    np.testing.assert_allclose(out["c"], 2 * v + 1)
    np.testing.assert_allclose(out["d"], v**2)
    assert out["e"].tolist() == [False, True, True]
    np.testing.assert_allclose(out["f"], np.fmod(3, v))


def test_numpy_scalars_either_side():
    """numpy scalars on the left defer to the tensor's reflected operator (numpy must not iterate the tensor)."""
    g = lm.Graph()
    x = g.tensor("x", (3,))
    outs = {"mul": np.float32(2.0) * x, "add": np.float64(1.5) + x, "sub": np.int64(3) - x, "div": np.float32(2) / x,
            "lt": np.float32(1.5) < x, "pow": x ** np.int32(2), "rmul": x * np.float32(3)}  # fmt: skip
    for name, t in outs.items():
        assert isinstance(t, lm.GraphTensor), name
        t.output(name)
    v = np.array([1, 2, 4], np.float32)
    out = g.compile("reference").run({"x": v})
    for name, want in {"mul": 2 * v, "add": 1.5 + v, "sub": 3 - v, "div": 2 / v, "pow": v**2, "rmul": v * 3}.items():
        np.testing.assert_allclose(out[name], want, rtol=2e-6, err_msg=name)
    assert out["lt"].tolist() == [False, True, True]
    with pytest.raises(lm.DTypeError, match="ndarray"):  # an array operand is not a scalar: a clear error
        _ = np.ones(3, np.float32) * x


def test_persistent_inputs_stay_bound_and_can_be_replaced():
    g = lm.Graph()
    x = g.tensor("x", (2,))
    w = g.tensor("w", (2,)).persist()
    (x * w).output("y")
    m = g.compile("reference")
    one = np.ones(2, np.float32)
    assert m.run({"x": one, "w": np.full(2, 3, np.float32)})["y"].tolist() == [3, 3]
    assert m.run({"x": one})["y"].tolist() == [3, 3]
    assert m.run({"x": one, "w": np.full(2, 5, np.float32)})["y"].tolist() == [5, 5]
    assert m.run({"x": one})["y"].tolist() == [5, 5]


def test_outputs_are_fresh_arrays():
    """An output does not alias an input buffer (changing it changes nothing)."""
    g = lm.Graph()
    x = g.tensor("x", (3,))
    x.output("same")
    v = np.arange(3, dtype=np.float32)
    out = g.compile("reference").run({"x": v})["same"]
    out[0] = 99
    assert v[0] == 0


def test_size_zero_dims():
    """Empty tensors flow through every op family, sized 0 at run time or statically (`x[:, 3:]` of a
    (2, 3) tensor, then pad / concat / cumsum of it); empty sums are 0, empty means NaN."""
    g = lm.Graph()
    x, w = g.tensor("x", ("a", "b")), g.tensor("w", ("b", 3))
    e = g.tensor("f", (2, 3))[:, 3:]  # statically (2, 0)
    outs = {"exp": x.exp(), "add": x + 1, "sum0": x.sum(axis=0), "sum1": x.sum(axis=1), "mm": x @ w,
            "cumsum": x.cumsum(), "slice": x[1:], "pad": x.pad(((1, 0), (0, 0))), "cat": lm.concat([x, x]), "t": x.T,
            "mean1": x.mean(axis=1), "e": e, "e_pad": e.pad(((0, 0), (1, 1)), value=3.0),
            "e_cat": lm.concat([e, e], axis=1), "e_cumsum": e.cumsum(), "e_sum": e.sum(axis=1),
            "e_mean": e.mean(axis=1), "e_flat": e.T.reshape(-1), "e_mm": e @ g.tensor("v", (0, 4))}  # fmt: skip
    for k, t in outs.items():
        t.output(k)
    m = g.compile("reference")
    fv = np.ones((2, 3), np.float32)
    for a, b in ((0, 3), (2, 0)):
        xv, wv = np.ones((a, b), np.float32), np.ones((b, 3), np.float32)
        out = m.run({"x": xv, "w": wv, "f": fv, "v": np.ones((0, 4), np.float32)})
        assert out["exp"].shape == (a, b) and out["sum0"].tolist() == [float(a)] * b
        assert out["sum1"].tolist() == [float(b)] * a
        np.testing.assert_array_equal(out["mm"], xv @ wv)
        assert out["slice"].shape == (max(a - 1, 0), b) and out["pad"].shape == (a + 1, b)
        assert out["cat"].shape == (2 * a, b) and out["t"].shape == (b, a) and out["cumsum"].shape == (a, b)
        assert out["mean1"].shape == (a,) and np.isnan(out["mean1"]).all()
        assert out["e"].shape == (2, 0) and out["e_pad"].tolist() == [[3.0, 3.0]] * 2 and out["e_cat"].shape == (2, 0)
        assert out["e_cumsum"].shape == (2, 0) and out["e_sum"].tolist() == [0.0, 0.0] and out["e_flat"].shape == (0,)
        assert np.isnan(out["e_mean"]).all() and out["e_mm"].tolist() == [[0.0] * 4] * 2


def test_max_over_an_empty_axis_raises():
    """max / min / argmax / softmax over an empty axis have no value: ShapeError (like numpy), at
    build time for a static axis, at run time for a symbolic one; a non-empty run still works."""
    for op in ("max", "min", "argmax", "softmax"):
        with pytest.raises(lm.ShapeError, match="max/min over an axis of size 0"):
            getattr(lm.Graph().tensor("e", (2, 0)), op)(1)
    g = lm.Graph()
    x = g.tensor("x", ("a", "b"))
    x.max(axis=1).output("m")
    (x.sum(axis=1) + 1).output("s")
    m = g.compile("reference")
    assert m.run({"x": np.ones((2, 3), np.float32)})["m"].tolist() == [1.0, 1.0]
    assert m.run({"x": np.ones((0, 3), np.float32)})["m"].shape == (0,)  # empty rows are fine: nothing is reduced
    with pytest.raises(lm.ShapeError, match=r"max/min over an axis of length b = 0 \(at b=0\)"):
        m.run({"x": np.ones((2, 0), np.float32)})


def test_one_plan_serves_every_size():
    """Compile once with symbolic dims; run at several sizes; same answers as numpy each time."""
    g = lm.Graph()
    x = g.tensor("x", ("s", "d"))
    (x.softmax(-1) @ x.T).output("y")
    m = g.compile("reference")
    rng = np.random.default_rng(1)
    for s, d in ((1, 1), (4, 3), (7, 2)):
        xv = rng.standard_normal((s, d)).astype(np.float32)
        e = np.exp(xv - xv.max(-1, keepdims=True))
        np.testing.assert_allclose(m.run({"x": xv})["y"], (e / e.sum(-1, keepdims=True)) @ xv.T, rtol=1e-5, atol=1e-6)


def test_every_op_is_made_of_primitives():
    """A graph using every public op holds only HLIR primitives (+ Input/Output/Constant)."""
    from luminal.hlir import HLIR_OPS

    g = lm.Graph()
    x, i, b = g.tensor("x", ("s", 4)), g.tensor("i", (3,), lm.i32), g.tensor("b", ("s", 4), lm.bool)
    unary = "exp exp2 log log2 sin cos sqrt rsqrt reciprocal square abs sign relu sigmoid silu tanh gelu gelu_tanh"
    outs = [getattr(x, n)() for n in (*unary.split(), "softplus")]
    outs += [x.sum(0), x.max(), x.min(1), x.mean(), x.var(), x.std(), x.prod(), x.argmax(), x.argmin(0), x.softmax(),
             x.log_softmax(), x.cumsum(), x.topk(2)[0], x.reshape(-1), x.permute(1, 0), x.transpose(), x.unsqueeze(0),
             x.squeeze(), x.flatten(), x.expand(2, "s", 4), x[1:, ::-2], x.pad(((1, 0), (0, 1))), x.repeat(2, 1),
             x.gather(i, 1), x.take_along_axis(i.reshape(1, 3), 1), x.scatter(i, 0.5), x.cast(lm.bf16),
             x.maximum(1), x.minimum(x), x.clip(0, 1), x.pow(1.5), x**2, x.where(b, 0), x @ x.T, x.layer_norm(),
             x.rms_norm(), x.tril(), x.triu(1), lm.concat([x, x]), lm.stack([x, x]), lm.where(b, x, 1.0),
             x + 1, x - x, x * 2, x / 3, x // 2, x % 2, -x, x < 1, x <= 1, x > 1, x >= 1, x.eq(1), x.ne(1),
             b & b, b | b, ~b, g.arange("s"), g.full(("s",), 2.0), g.zeros((2,)), g.ones((2,)),
             g.constant(3)]  # fmt: skip
    for k, t in enumerate(outs):
        t.output(f"o{k}")
    kinds = {type(n.op) for n in g.nodes}
    assert kinds <= set(HLIR_OPS), kinds - set(HLIR_OPS)


def test_non_contiguous_and_readonly_inputs():
    g = lm.Graph()
    x = g.tensor("x", ("a", "b"))
    (x * 2).output("y")
    m = g.compile("reference")
    v = np.arange(12, dtype=np.float32).reshape(4, 3).T  # Fortran-ordered view
    np.testing.assert_array_equal(m.run({"x": v})["y"], v * 2)
    r = np.arange(6, dtype=np.float32).reshape(2, 3)
    r.setflags(write=False)
    np.testing.assert_array_equal(m.run({"x": r})["y"], r * 2)
