"""ReferenceBackend: numpy execution of LLIR made of HLIR ops plus NumpyMatmul; the oracle.

Its LLIR ops are the HLIR ops themselves plus two real rewrites so search has a choice: matmul.egg
(one np.matmul) and inplace.egg (a Scatter into persistent state that updates it in place).
`profile` is an analytical cost (elements touched, matmul flops at a BLAS rate) at representative
dims rather than a timing: it is deterministic, needs no weights, and costs
microseconds, so compiles stay fast and reproducible on CPU.
"""

from __future__ import annotations

import platform
from collections.abc import Mapping, Sequence
from functools import lru_cache

from luminal.backends.reference.executor import ReferenceExecutor
from luminal.backends.reference.inplace import InplaceScatter
from luminal.backends.reference.matmul import NumpyMatmul
from luminal.egraph.llir import LLIRGraph
from luminal.egraph.rulesets import Phase, main_cycle, with_buffer_reuse
from luminal.hlir import HLIR_OPS, Input, Output
from luminal.shape.expr import prod
from luminal.shape.tracker import ShapeTracker

MATMUL_BACKEND = "matmul_backend"
BUFFER_REUSE = "buffer_reuse"  # in-place updates of persistent state (inplace.egg)
ELEMENT_COST = 1.0  # one numpy element-op (~1 ns vectorized)
GATHER_COST = 4.0  # extra per element read through a non-contiguous view (index arithmetic)
FLOP_COST = 0.02  # one multiply-add inside BLAS (~50x an element-op)


class ReferenceBackend:
    name = "reference"
    ops = (NumpyMatmul, InplaceScatter)
    hlir_ops = HLIR_OPS
    rulesets = (MATMUL_BACKEND, BUFFER_REUSE)
    phases: tuple[Phase, ...] = with_buffer_reuse(main_cycle([MATMUL_BACKEND]), BUFFER_REUSE)

    @property
    def device(self) -> str:
        import numpy as np

        return f"cpu-{platform.machine()}-numpy{np.__version__}"

    def load(self, llir: LLIRGraph) -> ReferenceExecutor:
        return ReferenceExecutor(llir.nodes, llir.outputs)

    def profile(self, llir: LLIRGraph, env: Mapping[str, int]) -> float:
        key = tuple(sorted(env.items()))
        return sum(_op_cost(n.op, key) for n in llir.nodes)

    def measure(self, plans: Sequence[LLIRGraph], env: Mapping[str, int]) -> list[float]:
        """Per-op costs for search (luminal/egraph/costs.py): the same analytic cost, no launch overhead."""
        return [self.profile(p, env) for p in plans]


@lru_cache(maxsize=1 << 16)
def _op_cost(op, env_key: tuple[tuple[str, int], ...]) -> float:
    """Cost of one op at dims `env_key` (memoized: candidates of one search share most ops)."""
    if isinstance(op, (Input, Output)):
        return 0.0
    env = dict(env_key)
    if isinstance(op, InplaceScatter):  # touches the scattered elements only
        return ELEMENT_COST * 2 * int(prod(op.index_shape).evaluate(env))
    if isinstance(op, NumpyMatmul):
        flops = int(prod((*op.shape, op.k)).evaluate(env))
        return FLOP_COST * flops + ELEMENT_COST * int(prod(op.shape).evaluate(env))
    size = int(op.out_size().evaluate(env))
    reads = size * int(op.iters.evaluate(env)) if hasattr(op, "iters") else size
    return ELEMENT_COST * (size + reads) + GATHER_COST * reads * _strided_inputs(op)


def _strided_inputs(op) -> int:
    """How many inputs the op reads through a non-contiguous view (0, 1, 2..)."""
    shape = getattr(op, "shape", None)
    if shape is None:
        return 1
    n = 0
    for f in ("strides", "a_strides", "b_strides"):
        st = getattr(op, f, None)
        if st is None:
            continue
        dims = (*shape, op.iters) if hasattr(op, "iters") else shape
        sts = (*st, op.iter_stride) if hasattr(op, "iters") else st
        if not ShapeTracker(tuple(dims), tuple(sts)).is_contiguous():
            n += 1
    return n
