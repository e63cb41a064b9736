"""The op cases of tests/torch/test_ops.py: a torch function, its inputs (shapes with named dims,
traced once at the first sizes and run at every entry of `sizes`), the dtypes to try, and the ATen
ops the traced graph must contain. Torch-level functions that decompose (silu, tril, stack, ...)
are cases too: they exercise the ops they decompose into."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

aten = torch.ops.aten
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16, "i64": torch.int64}
N = ({"n": 3}, {"n": 5})  # default sizes: one compile, two lengths


@dataclass(frozen=True)
class A:
    """An input: shape of ints and dim names; dtype None = the case's; floats uniform in [lo, hi]
    (|x| >= min_abs), ints in [lo, hi) (hi may name a dim: indices), bools fair coins."""

    shape: tuple
    dtype: torch.dtype | None = None
    lo: float = -2.0
    hi: float | str = 2.0
    min_abs: float = 0.0


@dataclass(frozen=True)
class Case:
    name: str
    fn: object
    args: tuple
    ops: tuple
    dtypes: tuple = ("f32",)
    sizes: tuple = N
    ref: object = None  # eager reference when fn cannot run eagerly here (CUDA-only kernels)
    wide: bool = True  # compare float outputs with eager run on f64 copies of the inputs
    scale: float = 1.0  # tolerance factor for long decompositions (docs/numerics.md)
    extra: dict = field(default_factory=dict)


def make_inputs(case: Case, dtype: torch.dtype, sizes: dict, gen: torch.Generator) -> list:
    out = []
    for a in case.args:
        shape = tuple(sizes[d] if isinstance(d, str) else d for d in a.shape)
        dt = a.dtype or dtype
        hi = sizes[a.hi] if isinstance(a.hi, str) else a.hi
        if dt == torch.bool:
            out.append(torch.rand(shape, generator=gen) < 0.5)
        elif not dt.is_floating_point:
            out.append(torch.randint(int(a.lo), int(hi), shape, generator=gen, dtype=dt))
        else:
            x = torch.rand(shape, generator=gen, dtype=torch.float64) * (hi - a.lo) + a.lo
            if a.min_abs:
                x = torch.where(x.abs() < a.min_abs, torch.where(x < 0, -a.min_abs, a.min_abs), x)
            out.append(x.to(dt))
    return out


X = A(("n", 4))
Y = A(("n", 4))
POS = A(("n", 4), lo=0.1, hi=3.0)
NZ = A(("n", 4), min_abs=0.25)
I64 = A(("n", 4), torch.int64, -9, 10)
I64NZ = A(("n", 4), torch.int64, 1, 7)
B = A(("n", 4), torch.bool)
FL = ("f32", "bf16")
FL3 = ("f32", "bf16", "f16")


def _c(name, fn, args, ops, **kw):
    return Case(
        name, fn, tuple(args), tuple(o if o.startswith(("aten.", "prims.")) else f"aten.{o}" for o in ops), **kw
    )


def _cpu_sdpa(q, k, v, *rest, **kw):
    return (F.scaled_dot_product_attention(q, k, v, is_causal=kw.get("is_causal", False)),)


CASES: list[Case] = [
    # -- arithmetic ------------------------------------------------------------------------------
    _c("add", lambda a, b: a + b, [X, A((4,))], ["add.Tensor"], dtypes=FL3),
    _c("add_int", lambda a, b: a + b * 3, [I64, I64], ["add.Tensor", "mul.Tensor"], dtypes=("i64",)),
    _c("add_scalar", lambda a: aten.add.Scalar(a, 2.5), [X], ["add.Scalar"]),
    _c("add_alpha_promote", lambda a, b: torch.add(a, b, alpha=2), [X, I64], ["add.Tensor"]),
    _c("sub", lambda a, b: torch.sub(a, b, alpha=3) - 1.5, [X, Y], ["sub.Tensor"], dtypes=FL),
    _c("sub_scalar", lambda a: aten.sub.Scalar(a, 1.5), [X], ["sub.Scalar"]),
    _c("rsub", lambda a: 1 - a, [X], ["sub.Tensor"]),
    _c("mul", lambda a, b: a * b, [X, Y], ["mul.Tensor"], dtypes=FL3),
    _c("mul_scalar", lambda a: aten.mul.Scalar(a, -0.5), [X], ["mul.Scalar"]),
    _c("div", lambda a, b: a / b, [X, NZ], ["div.Tensor"], dtypes=FL),
    _c("div_int", lambda a, b: a / b, [I64, I64NZ], ["div.Tensor"], dtypes=("i64",)),
    _c("div_scalar", lambda a: aten.div.Scalar(a, 4.0), [X], ["div.Scalar"]),
    _c("div_floor", lambda a, b: torch.div(a, b, rounding_mode="floor"), [X, NZ], ["div.Tensor_mode"]),
    _c("div_trunc", lambda a, b: torch.div(a, b, rounding_mode="trunc"), [X, NZ], ["div.Tensor_mode"]),
    _c("floor_divide_int", lambda a, b: a // b, [I64, A(("n", 4), torch.int64, -5, -1)], ["div.Tensor_mode"],
       dtypes=("i64",)),  # fmt: skip
    _c("div_scalar_mode", lambda a: aten.div.Scalar_mode(a, 3, rounding_mode="floor"), [I64], ["div.Scalar_mode"],
       dtypes=("i64",)),  # fmt: skip
    _c("remainder", lambda a, b: torch.remainder(a, b), [X, NZ], ["remainder.Tensor"]),
    _c("remainder_int", lambda a: torch.remainder(a, -4), [I64], ["remainder.Scalar"], dtypes=("i64",)),
    _c("fmod", lambda a, b: torch.fmod(a, b), [X, NZ], ["fmod.Tensor"]),
    _c("fmod_scalar", lambda a: torch.fmod(a, 3), [I64], ["fmod.Scalar"], dtypes=("i64",)),
    _c("neg_abs_sign", lambda a: (-a, a.abs(), a.sign()), [X], ["neg.default", "abs.default", "sign.default"],
       dtypes=("f32", "i64")),  # fmt: skip
    _c("pow_scalar", lambda a: (a**2, a**3.5), [POS], ["pow.Tensor_Scalar"], dtypes=FL, scale=2),
    _c("pow_tensor", lambda a, b: a**b, [POS, X], ["pow.Tensor_Tensor"], scale=2),
    _c("pow_scalar_base", lambda a: 2.0**a, [X], ["pow.Scalar"], scale=2),
    # -- unary math ------------------------------------------------------------------------------
    _c("exp", torch.exp, [X], ["exp.default"], dtypes=FL3),
    _c("exp2", torch.exp2, [X], ["exp2.default"]),
    _c("log", torch.log, [POS], ["log.default"], dtypes=FL),
    _c("log2", torch.log2, [POS], ["log2.default"]),
    _c("log1p_expm1", lambda a: (torch.log1p(a.abs()), torch.expm1(a)), [X], ["log1p.default", "expm1.default"]),
    _c("sqrt_rsqrt", lambda a: (a.sqrt(), a.rsqrt()), [POS], ["sqrt.default", "rsqrt.default"], dtypes=FL),
    _c("reciprocal", torch.reciprocal, [NZ], ["reciprocal.default"]),
    _c("sin_cos", lambda a: (a.sin(), a.cos()), [X], ["sin.default", "cos.default"]),
    _c("sigmoid_tanh", lambda a: (a.sigmoid(), a.tanh()), [X], ["sigmoid.default", "tanh.default"], dtypes=FL),
    _c("relu", F.relu, [X], ["relu.default"], dtypes=FL),
    _c("silu", F.silu, [X], ["sigmoid.default", "mul.Tensor"], dtypes=FL),
    _c("softplus", lambda a: F.softplus(a, beta=2.0), [X], ["log1p.default", "where.self"]),
    _c("gelu", F.gelu, [X], ["gelu.default"], dtypes=FL, scale=2),
    _c("gelu_tanh", lambda a: F.gelu(a, approximate="tanh"), [X], ["gelu.default"], dtypes=FL, scale=2),
    _c("erf", torch.erf, [X], ["erf.default"], scale=4),
    _c("leaky_relu", lambda a: F.leaky_relu(a, 0.2), [X], ["leaky_relu.default"]),
    _c("hardtanh", lambda a: F.hardtanh(a, -0.5, 1.0), [X], ["hardtanh.default"]),
    _c("elu", F.elu, [X], ["elu.default"]),
    _c("rounding", lambda a: (a.trunc(), a.floor(), a.ceil(), a.round()), [A(("n", 4), lo=-4, hi=4)],
       ["trunc.default", "floor.default", "ceil.default", "round.default"]),  # fmt: skip
    _c("round_ties", lambda a: torch.round(a * 0 + torch.tensor([0.5, 1.5, -2.5, 2.49])), [X],
       ["round.default", "lift_fresh_copy.default"]),  # fmt: skip
    # -- comparisons and logic -------------------------------------------------------------------
    _c("compare", lambda a, b: (a == b, a != b, a < b, a <= b, a > b, a >= b),
       [A(("n", 4), lo=-2, hi=2), A((4,), lo=-2, hi=2)],
       ["eq.Tensor", "ne.Tensor", "lt.Tensor", "le.Tensor", "gt.Tensor", "ge.Tensor"], dtypes=("f32", "i64")),
    _c("compare_scalar", lambda a: (a == 1, a != 1, a < 0.5, a <= 0, a > 0, a >= 1),
       [A(("n", 4), torch.int64, -2, 3)],
       ["eq.Scalar", "ne.Scalar", "lt.Scalar", "le.Scalar", "gt.Scalar", "ge.Scalar"]),
    _c("compare_promote", lambda a, b: a < b, [I64, X], ["lt.Tensor"]),
    _c("logical", lambda a, b: (a & b, a | b, a ^ b, ~a, torch.logical_and(a, b), torch.logical_or(a, b),
                                torch.logical_xor(a, b), torch.logical_not(a)),
       [B, B], ["bitwise_and.Tensor", "bitwise_or.Tensor", "bitwise_xor.Tensor", "bitwise_not.default",
                "logical_and.default", "logical_or.default", "logical_xor.default", "logical_not.default"]),
    _c("logical_scalar", lambda a: (aten.bitwise_and.Scalar(a, True), aten.bitwise_or.Scalar(a, False),
                                    aten.bitwise_xor.Scalar(a, True)),
       [B], ["bitwise_and.Scalar", "bitwise_or.Scalar", "bitwise_xor.Scalar"]),
    _c("logical_numeric", lambda a: torch.logical_not(a), [I64], ["logical_not.default"]),
    _c("isnan_isinf", lambda a: (torch.isnan(a.log()), torch.isinf(1 / (a * 0))), [X],
       ["isnan.default", "isinf.default"]),  # fmt: skip
    _c("maximum_minimum", lambda a, b: (torch.maximum(a, b), torch.minimum(a, b)), [X, Y],
       ["maximum.default", "minimum.default"], dtypes=("f32", "i64")),  # fmt: skip
    _c("clamp", lambda a: (a.clamp(-0.5, 1.0), a.clamp(min=0.2), a.clamp(max=0.1)), [X], ["clamp.default"]),
    _c("clamp_tensor", lambda a, lo, hi: a.clamp(lo, hi), [X, A((4,), lo=-1, hi=0), A((4,), lo=0, hi=1)],
       ["clamp.Tensor"]),  # fmt: skip
    _c("where", lambda c, a, b: torch.where(c, a, b), [B, X, A((4,))], ["where.self"], dtypes=FL),
    _c("where_scalar", lambda c, a: (torch.where(c, a, 0.0), torch.where(c, 1.0, a)), [B, X], ["where.self"]),
    _c("masked_fill", lambda a, m: a.masked_fill(m, -1e4), [X, B], ["where.self"]),
    # -- casts and copies ------------------------------------------------------------------------
    _c("to_dtype", lambda a: (a.to(torch.bfloat16), a.to(torch.int64), a.to(torch.float16), a > a.mean()),
       [A(("n", 4), lo=-40, hi=40)], ["_to_copy.default"]),  # fmt: skip
    _c("to_float", lambda a: (a.float(), a.to(torch.bool), a.double()), [I64], ["_to_copy.default"]),
    _c("convert_element_type", lambda a: (torch.ops.prims.convert_element_type(a, torch.bfloat16),
                                           torch.ops.prims.convert_element_type(a, torch.int32)),
       [A(("n", 4), lo=-40, hi=40)], ["prims.convert_element_type.default"]),  # fmt: skip
    _c("clone_alias", lambda a: (a.clone() + 1, aten.alias(a) * 2), [X], ["clone.default", "alias.default"]),
    _c("copy", lambda a: torch.empty(a.shape[0], 4).copy_(a) * 2, [X], ["copy.default", "empty.memory_format"]),
    # -- reductions ------------------------------------------------------------------------------
    _c("sum", lambda a: (a.sum(1), a.sum(), a.sum(0, keepdim=True)), [X], ["sum.dim_IntList"], dtypes=FL),
    _c("sum_int_bool", lambda a, b: (a.sum(1), b.sum(0)), [I64, B], ["sum.dim_IntList"]),
    _c("mean", lambda a: (a.mean(1), a.mean(), a.mean((0, 1), keepdim=True)), [X], ["mean.dim", "mean.default"],
       dtypes=FL),  # fmt: skip
    _c("prod", lambda a: (a.prod(), a.prod(1, keepdim=True)), [A(("n", 4), lo=0.5, hi=1.5)],
       ["prod.default", "prod.dim_int"]),  # fmt: skip
    _c("var_std", lambda a: (a.var(1), a.var(0, correction=0), a.std()), [X], ["var.correction"], scale=2),
    _c("amax_amin", lambda a: (a.amax(1), a.amin(0, keepdim=True), a.amax()), [X], ["amax.default", "amin.default"],
       dtypes=("f32", "i64")),  # fmt: skip
    _c("max_min_all", lambda a: (a.max(), a.min()), [X], ["max.default", "min.default"]),
    _c("max_min_dim", lambda a: (*a.max(1), *a.min(0)), [X], ["max.dim", "min.dim"]),
    _c("argmax_argmin", lambda a: (a.argmax(1), a.argmin(0, keepdim=True), a.argmax()), [X],
       ["argmax.default", "argmin.default"]),  # fmt: skip
    _c("any_all", lambda a, b: (a.any(), b.any(1), aten.any.dims(b, [0, 1]), b.all(0), b.all()), [I64, B],
       ["any.default", "any.dim", "any.dims"]),  # fmt: skip
    _c("softmax", lambda a: (a.softmax(-1), a.softmax(0)), [X], ["_softmax.default"], dtypes=FL3),
    _c("log_softmax", lambda a: a.log_softmax(-1), [X], ["_log_softmax.default"], dtypes=FL),
    _c("cumsum", lambda a, b: (a.cumsum(0), b.cumsum(1)), [X, I64], ["cumsum.default"]),
    _c("topk", lambda a: (*a.topk(2, -1), *a.topk(3, 1, largest=False)), [X], ["topk.default"]),
    _c("sort", lambda a: (*a.sort(-1), *a.sort(dim=-1, descending=True, stable=True)), [X],
       ["sort.default", "sort.stable"]),  # fmt: skip
    _c("argsort", lambda a: a.argsort(dim=-1, stable=True), [A(("n", 4), torch.int64, 0, 3)], ["sort.stable"]),
    # -- movement ----------------------------------------------------------------------------------
    _c("view_permute", lambda a: (a.view(-1, 2).permute(1, 0), a.t(), a.transpose(0, 1).reshape(2, -1)), [X],
       ["view.default", "permute.default"]),  # fmt: skip
    _c("expand", lambda a: a[:, None, :].expand(-1, 3, 4), [X], ["expand.default", "unsqueeze.default"]),
    _c("squeeze", lambda a: (a.unsqueeze(0).squeeze(0), a[:, :1].squeeze(1), a.view(1, -1, 4, 1).squeeze()), [X],
       ["squeeze.dims"]),  # fmt: skip
    _c("slice", lambda a: (a[1:, 1:3], a[:, ::2], a[-2:], a[:, -3:-1], a[1:3]), [X], ["slice.Tensor"],
       dtypes=FL),  # fmt: skip
    _c("narrow_select", lambda a: (a.narrow(1, 1, 2), a[1], a[:, -1], a.select(0, -1)), [X],
       ["slice.Tensor", "select.int"]),  # fmt: skip
    _c("cat", lambda a, b: (torch.cat([a, b], 0), torch.cat([a, b, a], 1), torch.cat([a, b.int()], 1)), [X, Y],
       ["cat.default"], dtypes=FL),  # fmt: skip
    # blocks of one tensor: RoPE's rotate_half (halves swapped, one negated), cat(f, f), identity
    _c("cat_blocks", lambda a: (torch.cat((-a[..., 2:], a[..., :2]), -1), torch.cat((a[:, 2:], -a[:, :2]), 1),
                                torch.cat((a, a), 0), torch.cat((a[..., :2], a[..., 2:]), -1),
                                torch.cat((-a, -a), 1), torch.cat((a[:, 1:], a[:, :1]), 1)), [X],
       ["cat.default"], dtypes=FL),  # fmt: skip
    _c("stack", lambda a, b: (torch.stack([a, b]), torch.stack([a, b], -1)), [X, Y], ["cat.default"]),
    _c("split", lambda a: (*a.split(2, 1), *a.split([1, 3], 1), *a.chunk(2, 1), *a.unbind(1)), [X],
       ["split_with_sizes.default"]),  # fmt: skip
    _c("pad", lambda a: (F.pad(a, (1, 2)), F.pad(a, (0, 1, 2, 0), value=3.0), F.pad(a, (-1, 1))), [A((3, 4))],
       ["constant_pad_nd.default"], sizes=({},)),  # fmt: skip  (torch specializes padded sizes)
    _c("repeat", lambda a: (a.repeat(2, 1), a.repeat(1, 2, 3)), [X], ["repeat.default"]),
    _c("flip", lambda a: (a.flip(0), a.flip(0, 1)), [X], ["flip.default"]),
    _c("tril_triu", lambda a: (a.tril(), a.triu(1), a.tril(-1)), [A(("n", 5))], ["where.self", "arange.start_step"]),
    # -- indexing ------------------------------------------------------------------------------------
    _c("index", lambda a, i, j: (a[i], a[:, j], a[i, j[:1]], a[i[:, None], j]),
       [A(("n", 4, 3)), A((2,), torch.int64, -3, 3), A((2,), torch.int64, -4, 4)], ["index.Tensor"], dtypes=FL),
    _c("index_nonadjacent", lambda a, i, j: a[i, :, j], [A((3, "n", 4)), A((2,), torch.int64, 0, 3),
       A((2,), torch.int64, 0, 4)], ["index.Tensor"]),  # fmt: skip
    _c("index_put", lambda a, i, v: a.index_put((i,), v), [X, A((2,), torch.int64, 0, 3), A((2, 4))],
       ["index_put.default"], dtypes=FL),  # fmt: skip
    _c("index_put_accumulate", lambda a, i, v: a.index_put((i,), v, accumulate=True),
       [X, A((5,), torch.int64, 0, 3), A((5, 4))], ["index_put.default"]),  # fmt: skip
    _c("index_put_mask", lambda a, m: a.index_put((m,), torch.tensor(-5.0)), [X, B], ["index_put.default"]),
    _c("index_copy", lambda a, i, v: a.index_copy(0, i, v), [A((6, "n")), A((2,), torch.int64, 0, 6), A((2, "n"))],
       ["index_put.default"]),  # fmt: skip
    _c("index_select", lambda a, i: (a.index_select(0, i), a.index_select(1, i)),
       [X, A((3,), torch.int64, 0, 3)], ["index_select.default"]),  # fmt: skip
    _c("embedding", lambda w, i: F.embedding(i, w), [A((10, 4)), A(("n",), torch.int64, 0, 10)],
       ["embedding.default"], dtypes=FL),  # fmt: skip
    _c("gather", lambda a, i: (a.gather(1, i), a.gather(0, i[:2])), [X, A(("n", 3), torch.int64, 0, 3)],
       ["gather.default"]),  # fmt: skip
    _c("scatter", lambda a, i, s: (a.scatter(1, i, s), a.scatter(1, i, 7.0)),
       [X, A(("n", 1), torch.int64, 0, 4), A(("n", 2))], ["scatter.src", "scatter.value"]),  # fmt: skip
    _c("scatter_add", lambda a, i, s: a.scatter_add(1, i, s), [X, A(("n", 3), torch.int64, 0, 4), A(("n", 3))],
       ["scatter_add.default"]),  # fmt: skip
    # -- creation ----------------------------------------------------------------------------------
    _c("arange", lambda a: (torch.arange(a.shape[0]) * 2, torch.arange(1, a.shape[0] + 1, 2, dtype=torch.float32),
                            torch.arange(0.5, 3.0, 0.5)), [X], ["arange.start_step"]),  # fmt: skip
    _c("full", lambda a: (torch.full((a.shape[0], 2), 3.5), torch.zeros(2, a.shape[0], dtype=torch.int64),
                          torch.ones_like(a), torch.full_like(a, -2.0), a.new_zeros(3)), [X],
       ["full.default", "full_like.default"]),  # fmt: skip
    _c("empty", lambda a: ((torch.empty_like(a) * 0).nan_to_num() + 1,
                           (torch.empty_strided((2, 3), (3, 1)) * 0).nan_to_num()),
       [X], ["empty_permuted.default", "empty_strided.default"]),  # fmt: skip
    _c("scalar_tensor", lambda a: torch.where(a > 0, a, aten.scalar_tensor(0.5)), [X], ["scalar_tensor.default"]),
    # -- matmul, conv, norms -----------------------------------------------------------------------
    _c("mm", lambda a, b: a @ b, [X, A((4, 3))], ["mm.default"], dtypes=FL3),
    _c("bmm", lambda a, b: (torch.bmm(a, b), a @ b[0]), [A((2, "n", 4)), A((2, 4, 3))], ["bmm.default"],
       dtypes=FL),  # fmt: skip
    _c("addmm_linear", lambda a, w, b: (F.linear(a, w, b), torch.addmm(b, a, w.t(), beta=0.5, alpha=2)),
       [X, A((3, 4)), A((3,))], ["addmm.default"], dtypes=FL),  # fmt: skip
    _c("conv1d", lambda x, w, b: (F.conv1d(x, w, b), F.conv1d(x, w, None, stride=2, padding=1, dilation=2)),
       [A((2, 3, "n")), A((4, 3, 3)), A((4,))], ["convolution.default"], sizes=({"n": 8}, {"n": 11})),
    _c("conv1d_grouped", lambda x, w: F.conv1d(x, w, groups=2, padding=1), [A((1, 4, "n")), A((6, 2, 3))],
       ["convolution.default"], sizes=({"n": 5}, {"n": 7})),  # fmt: skip
    _c("conv2d", lambda x, w, b: (F.conv2d(x, w, b, padding=1), F.conv2d(x, w, None, stride=(2, 1))),
       [A((1, 2, "n", 5)), A((3, 2, 3, 2)), A((3,))], ["convolution.default"], sizes=({"n": 6}, {"n": 7})),
    _c("conv2d_depthwise", lambda x, w: F.conv2d(x, w, groups=3), [A((2, 3, 4, "n")), A((3, 1, 2, 2))],
       ["convolution.default"], sizes=({"n": 4}, {"n": 6})),  # fmt: skip
    _c("layer_norm", lambda x, w, b: (F.layer_norm(x, (4,), w, b), F.layer_norm(x, (4,))),
       [X, A((4,)), A((4,))], ["native_layer_norm.default"], dtypes=FL, scale=2),  # fmt: skip
    _c("rms_norm", lambda x, w: F.rms_norm(x, (4,), w, eps=1e-6), [X, A((4,))], ["rsqrt.default", "mean.dim"],
       dtypes=FL, scale=2),  # fmt: skip
    _c("group_norm", lambda x, w, b: F.group_norm(x, 2, w, b), [A((2, 4, "n")), A((4,)), A((4,))],
       ["native_group_norm.default"], scale=2),  # fmt: skip
    # -- attention -------------------------------------------------------------------------------------
    _c("sdpa_cpu", lambda q, k, v, m: (F.scaled_dot_product_attention(q, k, v),
                                       F.scaled_dot_product_attention(q, k, v, is_causal=True),
                                       F.scaled_dot_product_attention(q, k, v, attn_mask=m),
                                       F.scaled_dot_product_attention(q, k, v, scale=0.3)),
       [A((1, 2, "n", 8)), A((1, 2, "n", 8)), A((1, 2, "n", 8)), A(("n", "n"), torch.bool)],
       ["_scaled_dot_product_flash_attention_for_cpu.default"], dtypes=FL),
    _c("sdpa_gqa_bias", lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m, enable_gqa=True),
       [A((1, 4, "n", 8)), A((1, 2, "n", 8)), A((1, 2, "n", 8)), A(("n", "n"))],
       ["_scaled_dot_product_flash_attention_for_cpu.default"]),
    _c("sdpa_efficient", lambda q, k, v: aten._scaled_dot_product_efficient_attention(q, k, v, None, False,
                                                                                      is_causal=True)[0],
       [A((1, 2, "n", 8))] * 3, ["_scaled_dot_product_efficient_attention.default"],
       ref=lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)),
    _c("sdpa_flash", lambda q, k, v: aten._scaled_dot_product_flash_attention(q, k, v, 0.0, True)[0],
       [A((1, 2, "n", 8))] * 3, ["_scaled_dot_product_flash_attention.default"],
       ref=lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)),
    _c("sdpa_cudnn", lambda q, k, v: aten._scaled_dot_product_cudnn_attention(q, k, v, None, False,
                                                                              is_causal=False)[0],
       [A((1, 2, "n", 8))] * 3, ["_scaled_dot_product_cudnn_attention.default"],
       ref=lambda q, k, v: F.scaled_dot_product_attention(q, k, v)),
]  # fmt: skip

# composite SDPA survives only torch.export's pre-dispatch trace; tests/torch/test_export.py covers it
EXPORT_ONLY = ("aten.scaled_dot_product_attention.default",)
