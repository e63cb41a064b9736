"""CudaBackend: what the e-graph compiler needs from the CUDA runtime (luminal.backends.base.Backend).

LLIR ops are the kernel ops (kernels/), introduced by the `kernel_lower` rules beside them; HLIR
Input and Output run as they are. Every other HLIR op must be lowered, so extraction can only
choose plans made of kernels. `profile` times a candidate on the GPU (CUDA events, warm-up, inputs
of ones filled on the device in a pool every plan of the compile shares: runtime.OnesPool); `measure`
times one-op plans for the search's per-op costs (luminal/egraph/costs.py), their kernels compiled
together first; `prefetch` starts compiling candidates' kernels in the background. Plans are profiled
and loaded with the graph's dims slots (rendered.plan_slots), so each kernel renders and compiles once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence

import numpy as np

from luminal.backends.cuda import driver, nvrtc, rendered, runtime
from luminal.backends.cuda.host import HostOp
from luminal.backends.cuda.kernel import Kernel, KernelOp, source
from luminal.backends.cuda.kernels import KERNEL_OPS
from luminal.backends.cuda.kernels.attention_norm import ATTENTION_KERNELS
from luminal.backends.cuda.kernels.attention_paged import PAGED_KERNELS
from luminal.backends.cuda.kernels.gemv import GEMV_KERNELS
from luminal.backends.cuda.kernels.gemvfused import GEMV_FUSED_OPS
from luminal.backends.cuda.kernels.io import KernelConstant
from luminal.backends.cuda.rendered import plan_slots
from luminal.backends.cuda.runtime import CudaExecutor, OnesPool
from luminal.dtype import DType
from luminal.egraph.llir import LLIRGraph, LNode
from luminal.egraph.rulesets import MATMUL_FLATTEN, Phase, analysis, main_cycle, saturate, with_buffer_reuse
from luminal.hlir import Input, Output
from luminal.shape.expr import Z

KERNEL_LOWER = "kernel_lower"
MATMUL_BACKEND = "matmul_backend"  # library matmuls and the decode GEMV (host/cublaslt.egg, kernels/gemv.egg)
FUSION_GROW = "fusion_grow"  # fused kernels (kernels/fused.py, the fusion rules beside each fusible kernel)
GEMV_FACTS, GEMV_FUSE = "gemv_facts", "gemv_fuse"  # the decode GEMV fused with its neighbours (kernels/gemvfused.egg)
BUFFER_REUSE = "buffer_reuse"  # in-place updates of persistent state (kernels/inplace.egg)
ATTENTION = "attention"  # the fused attention block (kernels/attention.egg)
RULESETS = (KERNEL_LOWER, MATMUL_BACKEND, FUSION_GROW, GEMV_FACTS, GEMV_FUSE, BUFFER_REUSE, ATTENTION)
log = logging.getLogger(__name__)
# what ranking plans cost on the device (the compiler reports the change per compile, LUMINAL_DEBUG shows
# it): plans timed (one-op plans of the search's per-op costs and whole plans it confirms), the seconds
# it took (executor build, kernel loads, uploads, warm-up and timed runs), and the MB of ones-filled
# inputs those plans uploaded
# (upload_mb: what the plans read; fill_mb / host_mb: what the profiling pool actually filled on the device
# / uploaded from the host for them: runtime.OnesPool shares one ones-filled buffer per dtype)
PROFILE_STATS = {"plans_timed": 0, "profile_s": 0.0, "upload_mb": 0.0, "fill_mb": 0.0, "host_mb": 0.0}
_MAIN, _CLEANUP = main_cycle([MATMUL_FLATTEN, KERNEL_LOWER, MATMUL_BACKEND], [FUSION_GROW])
# attention first, on the graph as the frontend wrote it (its rules read HLIR terms only): a few
# iterations over a small e-graph instead of every iteration of the main cycle
_ATTENTION = Phase(ATTENTION, saturate(ATTENTION))
# after main: the facts to a fixpoint, then the fused GEMVs (with fusion_grow for the body classes they name)
_GEMV = Phase(GEMV_FUSE, saturate(saturate(analysis(), GEMV_FACTS), saturate(analysis(), FUSION_GROW, GEMV_FUSE)))
PHASES = with_buffer_reuse((_ATTENTION, _MAIN, _GEMV, _CLEANUP), BUFFER_REUSE)


def matmul_ops() -> tuple:
    """The matmul alternatives: the GEMV kernel, plus the cuBLASLt host ops once the runtime runs
    host ops (`CudaExecutor.runs_host_ops`, luminal/backends/cuda/host/__init__.py has the contract)."""
    from luminal.backends.cuda.host import host_ops

    return (*(host_ops() if getattr(CudaExecutor, "runs_host_ops", False) else ()), *GEMV_KERNELS)


class CudaBackend:
    name = "cuda"
    # preference order: fused attention, fused GEMVs, library matmuls, GEMV, fused kernels, the rest
    ops = (*ATTENTION_KERNELS, *PAGED_KERNELS, *GEMV_FUSED_OPS, *matmul_ops(), *KERNEL_OPS)
    hlir_ops = (Input, Output)
    rulesets = RULESETS
    phases: tuple[Phase, ...] = PHASES
    cost_cache = True  # measured op costs are kept in the compile cache (they cost GPU time)

    def __init__(self) -> None:
        self._dev = driver.device()  # BackendError with a clear message when no GPU is usable
        self._pool: OnesPool | None = None  # profiling inputs of this compile (one backend per compile)

    @property
    def _arch(self) -> str | None:
        return self._dev.arch

    @property
    def prefetch_kernels(self) -> bool:
        """Whether `prefetch` compiles: when `profile` is this class's (plans timed on the GPU)."""
        return type(self).profile is CudaBackend.profile

    @property
    def device(self) -> str:
        major, minor = nvrtc.version()
        return f"cuda-{self._dev.name}-{self._dev.arch}-nvrtc{major}.{minor}"

    def load(self, llir: LLIRGraph) -> CudaExecutor:
        self._pool = None  # the search is over (the compiler loads plans last): free the profiling inputs
        return CudaExecutor(llir.nodes, dims=llir.dims)  # the slots its kernels were profiled with

    def profile(self, llir: LLIRGraph, env: Mapping[str, int]) -> float:
        """Seconds of one run of `llir` at `env`, on the ones-filled inputs of this compile's pool; its
        kernels are rendered with the graph's dims slots (`env`'s), as in the whole plan."""
        t = time.perf_counter()
        sizes = input_extents(llir.nodes, env)
        if self._pool is None:
            self._pool = OnesPool()
        before = dict(self._pool.stats)
        try:
            return CudaExecutor(llir.nodes, dims=env).profile(env, sizes, pool=self._pool)
        finally:
            filled = {k: self._pool.stats[k] - before[k] for k in before}
            count_profile(llir, sizes, time.perf_counter() - t, filled["fill_bytes"], filled["upload_bytes"])

    def measure(self, plans: Sequence[LLIRGraph], env: Mapping[str, int]) -> list[float | str]:
        """Seconds of each one-op plan net of the fixed cost of timing a plan (one launch included);
        a str says why a plan could not be compiled or run."""
        if self.prefetch_kernels:  # timed on the GPU: compile every kernel at once
            _precompile(plans, env)
        base = self._timing_base(env)
        out: list[float | str] = []
        for p in plans:
            try:
                out.append(max(0.0, self.profile(p, env) - base))
            except Exception as e:  # noqa: BLE001 - a candidate op that cannot be built or run is skipped, never fatal
                out.append(f"{type(e).__name__}: {e}")
        return out

    def prefetch(self, plans: Sequence[LLIRGraph], env: Mapping[str, int]) -> None:
        """Start compiling the kernels of candidate plans `plans` in the background (rendered with the
        slots `profile` uses), so the long ones (attention) compile while the search goes on. Only where
        plans are timed on the GPU (`prefetch_kernels`)."""
        if not self.prefetch_kernels:
            return
        ks = {k.code: k for p in plans for k in plan_kernels(p.nodes, env)}
        ks = {c: k for c, k in ks.items() if c not in runtime._MODULES}
        if ks:
            nvrtc.prefetch(list(ks), lambda codes: source([ks[c] for c in codes]), self._arch)

    def _timing_base(self, env: Mapping[str, int]) -> float:
        """What `profile` reports beyond the launches themselves: a one-kernel plan's time minus one
        launch, the launch cost being the slope from one to eight trivial kernels."""
        base = getattr(self, "_base", None)
        if base is None:
            t1, t8 = self.profile(_trivial(1), env), self.profile(_trivial(8), env)
            base = self._base = max(0.0, t1 - max(0.0, (t8 - t1) / 7))
        return base

    def counters(self) -> dict[str, float]:
        """NVRTC counters (compiles, cache hits, seconds), profiling counters (PROFILE_STATS) and kernel
        renders (rendered.STATS) and executor builds (runtime.LOAD_STATS): the compiler reports their change
        per compile."""
        return {**nvrtc.STATS, **PROFILE_STATS, **rendered.STATS, **runtime.LOAD_STATS}

    def counter_lines(self, delta: Mapping[str, float]) -> list[str]:
        """What LUMINAL_DEBUG prints of a compile's counter changes `delta` beyond the table: NVRTC's line."""
        return [nvrtc.summary(dict(delta))]


def count_profile(llir: LLIRGraph, sizes: Mapping[str, int], seconds: float, filled: int = 0, host: int = 0) -> None:
    """Add one timed plan to PROFILE_STATS (`sizes`: element count of each Input it reads; `filled` /
    `host`: bytes the profiling pool filled on the device / uploaded for it)."""
    ins = {n.op.label: n.dtype.itemsize for n in llir.nodes if isinstance(n.op, Input)}
    PROFILE_STATS["plans_timed"] += 1
    PROFILE_STATS["profile_s"] += seconds
    PROFILE_STATS["upload_mb"] += sum(int(sizes.get(k, 0)) * b for k, b in ins.items()) / 2**20
    PROFILE_STATS["fill_mb"] += filled / 2**20
    PROFILE_STATS["host_mb"] += host / 2**20


def _trivial(n: int) -> LLIRGraph:
    """n independent one-element constant kernels, each an output: what timing n launches costs."""
    nodes = [LNode(KernelConstant(1.0, DType.f32), (), DType.f32) for _ in range(n)]
    nodes += [LNode(Output(f"out{i}"), (i,), DType.f32) for i in range(n)]
    return LLIRGraph(nodes, {f"out{i}": n + i for i in range(n)})


def plan_kernels(nodes, dims=()) -> list[Kernel]:
    """The kernels a CudaExecutor of `nodes` renders (same dims slots: `dims` as given to it), for
    batched compiling."""
    kslots = plan_slots(nodes, dims)
    return [rendered.render(n.op, kslots) for n in nodes if isinstance(n.op, KernelOp)]


def _precompile(plans: Sequence[LLIRGraph], dims=()) -> None:
    """Compile and load every kernel of `plans` (rendered with the slots of `dims`, as `profile` does) in
    one batch; on failure (one bad kernel fails its program) each plan compiles its own when profiled,
    so only the bad one is skipped."""
    try:
        kernels = [k for p in plans for k in plan_kernels(p.nodes, dims)]
        if kernels:
            runtime.load_kernels(kernels)
    except Exception as e:  # noqa: BLE001 - only an optimization: each plan then compiles its own kernels
        log.info("batched NVRTC compile of %d plans failed (%s); compiling per plan", len(plans), str(e)[:200])


def view_extent(shape, strides, env: Mapping[str, int]) -> int:
    """Elements a buffer needs for the view (shape, strides) to stay in bounds: 1 + max index."""
    total = 0
    for d, st in zip(shape, strides, strict=True):
        n = int(d.evaluate(env))
        if n == 0:
            return 0
        v = np.asarray(st.evaluate({**env, Z: np.arange(n, dtype=np.int64)}), np.int64)
        total += int(v.max())
    return total + 1


def input_extents(nodes, env: Mapping[str, int]) -> dict[str, int]:
    """For profiling without real inputs: each Input's element count, from the views that read it."""
    need: dict[int, int] = {}
    for n in nodes:
        if isinstance(n.op, (KernelOp, HostOp)):
            for k, shape, strides in n.op.input_reads():
                src = n.inputs[k]
                need[src] = max(need.get(src, 0), view_extent(shape, strides, env))
    return {n.op.label: need.get(i, 0) for i, n in enumerate(nodes) if isinstance(n.op, Input)}
