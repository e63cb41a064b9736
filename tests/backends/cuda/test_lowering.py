"""CPU: the `kernel_lower` rules turn every HLIR primitive into a CUDA kernel op through the real
egglog pipeline; the extracted LLIR (kernel ops only) computes what the reference computes, and
every kernel it holds compiles with NVRTC for sm_90."""

from __future__ import annotations

import numpy as np
import pytest

from luminal.backends.cuda import nvrtc
from luminal.backends.cuda.backend import CudaBackend, input_extents
from luminal.backends.cuda.kernel import KernelOp, source
from luminal.backends.reference.executor import ReferenceExecutor
from luminal.egraph.compile import CompileOptions, compile_plans
from luminal.hlir import Input, Output
from tests.backends.cuda.graphs import build, cases, make_inputs
from tests.helpers import assert_matches


class CpuCudaBackend(CudaBackend):
    """The CUDA backend's ops, rules and schedule, executed by reference semantics (no GPU)."""

    def __init__(self) -> None:
        pass

    @property
    def device(self) -> str:
        return "cuda-cpu-lowering-test"

    def load(self, llir):
        return ReferenceExecutor(llir.nodes, llir.outputs)

    def profile(self, llir, env):
        return float(len(llir.nodes))


@pytest.mark.parametrize("case", sorted(cases()))
def test_lowered_plan_is_all_kernels_and_matches_reference(case):
    g, specs = build(case)
    ex, llirs, _ = compile_plans(g, CpuCudaBackend(), CompileOptions(cache=False, search_budget=2))
    (llir,) = llirs
    bad = [type(n.op).__name__ for n in llir.nodes if not isinstance(n.op, (KernelOp, Input, Output))]
    assert not bad, f"ops left unlowered: {bad}"
    ref = g.compile("reference", cache=False)
    for s in (1, 5):
        feed = make_inputs(specs, s, seed=s)
        got = ex.run(feed, {"s": s})
        want = ref.run(feed)
        for name, arr in want.items():
            assert_matches(np.asarray(got[name]).reshape(arr.shape), arr, arr.dtype and g.nodes[g.outputs[name]].dtype,
                           1.0, f"{case}/{name} s={s}")  # fmt: skip
    slots = {"s": 0}
    kernels = [n.op.render(slots) for n in llir.nodes if isinstance(n.op, KernelOp)]
    assert nvrtc.compile_cubin(source(kernels), arch="sm_90")[:4] == b"\x7fELF"
    ext = input_extents(llir.nodes, {"s": 3})
    for name, (shape, _) in specs.items():
        want_n = int(np.prod([3 if d == "s" else d for d in shape]))
        assert ext[name] <= want_n, (name, ext[name], want_n)
