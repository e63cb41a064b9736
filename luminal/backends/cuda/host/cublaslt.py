"""cuBLASLt matmul host ops: CublasLt (A @ B [+ relu | gelu]), CublasLtBias (+ a bias row) and
CublasLtAccum (+ a C matrix, beta = 1), unioned with the frontend's Mul -> SumReduce matmul by the
`matmul_backend` rules in cublaslt.egg.

Luminal's output D[t, i, j] (batch t, m rows, n cols, row-major, contiguous) is cuBLAS's
column-major D'(j, i) = sum_l B'(j, l) A'(l, i) with ld n: the column-major "swap" view, so any
row- or column-major A and B are read in place through their strides (transposes are free).
Fields, in egglog argument order:
  batch m n k                 matrices, rows and cols of D, reduced length (Expressions of dims)
  trans_b ld_b stride_b       B' (n x k): "N" = B' stored column-major with leading dim ld_b
                              (B row-major), "T" = stored k x n (B column-major); batch stride
  trans_a ld_a stride_a       A' (k x m): "N" = A row-major, "T" = A column-major
  dtype d_dtype epilogue      A/B dtype, D dtype (bias / C have D's), "DEFAULT" | "RELU" | "GELU"
                              (CublasLtBias: "BIAS" | "RELU_BIAS" | "GELU_BIAS")
Every float type accumulates in f32 (CUBLAS_COMPUTE_32F: exact f32 products, no TF32 unless
LUMINAL_TF32=1; f64 in 64F); the epilogue runs on the f32 accumulator and D is rounded once. cuBLASLt's GELU is the tanh
approximation (the frontend's `gelu_tanh`). Dims are evaluated at prepare time: one plan serves
every value of a symbolic m (the heuristic is cached per concrete shape).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from luminal import flags
from luminal.backends.cuda.host import HostOp
from luminal.dtype import DType
from luminal.errors import BackendError
from luminal.hlir.op import compute_dtype
from luminal.shape.expr import Expression, num, prod, z

GELU_C = math.sqrt(2.0 / math.pi)


@dataclass(frozen=True)
class CublasLt(HostOp):
    batch: Expression
    m: Expression
    n: Expression
    k: Expression
    trans_b: str
    ld_b: Expression
    stride_b: Expression
    trans_a: str
    ld_a: Expression
    stride_a: Expression
    dtype: DType
    d_dtype: DType
    epilogue: str
    n_inputs: ClassVar[int] = 2  # (A, B)
    beta: ClassVar[float] = 0.0
    has_bias: ClassVar[bool] = False

    def out_dtype(self, in_dtypes) -> DType:
        return self.d_dtype

    def out_size(self) -> Expression:
        return prod((self.batch, self.m, self.n))

    # -- views ----------------------------------------------------------------------------------
    def a_strides(self) -> tuple[Expression, Expression, Expression]:
        """z-strides of A over (batch, m, k)."""
        lead = self.ld_a * z
        return (self.stride_a * z, lead, z) if self.trans_a == "N" else (self.stride_a * z, z, lead)

    def b_strides(self) -> tuple[Expression, Expression, Expression]:
        """z-strides of B over (batch, k, n)."""
        lead = self.ld_b * z
        return (self.stride_b * z, lead, z) if self.trans_b == "N" else (self.stride_b * z, z, lead)

    def input_views(self):
        views = [((self.batch, self.m, self.k), self.a_strides()), ((self.batch, self.k, self.n), self.b_strides())]
        if self.has_bias:
            views.append(((self.n,), (z,)))
        if self.beta:
            views.append(((self.out_size(),), (z,)))
        return tuple(views)

    # -- reference semantics (numpy): lets the CPU tests run plans holding this op ----------------
    def reference(self, ins, in_dtypes, env):
        from luminal.hlir.op import view

        bt, m, n, k = (int(e.evaluate(env)) for e in (self.batch, self.m, self.n, self.k))
        acc = compute_dtype(self.d_dtype)
        a = view(ins[0], (num(bt), num(m), num(k)), self.a_strides(), env).astype(acc)
        b = view(ins[1], (num(bt), num(k), num(n)), self.b_strides(), env).astype(acc)
        d = np.matmul(a, b) if k else np.zeros((bt, m, n), acc)
        if self.has_bias:
            d = d + ins[2][:n].astype(acc)
        if self.beta:
            d = d + self.beta * ins[2][: bt * m * n].astype(acc).reshape(d.shape)
        act = self.epilogue.removesuffix("_BIAS").removesuffix("BIAS")
        with np.errstate(all="ignore"):
            if act == "RELU":
                d = np.maximum(d, 0)
            elif act == "GELU":
                d = 0.5 * d * (1 + np.tanh(GELU_C * (d + 0.044715 * d * d * d)))
        return np.ascontiguousarray(d, dtype=self.d_dtype.np).reshape(-1)

    # -- execution --------------------------------------------------------------------------------
    def spec(self, env: Mapping[str, int], ptrs: Sequence[int]):
        from luminal.backends.cuda.host import lt

        ev = lambda e: int(e.evaluate(env))  # noqa: E731
        bt, m, n, k = ev(self.batch), ev(self.m), ev(self.n), ev(self.k)
        lda, ldb, sa, sb = ev(self.ld_a), ev(self.ld_b), ev(self.stride_a), ev(self.stride_b)
        isz, osz = self.dtype.itemsize, self.d_dtype.itemsize
        align = 256
        for v in (*ptrs, lda * isz, ldb * isz, (sa * isz if bt > 1 else 0), (sb * isz if bt > 1 else 0), n * osz):
            align = math.gcd(align, int(v))
        compute = "64F" if self.dtype == DType.f64 else "32F"
        if self.dtype == DType.f32 and flags.tf32():
            compute = "32F_FAST_TF32"  # only when asked (LUMINAL_TF32=1): TF32 rounds the inputs
        return lt.Spec(self.trans_b, self.trans_a, n, m, k, ldb, lda, bt, sb, sa, self.dtype, self.d_dtype,
                       compute, self.epilogue, self.d_dtype if self.has_bias else None, align)  # fmt: skip

    def _ptrs(self, out_ptr: int, in_ptrs: Sequence[int]) -> tuple[int, int, int, int]:
        """(A, B, C, bias) device pointers; C is D itself unless beta != 0."""
        extra = in_ptrs[2] if len(in_ptrs) > 2 else 0
        return in_ptrs[0], in_ptrs[1], extra if self.beta else out_ptr, extra if self.has_bias else 0

    def _empty(self, env) -> bool:
        return any(int(e.evaluate(env)) == 0 for e in (self.batch, self.m, self.n))

    def prepare(self, env, out_ptr, in_ptrs, stream=None):
        from luminal.backends.cuda import driver
        from luminal.backends.cuda.host import lt

        if self._empty(env) or int(self.k.evaluate(env)) == 0:
            return
        stream = driver.device().stream if stream is None else stream
        p = lt.plan(self.spec(env, [out_ptr, *in_ptrs]), stream)
        lt.workspace(stream, p.workspace)

    def launch(self, stream, out_ptr, in_ptrs, env):
        from luminal.backends.cuda.host import lt

        if self._empty(env):
            return
        a, b, c, bias = self._ptrs(out_ptr, in_ptrs)
        if int(self.k.evaluate(env)) == 0:  # an empty sum (e.g. a dim at 0): D = 0 (+ C)
            self._empty_sum(stream, out_ptr, c, bias, env)
            return
        p = lt.plan(self.spec(env, [out_ptr, *in_ptrs]), stream)
        # cuBLAS's first operand is luminal's B (the column-major swap), its second is A
        lt.matmul(p, stream, b, a, c, out_ptr, bias, self.beta)

    def _empty_sum(self, stream, out_ptr: int, c: int, bias: int, env) -> None:
        from luminal.backends.cuda import driver

        nbytes = int(self.out_size().evaluate(env)) * self.d_dtype.itemsize
        if bias:  # the bias rules require a literal k >= 1, so this cannot be reached from a plan
            raise BackendError(f"{type(self).__name__}: k = 0 with a bias epilogue")
        if self.beta:
            driver.dtod(out_ptr, c, nbytes, stream)  # relu(0) = gelu(0) = 0, so D = C exactly
        else:
            driver.memset8(out_ptr, 0, nbytes, stream)


@dataclass(frozen=True)
class CublasLtBias(CublasLt):
    """epilogue(A @ B + bias) with bias a length-n row broadcast over batch and m (input 2)."""

    n_inputs: ClassVar[int] = 3  # (A, B, bias)
    has_bias: ClassVar[bool] = True


@dataclass(frozen=True)
class CublasLtAccum(CublasLt):
    """A @ B + C with C a contiguous (batch, m, n) buffer of D's dtype (input 2): beta = 1."""

    n_inputs: ClassVar[int] = 3  # (A, B, C)
    beta: ClassVar[float] = 1.0


CUBLASLT_OPS = (CublasLt, CublasLtBias, CublasLtAccum)
__all__ = ["CUBLASLT_OPS", "CublasLt", "CublasLtAccum", "CublasLtBias"]
