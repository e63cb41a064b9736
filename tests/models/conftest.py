"""Goldens for the model tests: tiny random-weight checkpoints with transformers' logits
(scripts/make_goldens.py) and the tolerance model outputs are held to (docs/numerics.md)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from luminal.models.checkpoint import Safetensors

GOLDENS = Path(__file__).parent / "goldens"
RTOL, ATOL = 1e-4, 1e-4  # f32 model outputs after ~20 ops per layer (docs/numerics.md, "Models")


def golden(name: str) -> dict[str, np.ndarray]:
    st = Safetensors([GOLDENS / name / "golden.safetensors"])
    return {k: np.array(st[k]) for k in st}


def assert_close(actual: np.ndarray, expected: np.ndarray, what: str) -> None:
    np.testing.assert_allclose(actual, expected, rtol=RTOL, atol=ATOL, err_msg=what)


@pytest.fixture
def copy_golden(tmp_path):
    """A writable copy of a golden model directory, for tests that break it."""
    import shutil

    def make(name: str) -> Path:
        dst = tmp_path / name
        shutil.copytree(GOLDENS / name, dst)
        return dst

    return make
