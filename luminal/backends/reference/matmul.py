"""NumpyMatmul: one np.matmul standing for the frontend's broadcast Mul -> SumReduce matmul.

The frontend spells `a (.., m, k) @ b (.., k, n)` as Mul over (.., m, n, k) [a broadcast along n,
b along m] and SumReduce over k (luminal/frontend/matmul.py); the rules in matmul.egg union that
pair with this op, and search picks it when it profiles faster. Fields describe both operands as
views: `shape` = (batch.., m, n) of the output, `k`, `a_strides` over (batch.., m, k) and
`b_strides` over (batch.., k, n), so transposes and broadcast batch dims are just strides.
Accumulation: f64 for f64; every other float in f32 (16/8-bit floats are read as f32 and the
result rounded once); integers in their own dtype, wrapping like Mul + SumReduce do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from luminal.dtype import DType
from luminal.errors import DTypeError
from luminal.hlir.op import EList, Env, Op, compute_dtype, view
from luminal.shape.expr import ZERO, Expression, prod


@dataclass(frozen=True)
class NumpyMatmul(Op):
    shape: EList  # (batch.., m, n)
    k: Expression
    a_strides: EList  # over (batch.., m, k)
    b_strides: EList  # over (batch.., k, n)
    n_inputs: ClassVar[int] = 2  # (a, b)

    def out_size(self) -> Expression:
        return prod(self.shape)

    def reference(self, ins, in_dtypes, env):
        dt = in_dtypes[0]
        if dt == DType.bool:
            raise DTypeError("NumpyMatmul of bool: SumReduce of bool is undefined")
        *batch, m, n = self.shape
        a = strided(ins[0], (*batch, m, self.k), self.a_strides, env)
        b = strided(ins[1], (*batch, self.k, n), self.b_strides, env)
        acc = compute_dtype(dt)
        with np.errstate(all="ignore"):
            out = np.matmul(a.astype(acc, copy=False), b.astype(acc, copy=False))
        return np.ascontiguousarray(out, dtype=dt.np).reshape(-1)


def strided(buf: np.ndarray, dims: EList, strides: EList, env: Env) -> np.ndarray:
    """A zero-copy view when every stride is linear (c * z) or 0; else the general gathered view."""
    shape = tuple(int(d.evaluate(env)) for d in dims)
    steps = []
    for st in strides:
        if st is ZERO:
            steps.append(0)
            continue
        c = st.substitute("z", 1)
        if st.substitute("z", 0) is not ZERO or st is not (c * Expression("var", ("z",))):
            return view(buf, dims, strides, env)
        steps.append(int(c.evaluate(env)))
    if any(s < 0 for s in steps) or buf.ndim != 1 or not buf.flags.c_contiguous:
        return view(buf, dims, strides, env)
    span = 1 + sum((n - 1) * s for n, s in zip(shape, steps, strict=True)) if all(shape) else 0
    if span > buf.size:
        return view(buf, dims, strides, env)
    item = buf.itemsize
    return np.lib.stride_tricks.as_strided(buf, shape, tuple(s * item for s in steps), writeable=False)
