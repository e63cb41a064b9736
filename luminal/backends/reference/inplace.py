"""InplaceScatter: a Scatter that updates its destination buffer in place (ruleset `buffer_reuse`).

Same fields and values as Scatter (luminal/hlir/indexing.py); its output aliases input 0 (the
destination, read row-major), so the runtime writes only the scattered elements instead of copying
the whole destination first. The rule (inplace.egg) proposes it only for persistent state that the
scatter alone reads -- a KV cache -- so no other op observes the old contents.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from luminal.hlir.indexing import Scatter, scatter_into
from luminal.hlir.op import EList, Op, view
from luminal.shape.expr import ZERO, Expression, prod


@dataclass(frozen=True)
class InplaceScatter(Op):
    dest_shape: EList
    dest_strides: EList
    index_shape: EList
    index_strides: EList
    src_strides: EList
    n_inputs: ClassVar[int] = 3  # (dest, indexes, src)
    inplace: ClassVar[bool] = True

    def alias(self) -> tuple[int, Expression]:
        return (0, ZERO)

    def out_dtype(self, in_dtypes):
        return in_dtypes[2]

    def out_size(self) -> Expression:
        return prod(self.dest_shape)

    def hlir(self) -> Scatter:
        return Scatter(self.dest_shape, self.dest_strides, self.index_shape, self.index_strides, self.src_strides)

    def reference(self, ins, in_dtypes, env):
        out = ins[0][: int(self.out_size().evaluate(env))]  # the destination's own (writable) bytes
        idx = view(ins[1], self.index_shape, self.index_strides, env).reshape(-1).astype(np.int64)
        src = view(ins[2], self.index_shape, self.src_strides, env).reshape(-1)
        return scatter_into(out, idx, src)
