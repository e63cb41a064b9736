"""Property tests of the unary ops against numpy: every dtype they are defined on, contiguous and
transposed inputs; all ops of a dtype share one graph, so one compile per dtype."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import luminal as lm
from tests.helpers import FLOATS, Arg, check_op

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


# name -> (numpy reference, input domain, tolerance scale)
UNARY = {
    "exp": (np.exp, "any", 1),
    "exp2": (np.exp2, "any", 1),
    "log": (np.log, "pos", 1),
    "log2": (np.log2, "pos", 1),
    "sin": (np.sin, "mid", 1),
    "cos": (np.cos, "mid", 2),
    "sqrt": (np.sqrt, "nonneg", 1),
    "rsqrt": (lambda x: 1 / np.sqrt(x), "pos", 1),
    "reciprocal": (np.reciprocal, "nonzero", 1),
    "square": (np.square, "any", 1),
    "abs": (np.abs, "any", 1),
    "sign": (np.sign, "any", 1),
    "relu": (lambda x: np.maximum(x, 0), "any", 1),
    "sigmoid": (_sigmoid, "wide", 1),
    "silu": (lambda x: x * _sigmoid(x), "wide", 2),
    "tanh": (np.tanh, "wide", 2),
    "gelu": (lambda x: 0.5 * x * (1 + _erf(x / np.sqrt(2))), "mid", 3),
    "gelu_tanh": (_gelu_tanh, "mid", 3),
    "softplus": (lambda x: np.logaddexp(0, x), "wide", 2),
}
INT_UNARY = ("abs", "sign", "square", "relu")
# one input per domain: all ops of a dtype share one graph (one compile), each reads its domain
DOMAINS = {"any": {}, "pos": {"lo": 0.01, "hi": 10}, "nonneg": {"lo": 0, "hi": 10}, "nonzero": {"min_abs": 0.05},
           "wide": {"lo": -12, "hi": 12}, "mid": {"lo": -6, "hi": 6}}  # fmt: skip


def _family(names):
    doms = sorted({UNARY[n][1] for n in names})

    def build(g, *xs):
        x = dict(zip(doms, xs))
        out = {}
        for n in names:
            v = x[UNARY[n][1]]
            out[n], out[f"{n}_t"] = getattr(v, n)(), getattr(v.T, n)()
        return out

    def ref(*xs):
        x = dict(zip(doms, xs))
        out = {}
        for n in names:
            v, fn = x[UNARY[n][1]], UNARY[n][0]
            out[n], out[f"{n}_t"] = fn(v), fn(v.T)
        return out

    tol = {k: UNARY[n][2] for n in names for k in (n, f"{n}_t")}
    return build, ref, doms, tol


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@given(data=st.data())
def test_unary_float(dtype, data):
    """Every unary op, on contiguous and transposed inputs of its domain."""
    build, ref, doms, tol = _family(sorted(UNARY))
    args = {d: Arg(("a", "b"), **DOMAINS[d]) for d in doms}
    check_op(data, "unary", build, ref, args, dtype, tol=tol)


@given(data=st.data())
def test_unary_int(data):
    """The unary ops defined on integers (exact)."""
    build, ref, _, _ = _family(INT_UNARY)
    check_op(data, "unary_int", build, ref, {"any": Arg(("a", "b"), lo=-1000, hi=1000)}, lm.i32)


@given(data=st.data())
def test_neg(data):
    dt = data.draw(st.sampled_from((lm.f32, lm.bf16, lm.i32)), label="dtype")
    check_op(data, "neg", lambda g, x: {"neg": -x, "neg_t": -(x.T)}, lambda x: {"neg": -x, "neg_t": -x.T},
             {"x": Arg(("a", 1, "c"), lo=-100, hi=100)}, dt)  # fmt: skip


@given(data=st.data())
def test_unary_of_broadcast_view(data):
    """A unary op reads a stride-0 view without materializing it first."""
    check_op(data, "exp_bcast", lambda g, x: x.expand("n", "a").exp(),
             lambda x, dims: np.broadcast_to(np.exp(x), (dims["n"], *x.shape)),
             {"x": Arg(("a",))}, lm.f32, extra_dims=("n",))  # fmt: skip


def test_unary_special_values():
    """NaN and inf go through like numpy (a few exact cases of each op)."""
    g = lm.Graph()
    x = g.tensor("x", (7,))
    names = ["exp", "log", "sqrt", "reciprocal", "abs", "relu", "sigmoid", "tanh", "silu", "softplus"]
    for n in names:
        getattr(x, n)().output(n)
    m = g.compile("reference")
    v = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0], np.float32)
    out = m.run({"x": v})
    with np.errstate(all="ignore"):
        want = {
            "exp": np.exp(v), "log": np.log(v), "sqrt": np.sqrt(v), "reciprocal": 1 / v, "abs": np.abs(v),
            "relu": np.where(np.isnan(v), np.nan, np.maximum(v, 0)), "sigmoid": _sigmoid(v), "tanh": np.tanh(v),
            "silu": v * _sigmoid(v), "softplus": np.logaddexp(0, v),
        }  # fmt: skip
    for n in names:
        np.testing.assert_allclose(out[n], want[n].astype(np.float32), rtol=1e-6, atol=1e-7, err_msg=n)


@pytest.mark.parametrize("dtype", (lm.f32, lm.f16, lm.bf16, lm.f64), ids=str)
def test_sign_special_values(dtype):
    """sign(NaN) is NaN like numpy (not 0), sign(±inf) = ±1, sign(±0) = 0."""
    g = lm.Graph()
    x = g.tensor("x", (7,), dtype)
    x.sign().output("s")
    v = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 2.5, -0.5]).astype(dtype.np)
    out = g.compile("reference").run({"x": v})["s"]
    np.testing.assert_array_equal(out.astype(np.float64), np.sign(v.astype(np.float64)))


WIDE16 = {  # op -> (numpy, domain): ranges where a 16-bit intermediate rounding costs a few ulps
    "exp": (np.exp, (4.0, 10.5)),
    "log": (np.log, (20.0, 60000.0)),
    "sigmoid": (_sigmoid, (-10.0, 10.0)),
    "tanh": (np.tanh, (-4.0, 4.0)),
    "silu": (lambda x: x * _sigmoid(x), (-10.0, 10.0)),
    "softplus": (lambda x: np.logaddexp(0, x), (-8.0, 10.0)),
    "gelu": (lambda x: 0.5 * x * (1 + _erf(x / np.sqrt(2))), (-5.0, 5.0)),
    "gelu_tanh": (_gelu_tanh, (-5.0, 5.0)),
    "cos": (np.cos, (-6.0, 6.0)),
    "rsqrt": (lambda x: 1 / np.sqrt(x), (0.01, 100.0)),
}


@pytest.mark.parametrize("dtype", (lm.f16, lm.bf16), ids=str)
@given(data=st.data())
def test_16bit_transcendentals_round_once(dtype, data):
    """16-bit composites compute in f32 and round once: within a quarter of the dtype's tolerance
    (a 16-bit exp2(x * log2 e) was 0.3% (f16) / 3.7% (bf16) off at x = 10)."""
    names = sorted(WIDE16)

    def build(g, *xs):
        out = {n: getattr(x, n)() for n, x in zip(names, xs, strict=True)}
        out["softmax"] = xs[0].softmax(-1)
        out["log_softmax"] = xs[0].log_softmax(-1)
        return out

    def ref(*xs):
        out = {n: WIDE16[n][0](x) for n, x in zip(names, xs, strict=True)}
        e = np.exp(xs[0] - xs[0].max(-1, keepdims=True))
        out["softmax"] = e / e.sum(-1, keepdims=True)
        out["log_softmax"] = np.log(out["softmax"])
        return out

    args = {n: Arg(("a", "b"), lo=WIDE16[n][1][0], hi=WIDE16[n][1][1]) for n in names}
    check_op(data, "wide16", build, ref, args, dtype, tol=0.25)


def test_f16_exp_issue_example():
    g = lm.Graph()
    g.tensor("x", (2,), lm.f16).exp().output("y")
    x = np.array([9.0625, 10], np.float16)
    out = g.compile("reference").run({"x": x})["y"]
    np.testing.assert_array_equal(out, np.exp(x.astype(np.float32)).astype(np.float16))  # [8624, 22032]
