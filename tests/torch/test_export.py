"""luminal.torch.compile (torch.export path): one compile for every length (affine dims included),
weights bound once without a copy, buffer mutations written back, eager dtypes kept, errors."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.export import Dim  # noqa: E402

import luminal.torch as lt  # noqa: E402
from luminal.errors import InputError, LuminalError  # noqa: E402
from tests.torch.util import assert_close  # noqa: E402


class Block(nn.Module):
    """Linear + norm + causal self-attention + a KV cache buffer updated in place; int64 and bool outputs."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)
        self.register_buffer("cache", torch.zeros(2, 16, 8))
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))

    def forward(self, x, pos):
        h = self.norm(F.silu(self.proj(x)))  # (2, s, 8)
        self.cache.index_copy_(1, pos, h)
        self.steps.add_(1)
        a = F.scaled_dot_product_attention(h[None], h[None], h[None], is_causal=True)[0]
        both = torch.cat([h, h], 1)  # (2, 2s, 8): an affine dim
        return a, both, pos + 1, (h > 0).any(-1), both[:, 1:].sum(1)


def _pair():
    torch.manual_seed(0)
    m, ref = Block(), Block()
    ref.load_state_dict(m.state_dict())
    return m, ref


def test_one_compile_serves_every_length_and_writes_buffers_back():
    m, ref = _pair()
    before = lt.counters["compiles"]
    fast = lt.compile(m, (torch.randn(2, 5, 8), torch.arange(5)), dynamic=True, backend="reference")
    assert "aten.scaled_dot_product_attention.default" in fast.program.aten_ops  # kept whole by export
    for n, start in ((3, 0), (6, 3), (2, 9)):
        x, pos = torch.randn(2, n, 8), torch.arange(start, start + n)
        got, want = fast(x, pos), ref(x, pos)
        for k, (g, w) in enumerate(zip(got, want, strict=True)):
            assert g.dtype == w.dtype, f"output {k}: dtype {g.dtype}, eager {w.dtype}"
            assert_close(g, w, f"s={n} output {k}", scale=4)
        assert_close(m.cache, ref.cache, f"cache after s={n}")
        assert int(m.steps) == int(ref.steps)
    assert lt.counters["compiles"] - before == 1


def test_explicit_dim_range_and_out_of_range_input():
    m, ref = _pair()
    s = Dim("s", min=2, max=8)
    fast = lt.compile(m, (torch.randn(2, 4, 8), torch.arange(4)), dynamic=({1: s}, {0: s}), backend="reference")
    x, pos = torch.randn(2, 7, 8), torch.arange(7)
    assert_close(fast(x, pos)[0], ref(x, pos)[0], "s=7", scale=4)
    with pytest.raises(InputError, match="outside the compiled range"):
        fast(torch.randn(2, 9, 8), torch.arange(9))


def test_affine_dims_only_input():
    """A graph whose only input size is 2*s + 1: s is solved from it."""

    def f(x):
        return x[1:].view(2, -1).sum(0) * 2

    fast = lt.compile(f, (torch.randn(7),), dynamic=({0: 2 * Dim("s", min=1, max=32) + 1},), backend="reference")
    for n in (5, 9, 21):  # export keeps s >= 2 (it specializes 0 and 1)
        x = torch.randn(n)
        assert_close(fast(x), f(x), f"n={n}")


def test_weights_are_bound_once_as_views():
    m, _ = _pair()
    fast = lt.compile(m, (torch.randn(2, 3, 8), torch.arange(3)), dynamic=True, backend="reference")
    fast(torch.randn(2, 3, 8), torch.arange(3))
    bound = fast.program._bound  # persistent inputs bound so far: name -> (storage address, ...)
    assert bound["proj.weight"][0] == m.proj.weight.data_ptr()
    assert "cache" not in bound  # mutated every call: fed each time, never persistent
    with torch.no_grad():
        m.proj.weight.mul_(2)  # an in-place update is seen through the view, no rebinding
    x, pos = torch.randn(2, 3, 8), torch.arange(3)
    _, ref = _pair()
    ref.load_state_dict(m.state_dict())
    assert_close(fast(x, pos)[0], ref(x, pos)[0], "after an in-place weight update", scale=4)


def test_bf16_weights_and_int_outputs():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(10, 4, dtype=torch.bfloat16)

        def forward(self, ids):
            e = self.emb(ids)
            return e.float().sum(-1), e.argmax(-1), ids.max(), (ids % 2).bool()

    torch.manual_seed(0)
    m = M()
    ids = torch.randint(0, 10, (2, 5))
    fast = lt.compile(m, (ids,), dynamic=True, backend="reference")
    ids = torch.randint(0, 10, (3, 6))
    got, want = fast(ids), m(ids)
    assert [g.dtype for g in got] == [torch.float32, torch.int64, torch.int64, torch.bool]
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        assert_close(g, w, f"output {k}")


class Unsupported(nn.Module):
    def forward(self, x):
        return torch.fft.fft(x).real  # no luminal translation


def test_unsupported_op_names_op_target_and_source_line():
    with pytest.raises(LuminalError) as e:
        lt.compile(Unsupported(), (torch.randn(4, 8),), backend="reference")
    msg = str(e.value)
    assert "aten._fft" in msg and "test_export.py" in msg and "torch.fft.fft(x)" in msg


def test_torch_compile_unsupported_op_raises_or_falls_back():
    torch._dynamo.reset()
    m = Unsupported()
    x = torch.randn(4, 8)
    with pytest.raises(Exception) as e:  # Dynamo wraps the backend's error in BackendCompilerFailed
        torch.compile(m, backend="luminal", options={"backend": "reference"})(x)
    chain, err = [], e.value
    while err is not None:
        chain.append(err)
        err = err.__cause__ or err.inner_exception if hasattr(err, "inner_exception") else err.__cause__
    assert any(isinstance(c, lt.UnsupportedOpError) for c in chain), chain
    torch._dynamo.reset()
    before = lt.counters["fallbacks"]
    fast = torch.compile(m, backend="luminal", options={"backend": "reference", "fallback": True})
    assert_close(fast(x), m(x), "eager fallback")
    assert lt.counters["fallbacks"] - before == 1
    torch._dynamo.reset()


def test_backend_is_registered_by_name():
    from torch._dynamo.backends.registry import lookup_backend

    assert lookup_backend("luminal") is lt.backend
