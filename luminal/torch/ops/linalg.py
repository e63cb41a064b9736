"""Matmul-family and normalization ATen ops: mm / bmm / addmm / baddbmm, convolution (1-D / 2-D,
strided, dilated, padded, grouped) as unfold-by-Gather + matmul, native_layer_norm, native_group_norm."""

from __future__ import annotations

from luminal.dtype import DType
from luminal.shape.expr import z
from luminal.torch.registry import aten


@aten("mm.default", "bmm.default", note="`@` (Mul + SumReduce; backends pick a GEMM)")
def mm(c, a, b):
    return c.tensor(a) @ c.tensor(b)


@aten("addmm.default", note="`beta*bias + alpha*(a @ b)`")
def addmm(c, bias, a, b, beta=1, alpha=1):
    prod = c.tensor(a) @ c.tensor(b)
    if alpha != 1:
        prod = prod * alpha
    if beta == 0:
        return prod
    bias = c.tensor(bias)
    return prod + (bias if beta == 1 else bias * beta)


@aten("convolution.default", note="conv1d/2d: padded input unfolded by one Gather per spatial axis, then a "
      "grouped matmul; transposed convolutions are not translated")  # fmt: skip
def convolution(c, x, w, bias, stride, padding, dilation, transposed, output_padding, groups):
    if transposed:
        raise c.unsupported("transposed convolution is not translated")
    nsp = x.ndim - 2
    if nsp not in (1, 2):
        raise c.unsupported(f"{nsp}-D convolution is not translated (1-D and 2-D are)")
    x, w = c.tensor(x), c.tensor(w)
    if any(padding):
        x = x.pad([(0, 0), (0, 0), *[(p, p) for p in padding]])
    out_sp = c.shape[2:]
    n = x.shape[0]
    cout, cg = w.shape[0], w.shape[1]
    ks = w.shape[2:]
    # unfold: axis 2+2k holds output position o, axis 3+2k the kernel tap j; index o*stride + j*dilation
    for k in range(nsp):
        ax = 2 + 2 * k
        kk = ks[k].value
        idx = c.graph.iota((z // kk) * stride[k] + (z % kk) * dilation[k], (out_sp[k], kk))
        x = x.gather(idx, axis=ax)
    # x: (N, C, O1, K1[, O2, K2]) -> (N, g, O1[, O2], C/g * K1[*K2])
    g = groups
    osp = list(range(2, 2 + 2 * nsp, 2))
    ksp = list(range(3, 3 + 2 * nsp, 2))
    x = x.permute(0, *osp, 1, *ksp)  # (N, O.., C, K..)
    x = x.reshape(n, *out_sp, g, cg.value * _prod(ks))
    x = x.permute(0, 1 + nsp, *range(1, 1 + nsp), 2 + nsp)  # (N, g, O.., C/g*K..)
    wm = w.reshape(g, cout.value // g, cg.value * _prod(ks)).transpose(1, 2)  # (g, C/g*K, Cout/g)
    for _ in range(nsp - 1):  # batch axes (g, 1..) against x's (N, g, O1..O_{last-1})
        wm = wm.unsqueeze(1)
    y = x @ wm  # (N, g, O.., Cout/g)
    y = y.permute(0, *range(2, 2 + nsp), 1, 2 + nsp).reshape(n, *out_sp, cout)  # (N, O.., Cout)
    if bias is not None:
        y = y + c.tensor(bias)
    return y.permute(0, 1 + nsp, *range(1, 1 + nsp))


def _prod(ks) -> int:
    out = 1
    for k in ks:
        out *= k.value
    return out


@aten("native_layer_norm.default", note="`layer_norm` in f32 (+ weight, bias); mean and rstd outputs too")
def native_layer_norm(c, x, normalized_shape, weight, bias, eps):
    axes = list(range(x.ndim - len(normalized_shape), x.ndim))
    xf = x.cast(DType.f32) if x.dtype.bits < 32 else x
    mean = xf.mean(axes, keepdim=True)
    d = xf - mean
    rstd = ((d * d).mean(axes, keepdim=True) + eps).rsqrt()
    y = d * rstd
    if weight is not None:
        y = y * c.tensor(weight, y.dtype)
    if bias is not None:
        y = y + c.tensor(bias, y.dtype)
    return y.cast(x.dtype), mean.cast(x.dtype), rstd.cast(x.dtype)


@aten("native_group_norm.default", note="`group_norm` in f32 over (C/G, *spatial) per group")
def native_group_norm(c, x, weight, bias, n, ch, hw, group, eps):
    shape = x.shape
    xf = x.cast(DType.f32) if x.dtype.bits < 32 else x
    xg = xf.reshape(shape[0], group, -1)
    mean = xg.mean(2, keepdim=True)
    d = xg - mean
    rstd = ((d * d).mean(2, keepdim=True) + eps).rsqrt()
    y = (d * rstd).reshape(*shape)
    bshape = [1, shape[1]] + [1] * (x.ndim - 2)
    if weight is not None:
        y = y * c.tensor(weight, y.dtype).reshape(*bshape)
    if bias is not None:
        y = y + c.tensor(bias, y.dtype).reshape(*bshape)
    return y.cast(x.dtype), mean.reshape(shape[0], group).cast(x.dtype), rstd.reshape(shape[0], group).cast(x.dtype)
