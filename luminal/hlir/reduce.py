"""Reductions over one axis: SumReduce and MaxReduce.

Fields: the output shape, the reduced length `iters`, the input strides of the kept axes and
the stride of the reduced axis. The reference accumulates floats in f64 and rounds once to the
tensor's dtype (docs/numerics.md); integers accumulate in their own dtype and wrap. MaxReduce
orders floats totally (+NaN above +inf, -NaN below -inf). An empty reduction gives 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

from luminal.errors import DTypeError
from luminal.hlir.op import EList, Op, view
from luminal.shape.expr import Expression, prod


@dataclass(frozen=True)
class Reduce(Op):
    shape: EList
    iters: Expression
    strides: EList
    iter_stride: Expression
    n_inputs: ClassVar[int] = 1

    def out_size(self) -> Expression:
        return prod(self.shape)

    def values(self, buf, env) -> np.ndarray:
        return view(buf, (*self.shape, self.iters), (*self.strides, self.iter_stride), env)


@dataclass(frozen=True)
class SumReduce(Reduce):
    # matmul_flatten: N-D Mul -> SumReduce matmuls equal lower-rank ones (the .egg says why)
    RULES: ClassVar[tuple[str, ...]] = (Path(__file__).with_name("matmul_flatten.egg").read_text(),)

    def reference(self, ins, in_dtypes, env):
        dt = in_dtypes[0]
        if dt.name == "bool":
            raise DTypeError("SumReduce of bool: cast to an integer dtype first")
        x = self.values(ins[0], env)
        acc = np.float64 if dt.is_float else dt.np
        with np.errstate(all="ignore"):
            return x.sum(axis=-1, dtype=acc).astype(dt.np).reshape(-1)


def _order_key(x: np.ndarray) -> np.ndarray:
    """Integers ordering floats totally (IEEE total order), for any float width."""
    bits = {8: np.int8, 16: np.int16, 32: np.int32, 64: np.int64}[x.dtype.itemsize * 8]
    i = x.view(bits).astype(np.int64)
    mask = (1 << (x.dtype.itemsize * 8 - 1)) - 1
    return np.where(i < 0, i ^ mask, i)


@dataclass(frozen=True)
class MaxReduce(Reduce):
    def reference(self, ins, in_dtypes, env):
        dt = in_dtypes[0]
        if dt.name == "bool":
            raise DTypeError("MaxReduce of bool: cast to an integer dtype first")
        x = self.values(ins[0], env)
        if x.shape[-1] == 0:
            return np.zeros(x.shape[:-1], dt.np).reshape(-1)
        if not dt.is_float:
            return x.max(axis=-1).reshape(-1)
        if not np.isnan(x).any():  # fast path; only a zero result can hide the -0.0 < +0.0 order
            out = np.array(x.max(axis=-1))
            zero = out == 0
            if zero.any():
                out[zero] = _total_max(x[zero])
            return out.reshape(-1)
        return _total_max(x).reshape(-1)


def _total_max(x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x)
    idx = _order_key(x).argmax(axis=-1)
    return np.take_along_axis(x, idx[..., None], axis=-1)[..., 0]
