"""A CPU stand-in for luminal.backends.cuda.driver, so the runtime's bookkeeping (arena offsets,
pointer stability, graph build / patch / rebuild, persistent uploads, carry) runs in CI.

Device memory is numpy byte arrays at fake 256-aligned addresses; a "kernel launch" runs the
kernel op's reference semantics (the HLIR op's) on the bytes behind its pointer arguments, so two
live buffers that wrongly share arena bytes corrupt each other's results exactly as on a GPU. An op
with zeroed words (KernelOp.zeroed_bytes) checks they are zero, as its self-resetting kernel needs
(fresh fake memory is 0xA5 garbage).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from luminal.backends.cuda import driver as real
from luminal.errors import BackendError

_HEAP: dict[int, np.ndarray] = {}
_BASES: list[int] = []
_NEXT = [1 << 20]
LOG: list[str] = []


def reset() -> None:
    _HEAP.clear()
    _BASES.clear()
    LOG.clear()


def mem(ptr: int, nbytes: int | None = None) -> np.ndarray:
    """The bytes at fake device address `ptr` (to the end of its allocation, or `nbytes`)."""
    k = bisect.bisect_right(_BASES, ptr) - 1
    if k < 0:
        raise BackendError(f"fake device: bad pointer 0x{ptr:x}")
    base = _BASES[k]
    buf = _HEAP[base]
    off = ptr - base
    if off > buf.size or (nbytes is not None and off + nbytes > buf.size):
        raise BackendError(f"fake device: access 0x{ptr:x}+{nbytes} outside an allocation of {buf.size} bytes")
    return buf[off:] if nbytes is None else buf[off : off + nbytes]


@dataclass
class Device:
    name: str = "fake"
    arch: str = "sm_90"
    stream: object = "stream"

    def synchronize(self) -> None:
        pass


_DEV = Device()


def device() -> Device:
    return _DEV


def device_available() -> bool:
    return True


class DeviceBuffer:
    def __init__(self, nbytes: int):
        self.nbytes = int(nbytes)
        self.ptr = _NEXT[0]
        _NEXT[0] += (max(self.nbytes, 1) + 255) // 256 * 256 + 256
        _HEAP[self.ptr] = np.full(max(self.nbytes, 1), 0xA5, np.uint8)  # garbage, like fresh device memory
        bisect.insort(_BASES, self.ptr)
        LOG.append(f"alloc {self.nbytes}")

    def free(self) -> None:
        if self.ptr in _HEAP:
            del _HEAP[self.ptr]
            _BASES.remove(self.ptr)
            self.ptr = 0

    def __del__(self):
        self.free()


def htod(dst: int, arr: np.ndarray, stream) -> None:
    if arr.nbytes:
        mem(dst, arr.nbytes)[:] = np.frombuffer(arr.tobytes(), np.uint8)
        LOG.append(f"htod {arr.nbytes}")


def dtoh(arr: np.ndarray, src: int, stream) -> None:
    if arr.nbytes:
        arr.view(np.uint8).reshape(-1)[:] = mem(src, arr.nbytes)
        LOG.append(f"dtoh {arr.nbytes}")


def dtod(dst: int, src: int, nbytes: int, stream) -> None:
    if nbytes:
        mem(dst, nbytes)[:] = mem(src, nbytes).copy()


def memset8(dst: int, value: int, nbytes: int, stream) -> None:
    if nbytes:
        mem(dst, nbytes)[:] = value
        LOG.append(f"memset {nbytes}")


class Params:
    def __init__(self, values):
        self.values = [int(v) for v in values]


class Func:
    """A kernel entry; `bind` gives it the executor state it needs to run reference semantics."""

    def __init__(self, name: str):
        self.name = name
        self.run = None

    def __call__(self, params: Params) -> None:
        if self.run is not None:
            self.run(params.values)


class Module:
    def __init__(self, image=None):
        self._funcs: dict[str, Func] = {}

    def function(self, name: str, shared: int = 0) -> Func:
        """(`shared`: the dynamic shared bytes the real driver opts the function in to; nothing here.)"""
        if name not in self._funcs:
            self._funcs[name] = f = Func(name)
            if name.startswith("sample_"):  # the device sampler (luminal/backends/cuda/sample.py)
                f.run = _sampler(name)
            elif name.startswith(
                "argmax_"
            ):  # its greedy rows (argmax_kernel): values out, x, err, part, ticket, rows, V
                sample = _sampler(name)
                f.run = lambda v, sample=sample: sample([*v[:3], v[5], v[6], 0, 0, _ONE, 0, 0])
        return self._funcs[name]


_ONE = 0x3FF0000000000000  # the bits of 1.0 (top_p: no filter)


def _sampler(name: str):
    """The sampling kernel's effect on fake memory, by the numpy oracle (luminal/sampling.py)."""
    import struct

    from luminal.dtype import DType
    from luminal.sampling import Sampler, sample

    dt = DType(name.split("_")[1])
    dbl = lambda v: struct.unpack("<d", struct.pack("<Q", v))[0]  # noqa: E731

    def run(values):
        out, logits, err, rows, cols, tbits, top_k, pbits, seed, position = values
        x = mem(logits, rows * cols * dt.itemsize).view(dt.np).reshape(rows, cols)
        ids = sample(x, Sampler(dbl(tbits), top_k, dbl(pbits), seed), position)
        head = mem(err, 16).view(np.int64) if err else np.zeros(2, np.int64)
        res = np.concatenate([head, ids.astype(np.int64)])
        mem(out, res.nbytes)[:] = res.view(np.uint8)

    return run


def load_kernels(kernels):
    return {k.code: Module() for k in kernels}


def launch(func, grid, block, shared, params, stream) -> None:
    LOG.append("launch")
    func(params)


def kernel_node_params(func, grid, block, shared, params):
    return (func, grid, Params(params.values))


class Graph:
    """The chain of nodes a real driver.Graph builds, with the edge kinds it would give them
    (`driver.edge_kind`, the real rule: programmatic kernel -> kernel under LUMINAL_PDL, full around
    every child graph) recorded in `edges` as (from, to, kind); `kinds` per node (kernel / host)."""

    def __init__(self, pdl: bool | None = None):
        from luminal import flags

        self.pdl = flags.pdl() if pdl is None else pdl  # the fake device is an sm_90
        self.nodes: list = []
        self.kinds: list[str] = []
        self.edges: list[tuple[int, int, str]] = []
        self.exec = None

    def _add(self, kind: str, node) -> int:
        if self.nodes:
            self.edges.append((len(self.nodes) - 1, len(self.nodes), real.edge_kind(self.kinds[-1], kind, self.pdl)))
        self.nodes.append(node)
        self.kinds.append(kind)
        return len(self.nodes) - 1

    def add_kernel(self, p) -> int:
        return self._add(real.KERNEL, p)

    def add_child(self, child) -> int:
        return self._add(real.HOST, child)

    def set_child(self, index, child) -> None:
        self.nodes[index] = child

    def set_kernel_params(self, index, p) -> None:
        self.nodes[index] = p

    def instantiate(self) -> None:
        self.exec = True
        LOG.append("instantiate")

    def launch(self, stream) -> None:
        LOG.append("graph launch")
        for func, _grid, params in self.nodes:
            func(params)

    def destroy(self) -> None:
        self.exec = None


class Event:
    def record(self, stream) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def elapsed_ms(self, start) -> float:
        return 0.001


_HOST: dict = {}  # host op -> (input dtypes, output dtype), for `capture`


def bind(executor) -> None:
    """Make each kernel step of `executor` run its op's reference semantics on fake memory (once
    per op: multi-launch ops compute everything in their first launch)."""
    seen: set[int] = set()
    for s in executor.steps:
        if s.host is not None:
            n = executor.nodes[s.node]
            _HOST[s.host] = (tuple(executor.nodes[j].dtype for j in n.inputs), n.dtype)
            continue
        if s.node in seen:
            continue
        seen.add(s.node)
        s.func = Func(s.func.name)
        s.func.run = _runner(executor, s.node)


def capture(op, stream, out_ptr: int, in_ptrs, env):
    """A host op "captured" for these pointers and dims: a graph node running its reference semantics
    with the dims of the capture (like a real capture, which bakes them in). Counted in LOG."""
    in_dts, out_dt = _HOST[op]
    env = dict(env)
    LOG.append("capture")

    def run(values):
        arrays = [mem(p).view(np.uint8)[: mem(p).size // dt.itemsize * dt.itemsize].view(dt.np)
                  for p, dt in zip(in_ptrs, in_dts, strict=True)]  # fmt: skip
        r = np.ascontiguousarray(op.reference(arrays, in_dts, env)).astype(out_dt.np)
        mem(out_ptr, r.nbytes)[:] = np.frombuffer(r.tobytes(), np.uint8)

    f = Func(type(op).__name__)
    f.run = run
    return (f, 1, Params([]))


def _runner(ex, i: int):
    node = ex.nodes[i]
    in_dts = tuple(ex.nodes[j].dtype for j in node.inputs)

    zeroed = node.op.zeroed_bytes()

    def run(values):
        out, ins, dims = values[0], values[1 : 1 + len(node.inputs)], values[1 + len(node.inputs)]
        if zeroed and mem(values[-1], zeroed).any():  # the kernel's counters must start at zero
            raise BackendError(f"fake device: {type(node.op).__name__}'s zeroed words are not zero")
        dv = mem(dims, 8 * max(1, len(ex.slots))).view(np.int64)
        env = {d: int(dv[k]) for d, k in ex.slots.items()}
        arrays = [mem(p).view(np.uint8)[: mem(p).size // dt.itemsize * dt.itemsize].view(dt.np) for p, dt in
                  zip(ins, in_dts, strict=True)]  # fmt: skip
        r = np.ascontiguousarray(node.op.reference(arrays, in_dts, env)).astype(node.dtype.np)
        mem(out, r.nbytes)[:] = np.frombuffer(r.tobytes(), np.uint8)

    return run
