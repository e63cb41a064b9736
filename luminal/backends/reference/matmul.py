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
from luminal.hlir.op import EList, Op, compute_dtype, view
from luminal.shape.expr import Expression, prod


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
        a = view(ins[0], (*batch, m, self.k), self.a_strides, env)
        b = view(ins[1], (*batch, self.k, n), self.b_strides, env)
        acc = compute_dtype(dt)
        with np.errstate(all="ignore"):
            out = np.matmul(a.astype(acc, copy=False), b.astype(acc, copy=False))
        return np.ascontiguousarray(out, dtype=dt.np).reshape(-1)
