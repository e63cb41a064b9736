"""Program: a translated, compiled graph and how torch values go in and out of it.

Per call: dims are solved from the tensor shapes and SymInt arguments (one plan for every length),
tensors are handed to the runtime as numpy views of their memory (no copy on the CPU), weights
and unmutated buffers only when their storage changed (they are persistent inputs), and outputs
come back as torch tensors of torch's dtype on the caller's device.

CUDA (designed, not tested here): with CUDA tensors, the CUDA runtime should bind persistent inputs
by device pointer (`tensors.device_pointer`) instead of uploading host copies; until
`CompiledModel` offers that binding (see docs/torch.md, "CUDA"), device tensors go through the host.
"""

from __future__ import annotations

import logging

import torch

from luminal.errors import InputError
from luminal.torch.symbolic import solve_dims
from luminal.torch.tensors import from_numpy, to_numpy
from luminal.torch.translate import Translation

log = logging.getLogger(__name__)

COUNTERS = {"compiles": 0, "fallbacks": 0, "runs": 0}


class Program:
    """`program(*flat_args)` -> list of outputs, in the FX graph's placeholder / output order."""

    def __init__(self, tr: Translation, backend: str = "auto", **options):
        self.inputs, self.outputs = tr.inputs, tr.outputs
        self.ranges = tr.ranges
        self.aten_ops = tr.aten_ops
        self.model = tr.graph.compile(backend, **options)
        self._bound: dict[str, tuple] = {}
        self._constants = dict(tr.constants)  # persistent, fed on the first call (outside any fake mode)
        COUNTERS["compiles"] += 1

    @property
    def stats(self) -> dict:
        return self.model.stats

    def __call__(self, *args) -> list:
        if len(args) != len(self.inputs):
            raise InputError(f"the compiled graph takes {len(self.inputs)} inputs, got {len(args)}")
        feed, pairs, device = {}, [], None
        for spec, a in zip(self.inputs, args, strict=True):
            if spec.kind == "sym":
                pairs.append((spec.expr, int(a)))
            elif spec.kind == "tensor":
                if not isinstance(a, torch.Tensor):
                    raise InputError(f"input {spec.name!r}: expected a tensor, got {type(a).__name__}")
                if device is None and not spec.persistent:
                    device = a.device
                pairs.extend((e, int(n)) for e, n in zip(spec.shape, a.shape, strict=True))
                if spec.persistent and a.is_contiguous():
                    key = (a.data_ptr(), a.dtype, tuple(a.shape))
                    if self._bound.get(spec.name) == key:
                        continue  # bound earlier, same storage: the runtime still holds the view
                    self._bound[spec.name] = key
                feed[spec.name] = to_numpy(a)
        feed.update({n: to_numpy(t) for n, t in self._constants.items()})
        dims = solve_dims(pairs)
        for d, (lo, hi) in self.ranges.items():
            if d in dims and (dims[d] < lo or (hi is not None and dims[d] > hi)):
                raise InputError(f"dim {d} = {dims[d]} is outside the compiled range [{lo}, {hi}]")
        outs = self.model.run(feed, dims=dims)
        self._constants = {}
        COUNTERS["runs"] += 1
        device = device or torch.device("cpu")
        result = []
        for spec in self.outputs:
            if spec.kind == "tensor":
                result.append(from_numpy(outs[spec.name], spec.dtype, device))
            elif spec.kind == "sym":
                result.append(int(spec.expr.evaluate(dims)))
            elif spec.kind == "const":
                result.append(spec.value)
            else:
                result.append(None)
        return result
