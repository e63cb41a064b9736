"""Goldens for the model tests: tiny random-weight checkpoints with transformers' logits
(scripts/make_goldens.py) and the tolerances model outputs are held to (docs/numerics.md, "Models")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from luminal.models.checkpoint import Safetensors

GOLDENS = Path(__file__).parent / "goldens"
RTOL, ATOL = 1e-4, 1e-4  # f32 model outputs after ~20 ops per layer (docs/numerics.md, "Models")
# 16-bit models: |got - want| <= SCALED[dtype] * max |want| over the row (docs/numerics.md, "Models")
SCALED = {"bf16": 3e-2, "f16": 4e-3}


def golden(name: str, dtype: str = "f32") -> dict[str, np.ndarray]:
    """transformers' outputs for a golden model run in `dtype` (f32, bf16, f16)."""
    suffix = "" if dtype == "f32" else f"_{dtype}"
    st = Safetensors([GOLDENS / name / f"golden{suffix}.safetensors"])
    return {k: np.array(st[k]) for k in st}


def assert_close(actual: np.ndarray, expected: np.ndarray, what: str, dtype: str = "f32") -> None:
    """f32: elementwise rtol/atol. bf16/f16: each row within SCALED[dtype] of its largest |value|: two
    16-bit computations of one model differ by a few units in the last place of the largest
    activations, not of each logit."""
    assert actual.shape == expected.shape, (what, actual.shape, expected.shape)
    assert actual.dtype == np.float32, (what, actual.dtype)
    if dtype == "f32":
        np.testing.assert_allclose(actual, expected, rtol=RTOL, atol=ATOL, err_msg=what)
        return
    bound = SCALED[dtype] * np.abs(expected).max(axis=-1, keepdims=True)
    err = np.abs(actual.astype(np.float64) - expected)
    worst = np.unravel_index(np.argmax(err - bound), err.shape)
    bad = f"{what} ({dtype}): error {err[worst]:.3g} > bound {bound[worst[:-1]][0]:.3g} at {worst}"
    assert np.all(err <= bound), bad


def margin(logits: np.ndarray) -> float:
    """Top-1 minus top-2 of a logit row: below the tolerance, greedy may pick either token."""
    top = np.sort(logits)[-2:]
    return float(top[1] - top[0])


@pytest.fixture
def copy_golden(tmp_path):
    """A writable copy of a golden model directory, for tests that break it."""
    import shutil

    def make(name: str) -> Path:
        dst = tmp_path / name
        shutil.copytree(GOLDENS / name, dst)
        return dst

    return make
