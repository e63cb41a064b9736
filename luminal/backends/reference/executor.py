"""Runs a plan of ops on numpy: each node's `reference` semantics over flat buffers, vectorized.

A plan is a topologically ordered list of nodes (op, input node ids, dtype); buffers are freed
after their last use so peak memory follows the live set, not the whole graph.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from luminal.errors import BackendError
from luminal.hlir import Input, Output


class ReferenceExecutor:
    def __init__(self, nodes: Sequence, outputs: Mapping[str, int]):
        self.nodes = list(nodes)
        self.outputs = dict(outputs)
        last: dict[int, int] = {}
        for i, n in enumerate(self.nodes):
            for s in n.inputs:
                last[s] = i
        self._free_after: dict[int, list[int]] = {}
        for s, i in last.items():
            self._free_after.setdefault(i, []).append(s)

    def run(self, inputs: Mapping[str, np.ndarray], env: Mapping[str, int]) -> dict[str, np.ndarray]:
        bufs: dict[int, np.ndarray] = {}
        out: dict[str, np.ndarray] = {}
        for i, n in enumerate(self.nodes):
            op = n.op
            if isinstance(op, Input):
                bufs[i] = np.ascontiguousarray(inputs[op.label]).reshape(-1)
                continue
            ins = [bufs[s] for s in n.inputs]
            dts = tuple(self.nodes[s].dtype for s in n.inputs)
            try:
                r = op.reference(ins, dts, env)
            except BackendError:
                raise
            except Exception as e:  # noqa: BLE001 - report which op failed, with its fields
                raise BackendError(f"reference backend failed in {op!r}: {type(e).__name__}: {e}") from e
            if isinstance(op, Output):
                out[op.label] = r
            else:
                bufs[i] = r
            for s in self._free_after.get(i, ()):
                bufs.pop(s, None)
        return out
