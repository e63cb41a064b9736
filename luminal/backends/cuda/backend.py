"""CudaBackend: what the e-graph compiler needs from the CUDA runtime (luminal.backends.base.Backend).

LLIR ops are the kernel ops (kernels/), introduced by the `kernel_lower` rules beside them; HLIR
Input and Output run as they are. Every other HLIR op must be lowered, so extraction can only
choose plans made of kernels. `profile` times a candidate on the GPU (CUDA events, warm-up,
ones-filled inputs).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from luminal.backends.cuda import driver, nvrtc
from luminal.backends.cuda.host import HostOp
from luminal.backends.cuda.kernel import KernelOp
from luminal.backends.cuda.kernels import KERNEL_OPS
from luminal.backends.cuda.kernels.attention import ATTENTION_KERNELS
from luminal.backends.cuda.kernels.attention_paged import PAGED_KERNELS
from luminal.backends.cuda.kernels.gemv import GEMV_KERNELS
from luminal.backends.cuda.runtime import CudaExecutor
from luminal.egraph.llir import LLIRGraph
from luminal.egraph.rulesets import MATMUL_FLATTEN, Phase, main_cycle, saturate
from luminal.hlir import Input, Output
from luminal.shape.expr import Z

KERNEL_LOWER = "kernel_lower"
MATMUL_BACKEND = "matmul_backend"  # library matmuls and the decode GEMV (host/cublaslt.egg, kernels/gemv.egg)
FUSION_GROW = "fusion_grow"  # fused kernels (kernels/fused.py, the fusion rules beside each fusible kernel)
ATTENTION = "attention"  # the fused attention block (kernels/attention.egg)
RULESETS = (KERNEL_LOWER, MATMUL_BACKEND, FUSION_GROW, ATTENTION)
# attention first, on the graph as the frontend wrote it (its rules read HLIR terms only): a few
# iterations over a small e-graph instead of every iteration of the main cycle
PHASES = (Phase("attention", saturate(ATTENTION)),
          *main_cycle([MATMUL_FLATTEN, KERNEL_LOWER, MATMUL_BACKEND], [FUSION_GROW]))  # fmt: skip


def matmul_ops() -> tuple:
    """The matmul alternatives: the GEMV kernel, plus the cuBLASLt host ops once the runtime runs
    host ops (`CudaExecutor.runs_host_ops`, luminal/backends/cuda/host/__init__.py has the contract)."""
    from luminal.backends.cuda.host import host_ops

    return (*(host_ops() if getattr(CudaExecutor, "runs_host_ops", False) else ()), *GEMV_KERNELS)


class CudaBackend:
    name = "cuda"
    # preference order: fused attention, library matmuls, GEMV, fused kernels, the rest
    ops = (*ATTENTION_KERNELS, *PAGED_KERNELS, *matmul_ops(), *KERNEL_OPS)
    hlir_ops = (Input, Output)
    rulesets = RULESETS
    phases: tuple[Phase, ...] = PHASES

    def __init__(self) -> None:
        self._dev = driver.device()  # BackendError with a clear message when no GPU is usable

    @property
    def device(self) -> str:
        major, minor = nvrtc.version()
        return f"cuda-{self._dev.name}-{self._dev.arch}-nvrtc{major}.{minor}"

    def load(self, llir: LLIRGraph) -> CudaExecutor:
        return CudaExecutor(llir.nodes)

    def profile(self, llir: LLIRGraph, env: Mapping[str, int]) -> float:
        return CudaExecutor(llir.nodes).profile(env, input_extents(llir.nodes, env))


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
