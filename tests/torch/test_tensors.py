"""torch <-> numpy without copies: CPU tensors (bf16 and fp8 through ml_dtypes views) and back."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from luminal.torch.tensors import TORCH_TO_LM, from_numpy, lm_dtype, to_numpy  # noqa: E402


@pytest.mark.parametrize("dt", list(TORCH_TO_LM), ids=str)
def test_round_trip_shares_memory_and_keeps_dtype(dt):
    t = (torch.arange(12, dtype=torch.float32).reshape(3, 4) - 5).to(dt)
    a = to_numpy(t)
    assert a.dtype == lm_dtype(dt).np and a.shape == (3, 4)
    assert a.__array_interface__["data"][0] == t.data_ptr()  # a view, not a copy
    back = from_numpy(a, dt)
    assert back.dtype == dt and back.data_ptr() == t.data_ptr()
    assert torch.equal(back, t) if not dt.is_floating_point or dt.itemsize > 1 else torch.equal(back.float(), t.float())


def test_zero_dim_stays_zero_dim():
    assert from_numpy(np.float32(3.0) * np.ones((), np.float32), torch.float32).shape == ()
