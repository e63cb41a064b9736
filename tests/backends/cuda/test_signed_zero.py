"""-0.0 and 0.0 are different constants everywhere ops are keyed: a Constant / KernelConstant compares
and hashes its float value by bit pattern, so the render memo, the fused bodies' interning and any
plan key keep 1 / -0.0 = -inf apart from 1 / 0.0 = inf (a conflation would be a silent wrong answer)."""

from __future__ import annotations

import math

import pytest

from luminal.backends.cuda.backend import plan_kernels
from luminal.backends.cuda.kernels.io import KernelConstant
from luminal.dtype import DType
from luminal.egraph.llir import LNode, _op_text
from luminal.hlir import Constant, Output
from luminal.hlir.fexpr import FNode


@pytest.mark.parametrize("cls", [Constant, KernelConstant])
def test_signed_zeros_are_different_constants(cls):
    pos, neg = cls(0.0, DType.f32), cls(-0.0, DType.f32)
    assert pos != neg and len({pos, neg}) == 2
    assert pos == cls(0.0, DType.f32) and hash(pos) == hash(cls(0.0, DType.f32))
    nan = cls(math.nan, DType.f32)
    assert nan == cls(math.nan, DType.f32)  # a NaN constant is itself (field == would say no)
    assert Constant(1.0, DType.f32) != KernelConstant(1.0, DType.f32)


@pytest.mark.parametrize("cls", [Constant, KernelConstant])
def test_op_text_keeps_signed_zeros_apart(cls):
    """The canonical op text (memoized by op) keys the per-op cost memo, the rendered-kernel disk cache
    and loop rolling's layer signatures: the first zero's text must not stand for the other."""
    assert "-0.0" not in _op_text(cls(0.0, DType.f32)) and "-0.0" in _op_text(cls(-0.0, DType.f32))


def test_fused_body_interning_keeps_signed_zeros_apart():
    pos, neg = FNode(KernelConstant(0.0, DType.f32), ()), FNode(KernelConstant(-0.0, DType.f32), ())
    assert pos is not neg
    assert math.copysign(1.0, neg.op.value) < 0


@pytest.mark.parametrize("first", [0.0, -0.0])
def test_plan_with_both_zeros_renders_both(first):
    """A plan holding KernelConstant(0.0) and KernelConstant(-0.0): each renders its own literal (the
    render memo keyed by op served the first one's kernel for both before the fix)."""
    second = -first
    nodes = [LNode(KernelConstant(first, DType.f32), (), DType.f32), LNode(Output("a"), (0,), DType.f32),
             LNode(KernelConstant(second, DType.f32), (), DType.f32), LNode(Output("b"), (2,), DType.f32)]  # fmt: skip
    k_first, k_second = plan_kernels(nodes)

    def lit(v: float) -> str:  # not a dict keyed by the zeros: it would conflate them too
        return "= -0x0.0p+0f;" if math.copysign(1.0, v) < 0 else "= 0x0.0p+0f;"

    assert lit(first) in k_first.code and lit(second) in k_second.code
    assert k_first.code != k_second.code
