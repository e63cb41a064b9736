"""Property tests of `@` / matmul against np.matmul: vector, matrix and broadcast-batch operands."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import luminal as lm
from tests.helpers import NUMERIC, Arg, check_op


@pytest.mark.parametrize("dtype", NUMERIC, ids=str)
@given(data=st.data())
def test_matmul_2d_and_vectors(dtype, data):
    def build(g, a, b, v, w):
        return {"mm": a @ b, "mv": a @ v, "vm": w @ a, "vv": v @ v, "method": a.matmul(b), "tt": b.T @ a.T,
                "ata": a.T @ a}  # fmt: skip

    def ref(a, b, v, w):
        return {"mm": a @ b, "mv": a @ v, "vm": w @ a, "vv": np.asarray(v @ v), "method": a @ b, "tt": b.T @ a.T,
                "ata": a.T @ a}  # fmt: skip

    lo, hi = (-1, 1) if dtype.is_float else (-30, 30)
    args = {"a": Arg(("m", "k"), lo=lo, hi=hi), "b": Arg(("k", "n"), lo=lo, hi=hi), "v": Arg(("k",), lo=lo, hi=hi),
            "w": Arg(("m",), lo=lo, hi=hi)}  # fmt: skip
    check_op(data, "matmul2d", build, ref, args, dtype, tol=2)


@pytest.mark.parametrize("dtype", (lm.f32, lm.bf16, lm.i32), ids=str)
@given(data=st.data())
def test_matmul_batched(dtype, data):
    def build(g, a, b, c, d):
        return {"b3x2": a @ b[0], "b3x3": a @ b, "bcast": c @ b, "b4": d @ b, "vec": a @ b[0, :, 0]}

    def ref(a, b, c, d):
        return {"b3x2": a @ b[0], "b3x3": a @ b, "bcast": c @ b, "b4": d @ b, "vec": a @ b[0, :, 0]}

    lo, hi = (-1, 1) if dtype.is_float else (-30, 30)
    args = {"a": Arg(("p", "m", "k"), lo=lo, hi=hi), "b": Arg(("p", "k", "n"), lo=lo, hi=hi),
            "c": Arg((1, "m", "k"), lo=lo, hi=hi), "d": Arg(("q", 1, "m", "k"), lo=lo, hi=hi)}  # fmt: skip
    check_op(data, "matmul_batched", build, ref, args, dtype, tol=2)


@given(data=st.data())
def test_matmul_bool(data):
    """bool @ bool is a bool (or of ands) like numpy, not a count; k = 0 gives False."""

    def build(g, a, b, v):
        return {"mm": a @ b, "mv": a @ v, "vv": v @ v}

    def ref(a, b, v):
        return {"mm": a @ b, "mv": a @ v, "vv": np.asarray(v @ v)}

    args = {"a": Arg(("m", "k")), "b": Arg(("k", "n")), "v": Arg(("k",))}
    check_op(data, "matmul_bool", build, ref, args, lm.bool, dim_sizes={"k": st.integers(0, 4)},
             out_dtypes={"mm": lm.bool, "mv": lm.bool, "vv": lm.bool})  # fmt: skip
