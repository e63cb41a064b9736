"""Data-dependent indexing: Gather and Scatter.

Gather: out[i] = data_view.flat[indexes_view.flat[i]] (index values are flat logical indices into
the data view); output has the index view's shape and the data's dtype.
Scatter: out = contiguous copy of the dest view; then for j in index order,
out[indexes.flat[j]] = src[j] (src read with `src_strides` over the index shape); out-of-range
indices are dropped and the last write wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from luminal.errors import BackendError
from luminal.hlir.op import EList, Op, view
from luminal.shape.expr import Expression, prod


def scatter_into(out: np.ndarray, idx: np.ndarray, src: np.ndarray) -> np.ndarray:
    """Scatter's write into the flat `out`: out[idx[j]] = src[j], the last write of an index wins and
    indexes outside [0, out.size) are dropped (docs/numerics.md)."""
    keep = (idx >= 0) & (idx < out.size)
    idx, src = idx[keep][::-1], src[keep][::-1]
    idx, first = np.unique(idx, return_index=True)  # first in reversed order = last write
    out[idx] = src[first]
    return out


@dataclass(frozen=True)
class Gather(Op):
    index_shape: EList
    index_strides: EList
    data_shape: EList
    data_strides: EList
    n_inputs: ClassVar[int] = 2  # (indexes, data)

    def out_dtype(self, in_dtypes):
        return in_dtypes[1]

    def out_size(self) -> Expression:
        return prod(self.index_shape)

    def reference(self, ins, in_dtypes, env):
        idx = view(ins[0], self.index_shape, self.index_strides, env).reshape(-1).astype(np.int64)
        data = view(ins[1], self.data_shape, self.data_strides, env).reshape(-1)
        if idx.size and (idx.min() < 0 or idx.max() >= data.size):
            bad = idx[(idx < 0) | (idx >= data.size)][0]
            raise BackendError(
                f"Gather: index {bad} out of range for data of {data.size} elements (the checked frontend ops "
                "gather / take_along_axis / Embedding send an index outside [-n, n) of its axis to -1)"
            )
        return data[idx]


@dataclass(frozen=True)
class Scatter(Op):
    dest_shape: EList
    dest_strides: EList
    index_shape: EList
    index_strides: EList
    src_strides: EList
    n_inputs: ClassVar[int] = 3  # (dest, indexes, src)

    def out_dtype(self, in_dtypes):
        return in_dtypes[2]

    def out_size(self) -> Expression:
        return prod(self.dest_shape)

    def reference(self, ins, in_dtypes, env):
        out = view(ins[0], self.dest_shape, self.dest_strides, env).reshape(-1).astype(in_dtypes[2].np, copy=True)
        idx = view(ins[1], self.index_shape, self.index_strides, env).reshape(-1).astype(np.int64)
        src = view(ins[2], self.index_shape, self.src_strides, env).reshape(-1)
        return scatter_into(out, idx, src)
