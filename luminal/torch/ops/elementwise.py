"""Elementwise ATen ops: arithmetic (torch's type promotion from the node's metadata), rounding and
division modes, comparisons and logic, activations, transcendentals, select (where / masked_fill),
clamp, casts and copies."""

from __future__ import annotations

import math

import luminal as lm
from luminal.dtype import DType
from luminal.torch.registry import aten


def _pair(c, a, b):
    return c.tensor(a), c.tensor(b)


def _binary(c, a, b, op):
    """op(a, b) at the output's rank less its leading literal-1 axes (kept at rank >= 2), viewed back
    to torch's rank: a Hugging Face decode step's (1, 1, n) residual add or gated product is built
    as the (1, n) op the zoo's graphs have -- the same values, and the shape the CUDA backend's
    GEMV epilogue rules (gemvfused.egg: residual, gated; sh = (1, n)) are written for."""
    a, b = _pair(c, a, b)
    shape = c.shape
    k = 0
    while k < len(shape) - 2 and shape[k].is_num and shape[k].value == 1:
        k += 1
    keep = len(shape) - k
    lead = [d for t in (a, b) for d in t.shape[: max(t.ndim - keep, 0)]]  # the operands' axes dropped
    if k == 0 or any(d != 1 for d in lead):
        return op(a, b)
    a, b = (t.squeeze(tuple(range(t.ndim - keep))) if t.ndim > keep else t for t in (a, b))
    out = op(a, b)
    for _ in range(k):
        out = out.unsqueeze(0)
    return out


@aten("add.Tensor", "add.Scalar", note="`a + alpha*b` in the promoted dtype")
def add(c, a, b, alpha=1):
    from luminal.torch.ops.rotary import rotary

    rotated = rotary(c)  # Hugging Face's rotary embedding, in the zoo's form
    if rotated is not None:
        return rotated
    return _binary(c, a, b, lambda a, b: a + (b if alpha == 1 else b * alpha))


@aten("sub.Tensor", "sub.Scalar", note="`a - alpha*b`")
def sub(c, a, b, alpha=1):
    return _binary(c, a, b, lambda a, b: a - (b if alpha == 1 else b * alpha))


@aten("mul.Tensor", "mul.Scalar", note="`a * b`")
def mul(c, a, b):
    return _binary(c, a, b, lambda a, b: a * b)


@aten("div.Tensor", "div.Scalar", note="true division (ints promote to float)")
def div(c, a, b):
    a, b = _pair(c, a, b)
    return a / b


def _floor_div(a, b):
    """Python's floor division for any dtype (luminal `//` floors floats, truncates ints)."""
    if a.dtype.is_float:
        return a // b
    q = a / b  # truncates
    fix = (a % b).ne(0) & (a < 0).ne(b < 0)
    return q - fix.cast(a.dtype)


@aten("div.Tensor_mode", "div.Scalar_mode", note="rounding_mode None / 'trunc' / 'floor'")
def div_mode(c, a, b, rounding_mode=None):
    a, b = _pair(c, a, b)
    if rounding_mode is None:
        return a / b
    if rounding_mode == "floor":
        return _floor_div(a, b)
    q = a / b
    return trunc(c, q) if q.dtype.is_float else q


@aten("remainder.Tensor", "remainder.Scalar", note="Python modulo (sign of the divisor): fmod + fix-up")
def remainder(c, a, b):
    a, b = _pair(c, a, b)
    r = a % b
    fix = r.ne(0) & (r < 0).ne(b < 0)
    return lm.where(fix, r + b, r)


@aten("fmod.Tensor", "fmod.Scalar", note="C remainder (`%`, sign of the dividend)")
def fmod(c, a, b):
    a, b = _pair(c, a, b)
    return a % b


@aten("neg.default", note="`-x`")
def neg(c, x):
    return -c.tensor(x)


@aten("abs.default", note="`abs`")
def abs_(c, x):
    return c.tensor(x).abs()


@aten("sign.default", note="`sign`")
def sign(c, x):
    return c.tensor(x).sign()


@aten("pow.Tensor_Scalar", "pow.Tensor_Tensor", "pow.Scalar", note="`pow` (integer exponents exact)")
def pow_(c, a, e):
    if not isinstance(a, lm.GraphTensor):  # scalar base, tensor exponent
        base = c.tensor(a)
        return lm.where(c.tensor(e).eq(0), 1.0, (c.tensor(e) * base.abs().log2()).exp2())
    if isinstance(e, lm.GraphTensor):
        return c.tensor(a) ** c.tensor(e)
    return c.tensor(a) ** e


def _unary(method: str):
    def fn(c, x):
        return getattr(c.tensor(x), method)()

    fn.__name__ = method
    return fn


for _name, _method in [
    ("exp", "exp"), ("exp2", "exp2"), ("log", "log"), ("log2", "log2"), ("sqrt", "sqrt"), ("rsqrt", "rsqrt"),
    ("reciprocal", "reciprocal"), ("sin", "sin"), ("cos", "cos"), ("sigmoid", "sigmoid"), ("tanh", "tanh"),
    ("relu", "relu"),
]:  # fmt: skip
    aten(f"{_name}.default", note=f"`{_method}`")(_unary(_method))


@aten("log1p.default", note="`log(1 + x)`")
def log1p(c, x):
    return (c.tensor(x) + 1).log()


@aten("expm1.default", note="`exp(x) - 1`")
def expm1(c, x):
    return c.tensor(x).exp() - 1


@aten("gelu.default", note="exact (`gelu`) or `approximate='tanh'` (`gelu_tanh`)")
def gelu(c, x, approximate="none"):
    x = c.tensor(x)
    return x.gelu_tanh() if approximate == "tanh" else x.gelu()


@aten("erf.default", note="Abramowitz-Stegun 7.1.26 (|error| < 1.5e-7), as luminal's gelu")
def erf(c, x):
    x = c.tensor(x)
    ax = x.abs()
    k = (ax * 0.3275911 + 1).reciprocal()
    poly = ((((k * 1.061405429 - 1.453152027) * k + 1.421413741) * k - 0.284496736) * k + 0.254829592) * k
    return (1 - poly * (-(ax * ax)).exp()) * x.sign()


@aten("leaky_relu.default", note="`where(x > 0, x, slope*x)`")
def leaky_relu(c, x, negative_slope=0.01):
    x = c.tensor(x)
    return lm.where(x > 0, x, x * negative_slope)


@aten("hardtanh.default", note="`clip(x, min, max)`")
def hardtanh(c, x, min_val=-1.0, max_val=1.0):
    return c.tensor(x).clip(min_val, max_val)


@aten("elu.default", note="`where(x > 0, x, alpha*(exp(x) - 1))`")
def elu(c, x, alpha=1.0, scale=1.0, input_scale=1.0):
    x = c.tensor(x)
    return lm.where(x > 0, x * scale, ((x * input_scale).exp() - 1) * (alpha * scale))


# -- rounding -----------------------------------------------------------------------------------
@aten("trunc.default", note="`x - fmod(x, 1)`")
def trunc(c, x):
    x = c.tensor(x)
    return x - x % 1.0 if x.dtype.is_float else x


@aten("floor.default", note="trunc, minus one below a negative non-integer")
def floor(c, x):
    x = c.tensor(x)
    if not x.dtype.is_float:
        return x
    t = x - x % 1.0
    return t - (x < t).cast(x.dtype)


@aten("ceil.default", note="trunc, plus one above a positive non-integer")
def ceil(c, x):
    x = c.tensor(x)
    if not x.dtype.is_float:
        return x
    t = x - x % 1.0
    return t + (x > t).cast(x.dtype)


@aten("round.default", note="round half to even")
def round_(c, x):
    x = c.tensor(x)
    if not x.dtype.is_float:
        return x
    r = floor(c, x + 0.5)
    tie = (r - x).eq(0.5) & (r % 2.0).ne(0.0)
    return r - tie.cast(x.dtype)


# -- comparisons and logic -------------------------------------------------------------------------
def _cmp(op: str):
    def fn(c, a, b):
        dt = c.common_dtype(0, 1)
        a, b = c.tensor(a, dt), c.tensor(b, dt)
        if op in ("eq", "ne"):
            return getattr(a, op)(b)
        return {"lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b}[op] if op else None

    fn.__name__ = op
    return fn


for _op in ("eq", "ne", "lt", "le", "gt", "ge"):
    aten(f"{_op}.Tensor", f"{_op}.Scalar", note=f"`{_op}` in the promoted dtype (bool result)")(_cmp(_op))


def _bool(c, x):
    return c.tensor(x, c.common_dtype(0)).ne(0) if not (isinstance(x, lm.GraphTensor) and x.dtype == DType.bool) else x


@aten("logical_not.default", note="`~(x != 0)`")
def logical_not(c, x):
    return ~_bool(c, x)


def _logic(op: str, bitwise: bool):
    def fn(c, a, b):
        if bitwise and c.dtype != DType.bool:
            raise c.unsupported("bitwise ops are translated for bool tensors only")
        a = _bool(c, a) if isinstance(a, lm.GraphTensor) else c.tensor(bool(a), DType.bool)
        b = _bool(c, b) if isinstance(b, lm.GraphTensor) else c.tensor(bool(b), DType.bool)
        return {"and": a & b, "or": a | b, "xor": a ^ b}[op]

    return fn


for _op in ("and", "or", "xor"):
    aten(f"logical_{_op}.default", note=f"logical {_op}")(_logic(_op, False))
    aten(f"bitwise_{_op}.Tensor", f"bitwise_{_op}.Scalar", note=f"{_op} of bool tensors")(_logic(_op, True))


@aten("bitwise_not.default", note="`~x` of a bool tensor")
def bitwise_not(c, x):
    if x.dtype != DType.bool:
        raise c.unsupported("bitwise_not is translated for bool tensors only")
    return ~x


@aten("isnan.default", note="`x != x`")
def isnan(c, x):
    return x.ne(x) if x.dtype.is_float else c.graph.full(x.shape, False, DType.bool)


@aten("isinf.default", note="`|x| == inf`")
def isinf(c, x):
    return x.abs().eq(math.inf) if x.dtype.is_float else c.graph.full(x.shape, False, DType.bool)


@aten("maximum.default", note="`maximum` (NaN-propagating)")
def maximum(c, a, b):
    a, b = _pair(c, a, b)
    return a.maximum(b)


@aten("minimum.default", note="`minimum` (NaN-propagating)")
def minimum(c, a, b):
    a, b = _pair(c, a, b)
    return a.minimum(b)


@aten("clamp.default", "clamp.Tensor", note="`clip(min, max)` (either may be None)")
def clamp(c, x, min=None, max=None):
    x = c.tensor(x)
    lo = None if min is None else c.tensor(min)
    hi = None if max is None else c.tensor(max)
    if lo is not None:
        x = x.maximum(lo)
    if hi is not None:
        x = x.minimum(hi)
    return x


# -- select -------------------------------------------------------------------------------------------
@aten("where.self", note="`lm.where` (NaN-safe select)")
def where(c, cond, a, b):
    return lm.where(_bool(c, cond), c.tensor(a), c.tensor(b))


# -- casts and copies ---------------------------------------------------------------------------------
@aten(
    "_to_copy.default",
    "prims.convert_element_type.default",
    note="`cast` to the target dtype (device moves are no-ops)",
)
def to_copy(c, x, *args, **kwargs):
    return c.tensor(x)


@aten("clone.default", "alias.default", "lift_fresh_copy.default",
      note="identity (luminal tensors are values)")  # fmt: skip
def identity(c, x, *args, **kwargs):
    return x


@aten("copy.default", note="`src` broadcast to `dst`'s shape and dtype")
def copy(c, dst, src, non_blocking=False):
    return c.tensor(src).expand(*c.shape)
