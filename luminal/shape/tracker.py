"""ShapeTracker: a view of a buffer as logical dims plus one z-expression stride per axis.

The stride of an axis is a function of the index along it (an Expression in `z`): contiguous
`(a, b, c)` has strides `(z*b*c, z*c, z)`, a broadcast axis has stride `0`, a merged pair of
non-contiguous axes has `outer(z // n) + inner(z % n)`. The physical index of logical index
`(i0, .., ik)` is `sum_k strides[k](z = ik)`. There are no masks or offsets: slices with a start,
padding and steps are real graph ops (Iota + Gather).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from luminal.errors import ShapeError
from luminal.shape.expr import ONE, ZERO, Expression, ExprLike, expr, prod, z

MAX_RANK = 10


def linear_step(st: Expression) -> Expression | None:
    """c when the stride is c * z with c free of z (0 included), else None (z % n, z // n ...)."""
    c = st.substitute("z", 1) - st.substitute("z", 0)
    if st.substitute("z", 0) is not ZERO or st is not c * z or "z" in c.vars():
        return None
    return c


def contiguous_strides(dims: tuple[Expression, ...]) -> tuple[Expression, ...]:
    out = []
    acc: Expression = ONE
    for d in reversed(dims):
        out.append(z * acc)
        acc = acc * d
    return tuple(reversed(out))


@dataclass(frozen=True)
class ShapeTracker:
    dims: tuple[Expression, ...]
    strides: tuple[Expression, ...]

    @staticmethod
    def new(dims: tuple[ExprLike, ...]) -> ShapeTracker:
        ds = tuple(expr(d) for d in dims)
        if len(ds) > MAX_RANK:
            raise ShapeError(f"rank {len(ds)} is over the maximum of {MAX_RANK}")
        for d in ds:
            if d.is_num and d.value < 0:
                raise ShapeError(f"negative dimension {d} in shape {ds}")
        return ShapeTracker(ds, contiguous_strides(ds))

    # -- queries ----------------------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.dims)

    def n_elements(self) -> Expression:
        return prod(self.dims)

    def is_contiguous(self) -> bool:
        want = contiguous_strides(self.dims)
        return all(d == 1 or s is w for d, s, w in zip(self.dims, self.strides, want, strict=True))

    def is_broadcast(self, axis: int) -> bool:
        return self.strides[axis] is ZERO

    def index_expression(self) -> Expression:
        """Physical index as a function of the flat logical index `z`."""
        out: Expression = ZERO
        inner: Expression = ONE
        for k in range(self.ndim - 1, -1, -1):
            zk = z // inner
            if k > 0:
                zk = zk % self.dims[k]
            out = out + self.strides[k].substitute("z", zk)
            inner = inner * self.dims[k]
        return out

    def physical_indices(self, env: dict[str, int]) -> np.ndarray:
        """int64 array of the view's logical shape holding each element's physical index."""
        shape = tuple(int(d.evaluate(env)) for d in self.dims)
        out = np.zeros(shape, np.int64)
        for k, (n, st) in enumerate(zip(shape, self.strides, strict=True)):
            if st is ZERO:
                continue
            v = np.asarray(st.evaluate({**env, "z": np.arange(n, dtype=np.int64)}), np.int64)
            out = out + np.broadcast_to(v, (n,)).reshape((1,) * k + (n,) + (1,) * (len(shape) - k - 1))
        return np.broadcast_to(out, shape)

    # -- view transforms --------------------------------------------------------------------------
    def permute(self, axes: tuple[int, ...]) -> ShapeTracker:
        return ShapeTracker(tuple(self.dims[a] for a in axes), tuple(self.strides[a] for a in axes))

    def expand_dim(self, axis: int, n: ExprLike) -> ShapeTracker:
        """Insert a broadcast (stride 0) axis of size n before `axis`."""
        if self.ndim >= MAX_RANK:
            raise ShapeError(f"rank {self.ndim + 1} is over the maximum of {MAX_RANK}")
        dims = (*self.dims[:axis], expr(n), *self.dims[axis:])
        return ShapeTracker(dims, (*self.strides[:axis], ZERO, *self.strides[axis:]))

    def broadcast_axis(self, axis: int, n: ExprLike) -> ShapeTracker:
        """Turn a size-1 axis into a broadcast axis of size n."""
        dims = list(self.dims)
        strides = list(self.strides)
        dims[axis], strides[axis] = expr(n), ZERO
        return ShapeTracker(tuple(dims), tuple(strides))

    def remove_dim(self, axis: int) -> ShapeTracker:
        return ShapeTracker(self.dims[:axis] + self.dims[axis + 1 :], self.strides[:axis] + self.strides[axis + 1 :])

    def merge_dims(self, axis: int) -> ShapeTracker:
        """Merge axes `axis` and `axis + 1` into one (always a view)."""
        (d0, d1), (s0, s1) = self.dims[axis : axis + 2], self.strides[axis : axis + 2]
        if s0 is ZERO and s1 is ZERO:
            st = ZERO
        elif s0 is s1.substitute("z", z * d1):  # contiguous pair
            st = s1
        else:
            st = s0.substitute("z", z // d1) + s1.substitute("z", z % d1)
        dims = (*self.dims[:axis], d0 * d1, *self.dims[axis + 2 :])
        return ShapeTracker(dims, (*self.strides[:axis], st, *self.strides[axis + 2 :]))

    def split_dim(self, axis: int, inner: ExprLike) -> ShapeTracker | None:
        """Split `axis` into (dim // inner, inner) as a view, or None if its stride is not linear."""
        inner = expr(inner)
        d, st = self.dims[axis], self.strides[axis]
        lin = st.substitute("z", ONE) - st.substitute("z", ZERO)
        if st is not ZERO and (st.substitute("z", ZERO) is not ZERO or st is not z * lin):
            return None
        dims = (*self.dims[:axis], d // inner, inner, *self.dims[axis + 1 :])
        strides = (*self.strides[:axis], st.substitute("z", z * inner), st, *self.strides[axis + 1 :])
        return ShapeTracker(dims, strides)

    def repeat_axis(self, axis: int, times: ExprLike) -> ShapeTracker:
        """Tile axis `axis` `times` times without copying (stride in z % dim)."""
        d, st = self.dims[axis], self.strides[axis]
        dims = list(self.dims)
        strides = list(self.strides)
        dims[axis] = d * expr(times)
        strides[axis] = st.substitute("z", z % d)
        return ShapeTracker(tuple(dims), tuple(strides))

    def __repr__(self) -> str:
        return f"ShapeTracker(dims={list(self.dims)}, strides={list(self.strides)})"
