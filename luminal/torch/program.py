"""Program: a translated, compiled graph and how torch values go in and out of it.

Per call, dims are solved from the tensor shapes and SymInt arguments (one plan for every length).
Then one of two paths:

* **Host** (the reference backend, or CPU tensors): tensors are handed to the runtime as numpy
  views of their memory (no copy on the CPU); weights and unmutated buffers only when their
  storage changed (they are persistent inputs); mutated inputs (state) are fed every call and
  their new value is copied back into the torch tensor; outputs come back as torch tensors of
  torch's dtype on the caller's device.
* **Device** (the cuda backend with CUDA tensors; `luminal/torch/device.py`): weights, buffers and
  state are bound once by their device address (`CompiledModel.bind_device`, no copy), rebound only
  when a tensor's storage changes; state (a KV cache) is updated by the plan in that memory, in
  place; per-call tensors go in as device addresses (copied device-to-device into the runtime's
  own buffers) and outputs are written device-to-device into torch tensors allocated here. Nothing
  goes through the host but the runtime's dims record and host scalars.

**Host scalars.** A 0-d CPU tensor fed per call is a scalar argument, not a tensor on the wrong
device: with `dynamic=True` Dynamo passes every Python float it reads (an RMSNorm's `eps`, attention
`scaling`, RoPE's `attention_scaling`) as a 0-d float64 CPU tensor, and a StaticCache's position
counter starts as a 0-d CPU tensor. On the device path they are fed from the host (8 bytes, and the
runtime skips the upload when the value did not change), like torch's CPU scalars in CUDA kernels.
Before this rule one such scalar sent the whole decode step down the host path: every state tensor
(the KV cache) read back to the host and uploaded again each token, weights read back once.
Any other tensor off the device (a weight or a state tensor on the CPU next to CUDA tensors) still
selects the host path, with a warning naming it.
"""

from __future__ import annotations

import logging

import torch

from luminal.errors import InputError
from luminal.torch.device import StreamOrder, device_array
from luminal.torch.symbolic import solve_dims
from luminal.torch.tensors import from_numpy, to_numpy
from luminal.torch.translate import Translation

log = logging.getLogger(__name__)

COUNTERS = {"compiles": 0, "fallbacks": 0, "runs": 0}

# torch device types whose memory a device-binding runtime (cuda) addresses directly; the CPU
# tests add "cpu" for the fake driver (tests/torch/test_device.py)
DEVICE_TYPES: tuple[str, ...] = ("cuda",)


class Program:
    """`program(*flat_args)` -> list of outputs, in the FX graph's placeholder / output order."""

    def __init__(self, tr: Translation, backend: str = "auto", **options):
        self.inputs, self.outputs = tr.inputs, tr.outputs
        self.ranges = tr.ranges
        self.aten_ops = tr.aten_ops
        self.state = dict(tr.state)  # mutated input name -> placeholder index
        self.model = tr.graph.compile(backend, **_with_fixed_bucket(tr, options))
        self._bound: dict[str, tuple] = {}
        self._all_constants = dict(tr.constants)
        self._constants = dict(tr.constants)  # persistent, fed on the first call (outside any fake mode)
        self._device_constants: dict[str, torch.Tensor] | None = None  # on the device, made once
        self._device_bound: dict[str, tuple[tuple, torch.Tensor]] = {}  # name -> (key, tensor kept alive)
        self._order: StreamOrder | None = None
        self._device_capable = self.model.binds_device
        self._warned_host = False
        self.host_fed: set[str] = set()  # per-call inputs the last device-path run fed from the host
        self.paths = {"host": 0, "device": 0}  # runs per path (tests and benches check which one ran)
        self._solved: dict[tuple, tuple] = {}  # argument shapes / devices / SymInts -> _solve's answer
        COUNTERS["compiles"] += 1

    @property
    def stats(self) -> dict:
        return self.model.stats

    def __call__(self, *args) -> list:
        if len(args) != len(self.inputs):
            raise InputError(f"the compiled graph takes {len(self.inputs)} inputs, got {len(args)}")
        # the arguments' shapes, SymInt values and devices decide the dims, the run's device and its
        # path: solved once per distinct key (a decode loop has one; solving ~200 weights' shapes
        # each call cost ~3 ms of host time a token on a 16-layer model, session 7)
        key = []
        for spec, a in zip(self.inputs, args, strict=True):
            if spec.kind == "sym":
                key.append(int(a))
            elif spec.kind == "tensor":
                if not isinstance(a, torch.Tensor):
                    raise InputError(f"input {spec.name!r}: expected a tensor, got {type(a).__name__}")
                key.append((a.shape, a.device))
        key = tuple(key)
        solved = self._solved.get(key)
        if solved is None:
            if len(self._solved) >= 64:
                self._solved.clear()
            solved = self._solved[key] = self._solve(args)
        dims, device, path = solved
        dims = dict(dims)
        self.paths[path] += 1
        if path == "device":
            outs = self._run_device(args, dims, device)
        else:
            outs = self._run_host(args, dims, device)
        COUNTERS["runs"] += 1
        result = []
        for spec in self.outputs:
            if spec.kind == "tensor":
                result.append(outs[spec.name])
            elif spec.kind == "input":
                result.append(args[spec.index])
            elif spec.kind == "sym":
                result.append(int(spec.expr.evaluate(dims)))
            elif spec.kind == "const":
                result.append(spec.value)
            else:
                result.append(None)
        return result

    def _solve(self, args) -> tuple[dict[str, int], torch.device, str]:
        """(dims, the run's device, "device" | "host") for these arguments, or an InputError."""
        pairs, device = [], None
        for spec, a in zip(self.inputs, args, strict=True):
            if spec.kind == "sym":
                pairs.append((spec.expr, int(a)))
            elif spec.kind == "tensor":
                if device is None and not spec.persistent and not host_scalar(spec, a):
                    device = a.device
                pairs.extend((e, int(n)) for e, n in zip(spec.shape, a.shape, strict=True))
        dims = solve_dims(pairs)
        for d, (lo, hi) in self.ranges.items():  # a dim the translation fixed that no input carries
            if lo == hi and d not in dims:
                dims[d] = lo
        for d, (lo, hi) in self.ranges.items():
            if d in dims and (dims[d] < lo or (hi is not None and dims[d] > hi)):
                if lo == hi:  # specialized by the translation (a static cache's capacity: cache_attention.py)
                    raise InputError(f"dim {d} = {dims[d]}: this graph was compiled for {d} = {lo} only (a "
                                     "static KV cache's capacity); compile again for another capacity")  # fmt: skip
                raise InputError(f"dim {d} = {dims[d]} is outside the compiled range [{lo}, {hi}]")
        tensors = [a for s, a in zip(self.inputs, args, strict=True) if s.kind == "tensor"]
        device = device or (tensors[0].device if tensors else torch.device("cpu"))
        return dims, device, "device" if self._on_device(args) else "host"

    def _on_device(self, args) -> bool:
        """The device path: a device-binding runtime, and every tensor but the host scalars in device memory."""
        if not self._device_capable:
            return False
        specs = [(s, a) for s, a in zip(self.inputs, args, strict=True) if s.kind == "tensor" and not host_scalar(s, a)]
        off = [(s.name, a.device) for s, a in specs if a.device.type not in DEVICE_TYPES]
        if not off:
            return bool(specs)
        if not self._warned_host and len(off) < len(specs):
            self._warned_host = True
            log.warning("luminal: input %r is on %s while the others are on the device: this graph runs on "
                        "the host path (state and weights copied through the host)", *off[0])  # fmt: skip
        return False

    # -- host path: numpy views, state copied back ---------------------------------------------
    def _run_host(self, args, dims: dict[str, int], device: torch.device) -> dict[str, torch.Tensor]:
        feed = {}
        for spec, a in zip(self.inputs, args, strict=True):
            if spec.kind != "tensor":
                continue
            if spec.persistent and not spec.state and a.is_contiguous():
                key = (a.data_ptr(), a.dtype, tuple(a.shape))
                if self._bound.get(spec.name) == key:
                    continue  # bound earlier, same storage: the runtime still holds the view
                self._bound[spec.name] = key
            feed[spec.name] = to_numpy(a)
        feed.update({n: to_numpy(t) for n, t in self._constants.items()})
        self._device_bound.clear()  # the runtime now holds host copies (a later device call rebinds)
        outs = self.model.run(feed, dims=dims)
        self._constants = {}
        result = {}
        for spec in self.outputs:
            if spec.kind == "tensor":
                result[spec.name] = from_numpy(outs[spec.name], spec.dtype, device)
        with torch.no_grad():
            for name, i in self.state.items():  # the new value of a mutated input, into its memory
                t = args[i]
                t.copy_(from_numpy(outs[name], t.dtype, t.device).reshape(t.shape))
        return result

    # -- device path: bound by address, state in place, outputs written into torch tensors --------
    def _run_device(self, args, dims: dict[str, int], device: torch.device) -> dict[str, torch.Tensor]:
        if self._order is None:
            self._order = StreamOrder(self.model.device_stream, device)
        if self._device_constants is None:
            self._device_constants = {n: t.to(device).contiguous() for n, t in self._all_constants.items()}
        for name, t in self._device_constants.items():
            self._bind_device(name, t)
        self._bound.clear()  # a later host call feeds the host views again
        self._constants = dict(self._all_constants)
        feed = {}
        self.host_fed = set()
        for spec, a in zip(self.inputs, args, strict=True):
            if spec.kind != "tensor":
                continue
            if spec.persistent:
                self._bind_device(spec.name, a, state=spec.state)
            elif host_scalar(spec, a):  # 8 bytes up, skipped by the runtime when unchanged
                feed[spec.name] = to_numpy(a)
                self.host_fed.add(spec.name)
            else:
                t = a.detach().contiguous()
                self._order.reads(t)  # not reused by torch before the runtime's stream has read it
                feed[spec.name] = device_array(t)
        result, into = {}, {}
        for spec in self.outputs:
            if spec.kind == "tensor":
                shape = tuple(int(e.evaluate(dims)) for e in spec.shape)
                result[spec.name] = t = torch.empty(shape, dtype=spec.dtype, device=device)
                into[spec.name] = device_array(t)
        with self._order:
            self.model.run(feed, dims=dims, fetch=(), into=into)
        return result

    def _bind_device(self, name: str, t: torch.Tensor, state: bool = False) -> None:
        """Bind `name` to `t`'s device memory, once per storage (the tensor is kept alive here)."""
        have = self._device_bound.get(name)
        if have is not None and have[1] is t and have[0][0] == t.data_ptr():
            return  # the bound tensor itself, same storage (its shape and device are in the call's signature)
        key = (t.data_ptr(), t.dtype, tuple(t.shape), t.is_contiguous())
        if have is not None and have[0] == key:  # same storage (the bound tensor is kept alive here)
            return
        if not t.is_contiguous():
            if state:
                raise InputError(
                    f"input {name!r} is updated in place but is not contiguous (strides {t.stride()}): "
                    "luminal binds state by its device address"
                )
            t = t.contiguous()  # a weight stored strided: one contiguous copy, bound and kept
            log.info("luminal: %s is not contiguous; bound a contiguous copy", name)
        self.model.bind_device(name, device_array(t))
        self._device_bound[name] = (key, t)


def _with_fixed_bucket(tr: Translation, options: dict) -> dict:
    """`options` with the dims the translation fixed (a static cache's capacity, the decode row
    `luminal_query_rows`: cache_attention.py) as the plan's bucket, unless the caller gave buckets.
    Without it those dims are unbounded to the compiler: the search prices candidates at its default
    size for a free dim (64: a 64-row prefill against a 64-slot cache, where GEMMs and unfused
    epilogues win on a GPU) and the rules bounded by a dim's range (the one-block cache write) do
    not fire; the decode step then runs that plan at one row (session 6: 320 launches per step on
    the H200 against the zoo's 197, whose decode bucket is s = 1)."""
    fixed = {d: (lo, hi) for d, (lo, hi) in tr.ranges.items() if lo == hi and d in tr.graph.dims()}
    if not fixed or "buckets" in options:
        return options
    return {**options, "buckets": [fixed]}


def host_scalar(spec, t: torch.Tensor) -> bool:
    """A per-call 0-d CPU tensor: a scalar argument (fed from the host on the device path)."""
    return not spec.persistent and t.ndim == 0 and t.device.type == "cpu"
