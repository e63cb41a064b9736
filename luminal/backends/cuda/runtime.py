"""CudaExecutor: runs an LLIR of kernel ops on the GPU (one stream, the plan replayed as a CUDA graph).

Loading renders every kernel op with the plan's dims slots, compiles the missing kernels in one
NVRTC program (cached in process and on disk) and lays out buffers: per-run inputs get their own
device buffers, persistent inputs live in a `Resident` table shared by the plans (dim buckets) of
one compiled model (bound once: `bind`), every kernel output and scratch gets an offset in one
arena (memory.py), the ops' zeroed words (self-resetting counters) live in one buffer zeroed once,
and an aliasing node (luminal/backends/aliasing.py: in-place KV-cache updates, zero-copy views)
gets its root buffer's pointer plus its offset. Running:
1. evaluate buffer sizes for the dims; replan/reallocate the arena only if a size outgrew its slot
   (a plan whose dims all have bucket bounds is sized at the bounds once: `set_bounds`);
2. upload per-run inputs (a small one is skipped when its bytes did not change);
3. write the dims into the device dims buffer (kernels read dims from it: no recompiling);
4. launch the CUDA graph: built once, its kernel grids sized at the bucket bounds where that is
   cheap (kernels exit past the live sizes) or patched (cuGraphExecKernelNodeSetParams) when the
   dims changed them, rebuilt only when a pointer changed (arena or input regrowth);
5. state: an output named like a persistent input is that input's next value -- nothing to do when
   an in-place op updated the input (the output aliases it), else a device-to-device copy;
6. copy back only the outputs asked for (`fetch`); `sample` draws token ids from an output on the
   device and reads back only the ids.
Host ops (library calls, host/__init__.py has the contract) are steps too: their outputs live in
the arena, `prepare` runs when dims or pointers change, and under CUDA graphs their launches are
captured into child-graph nodes, re-captured when `signature(env)` or a pointer changes.
`stats` counts graph builds / patches / captures and the bytes moved host <-> device by the last
step (`h2d_bytes`, `d2h_bytes`: one `run` plus its `sample`) and in total.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from luminal import flags
from luminal.backends.aliasing import alias_roots, check_inplace, written_roots
from luminal.backends.cuda import driver, memory, nvrtc
from luminal.backends.cuda.host import HostOp, capture
from luminal.backends.cuda.kernel import ERROR_SLOT, Kernel, KernelOp, source
from luminal.backends.cuda.kernels.indexing import KernelGather, KernelGatherFused
from luminal.backends.cuda.rendered import plan_slots, render
from luminal.errors import BackendError, InputError
from luminal.hlir import Input, Output
from luminal.shape.expr import ONE, Expression

log = logging.getLogger(__name__)

_MODULES: dict[str, driver.Module] = {}  # kernel code -> loaded module holding its entries
# what building executors cost (the backend's counters: a warm compile's `load`): cubins loaded as modules
# (their MB and seconds), executors built and their seconds in all (kernels, steps, lifetimes, buffers)
LOAD_STATS = {"modules_loaded": 0, "module_mb": 0.0, "module_load_s": 0.0, "executors": 0, "executor_s": 0.0}
GROWTH = 1.25  # arena/input regrowth headroom, so a slowly growing dim does not replan every run
PIN_ARENA_BYTES = 4 << 30  # a bounded plan is sized at its bucket bounds when that arena fits in this
PIN_GRID = 512  # ... and a kernel's grid is fixed at its bound when that is at most this many blocks (~4 waves)
SMALL_INPUT = 4096  # per-run inputs up to this many bytes are not uploaded again when unchanged


def log_profile(table: str) -> None:
    logging.getLogger("luminal.profile").info("%s", table)


def load_kernels(kernels: Sequence[Kernel]) -> dict[str, driver.Module]:
    """Modules for every kernel. The ones not loaded yet come from NVRTC's per-kernel index (compiled
    before, in any batch, by any process) or are compiled, split into one program per CPU."""
    missing = {k.code: k for k in kernels if k.code not in _MODULES}
    if missing:
        images = nvrtc.compile_units(list(missing), lambda codes: source([missing[c] for c in codes]))
        modules: dict[int, driver.Module] = {}  # one module per image (a program holds several kernels)
        for code, image in images.items():
            if id(image) not in modules:
                t = time.perf_counter()
                modules[id(image)] = driver.Module(image)
                LOAD_STATS["module_load_s"] += time.perf_counter() - t
                LOAD_STATS["modules_loaded"] += 1
                LOAD_STATS["module_mb"] += len(image) / 2**20
            _MODULES[code] = modules[id(image)]
    return {k.code: _MODULES[k.code] for k in kernels}


def monotone(e: Expression) -> bool:
    """Whether `e` never decreases as any dim grows (sums, products, quotients, min / max of such terms
    with non-negative constants): only then is a grid evaluated at the bucket's upper bounds at least
    the grid at every dims inside the bucket. A grid gated by a comparison (the attention kernel's
    `264 * (s < 9) * s`: zero at the bound, 1584 blocks at s = 6) is not, and must follow the dims."""
    if e.op == "num":
        return e.value >= 0
    if e.op == "var":
        return True
    return e.op in ("add", "mul", "div", "cdiv", "min", "max") and all(monotone(a) for a in e.args)


class AtDims:
    """Expressions (by key) evaluated at one run's dims on first use: a steady decode step reads
    only the few it needs (fetched outputs, grids that follow the dims), not every buffer's size."""

    def __init__(self, exprs: Mapping, env: Mapping[str, int], memo: dict):
        self.exprs, self.env, self.memo = exprs, env, memo
        self.vals: dict = {}

    def __getitem__(self, k) -> int:
        v = self.vals.get(k)
        if v is None:
            e = self.exprs[k]
            v = self.memo.get(e)
            if v is None:
                v = self.memo[e] = int(e.evaluate(self.env))
            self.vals[k] = v
        return v

    def __contains__(self, k) -> bool:
        return k in self.exprs

    def keys(self):
        return self.exprs.keys()

    def items(self):
        return [(k, self[k]) for k in self.exprs]


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
class External:
    """Device memory a persistent input is bound to that the caller owns (`bind_device`): not freed here."""

    ptr: int
    nbytes: int


class Resident:
    """Device buffers of persistent inputs (weights, KV caches), shared by the plans of one model.

    `bind` uploads at once and keeps no reference to the host array (a model streams its weights
    through it tensor by tensor); `src` remembers which array object was uploaded, so a run that
    passes the same object again does not upload it again."""

    def __init__(self) -> None:
        self.bufs: dict[str, driver.DeviceBuffer] = {}
        self.nbytes: dict[str, int] = {}
        self.src: dict[str, int] = {}
        self.bytes_bound = 0
        self.version = 0  # bumped whenever a buffer is (re)allocated: plans re-read their pointers

    def bind(self, label: str, arr: np.ndarray, dev) -> None:
        flat = np.ascontiguousarray(arr).reshape(-1)
        buf = self.bufs.get(label)
        if buf is None or isinstance(buf, External) or buf.nbytes < flat.nbytes:  # never write caller memory
            dev.synchronize()  # queued work may still read the old buffer
            self.bufs[label] = buf = None
            self.bufs[label] = buf = driver.DeviceBuffer(flat.nbytes)
            self.version += 1
        driver.htod(buf.ptr, flat, dev.stream)
        self.nbytes[label] = flat.nbytes
        self.src[label] = id(arr)
        self.bytes_bound += flat.nbytes

    def bind_device(self, label: str, ptr: int, nbytes: int) -> None:
        """Use caller-owned device memory at `ptr` for `label` (no allocation, no copy); the caller
        keeps it alive. A later `bind` of the label allocates a buffer of its own again."""
        buf = self.bufs.get(label)
        if buf is None or buf.ptr != ptr or buf.nbytes != nbytes:
            self.bufs[label] = External(int(ptr), int(nbytes))
            self.version += 1
        self.nbytes[label] = int(nbytes)
        self.src.pop(label, None)

    def forget_sources(self) -> None:
        """The device copies no longer hold what was uploaded (profiling filled them with ones)."""
        self.src.clear()


class OnesPool:
    """Device buffers filled with ones for timing plans (`CudaExecutor.profile`), filled on the device
    (cuMemsetD8/D16/D32 with the bit pattern of 1 in the dtype) and shared by every plan timed with the
    pool: per dtype, numbered buffers grown to the largest input asked for (a plan's largest input of a
    dtype gets buffer 0, the next buffer 1, ...: its inputs never alias), so the 128256 x 2048 head of a
    model is filled once per compile, not uploaded from the host once per candidate op. Buffers of
    inputs a plan writes in place are separate and filled again before each plan.
    `stats`: bytes filled on the device and bytes uploaded (8-byte dtypes, which no memset can fill)."""

    def __init__(self) -> None:
        self.bufs: dict[tuple, driver.DeviceBuffer] = {}
        self.stats = {"fill_bytes": 0, "upload_bytes": 0, "allocs": 0}

    def get(self, dt, k: int, nbytes: int, written: bool = False) -> int:
        """Pointer to at least `nbytes` of ones of dtype `dt` in the pool's k-th buffer of `dt` (a plan's
        inputs each get their own k); `written`: a plan writes it in place, so it is filled again now."""
        key = (dt, k, written)
        buf = self.bufs.get(key)
        if buf is None or buf.nbytes < nbytes:
            driver.device().synchronize()  # queued timing runs may still read the old buffer
            self.bufs[key] = buf = None
            self.bufs[key] = buf = driver.DeviceBuffer(max(nbytes, 256))
            self.stats["allocs"] += 1
            self._fill(buf.ptr, dt, buf.nbytes)
        elif written:
            self._fill(buf.ptr, dt, nbytes)
        return buf.ptr

    def _fill(self, ptr: int, dt, nbytes: int) -> None:
        stream = driver.device().stream
        size = dt.itemsize
        count = nbytes // size
        if size in (1, 2, 4):
            bits = int(np.ones(1, dt.np).view(f"u{size}")[0])
            driver.call(f"cuMemsetD{8 * size}Async", ptr, bits, count, stream)
            self.stats["fill_bytes"] += count * size
        elif count:
            driver.htod(ptr, np.ones(count, dt.np), stream)
            self.stats["upload_bytes"] += count * size


class CudaExecutor:
    runs_host_ops = True  # host ops (cuBLASLt) run as graph child nodes; see host/__init__.py

    def __init__(self, nodes: Sequence, persistent: frozenset[str] = frozenset(), use_graphs: bool = True,
                 dims: Iterable[str] = ()):  # fmt: skip
        t_init = time.perf_counter()
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
        kslots = plan_slots(self.nodes, dims)
        self.slots = {d: i for d, i in kslots.items() if d != ERROR_SLOT}
        # two words after the dims: (flag, value) a kernel sets to report an error (Gather out of range)
        self._err = len(self.slots)
        t0 = time.perf_counter()
        rendered = {i: render(n.op, kslots) for i, n in enumerate(self.nodes) if isinstance(n.op, KernelOp)}
        self._reports = any(isinstance(n.op, (KernelGather, KernelGatherFused)) for n in self.nodes)
        mods = load_kernels(list(rendered.values()))
        self.steps: list[Step] = []
        # per op object (an unrolled plan repeats its body's): attention's walks its spec, ~0.3 ms a call
        scratch: dict[int, Expression] = {
            id(n.op): n.op.scratch_bytes() for n in self.nodes if isinstance(n.op, KernelOp)
        }
        for i, n in enumerate(self.nodes):  # topological order: kernels and host ops interleaved
            if isinstance(n.op, HostOp):
                self.steps.append(Step(i, None, ONE, 0, 0, False, n.op))
            elif i in rendered:
                for ln in rendered[i].launches:
                    f = mods[rendered[i].code].function(ln.name, ln.shared)
                    self.steps.append(Step(i, f, ln.grid, ln.block, ln.shared, scratch[id(n.op)] != 0))
        self.inputs = {n.op.label: i for i, n in enumerate(self.nodes) if isinstance(n.op, Input)}
        self.outputs = {n.op.label: n.inputs[0] for n in self.nodes if isinstance(n.op, Output)}
        self._alias = alias_roots(self.nodes)
        check_inplace(self.nodes)
        life = memory.lifetimes([n.inputs for n in self.nodes], list(self.outputs.values()))
        for i, (root, _) in self._alias.items():  # a root buffer lives as long as its aliases
            life[root] = (life[root][0], max(life[root][1], life[i][1]))
        self._life = life
        self._written = written_roots(self.nodes, self._alias)
        computed = [(i, n) for i, n in enumerate(self.nodes) if isinstance(n.op, (KernelOp, HostOp))]
        self._sizes = {i: n.op.out_size() * n.dtype.itemsize for i, n in computed}
        self._scratch = {i: scratch[id(n.op)] for i, n in computed if isinstance(n.op, KernelOp)}
        self._scratch = {i: e for i, e in self._scratch.items() if e != 0}
        self._zeroed, self._zeroed_buf = self._zeroed_words(computed)
        self._grid_exprs = {k: st.grid for k, st in enumerate(self.steps)}
        self._alias_offsets = {i: off for i, (_, off) in self._alias.items()}
        self._alias_dynamic = any(off.dims() for off in self._alias_offsets.values())
        self._res_version = -1
        self._dynamic: list[int] = list(range(len(self.steps)))  # steps whose launch may change with dims
        self.stats = {"kernels": len(rendered), "launches": len(self.steps), "compile_s": time.perf_counter() - t0,
                      "arena_bytes": 0, "graph_builds": 0, "graph_patches": 0, "replans": 0, "pointer_moves": 0,
                      "host_captures": 0, "pinned": False, "h2d_bytes": 0, "d2h_bytes": 0, "h2d_total": 0,
                      "d2h_total": 0, "d2d_bytes": 0, "runs": 0}  # fmt: skip
        self.resident = Resident()
        self._upper: dict[str, int] | None = None  # bucket bounds of every dim, when all are bounded
        self._plan: memory.ArenaPlan | None = None
        self._arena: driver.DeviceBuffer | None = None
        self._in_bufs: dict[str, driver.DeviceBuffer] = {}
        self._small: dict[str, bytes] = {}  # per-run input -> bytes last uploaded (small ones)
        self._dims_buf = driver.DeviceBuffer(8 * (len(self.slots) + 2))
        self._dims_host = np.zeros(len(self.slots) + 2, np.int64)  # dims, then the error pair (cleared)
        self._err_host = np.zeros(2, np.int64)
        self._graph: driver.Graph | None = None
        self._grids: list[int] = []
        self._pinned: list[int | None] = [None] * len(self.steps)
        self._params: list[driver.Params] = []
        self._ptrs: dict[int, int] = {}
        self._env_key: tuple | None = None
        self._env: dict[str, int] = {}
        self._nbytes: dict[int, int] = {}  # computed node -> output bytes at the current dims
        self._in_nbytes: dict[int, int] = {}  # input node -> bytes of the array last fed
        self._offsets: dict[int, int] = {}  # aliasing node -> byte offset in its root at the current dims
        self._host_state: dict[int, tuple] = {}  # step -> (signature, pointers) it was prepared/captured for
        self._sampler = None
        self._split_inputs()
        self._profiled = False
        self._fixed: dict[int, tuple[int, int]] | None = None  # input node -> (ptr, bytes) while profiling
        self._state: dict[str, tuple[int, int]] = {}  # state label -> (input node, output node)
        LOAD_STATS["executors"] += 1
        LOAD_STATS["executor_s"] += time.perf_counter() - t_init

    def _zeroed_words(self, computed) -> tuple[dict[int, int], driver.DeviceBuffer | None]:
        """One persistent buffer for every op's zeroed words (KernelOp.zeroed_bytes: self-resetting
        counters), zeroed once here: node -> byte offset (256-aligned), and the buffer."""
        offsets, total = {}, 0
        for i, n in computed:
            nbytes = n.op.zeroed_bytes() if isinstance(n.op, KernelOp) else 0
            if nbytes:
                offsets[i], total = total, total + (nbytes + 255) // 256 * 256
        if not total:
            return offsets, None
        buf = driver.DeviceBuffer(total)
        driver.memset8(buf.ptr, 0, total, self.dev.stream)
        return offsets, buf

    # -- public -----------------------------------------------------------------------------------
    def run(self, feed: Mapping[str, np.ndarray], env: Mapping[str, int],
            fetch: Sequence[str] | None = None, into: Mapping | None = None) -> dict[str, np.ndarray]:  # fmt: skip
        """Run the plan; copy back the outputs in `fetch` (default: all), and copy the outputs in
        `into` (label -> DeviceArray) device-to-device into caller memory. The others stay on the
        device until the next run (`sample` reads from them). Gather range errors are reported when
        something is read back (here, or by the next `sample`)."""
        self.stats["h2d_bytes"] = self.stats["d2h_bytes"] = self.stats["d2d_bytes"] = 0
        self.stats["runs"] += 1
        self._prepare(feed, env)
        if not self._profiled and flags.profile():  # one table per plan, before the real launch
            from luminal.backends.cuda.profile import step_table

            self._profiled = True
            log_profile(step_table(self, f"{len(self.steps)} steps "))
        self._execute()
        for label, (inp, src) in self._state.items():  # in place already when the output aliases the input
            if self._ptrs[src] != self._ptrs[inp]:
                nbytes = self._bytes(src)
                if nbytes > self._capacity(inp):
                    raise BackendError(
                        f"state {label!r}: the output has {nbytes} bytes, its input {self._capacity(inp)}"
                    )
                driver.dtod(self._ptrs[inp], self._ptrs[src], nbytes, self.dev.stream)
                self.stats["d2d_bytes"] += nbytes
        for label, dst in (into or {}).items():  # outputs into caller-owned device memory
            s = self.outputs[label]
            nbytes = min(self._bytes(s), dst.nbytes)
            driver.dtod(dst.ptr, self._ptrs[s], nbytes, self.dev.stream)
            self.stats["d2d_bytes"] += nbytes
        labels = list(self.outputs) if fetch is None else list(fetch)
        out = {}
        for label in labels:
            if label not in self.outputs:
                raise InputError(f"fetch: no output {label!r}; outputs are {sorted(self.outputs)}")
            s = self.outputs[label]
            out[label] = arr = np.empty(self._bytes(s) // self.nodes[s].dtype.itemsize, self.nodes[s].dtype.np)
            self._d2h(arr, self._ptrs[s])
        if labels and self._reports:
            self._d2h(self._err_host, self._dims_buf.ptr + 8 * self._err)
        if labels:
            self.dev.synchronize()
            if self._reports and self._err_host[0]:
                raise BackendError(f"Gather: index {int(self._err_host[1])} out of range for its data (cuda kernel)")
        return out

    def set_persistent(self, names: frozenset[str], share: CudaExecutor | None = None) -> None:
        """Inputs bound once (weights, caches); `share`: another plan of the same model whose device
        buffers for them this plan uses (dim buckets share weights and state)."""
        self.persistent = frozenset(names)
        if share is not None and share is not self:
            self.resident = share.resident
        self._split_inputs()
        # state: an output named like a persistent input is that input's next value
        self._state = {
            lb: (self.inputs[lb], s) for lb, s in self.outputs.items() if lb in self.persistent and lb in self.inputs
        }

    def set_bounds(self, bounds: Mapping[str, tuple[int, int]]) -> None:
        """This plan's bucket ranges. When they bound every dim the plan uses, the arena is sized
        (and cheap kernel grids fixed) at the upper bounds, so no run in the bucket moves a pointer
        or patches a node: each run replays the same instantiated graph."""
        if self.slots and all(d in bounds for d in self.slots):
            self._upper = {d: int(bounds[d][1]) for d in self.slots}
        else:
            self._upper = None

    def bind(self, label: str, arr: np.ndarray) -> None:
        """Upload persistent input `label` now (kept on the device; no host reference kept)."""
        if label not in self.persistent:
            raise InputError(f"bind({label!r}): only persistent inputs are bound (mark it .persist())")
        before = self.resident.bytes_bound
        self.resident.bind(label, arr, self.dev)
        self._count("h2d", self.resident.bytes_bound - before)

    def bind_device(self, label: str, ptr: int, nbytes: int) -> None:
        """Persistent input `label` lives at caller-owned device address `ptr` (nothing moves)."""
        if label not in self.persistent:
            raise InputError(f"bind_device({label!r}): only persistent inputs are bound (mark it .persist())")
        self.resident.bind_device(label, ptr, nbytes)

    def sample(self, label: str, rows: int, cols: int, sampler, position: int) -> np.ndarray:
        """Token ids (rows,) drawn on the device from output `label` of the last run, read as
        (rows, cols) f32 logits; only the ids (and the plan's error word) come back."""
        from luminal.backends.cuda.sample import DeviceSampler

        if self._sampler is None:
            self._sampler = DeviceSampler(load_kernels, driver)
        s = self.outputs[label]
        ids, err = self._sampler(self._ptrs[s], self.nodes[s].dtype, rows, cols, sampler, position,
                                 self._dims_buf.ptr + 8 * self._err if self._reports else 0, self)  # fmt: skip
        if err[0]:
            raise BackendError(f"Gather: index {int(err[1])} out of range for its data (cuda kernel)")
        return ids

    def profile(self, env: Mapping[str, int], input_sizes: Mapping[str, int], reps: int = 20, warmup: int = 3,
                pool: OnesPool | None = None) -> float:  # fmt: skip
        """Median seconds of one plan execution (CUDA events around the graph launch), after
        warm-up, on inputs filled with ones (never zeros: zeros hide NaN paths and denormals).
        The inputs are `pool`'s device buffers (filled on the device, shared by every plan timed with
        that pool; a fresh pool when None), not this plan's own: its bound inputs are left as they
        were, and the next `run` binds its own pointers again."""
        pool = pool or OnesPool()
        need = {i: int(input_sizes[label]) * self.nodes[i].dtype.itemsize for label, i in self.inputs.items()}
        rank: dict = {}  # (dtype, written) -> inputs so far: the k-th largest gets the pool's k-th buffer
        self._fixed = {}
        for i in sorted(need, key=lambda i: -need[i]):  # a plan's inputs never share bytes (nor L2 lines)
            dt, written = self.nodes[i].dtype, i in self._written  # written in place: refilled per plan
            k = rank[dt, written] = rank.get((dt, written), -1) + 1
            self._fixed[i] = (pool.get(dt, k, need[i], written), need[i])
        try:
            self._prepare({}, env)
            for _ in range(warmup):
                self._execute()
            evs = [(driver.Event(), driver.Event()) for _ in range(reps)]
            for a, b in evs:
                a.record(self.dev.stream)
                self._execute()
                b.record(self.dev.stream)
            self.dev.synchronize()
        finally:
            self._fixed = None
            self._res_version = -1  # the next run points the plan at its own inputs again
            for i in self.inputs.values():
                self._ptrs.pop(i, None)
            self._small.clear()
        return float(np.median([b.elapsed_ms(a) for a, b in evs])) * 1e-3

    def _split_inputs(self) -> None:
        self._resident_labels = frozenset(lb for lb in self.inputs if lb in self.persistent)
        self._per_run = [lb for lb in self.inputs if lb not in self._resident_labels]
        self._res_version = -1

    # -- transfers --------------------------------------------------------------------------------
    def _count(self, way: str, nbytes: int) -> None:
        self.stats[f"{way}_bytes"] += nbytes
        self.stats[f"{way}_total"] += nbytes

    def _h2d(self, ptr: int, arr: np.ndarray) -> None:
        driver.htod(ptr, arr, self.dev.stream)
        self._count("h2d", arr.nbytes)

    def _d2h(self, arr: np.ndarray, ptr: int) -> None:
        driver.dtoh(arr, ptr, self.dev.stream)
        self._count("d2h", arr.nbytes)

    # -- preparing --------------------------------------------------------------------------------
    def _prepare(self, feed: Mapping[str, np.ndarray], env: Mapping[str, int]) -> None:
        try:
            self._dims_host[: len(self.slots)] = [int(env[d]) for d in self.slots]
        except KeyError as e:
            raise InputError(f"no value for dim {e.args[0]!r} (the plan uses dims {sorted(self.slots)})") from None
        key = tuple(self._dims_host.tolist())
        if key != self._env_key:
            self._env = {d: int(env[d]) for d in self.slots}
            if self._upper is not None:
                bad = [d for d, v in self._env.items() if v > self._upper[d]]
                if bad:
                    raise InputError(f"dims {bad} exceed this plan's bucket bounds {self._upper}")
            memo: dict[Expression, int] = {}
            self._nbytes = AtDims(self._sizes, self._env, memo)
            self._scratch_n = AtDims(self._scratch, self._env, memo)
            self._grid_now = AtDims(self._grid_exprs, self._env, memo)
            self._offsets = AtDims(self._alias_offsets, self._env, memo)
            self._env_key = key
        moved = self._place(feed)
        self.stats["pointer_moves"] += moved
        self._h2d(self._dims_buf.ptr, self._dims_host)
        if moved or (self._graph is None and self.use_graphs):
            self._bind()

    def _want(self) -> dict:
        """Arena bytes per buffer: at the current dims, or at the bucket bounds for a pinned plan."""
        want = {("out", i): n for i, n in self._nbytes.items() if i not in self._alias}
        want |= {("tmp", i): n for i, n in self._scratch_n.items()}
        if self._upper is None:
            return want
        up = {("out", i): int(e.evaluate(self._upper)) for i, e in self._sizes.items() if i not in self._alias}
        up |= {("tmp", i): int(e.evaluate(self._upper)) for i, e in self._scratch.items()}
        pinned = {k: max(n, up[k]) for k, n in want.items()}
        self.stats["pinned"] = memory.plan(self._buffers(pinned, {})).total <= PIN_ARENA_BYTES
        return pinned if self.stats["pinned"] else want

    def _buffers(self, want: dict, old: dict) -> list[memory.Buffer]:
        bufs = []
        for (kind, i), n in want.items():
            cap = max(n, old.get((kind, i), 0))
            if old and n > old.get((kind, i), 0):
                cap = int(cap * GROWTH)
            start, end = self._life[i] if kind == "out" else (i, i)
            bufs.append(memory.Buffer((kind, i), cap, start, end))
        return bufs

    def _place(self, feed: Mapping[str, np.ndarray]) -> bool:
        """Arena (re)plan and input uploads; True when any device pointer changed. A plan sized at its
        bucket bounds never replans, and per run it only looks at the inputs fed."""
        moved = False
        if self._plan is None or (not self.stats["pinned"] and not self._plan.fits(self._live_sizes())):
            old = self._plan.sizes if self._plan else {}
            self._plan = memory.plan(self._buffers(self._want(), old))
            self.dev.synchronize()  # the previous arena may still be in use by queued work
            self._arena = None
            self._arena = driver.DeviceBuffer(self._plan.total)
            self.stats["arena_bytes"] = self._plan.total
            self.stats["replans"] += 1
            moved = True
            for (kind, i), off in self._plan.offsets.items():
                if kind == "out":
                    self._ptrs[i] = self._arena.ptr + off
        if self._fixed is not None:  # profiling: every input at a pool buffer (`profile`)
            for i, (ptr, nbytes) in self._fixed.items():
                moved |= self._ptrs.get(i) != ptr
                self._ptrs[i], self._in_nbytes[i] = ptr, nbytes
        else:
            for label in self._per_run:
                moved |= self._place_input(label, self.inputs[label], feed)
        res = self.resident
        if self._fixed is None and (res.version != self._res_version or any(k in self._resident_labels for k in feed)):
            for label in self._resident_labels:
                moved |= self._place_resident(label, self.inputs[label], feed)
            self._res_version = res.version
        if moved or self._alias_dynamic:
            for i, (root, _) in self._alias.items():
                cap = self._capacity(root)
                if self._offsets[i] + self._nbytes[i] > cap:
                    raise BackendError(
                        f"node {i} ({type(self.nodes[i].op).__name__}) aliases bytes [{self._offsets[i]}, "
                        f"{self._offsets[i] + self._nbytes[i]}) of node {root}'s buffer of {cap} bytes"
                    )
                ptr = self._ptrs[root] + self._offsets[i]
                moved |= self._ptrs.get(i) != ptr
                self._ptrs[i] = ptr
        return moved

    def _live_sizes(self) -> dict:
        return {("out", i): n for i, n in self._nbytes.items() if i not in self._alias} | {
            ("tmp", i): n for i, n in self._scratch_n.items()
        }

    def _capacity(self, root: int) -> int:
        if self._fixed is not None and root in self._fixed:
            return self._fixed[root][1]
        if root in self.inputs.values():
            label = self.nodes[root].op.label
            return self.resident.bufs[label].nbytes if label in self.persistent else self._in_bufs[label].nbytes
        return self._plan.sizes[("out", root)]

    def _place_resident(self, label: str, i: int, feed: Mapping[str, np.ndarray]) -> bool:
        res = self.resident
        if label in feed and res.src.get(label) != id(feed[label]):
            self._check_dtype(label, i, feed[label])
            self.bind(label, feed[label])
        if label not in res.bufs:
            raise InputError(f"missing input {label!r} (persistent: bind it once)")
        self._in_nbytes[i] = res.nbytes[label]
        moved = self._ptrs.get(i) != res.bufs[label].ptr
        self._ptrs[i] = res.bufs[label].ptr
        return moved

    def _place_input(self, label: str, i: int, feed: Mapping[str, np.ndarray]) -> bool:
        if label not in feed:
            raise InputError(f"missing input {label!r}")
        if hasattr(feed[label], "ptr"):  # a DeviceArray (luminal/compiled.py): copied on the device
            return self._place_device_input(label, i, feed[label])
        arr = np.ascontiguousarray(feed[label]).reshape(-1)
        self._check_dtype(label, i, arr)
        buf = self._in_bufs.get(label)
        if buf is None or buf.nbytes < arr.nbytes:
            cap = arr.nbytes if buf is None else int(arr.nbytes * GROWTH)
            self.dev.synchronize()
            self._in_bufs[label] = buf = None
            self._in_bufs[label] = buf = driver.DeviceBuffer(cap)
            self._small.pop(label, None)
        moved = self._ptrs.get(i) != buf.ptr
        self._ptrs[i] = buf.ptr
        self._in_nbytes[i] = arr.nbytes
        if arr.nbytes <= SMALL_INPUT and i not in self._written:
            raw = arr.tobytes()
            if self._small.get(label) == raw:
                return moved  # the device copy already holds these bytes (e.g. decode's rows = [0])
            self._small[label] = raw
        self._h2d(buf.ptr, arr)
        return moved

    def _place_device_input(self, label: str, i: int, arr) -> bool:
        """A per-run input in caller device memory: copied device-to-device into this plan's own
        buffer (a stable address for the CUDA graph), on the runtime's stream."""
        self._check_dtype(label, i, arr)
        buf = self._in_bufs.get(label)
        if buf is None or buf.nbytes < arr.nbytes:
            cap = arr.nbytes if buf is None else int(arr.nbytes * GROWTH)
            self.dev.synchronize()
            self._in_bufs[label] = buf = None
            self._in_bufs[label] = buf = driver.DeviceBuffer(cap)
        moved = self._ptrs.get(i) != buf.ptr
        self._small.pop(label, None)
        self._ptrs[i] = buf.ptr
        self._in_nbytes[i] = arr.nbytes
        driver.dtod(buf.ptr, arr.ptr, arr.nbytes, self.dev.stream)
        self.stats["d2d_bytes"] += arr.nbytes
        return moved

    def _check_dtype(self, label: str, i: int, arr: np.ndarray) -> None:
        if arr.dtype != self.nodes[i].dtype.np:
            raise InputError(f"input {label!r}: dtype {arr.dtype}, the plan needs {self.nodes[i].dtype}")

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
            if s.node in self._zeroed:  # (after a null scratch pointer when the op has no scratch)
                ptrs += [*([] if s.scratch else [0]), self._zeroed_buf.ptr + self._zeroed[s.node]]
            self._params.append(driver.Params(ptrs))
        if self._graph is not None:
            self._graph.destroy()
            self._graph = None
        self._host_state.clear()
        if self.use_graphs and self.steps:
            self._pinned = self._pinned_grids()
            g = driver.Graph()
            self._grids = [p if p is not None else max(1, self._grid_now[k]) for k, p in enumerate(self._pinned)]
            self._dynamic = [k for k, st in enumerate(self.steps)  # what a run must re-check: dims-dependent
                             if (st.host.dim_names() if st.host is not None else
                                 self._pinned[k] is None and st.grid.dims())]  # fmt: skip
            for k, (s, p, grid) in enumerate(zip(self.steps, self._params, self._grids, strict=True)):
                if s.host is not None:
                    g.add_child(self._capture(k, s))
                else:
                    g.add_kernel(driver.kernel_node_params(s.func, grid, s.block, s.shared, p))
            g.instantiate()
            self._graph = g
            self.stats["graph_builds"] += 1

    def _pinned_grids(self) -> list[int | None]:
        """Per step: the grid fixed at the bucket bounds (kernels exit past the live sizes), or None
        where the grid follows the dims (unbounded plans, or a bound grid too large to waste)."""
        if self._upper is None or not self.stats["pinned"]:
            return [None] * len(self.steps)
        out: list[int | None] = []
        for s in self.steps:
            g = max(1, int(s.grid.evaluate(self._upper))) if s.host is None else None
            out.append(g if g is not None and g <= PIN_GRID and monotone(s.grid) else None)
        return out

    def _capture(self, k: int, s: Step):
        out, ins = self._host_ptrs(s)
        self._host_state[k] = (s.host.signature(self._env), out, ins)
        self.stats["host_captures"] += 1
        return capture(s.host, self.dev.stream, out, ins, self._env)

    # -- executing --------------------------------------------------------------------------------
    def _driver(self):
        return driver

    def _launch_step(self, k: int) -> None:
        """Launch step k eagerly (a host op is prepared first when its dims or pointers changed)."""
        s, stream = self.steps[k], self.dev.stream
        if s.host is not None:
            out, ins = self._host_ptrs(s)
            state = (s.host.signature(self._env), out, ins)
            if self._host_state.get(k) != state:
                s.host.prepare(self._env, out, ins, stream)
                self._host_state[k] = state
            s.host.launch(stream, out, ins, self._env)
        elif self._grid_now[k] > 0:  # zero-size tensors: no launch
            driver.launch(s.func, self._grid_now[k], s.block, s.shared, self._params[k], stream)

    def _execute_eager(self) -> None:
        for k in range(len(self.steps)):
            self._launch_step(k)

    def _execute(self) -> None:
        stream = self.dev.stream
        if self._graph is None:
            self._execute_eager()
            return
        for k in self._dynamic:
            s = self.steps[k]
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
            if self._pinned[k] is not None and grid <= self._pinned[k]:
                continue  # fixed at the bucket bound: kernels exit past the live sizes
            if grid != self._grids[k]:  # dims changed this kernel's grid: patch the node in place
                p = self._params[k]
                self._graph.set_kernel_params(k, driver.kernel_node_params(s.func, grid, s.block, s.shared, p))
                self._grids[k] = grid
                self.stats["graph_patches"] += 1
        self._graph.launch(stream)
