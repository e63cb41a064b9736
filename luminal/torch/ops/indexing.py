"""Indexing ATen ops: advanced indexing (index / index_put, the KV-cache write), gather / scatter /
scatter_add, index_select / index_copy, embedding. All reduce to luminal's Gather / Scatter on a
view whose indexed axes are merged into one leading axis."""

from __future__ import annotations

import luminal as lm
from luminal.dtype import DType
from luminal.frontend.movement import broadcast_shapes, flat_strides, scatter_flat, unflatten_index
from luminal.shape.expr import ZERO, Expression, z
from luminal.shape.expr import prod as expr_prod
from luminal.torch.registry import aten


def _num(c, e: Expression):
    """A dim (int or symbolic) as something an i32 tensor can be multiplied by."""
    return e.value if e.is_num else c.tensor(e, DType.i32)


def _wrap(c, idx, n: Expression):
    """i32 indices with negatives counted from the end (torch's rule)."""
    idx = idx.cast(DType.i32)
    return idx + (idx < 0).cast(DType.i32) * _num(c, n)


class _Advanced:
    """x[indices] with integer index tensors: the indexed axes merged into one leading axis of
    length NA, their indices into one flat index tensor of the broadcast shape B."""

    def __init__(self, c, x, indices):
        idx = list(indices) + [None] * (x.ndim - len(indices))
        self.axes = [k for k, i in enumerate(idx) if i is not None]
        self.index = idx[self.axes[0]] if len(self.axes) == 1 else None
        self.rest = [k for k in range(x.ndim) if k not in self.axes]
        if any(idx[k].dtype == DType.bool for k in self.axes):
            raise c.unsupported("boolean-mask indexing has a data-dependent shape")
        self.B = broadcast_shapes(*(idx[k].shape for k in self.axes), op="index")
        self.rest_dims = [x.shape[k] for k in self.rest]
        self.a_dims = [x.shape[k] for k in self.axes]
        flat = None
        for j, k in enumerate(self.axes):
            term = _wrap(c, idx[k].expand(*self.B), x.shape[k])
            inner = expr_prod(self.a_dims[j + 1 :])
            term = term if inner == 1 else term * _num(c, inner)
            flat = term if flat is None else flat + term
        self.flat = flat  # (*B) i32
        self.x2 = x.permute(*self.axes, *self.rest).reshape(expr_prod(self.a_dims), *self.rest_dims)
        p = self.axes[0]
        self.adjacent = self.axes == list(range(p, self.axes[-1] + 1))
        nb = len(self.B)
        # the result order torch uses: B in place of adjacent indexed axes, else first
        self.perm = list(range(nb, nb + p)) + list(range(nb)) + list(range(nb + p, nb + len(self.rest)))
        if not (self.adjacent and p > 0):
            self.perm = list(range(nb + len(self.rest)))

    def get(self):
        y = self.x2.gather(self.flat, axis=0)  # (*B, *rest)
        return y.permute(*self.perm) if self.perm != sorted(self.perm) else y

    def result_shape(self):
        shape = [*self.B, *self.rest_dims]
        return [shape[k] for k in self.perm]

    def put(self, c, x, values, accumulate: bool):
        vals = c.tensor(values, x.dtype).expand(*self.result_shape())
        if not accumulate and self.index is not None:
            # one indexed axis (a KV-cache write, `cache[:, :, pos] = kv`): a Scatter straight into x's
            # own layout, no permuted copy, so a write into a state input can be in place (buffer_reuse)
            return x.scatter(self.index, vals, axis=self.axes[0])
        inv = [self.perm.index(k) for k in range(len(self.perm))]
        if inv != sorted(inv):
            vals = vals.permute(*inv)  # (*B, *rest)
        m = expr_prod(self.B)
        vals = vals.reshape(m, *self.rest_dims)
        flat = self.flat.reshape(m)
        if accumulate:
            na = self.x2.shape[0]
            hit = c.graph.iota(z % na, (m, na))
            onehot = hit.eq(flat.unsqueeze(1).expand(m, na)).cast(x.dtype)  # (m, NA)
            for _ in self.rest_dims:
                onehot = onehot.unsqueeze(-1)
            add = (onehot * vals.unsqueeze(1)).sum(0)  # (NA, *rest)
            out = self.x2 + add
        else:
            out = self.x2.scatter(flat, vals, axis=0)
        out = out.reshape(*self.a_dims, *self.rest_dims)
        order = self.axes + self.rest
        back = [order.index(k) for k in range(x.ndim)]
        return out.permute(*back) if back != sorted(back) else out


@aten("index.Tensor", note="advanced indexing: one Gather over the merged indexed axes")
def index(c, x, indices):
    return _Advanced(c, x, indices).get()


@aten("index_put.default", note="`x[indices] = values` (Scatter; accumulate sums)")
def index_put(c, x, indices, values, accumulate=False):
    live = [i for i in indices if i is not None]
    if len(live) == 1 and live[0].dtype == DType.bool:
        mask = live[0]
        lead = list(indices).index(mask)
        for _ in range(lead):
            mask = mask.unsqueeze(0)
        while mask.ndim < x.ndim:
            mask = mask.unsqueeze(-1)
        v = c.tensor(values, x.dtype)
        if v.ndim and expr_prod(v.shape) != 1:
            raise c.unsupported("boolean-mask index_put with a tensor of values has a data-dependent shape")
        v = v.reshape(*([1] * v.ndim)) if v.ndim else v
        return x + lm.where(mask, v, 0) if accumulate else lm.where(mask, v, x)
    return _Advanced(c, x, indices).put(c, x, values, accumulate)


@aten("index_select.default", note="`gather` along `dim`")
def index_select(c, x, dim, index):
    return x.gather(index, dim)


@aten("embedding.default", note="`gather` of weight rows")
def embedding(c, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    return weight.gather(indices, 0)


def _fit(c, x, shape, skip: int):
    """x sliced to `shape` on every axis but `skip` (torch's gather/scatter allow a smaller index)."""
    key = tuple(slice(None) if k == skip or shape[k] is x.shape[k] else slice(0, shape[k]) for k in range(x.ndim))
    if all(s == slice(None) for s in key):
        return x
    return c.fix(x[key], [x.shape[k] if k == skip else shape[k] for k in range(x.ndim)])


@aten("gather.default", note="`take_along_axis` (x first cut to the index's extent)")
def gather(c, x, dim, index, sparse_grad=False):
    if x.ndim == 0:
        return x
    dim %= x.ndim
    return _fit(c, x, index.shape, dim).take_along_axis(index, dim)


def _elem_flat(c, x, dim, index):
    """Flat positions in x of torch scatter's targets: index replaces the coordinate on `dim`."""
    dims = index.shape
    strides = flat_strides(x.shape)
    pos = ZERO
    for k, ik in enumerate(unflatten_index(dims)):
        if k != dim:
            pos = pos + ik * strides[k]
    base = c.graph.iota(pos, dims)
    return base + _wrap(c, index, x.shape[dim]) * _num(c, strides[dim])


@aten("scatter.src", "scatter.value", note="elementwise Scatter at `index` along `dim` (last write wins)")
def scatter(c, x, dim, index, src):
    if x.ndim == 0:
        return c.tensor(src, x.dtype).reshape()
    dim %= x.ndim
    s = c.tensor(src, x.dtype)
    s = _fit(c, s, index.shape, -1) if s.ndim == index.ndim and s.ndim else s.expand(*index.shape)
    return scatter_flat(x, _elem_flat(c, x, dim, index), s)


@aten("scatter_add.default", note="one-hot sum of `src` into `x` at `index` along `dim`")
def scatter_add(c, x, dim, index, src):
    dim %= x.ndim
    s = _fit(c, c.tensor(src, x.dtype), index.shape, -1)
    flat = _elem_flat(c, x, dim, index).reshape(-1)
    n, m = x.view.n_elements(), flat.shape[0]
    onehot = c.graph.iota(z % n, (m, n)).eq(flat.unsqueeze(1).expand(m, n)).cast(x.dtype)
    add = (onehot * s.reshape(-1).unsqueeze(1)).sum(0)
    return x + add.reshape(*x.shape)
