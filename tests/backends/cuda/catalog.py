"""Every CUDA kernel op for every dtype it supports, over a few view kinds (contiguous, broadcast,
permuted, merged non-linear z-strides, symbolic dims): the CPU compile test's inventory."""

from __future__ import annotations

from luminal.backends.cuda.kernels import (
    KernelAdd,
    KernelCast,
    KernelConstant,
    KernelExp2,
    KernelFused,
    KernelGather,
    KernelIota,
    KernelLessThan,
    KernelLog2,
    KernelMaxReduce,
    KernelMod,
    KernelMul,
    KernelRecip,
    KernelScatter,  # fmt: skip
    KernelScatterInplace,
    KernelSin,
    KernelSqrt,
    KernelSumReduce,
)
from luminal.backends.cuda.kernels.indexing import KernelGatherFused
from luminal.backends.cuda.kernels.inplace import KernelAliasAfter, KernelScatterFused, KernelScatterPair
from luminal.dtype import DType
from luminal.hlir.fexpr import FLeaf, FNode
from luminal.shape.expr import num, var, z
from luminal.shape.tracker import ShapeTracker

DTYPES = (
    DType.f32,
    DType.f16,
    DType.bf16,
    DType.f64,
    DType.i8,
    DType.i16,
    DType.i32,
    DType.i64,
    DType.u8,
    DType.bool,
    DType.f8e4m3,
    DType.f8e5m2,
)
FLOATS = tuple(d for d in DTYPES if d.is_float)
s, n = var("s"), var("n")
CONTIG = ShapeTracker.new((s, 8))
PERM = ShapeTracker.new((8, s)).permute((1, 0))
MERGED = ShapeTracker.new((3, s, 4)).permute((1, 0, 2)).merge_dims(1)  # (s, 12) with z//4, z%4 strides
BCAST = ShapeTracker.new((s,)).expand_dim(1, 8)
VIEWS = (CONTIG, PERM, MERGED)


def kernels_for(dt: DType) -> list:
    out: list = []
    if dt.is_float:
        out += [
            cls(CONTIG.dims, CONTIG.strides, dt) for cls in (KernelLog2, KernelExp2, KernelSin, KernelSqrt, KernelRecip)
        ]
        out += [KernelExp2(v.dims, v.strides, dt) for v in (PERM, MERGED)]  # the strided index paths
    for cls in (KernelAdd, KernelMul, KernelMod, KernelLessThan):
        out.append(cls(CONTIG.dims, CONTIG.strides, BCAST.strides, dt))
        out.append(cls(CONTIG.dims, CONTIG.strides, CONTIG.strides, dt))  # vectorized path
        out.append(cls(MERGED.dims, MERGED.strides, MERGED.strides, dt))
    if dt != DType.bool:
        for cls in (KernelSumReduce, KernelMaxReduce):
            out.append(cls((s,), num(8), (z * 8,), z, dt))  # thread per row
            out.append(cls((s,), num(300), (z * 300,), z, dt))  # warp per row
            out.append(cls((num(4),), n, (z,), z * 4, dt))  # block per row, strided, symbolic length
            out.append(cls((), s, (), z, dt))  # full reduction to a scalar
            out.append(cls((s,), num(4096), (z * 4096,), z, dt))  # contiguous rows: vector loads
    out.append(KernelGather(CONTIG.dims, CONTIG.strides, (s, num(8)), PERM.strides, dt, DType.i32))
    out.append(KernelGather((s,), (z,), (num(16),), (z,), dt, DType.i64))
    out.append(KernelScatter(CONTIG.dims, CONTIG.strides, (s,), (z,), (z * 0,), dt, DType.i32))
    out += [
        KernelScatterInplace(CONTIG.dims, CONTIG.strides, (s,), (z,), (z * 0,), dt, DType.i64, w) for w in (False, True)
    ]
    # the gather / in-place scatter computing its index (p + position) and values (a strided read)
    i32 = DType.i32
    idx = FNode(KernelCast((s,), (z,), i32, i32), (FNode(KernelAdd((s,), (z,), (z * 0,), i32),
                                                       (FNode(KernelIota(z, s, i32), ()), FLeaf(0))),))  # fmt: skip
    out.append(KernelGatherFused((s,), (num(16),), (z,), dt, i32, (idx,)))
    val = FNode(KernelCast((s,), (z * 2,), dt, dt), (FLeaf(1),))
    out += [KernelScatterFused(CONTIG.dims, CONTIG.strides, (s,), dt, i32, w, (idx,), (val,)) for w in (False, True)]
    odd = FNode(KernelCast((s,), (z * 2 + 1,), dt, dt), (FLeaf(1),))  # both caches' writes in one launch
    out.append(KernelScatterPair(CONTIG.dims, CONTIG.strides, (s,), dt, i32, (idx,), (val,), (odd,)))
    out.append(KernelAliasAfter(CONTIG.dims, dt))  # (the second cache after the pair: no code, no launch)
    out += [KernelCast(CONTIG.dims, CONTIG.strides, to, dt) for to in DTYPES if to != dt]  # every conversion
    out += [KernelCast(PERM.dims, PERM.strides, to, dt) for to in (DType.f32, DType.i32) if to != dt]  # strided
    return out + fused_for(dt)


def fused_for(dt: DType) -> list:
    """Fused kernels in each layout: elementwise (vectorized and strided), a reduction with a fused
    prologue, and row kernels (reductions computed per row inline, warp and block per row)."""
    x, y = FLeaf(0), FLeaf(1)
    sh, st, bc = CONTIG.dims, CONTIG.strides, BCAST.strides
    if dt == DType.bool:
        return [KernelFused(KernelAdd(sh, st, st, dt), (FNode(KernelMul(sh, st, bc, dt), (x, y)), x))]
    if not dt.is_float:
        prod = FNode(KernelMul(sh, st, st, dt), (x, y))
        return [KernelFused(KernelAdd(sh, st, bc, dt), (prod, y)),
                KernelFused(KernelSumReduce((s,), num(8), (z * 8,), z, dt), (prod,))]  # fmt: skip
    c = FNode(KernelCast((), (), dt, DType.f32), (FNode(KernelConstant(1.5, DType.f32), ()),))
    out = [KernelFused(KernelExp2(sh, st, dt), (FNode(KernelMul(sh, st, (num(0), num(0)), dt), (x, c)),)),
           KernelFused(KernelExp2(PERM.dims, PERM.strides, dt), (FNode(KernelSqrt(sh, bc, dt), (x,)),))]  # fmt: skip
    for cols in (num(300), num(4096), n):  # warp per row, block per row, symbolic row length
        row = ShapeTracker.new((s, cols))
        red = ((s,), cols, (z * cols,), z)
        if dt not in (DType.f8e4m3, DType.f8e5m2):  # fused maxima need the float's bits (reduce.egg)
            out.append(KernelFused(KernelMaxReduce(*red, dt), (FNode(KernelExp2(row.dims, row.strides, dt), (x,)),)))
        rstr = ShapeTracker.new((s,)).expand_dim(1, cols).strides
        e = FNode(KernelExp2(row.dims, row.strides, dt), (x,))
        total = FNode(KernelRecip((s,), (z,), dt), (FNode(KernelSumReduce(*red, dt), (e,)),))
        out.append(KernelFused(KernelMul(row.dims, row.strides, rstr, dt), (e, total)))  # softmax-like
    return out


def sources() -> list:
    return [KernelIota(z * 2 + s, s * 4, DType.i32), KernelIota((z // 3) % n, s * n, DType.i32),
            KernelConstant(0.1, DType.f32), KernelConstant(float("-inf"), DType.f32),
            KernelConstant(float("nan"), DType.f32), KernelConstant(-0.0, DType.f32)]  # fmt: skip
