"""CudaExecutor: runs an LLIR of kernel ops on the GPU (one stream, the plan replayed as a CUDA graph).

Loading renders every kernel op with the plan's dims slots, compiles the missing kernels in one
NVRTC program (cached in process and on disk) and lays out buffers: user inputs get their own
device buffers (persistent ones are uploaded once and stay), every kernel output and scratch gets
an offset in one arena (memory.py). Running:
1. evaluate buffer sizes for the dims; replan/reallocate the arena only if a size outgrew its slot;
2. upload inputs (a persistent input is skipped when it is the same array object as last time);
3. write the dims into the device dims buffer (kernels read dims from it: no recompiling);
4. launch the CUDA graph: built once, patched (cuGraphExecKernelNodeSetParams) only for nodes whose
   grid changed with the dims, rebuilt only when a pointer changed (arena or input regrowth);
5. copy outputs back (or leave them on the device: `run_device`), apply `carry` copies.
Host ops (library calls, host/__init__.py has the contract) are steps too: their outputs live in
the arena, `prepare` runs when dims or pointers change, and under CUDA graphs their launches are
captured into child-graph nodes, re-captured when `signature(env)` or a pointer changes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from luminal.backends.cuda import driver, memory, nvrtc
from luminal.backends.cuda.host import HostOp, capture
from luminal.backends.cuda.kernel import ERROR_SLOT, Kernel, KernelOp, source
from luminal.backends.cuda.kernels.indexing import KernelGather
from luminal.dtype import DType
from luminal.errors import BackendError, InputError
from luminal.hlir import Input, Output
from luminal.shape.expr import ONE, Expression

log = logging.getLogger(__name__)

_MODULES: dict[str, driver.Module] = {}  # kernel code -> loaded module holding its entries
GROWTH = 1.25  # arena/input regrowth headroom, so a slowly growing dim does not replan every run


def load_kernels(kernels: Sequence[Kernel]) -> dict[str, driver.Module]:
    """Modules for every kernel; the ones not loaded yet are compiled together in one program."""
    missing = list({k.code: k for k in kernels if k.code not in _MODULES}.values())
    if missing:
        mod = driver.Module(nvrtc.compile_cubin(source(missing)))
        for k in missing:
            _MODULES[k.code] = mod
    return {k.code: _MODULES[k.code] for k in kernels}


@dataclass
class Step:
    """One launch of one kernel op (function, grid expression, block, shared bytes), or one host op."""

    node: int
    func: object
    grid: Expression
    block: int
    shared: int
    scratch: bool
    host: HostOp | None = None


@dataclass(frozen=True)
class DeviceView:
    """A device-resident result: valid until the next run of the executor."""

    ptr: int
    size: int
    dtype: DType

    def numpy(self) -> np.ndarray:
        out = np.empty(self.size, self.dtype.np)
        dev = driver.device()
        driver.dtoh(out, self.ptr, dev.stream)
        dev.synchronize()
        return out


class CudaExecutor:
    runs_host_ops = True  # host ops (cuBLASLt) run as graph child nodes; see host/__init__.py

    def __init__(self, nodes: Sequence, persistent: frozenset[str] = frozenset(), use_graphs: bool = True):
        self.dev = driver.device()
        self.nodes = list(nodes)
        self.persistent = frozenset(persistent)
        self.use_graphs = use_graphs
        bad = sorted(
            {type(n.op).__name__ for n in self.nodes if not isinstance(n.op, (Input, Output, KernelOp, HostOp))}
        )
        if bad:
            raise BackendError(
                f"the cuda backend cannot run ops {bad}: the LLIR must hold CUDA kernel and host ops only"
            )
        names: set[str] = set()
        for n in self.nodes:
            if isinstance(n.op, KernelOp):
                names |= n.op.dim_names() | n.op.out_size().dims() | n.op.scratch_bytes().dims()
            elif isinstance(n.op, HostOp):
                names |= n.op.dim_names() | n.op.out_size().dims()
        self.slots = {d: i for i, d in enumerate(sorted(names))}
        # two words after the dims: (flag, value) a kernel sets to report an error (Gather out of range)
        self._err = len(self.slots)
        t0 = time.perf_counter()
        kslots = {**self.slots, ERROR_SLOT: self._err}
        rendered = {i: n.op.render(kslots) for i, n in enumerate(self.nodes) if isinstance(n.op, KernelOp)}
        self._reports = any(isinstance(n.op, KernelGather) for n in self.nodes)
        mods = load_kernels(list(rendered.values()))
        self.steps: list[Step] = []
        for i, n in enumerate(self.nodes):  # topological order: kernels and host ops interleaved
            if isinstance(n.op, HostOp):
                self.steps.append(Step(i, None, ONE, 0, 0, False, n.op))
            elif i in rendered:
                for ln in rendered[i].launches:
                    f = mods[rendered[i].code].function(ln.name)
                    self.steps.append(Step(i, f, ln.grid, ln.block, ln.shared, n.op.scratch_bytes() != 0))
        self.inputs = {n.op.label: i for i, n in enumerate(self.nodes) if isinstance(n.op, Input)}
        self.outputs = {n.op.label: n.inputs[0] for n in self.nodes if isinstance(n.op, Output)}
        self._life = memory.lifetimes([n.inputs for n in self.nodes], list(self.outputs.values()))
        computed = [(i, n) for i, n in enumerate(self.nodes) if isinstance(n.op, (KernelOp, HostOp))]
        self._sizes = {i: n.op.out_size() * n.dtype.itemsize for i, n in computed}
        self._scratch = {i: n.op.scratch_bytes() for i, n in computed if isinstance(n.op, KernelOp)}
        self._scratch = {i: e for i, e in self._scratch.items() if e != 0}
        self.stats = {"kernels": len(rendered), "launches": len(self.steps), "compile_s": time.perf_counter() - t0,
                      "arena_bytes": 0, "graph_builds": 0, "graph_patches": 0, "replans": 0, "pointer_moves": 0,
                      "host_captures": 0}  # fmt: skip
        self._plan: memory.ArenaPlan | None = None
        self._arena: driver.DeviceBuffer | None = None
        self._in_bufs: dict[str, driver.DeviceBuffer] = {}
        self._uploaded: dict[str, int] = {}  # persistent label -> id() of the array last uploaded
        self._dims_buf = driver.DeviceBuffer(8 * (len(self.slots) + 2))
        self._dims_host = np.zeros(len(self.slots) + 2, np.int64)  # dims, then the error pair (cleared)
        self._err_host = np.zeros(2, np.int64)
        self._graph: driver.Graph | None = None
        self._grids: list[int] = []
        self._params: list[driver.Params] = []
        self._ptrs: dict[int, int] = {}
        self._carry: list[tuple[str, str]] = []
        self._env_key: tuple | None = None
        self._env: dict[str, int] = {}
        self._nbytes: dict[int, int] = {}  # computed node -> output bytes at the current dims
        self._in_nbytes: dict[int, int] = {}  # input node -> bytes of the array last fed
        self._host_state: dict[int, tuple] = {}  # step -> (signature, pointers) it was prepared/captured for

    # -- public -----------------------------------------------------------------------------------
    def run(self, feed: Mapping[str, np.ndarray], env: Mapping[str, int]) -> dict[str, np.ndarray]:
        views = self.run_device(feed, env)
        out = {}
        for label, v in views.items():
            out[label] = arr = np.empty(v.size, v.dtype.np)
            driver.dtoh(arr, v.ptr, self.dev.stream)
        if self._reports:
            driver.dtoh(self._err_host, self._dims_buf.ptr + 8 * self._err, self.dev.stream)
        self.dev.synchronize()
        if self._reports and self._err_host[0]:
            raise BackendError(f"Gather: index {int(self._err_host[1])} out of range for its data (cuda kernel)")
        return out

    def run_device(self, feed: Mapping[str, np.ndarray], env: Mapping[str, int]) -> dict[str, DeviceView]:
        """Run and leave the outputs on the GPU (decode loops): views valid until the next run.
        Nothing is synchronized or read back (so a Gather index out of range is not reported)."""
        self._prepare(feed, env)
        self._execute()
        for out, inp in self._carry:
            src = self.outputs[out]
            nbytes = self._bytes(src)
            if nbytes > self._in_bufs[inp].nbytes:
                raise InputError(
                    f"carry {out!r} -> {inp!r}: output has {nbytes} bytes, input {self._in_bufs[inp].nbytes}"
                )
            driver.dtod(self._in_bufs[inp].ptr, self._ptrs[src], nbytes, self.dev.stream)
        return {label: DeviceView(self._ptrs[s], self._bytes(s) // self.nodes[s].dtype.itemsize, self.nodes[s].dtype)
                for label, s in self.outputs.items()}  # fmt: skip

    def set_persistent(self, names: frozenset[str]) -> None:
        """Inputs bound once (weights, caches): uploaded again only when a different array is passed."""
        self.persistent = frozenset(names)

    def carry(self, output: str, input: str) -> None:
        """After every run, copy output `output` into the device buffer of (persistent) input
        `input` on the GPU: state such as a KV cache never travels through the host."""
        if output not in self.outputs or input not in self.inputs:
            raise InputError(
                f"carry({output!r}, {input!r}): outputs are {sorted(self.outputs)}, inputs {sorted(self.inputs)}"
            )
        if input not in self.persistent:
            raise InputError(f"carry into {input!r}: only persistent inputs keep device state (mark it .persist())")
        self._carry.append((output, input))

    def profile(self, env: Mapping[str, int], input_sizes: Mapping[str, int], reps: int = 20, warmup: int = 3) -> float:
        """Median seconds of one plan execution (CUDA events around the graph launch), after
        warm-up, on inputs filled with ones (never zeros: zeros hide NaN paths and denormals)."""
        feed = {}
        for label, i in self.inputs.items():
            dt = self.nodes[i].dtype
            feed[label] = np.ones(int(input_sizes[label]), dt.np)
        self._prepare(feed, env)
        for _ in range(warmup):
            self._execute()
        evs = [(driver.Event(), driver.Event()) for _ in range(reps)]
        for a, b in evs:
            a.record(self.dev.stream)
            self._execute()
            b.record(self.dev.stream)
        self.dev.synchronize()
        self._uploaded.clear()  # the device copies of persistent inputs now hold ones
        return float(np.median([b.elapsed_ms(a) for a, b in evs])) * 1e-3

    # -- preparing --------------------------------------------------------------------------------
    def _prepare(self, feed: Mapping[str, np.ndarray], env: Mapping[str, int]) -> None:
        try:
            self._dims_host[: len(self.slots)] = [int(env[d]) for d in self.slots]
        except KeyError as e:
            raise InputError(f"no value for dim {e.args[0]!r} (the plan uses dims {sorted(self.slots)})") from None
        key = tuple(self._dims_host.tolist())
        self._env = {d: int(env[d]) for d in self.slots}
        if key != self._env_key:
            memo: dict[Expression, int] = {}
            ev = lambda e: memo[e] if e in memo else memo.setdefault(e, int(e.evaluate(env)))  # noqa: E731
            self._nbytes = {i: ev(e) for i, e in self._sizes.items()}
            self._scratch_n = {i: ev(e) for i, e in self._scratch.items()}
            self._grid_now = [ev(s.grid) for s in self.steps]
            self._env_key = key
        moved = self._place(feed)
        self.stats["pointer_moves"] += moved
        driver.htod(self._dims_buf.ptr, self._dims_host, self.dev.stream)
        if moved or (self._graph is None and self.use_graphs):
            self._bind()

    def _place(self, feed: Mapping[str, np.ndarray]) -> bool:
        """Arena (re)plan and input uploads; True when any device pointer changed."""
        moved = False
        want = {("out", i): n for i, n in self._nbytes.items()} | {("tmp", i): n for i, n in self._scratch_n.items()}
        if self._plan is None or not self._plan.fits(want):
            old = self._plan.sizes if self._plan else {}
            bufs = []
            for (kind, i), n in want.items():
                cap = max(n, old.get((kind, i), 0))
                if self._plan is not None and n > old.get((kind, i), 0):
                    cap = int(cap * GROWTH)
                start, end = self._life[i] if kind == "out" else (i, i)
                bufs.append(memory.Buffer((kind, i), cap, start, end))
            self._plan = memory.plan(bufs)
            self.dev.synchronize()  # the previous arena may still be in use by queued work
            self._arena = None
            self._arena = driver.DeviceBuffer(self._plan.total)
            self.stats["arena_bytes"] = self._plan.total
            self.stats["replans"] += 1
            moved = True
        base = self._arena.ptr
        for (kind, i), off in self._plan.offsets.items():
            if kind == "out":
                self._ptrs[i] = base + off
        for label, i in self.inputs.items():
            if label not in feed:
                if label in self._in_bufs and label in self.persistent:
                    continue
                raise InputError(f"missing input {label!r}")
            arr = np.ascontiguousarray(feed[label]).reshape(-1)
            if arr.dtype != self.nodes[i].dtype.np:
                raise InputError(f"input {label!r}: dtype {arr.dtype}, the plan needs {self.nodes[i].dtype}")
            buf = self._in_bufs.get(label)
            if buf is None or buf.nbytes < arr.nbytes:
                cap = arr.nbytes if buf is None else int(arr.nbytes * GROWTH)
                self.dev.synchronize()
                self._in_bufs[label] = buf = None
                self._in_bufs[label] = buf = driver.DeviceBuffer(cap)
                self._uploaded.pop(label, None)
                moved = True
            self._ptrs[i] = buf.ptr
            self._in_nbytes[i] = arr.nbytes
            if label in self.persistent and self._uploaded.get(label) == id(feed[label]):
                continue
            driver.htod(buf.ptr, arr, self.dev.stream)
            if label in self.persistent:
                self._uploaded[label] = id(feed[label])
        return moved

    def _bytes(self, i: int) -> int:
        """Bytes of node i's buffer this run (a kernel/host output, or an input as uploaded)."""
        return self._nbytes[i] if i in self._nbytes else self._in_nbytes[i]

    def _host_ptrs(self, s: Step) -> tuple[int, tuple[int, ...]]:
        n = self.nodes[s.node]
        return self._ptrs[s.node], tuple(self._ptrs[j] for j in n.inputs)

    def _bind(self) -> None:
        """Kernel params for the current pointers; (re)build the CUDA graph."""
        self._params = []
        for s in self.steps:
            if s.host is not None:
                self._params.append(None)
                continue
            n = self.nodes[s.node]
            ptrs = [self._ptrs[s.node], *(self._ptrs[j] for j in n.inputs), self._dims_buf.ptr]
            if s.scratch:
                ptrs.append(self._arena.ptr + self._plan.offsets[("tmp", s.node)])
            self._params.append(driver.Params(ptrs))
        if self._graph is not None:
            self._graph.destroy()
            self._graph = None
        self._host_state.clear()
        if self.use_graphs and self.steps:
            g = driver.Graph()
            self._grids = [max(1, x) for x in self._grid_now]
            for k, (s, p, grid) in enumerate(zip(self.steps, self._params, self._grids, strict=True)):
                if s.host is not None:
                    g.add_child(self._capture(k, s))
                else:
                    g.add_kernel(driver.kernel_node_params(s.func, grid, s.block, s.shared, p))
            g.instantiate()
            self._graph = g
            self.stats["graph_builds"] += 1

    def _capture(self, k: int, s: Step):
        out, ins = self._host_ptrs(s)
        self._host_state[k] = (s.host.signature(self._env), out, ins)
        self.stats["host_captures"] += 1
        return capture(s.host, self.dev.stream, out, ins, self._env)

    # -- executing --------------------------------------------------------------------------------
    def _execute(self) -> None:
        stream = self.dev.stream
        if self._graph is None:
            for k, (s, p, grid) in enumerate(zip(self.steps, self._params, self._grid_now, strict=True)):
                if s.host is not None:
                    out, ins = self._host_ptrs(s)
                    state = (s.host.signature(self._env), out, ins)
                    if self._host_state.get(k) != state:
                        s.host.prepare(self._env, out, ins, stream)
                        self._host_state[k] = state
                    s.host.launch(stream, out, ins, self._env)
                elif grid > 0:  # zero-size tensors: no launch
                    driver.launch(s.func, grid, s.block, s.shared, p, stream)
            return
        for k, (s, p) in enumerate(zip(self.steps, self._params, strict=True)):
            if s.host is not None:
                if self._host_state.get(k, (None,))[0] != s.host.signature(self._env):
                    try:  # the dims it reads changed: re-capture and patch the child node
                        self._graph.set_child(k, self._capture(k, s))
                    except BackendError:  # the new capture has another topology: rebuild the graph
                        self._bind()
                        self._graph.launch(stream)
                        return
                continue
            grid = max(1, self._grid_now[k])
            if grid != self._grids[k]:  # dims changed this kernel's grid: patch the node in place
                self._graph.set_kernel_params(k, driver.kernel_node_params(s.func, grid, s.block, s.shared, p))
                self._grids[k] = grid
                self.stats["graph_patches"] += 1
        self._graph.launch(stream)
