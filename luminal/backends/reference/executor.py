"""Runs a plan of ops on numpy: each node's `reference` semantics over flat buffers, vectorized.

A plan is a topologically ordered list of nodes (op, input node ids, dtype); buffers are freed
after their last use so peak memory follows the live set, not the whole graph.

Persistent inputs (weights, KV caches) are bound once (`bind`, or passed to `run`) and kept in a
`Bound` table that the plans of one compiled model (its dim buckets) share, like device-resident
buffers. State: an output named like a persistent input is that input's next value (after a run
the input holds it: nothing to do when an in-place op updated it, else the output is copied in).
Aliasing ops (luminal/backends/aliasing.py): a view op's result is its own; an in-place op writes
into its input's bytes -- a bound array is copied once before the first write (the caller's array
is never modified), a per-run input before every write.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from luminal.backends.aliasing import alias_roots, check_inplace
from luminal.errors import BackendError, InputError
from luminal.hlir import Input, Output


class Bound:
    """Persistent inputs of a compiled model: label -> (array given, array the plans use)."""

    def __init__(self) -> None:
        self.given: dict[str, np.ndarray] = {}
        self.arrays: dict[str, np.ndarray] = {}
        self.owned: set[str] = set()  # copies the runtime may write (in-place state)

    def bind(self, label: str, arr: np.ndarray) -> None:
        self.given[label] = arr
        self.arrays[label] = np.ascontiguousarray(arr).reshape(-1)
        self.owned.discard(label)

    def writable(self, label: str) -> np.ndarray:
        if label not in self.owned:
            self.arrays[label] = self.arrays[label].copy()
            self.owned.add(label)
        return self.arrays[label]


class ReferenceExecutor:
    def __init__(self, nodes: Sequence, outputs: Mapping[str, int]):
        self.nodes = list(nodes)
        self.outputs = dict(outputs)
        self._alias = alias_roots(self.nodes)
        check_inplace(self.nodes)
        last: dict[int, int] = {}
        for i, n in enumerate(self.nodes):
            for s in n.inputs:
                last[s] = i
        for i, (root, _) in self._alias.items():  # a root lives as long as its aliases
            last[root] = max(last.get(root, root), last.get(i, i))
        self._free_after: dict[int, list[int]] = {}
        for s, i in last.items():
            self._free_after.setdefault(i, []).append(s)
        self.persistent: frozenset[str] = frozenset()
        self.bound = Bound()
        self._last: dict[str, np.ndarray] = {}
        self._out_src = {n.op.label: n.inputs[0] for n in self.nodes if isinstance(n.op, Output)}
        self._state: dict[str, tuple[int, int]] = {}

    def set_persistent(self, names: frozenset[str], share: ReferenceExecutor | None = None) -> None:
        """Inputs bound once; `share`: another plan of the same model whose bindings this one uses."""
        self.persistent = frozenset(names)
        if share is not None:
            self.bound = share.bound
        inputs = {n.op.label: i for i, n in enumerate(self.nodes) if isinstance(n.op, Input)}
        # state: an output named like a persistent input is that input's next value
        self._state = {
            lb: (inputs[lb], src) for lb, src in self._out_src.items() if lb in self.persistent and lb in inputs
        }

    def bind(self, label: str, arr: np.ndarray) -> None:
        self.bound.bind(label, arr)

    def run(self, inputs: Mapping[str, np.ndarray], env: Mapping[str, int],
            fetch: Sequence[str] | None = None) -> dict[str, np.ndarray]:  # fmt: skip
        bufs: dict[int, np.ndarray] = {}
        out: dict[str, np.ndarray] = {}
        for i, n in enumerate(self.nodes):
            op = n.op
            if isinstance(op, Input):
                bufs[i] = self._input(op.label, inputs)
                continue
            if op.inplace:
                self._own_root(i, bufs)
                for k in op.also_writes():  # another buffer written in place (KernelScatterPair's v cache)
                    self._own_buffer(i, n.inputs[k], bufs)
            ins = [bufs[s] for s in n.inputs]
            dts = tuple(self.nodes[s].dtype for s in n.inputs)
            try:
                r = op.reference(ins, dts, env)
            except BackendError:
                raise
            except Exception as e:  # noqa: BLE001 - report which op failed, with its fields
                raise BackendError(f"reference backend failed in {op!r}: {type(e).__name__}: {e}") from e
            if op.inplace:
                r = self._store_inplace(i, r, bufs, env)
            if isinstance(op, Output):
                src = n.inputs[0]
                out[op.label] = r.copy() if src in self._alias or isinstance(self.nodes[src].op, Input) else r
            else:
                bufs[i] = r
            for s in self._free_after.get(i, ()):
                bufs.pop(s, None)
        for label, (inp, src) in self._state.items():  # in place already when the output aliases the input
            if self._alias.get(src, (src,))[0] != inp:
                self.bound.arrays[label] = np.array(out[label], copy=True).reshape(-1)
                self.bound.owned.add(label)
        self._last = out
        return out if fetch is None else {k: out[k] for k in fetch}

    def sample(self, label: str, rows: int, cols: int, sampler, position: int) -> np.ndarray:
        """Token ids (rows,) drawn from output `label` of the last run, as (rows, cols) logits."""
        from luminal.sampling import sample

        return sample(self._last[label].reshape(rows, cols), sampler, position)

    # -- helpers --------------------------------------------------------------------------------
    def _input(self, label: str, inputs: Mapping[str, np.ndarray]) -> np.ndarray:
        if label in self.persistent:
            if label in inputs and self.bound.given.get(label) is not inputs[label]:
                self.bound.bind(label, inputs[label])
            if label in self.bound.arrays:
                return self.bound.arrays[label]
        if label not in inputs:
            raise InputError(f"missing input {label!r}")
        return np.ascontiguousarray(inputs[label]).reshape(-1)

    def _own_root(self, i: int, bufs: dict[int, np.ndarray]) -> None:
        """Before an in-place op writes: make the root buffer one the runtime owns."""
        k = self.nodes[i].op.alias()[0]  # re-resolve the chain's views onto the (possibly new) root
        self._own_buffer(i, self.nodes[i].inputs[k], bufs)

    def _own_buffer(self, i: int, src: int, bufs: dict[int, np.ndarray]) -> None:
        """Before node i writes node src's buffer in place: make it one the runtime owns."""
        root = self._alias.get(src, (src,))[0]
        if src != root:
            raise BackendError(f"node {i}: in-place updates through a chain of aliases are not supported")
        op = self.nodes[root].op
        if isinstance(op, Input) and op.label in self.persistent and op.label in self.bound.arrays:
            bufs[root] = self.bound.writable(op.label)
        elif isinstance(op, Input) or not bufs[root].flags.writeable or bufs[root].base is not None:
            bufs[root] = bufs[root].copy()

    def _store_inplace(self, i: int, r: np.ndarray, bufs: dict[int, np.ndarray], env) -> np.ndarray:
        """The in-place op's output, as the bytes of its root buffer from its offset on."""
        root, off = self._alias[i]
        n = self.nodes[i]
        size = int(n.op.out_size().evaluate(env))
        start = int(off.evaluate(env))
        raw = bufs[root].view(np.uint8)
        end = start + size * n.dtype.itemsize
        if end > raw.size:
            raise BackendError(
                f"node {i} ({type(n.op).__name__}): alias [{start}, {end}) past its buffer of {raw.size} bytes"
            )
        dst = raw[start:end].view(n.dtype.np)
        r = np.asarray(r).reshape(-1)
        if not (r.size == dst.size and r.__array_interface__["data"][0] == dst.__array_interface__["data"][0]):
            dst[...] = r
        return dst
