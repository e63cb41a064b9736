"""The CUDA kernel ops, one family per module (its kernel_lower rules in the .egg beside it)."""

from __future__ import annotations

from luminal.backends.cuda.kernels.binary import BINARY_KERNELS, KernelAdd, KernelLessThan, KernelMod, KernelMul
from luminal.backends.cuda.kernels.fused import FUSED_KERNELS, KernelFused
from luminal.backends.cuda.kernels.indexing import INDEXING_KERNELS, KernelGather, KernelScatter
from luminal.backends.cuda.kernels.inplace import INPLACE_KERNELS, KernelScatterInplace
from luminal.backends.cuda.kernels.io import IO_KERNELS, KernelCast, KernelConstant, KernelIota
from luminal.backends.cuda.kernels.reduce import REDUCE_KERNELS, KernelMaxReduce, KernelSumReduce
from luminal.backends.cuda.kernels.unary import (
    UNARY_KERNELS,
    KernelExp2,
    KernelLog2,
    KernelRecip,
    KernelSin,
    KernelSqrt,
)

# fused kernels first: the search's first candidate prefers them (luminal/backends/base.py)
# in-place updates before the copying scatter: the search's first candidate writes state in place
KERNEL_OPS = (*FUSED_KERNELS, *UNARY_KERNELS, *BINARY_KERNELS, *REDUCE_KERNELS, *INPLACE_KERNELS, *INDEXING_KERNELS,
              *IO_KERNELS)  # fmt: skip

__all__ = [
    "KERNEL_OPS", "KernelAdd", "KernelCast", "KernelConstant", "KernelExp2", "KernelFused", "KernelGather",
    "KernelIota", "KernelLessThan", "KernelLog2", "KernelMaxReduce", "KernelMod", "KernelMul", "KernelRecip",
    "KernelScatter", "KernelScatterInplace", "KernelSin", "KernelSqrt", "KernelSumReduce",
]  # fmt: skip
