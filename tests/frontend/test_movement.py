"""Property tests of the movement ops (views, and the Iota+Gather/Scatter ones) against numpy:
reshape permute transpose unsqueeze squeeze flatten expand [...] pad repeat, on symbolic dims."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import luminal as lm
from tests.helpers import Arg, check_op

DTYPES = (lm.f32, lm.bf16, lm.i32)
X = ("a", "b", "c")


def _case(key, build, ref, args, dtype, data, **kw):
    check_op(data, key, build, ref, args, dtype, **kw)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@given(data=st.data())
def test_reshape(dtype, data):
    def build(g, x):
        return {"split": x.reshape("a", "b", 2, 3), "merge": x.reshape("a", -1), "flat": x.reshape(-1),
                "tuple": x.reshape(("a", "b", 3, 2)), "lead": x.reshape(-1, 6),
                "t_flat": x.permute(2, 0, 1).reshape(-1),
                "t_merge": x.transpose(0, 1).reshape("b", -1), "t_split": x.transpose(0, 1).reshape("b", "a", 3, 2),
                "ones": x.reshape(1, "a", "b", 1, 6)}  # fmt: skip

    def ref(x):
        a, b = x.shape[:2]
        return {"split": x.reshape(a, b, 2, 3), "merge": x.reshape(a, -1), "flat": x.reshape(-1),
                "tuple": x.reshape(a, b, 3, 2), "lead": x.reshape(-1, 6), "t_flat": x.transpose(2, 0, 1).reshape(-1),
                "t_merge": x.transpose(1, 0, 2).reshape(b, -1), "t_split": x.transpose(1, 0, 2).reshape(b, a, 3, 2),
                "ones": x.reshape(1, a, b, 1, 6)}  # fmt: skip

    _case("reshape", build, ref, {"x": Arg(("a", "b", 6))}, dtype, data)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@given(data=st.data())
def test_permute_transpose(dtype, data):
    def build(g, x):
        return {"p": x.permute(2, 0, 1), "p_tuple": x.permute((1, 0, 2)), "p_neg": x.permute(-1, -2, -3),
                "t": x.transpose(), "t02": x.transpose(0, 2), "T": x.T,
                "pp": x.permute(1, 2, 0).permute(2, 1, 0)}  # fmt: skip

    def ref(x):
        return {"p": x.transpose(2, 0, 1), "p_tuple": x.transpose(1, 0, 2), "p_neg": x.transpose(2, 1, 0),
                "t": np.swapaxes(x, -2, -1), "t02": np.swapaxes(x, 0, 2), "T": x.T,
                "pp": x.transpose(1, 2, 0).transpose(2, 1, 0)}  # fmt: skip

    _case("permute", build, ref, {"x": Arg(X)}, dtype, data)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@given(data=st.data())
def test_unsqueeze_squeeze_flatten(dtype, data):
    def build(g, x):
        return {"u0": x.unsqueeze(0), "u_last": x.unsqueeze(-1), "u2": x.unsqueeze(2), "sq1": x.squeeze(1),
                "sq": x.squeeze(), "sq_neg": x.squeeze(-2), "sq_tuple": x.unsqueeze(0).squeeze((0, 2)),
                "fl": x.flatten(), "fl1": x.flatten(1), "fl01": x.flatten(0, 1), "fl_t": x.T.flatten(),
                "fl_t1": x.permute(2, 1, 0).flatten(1)}  # fmt: skip

    def ref(x):
        return {"u0": x[None], "u_last": x[..., None], "u2": np.expand_dims(x, 2), "sq1": x.squeeze(1),
                "sq": x.squeeze(1), "sq_neg": x.squeeze(-2), "sq_tuple": x.squeeze(1),
                "fl": x.reshape(-1), "fl1": x.reshape(x.shape[0], -1), "fl01": x.reshape(-1, x.shape[2]),
                "fl_t": x.T.reshape(-1), "fl_t1": x.transpose(2, 1, 0).reshape(x.shape[2], -1)}  # fmt: skip

    _case("squeeze", build, ref, {"x": Arg(("a", 1, "c"))}, dtype, data)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@given(data=st.data())
def test_expand_repeat(dtype, data):
    def build(g, x):
        return {"e": x.expand("a", "n", "c"), "e_lead": x.expand(2, "a", "n", "c"), "e_keep": x.expand(-1, 3, -1),
                "e_tuple": x.expand(("a", 1, "c")), "e_t": x.T.expand("c", 4, "a"),
                "r": x.repeat(2, 3, 1), "r_lead": x.repeat(2, 1, 1, 2), "r_short": x.repeat(3),
                "r_t": x.T.repeat(1, 2, 2), "r_sym": x.repeat(1, "n", 1)}  # fmt: skip

    def ref(x, dims):
        a, _, c = x.shape
        n = dims["n"]
        return {"e": np.broadcast_to(x, (a, n, c)), "e_lead": np.broadcast_to(x, (2, a, n, c)),
                "e_keep": np.broadcast_to(x, (a, 3, c)), "e_tuple": x, "e_t": np.broadcast_to(x.T, (c, 4, a)),
                "r": np.tile(x, (2, 3, 1)), "r_lead": np.tile(x, (2, 1, 1, 2)), "r_short": np.tile(x, 3),
                "r_t": np.tile(x.T, (1, 2, 2)), "r_sym": np.tile(x, (1, n, 1))}  # fmt: skip

    _case("expand", build, ref, {"x": Arg(("a", 1, "c"))}, dtype, data, extra_dims=("n",))


# keys that hold for any size >= 1 of the symbolic axes (empty results included)
SYM_KEYS = {
    "int0": (0,), "int_neg": (-1,), "int_mid": (slice(None), 0), "start": (slice(None), slice(1, None)),
    "stop_neg": (slice(None, -1),), "both": (slice(1, -1),), "step": (Ellipsis, slice(None, None, 2)),
    "step3": (slice(None), slice(None, None, 3)), "rev": (slice(None, None, -1),),
    "rev2": (Ellipsis, slice(None, None, -2)), "none": (slice(None), None), "none_end": (Ellipsis, None),
    "mix": (0, Ellipsis, slice(1, 3)), "tail": (slice(None), slice(-2, None)), "ellipsis": (Ellipsis,),
    "all_int": (0, 0, -1), "none_int": (None, -1, slice(None), None), "stop_big": (slice(None, 100),),
}  # fmt: skip


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@given(data=st.data())
def test_getitem_symbolic(dtype, data):
    build = lambda g, x: {k: x[key] for k, key in SYM_KEYS.items()}  # noqa: E731
    ref = lambda x: {k: x[key] for k, key in SYM_KEYS.items()}  # noqa: E731
    _case("getitem_sym", build, ref, {"x": Arg(X)}, dtype, data)


CONCRETE_KEYS = {
    "neg_range": (slice(-3, -1),), "rev_step": (slice(4, 0, -2),), "rev_all": (slice(None, None, -2),),
    "clamped": (slice(-100, 100),), "empty": (slice(3, 1),), "rev_stop": (slice(None, 1, -1),),
    "int_neg": (-2, slice(None)), "step_start": (slice(1, None, 3), slice(None, None, -1)),
}  # fmt: skip


@pytest.mark.parametrize("dtype", (lm.f32, lm.i32), ids=str)
@given(data=st.data())
def test_getitem_concrete(dtype, data):
    build = lambda g, x: {k: x[key] for k, key in CONCRETE_KEYS.items()}  # noqa: E731
    ref = lambda x: {k: x[key] for k, key in CONCRETE_KEYS.items()}  # noqa: E731
    _case("getitem_concrete", build, ref, {"x": Arg((5, "b"))}, dtype, data)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@given(data=st.data())
def test_getitem_of_view(dtype, data):
    """Slices of permuted / broadcast views read the right elements."""

    def build(g, x):
        return {"t": x.T[1:, ::-1], "bc": x.expand("a", 3, "c")[:, 1:, 0], "rep": x.repeat(1, 4, 1)[:, 1::2]}

    def ref(x):
        return {"t": x.T[1:, ::-1], "bc": np.broadcast_to(x, (x.shape[0], 3, x.shape[2]))[:, 1:, 0],
                "rep": np.tile(x, (1, 4, 1))[:, 1::2]}  # fmt: skip

    _case("getitem_view", build, ref, {"x": Arg(("a", 1, "c"))}, dtype, data)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@given(data=st.data())
def test_pad(dtype, data):
    v = -1.5 if dtype.is_float else -7

    def build(g, x):
        return {"p": x.pad(((1, 2), (0, 1))), "all": x.pad((1, 1)), "value": x.pad(((0, 0), (2, 0)), value=v),
                "zero": x.pad(((0, 0), (0, 0))), "t": x.T.pad(((1, 0), (0, 2)), value=v)}  # fmt: skip

    def ref(x):
        return {"p": np.pad(x, ((1, 2), (0, 1))), "all": np.pad(x, 1),
                "value": np.pad(x, ((0, 0), (2, 0)), constant_values=v), "zero": x,
                "t": np.pad(x.T, ((1, 0), (0, 2)), constant_values=v)}  # fmt: skip

    _case("pad", build, ref, {"x": Arg(("a", "b"))}, dtype, data)


def test_pad_symbolic_width():
    """Pad widths may be dim symbols."""
    g = lm.Graph()
    x = g.tensor("x", ("a",))
    x.pad((("w", 1),), value=2.0).output("y")
    m = g.compile("reference")
    out = m.run({"x": np.arange(3, dtype=np.float32)}, dims={"w": 2})["y"]
    np.testing.assert_array_equal(out, np.pad(np.arange(3.0), (2, 1), constant_values=2.0).astype(np.float32))
