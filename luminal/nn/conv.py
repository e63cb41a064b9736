"""Conv1d over a (channels, time) signal as unfold (one Gather) + matmul, time-major output."""

from __future__ import annotations

import luminal as lm
from luminal.errors import ShapeError
from luminal.graph import Graph
from luminal.nn.check import block_name, expect
from luminal.nn.linear import weight
from luminal.shape.expr import maximum, z
from luminal.tensor import GraphTensor


class Conv1d:
    """torch.nn.Conv1d(c_in, c_out, kernel, stride, padding) with weight (c_out, c_in, kernel).
    Input (c_in, T); output (T_out, c_out), T_out = (T + 2*padding - kernel) // stride + 1 (0 when a
    symbolic T is shorter than the kernel: an empty output; a static one raises ShapeError)."""

    def __init__(self, g: Graph, name: str, c_in: int, c_out: int, kernel: int, stride: int = 1,
                 padding: int = 0, bias: bool = True, dtype: object = lm.f32):  # fmt: skip
        for what, v, lo in (("c_in", c_in, 1), ("c_out", c_out, 1), ("kernel", kernel, 1), ("stride", stride, 1),
                            ("padding", padding, 0)):  # fmt: skip
            if not isinstance(v, int) or isinstance(v, bool) or v < lo:
                raise ShapeError(f"Conv1d {name!r}: {what}={v!r} must be an int >= {lo}")
        self.c_in, self.c_out, self.kernel, self.stride, self.padding = c_in, c_out, kernel, stride, padding
        self.weight = weight(g, f"{name}.weight", (c_out, c_in, kernel), dtype)
        self.bias = weight(g, f"{name}.bias", (c_out,), dtype) if bias else None

    def __call__(self, x: GraphTensor) -> GraphTensor:
        c, k, st = self.c_in, self.kernel, self.stride
        block = block_name("Conv1d", self.weight)
        expect(x, block, f"an unbatched (c_in={c}, T) input, channels first (one call per batch item)", 2, {0: c})
        if (x.shape[1] + 2 * self.padding).is_num and (x.shape[1] + 2 * self.padding).value < k:
            raise ShapeError(f"{block}: input length {x.shape[1]} + 2 * padding {self.padding} is below the kernel {k}")
        if self.padding:
            x = x.pad(((0, 0), (self.padding, self.padding)))
        t_in = x.shape[1]
        # (t_in - k) // st + 1 for t_in >= k; 0 (an empty output) for a symbolic input shorter than the
        # kernel, where C's truncating // gave a length of 1 (or a negative one) reading past the input
        t_out = maximum(t_in - k + st, 0) // st
        # cols[t, c, j] = x[c, t*stride + j]: flat index c*T + t*stride + j over (T_out, c_in, k)
        t, ci, j = z // (c * k), (z // k) % c, z % k
        idx = x.graph.iota(ci * t_in + t * st + j, (t_out, c, k))
        cols = x.reshape(-1).gather(idx).reshape(t_out, c * k)  # (T_out, c_in*k)
        y = cols @ self.weight.reshape(self.c_out, c * k).T  # (T_out, c_out)
        return y + self.bias if self.bias is not None else y
