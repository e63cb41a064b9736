"""Row reductions reached through a view that permutes within the row (the rotate-half of a
q/k-norm'ed head, Gemma 3 and Qwen 3) stay row-level in the fused kernel (emit.py `invariant`):
computed once per row, cooperatively, not serially for every element (on the H200 the per-element
version of Gemma's q-norm + rotary took ~75 us a layer). Numerics: tests/models/test_engine_gpu.py
(teacher-forced decode of gemma / qwen3 / llama vs the reference, on the GPU)."""

from __future__ import annotations

import re

import pytest

from luminal.backends.cuda import nvrtc
from luminal.backends.cuda.kernel import source
from luminal.backends.cuda.kernels.fused import KernelFused
from luminal.backends.cuda.kernels.inplace import KernelScatterFused, KernelScatterPair
from tests.backends.cuda.test_inplace import SLOTS, plans

SERIAL = re.compile(r"#pragma unroll 4\s*for \(long long k\d+ = 0; k\d+ < iters")  # emit.py's per-element loop


@pytest.mark.parametrize("name", ["gemma3", "qwen3"])
def test_normed_rotary_reduces_once_per_row(name):
    model, steps = plans(name)
    ops = {n.op for n in steps[1].nodes if isinstance(n.op, KernelFused)}
    kernels = {op: op.render(SLOTS) for op in ops}
    normed = [op for op, k in kernels.items() if "iters" in k.code]  # the fused q-norm + rotary
    assert normed, steps[1].op_counts()
    for op in normed:
        assert not SERIAL.search(kernels[op].code), kernels[op].code
    assert nvrtc.compile_cubin(source(list(kernels.values())), arch="sm_90")[:4] == b"\x7fELF"


def test_normed_cache_write_reduces_once_per_row():
    """qwen3's k write (k-norm, rotary, in-place scatter: inplace.py RowWrite) sums each head row's
    squares once, a warp per row, not once per element in the element's own thread (25 us a layer
    on the H200)."""
    model, steps = plans("qwen3")
    ops = [n.op for n in steps[1].nodes if isinstance(n.op, (KernelScatterFused, KernelScatterPair))]
    kernels = [op.render(SLOTS) for op in ops]
    normed = [k for k in kernels if "iters" in k.code]
    assert len(normed) == 1, [op.src for op in ops]  # (the pair of k and v: k's write in rows, v's per element)
    assert "const int lane = 0;" not in normed[0].code  # emit.py's one-thread row: the serial form
    assert "__shfl_down_sync" in normed[0].code, normed[0].code
    assert nvrtc.compile_cubin(source(kernels), arch="sm_90")[:4] == b"\x7fELF"
