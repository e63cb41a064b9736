"""Fixtures of the CUDA backend tests."""

from __future__ import annotations

import pytest

from luminal.backends.cuda import nvrtc, runtime
from tests.backends.cuda import fake_driver


@pytest.fixture
def no_cache(monkeypatch):
    """NVRTC really compiles: no on-disk or in-process kernel cache."""
    monkeypatch.setenv("LUMINAL_CACHE", "off")
    nvrtc.clear_memory_cache()
    yield
    nvrtc.clear_memory_cache()


@pytest.fixture
def fake(monkeypatch):
    """The CUDA runtime over the fake driver (tests/backends/cuda/fake_driver.py): runs on the CPU."""
    monkeypatch.setattr(runtime, "driver", fake_driver)
    monkeypatch.setattr(runtime, "load_kernels", fake_driver.load_kernels)
    fake_driver.reset()
    yield fake_driver
    fake_driver.reset()
