"""Tensor-creating ATen ops: arange, full / full_like, empty, scalar_tensor (zeros, ones and the
`_like` / `new_` forms decompose to these). Sizes come from torch's metadata (symbolic dims
included); `empty` is zeros."""

from __future__ import annotations

from luminal.dtype import DType
from luminal.torch.registry import aten


@aten("arange.start_step", note="`start + iota * step` (symbolic bounds allowed)")
def arange(c, *args, **kwargs):
    nums = [a for a in args if not isinstance(a, bool)][:3]
    start, step = (0, 1) if len(nums) == 1 else (nums[0], nums[2] if len(nums) > 2 else 1)
    n = c.shape[0]
    it = c.graph.iota("z", (n,))
    dt = c.dtype
    wide = DType.f64 if dt.is_float else dt
    out = it.cast(wide)
    if step != 1:
        out = out * c.tensor(step, wide)
    if not (isinstance(start, int) and start == 0):
        out = out + c.tensor(start, wide)
    return out.cast(dt)


def _full(c, value):
    return c.tensor(value).expand(*c.shape)


@aten("full.default", "full_like.default", note="a constant broadcast to torch's size")
def full(c, x_or_size, fill_value, *args, **kwargs):
    return _full(c, fill_value)


@aten("empty.memory_format", "empty_permuted.default", "empty_strided.default",
      note="zeros (uninitialized memory reads as zeros)")  # fmt: skip
def empty(c, *args, **kwargs):
    return _full(c, 0)


@aten("scalar_tensor.default", note="a 0-d constant")
def scalar_tensor(c, value, **kwargs):
    return c.tensor(value)
