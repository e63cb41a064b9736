"""Fixtures of the CUDA backend tests."""

from __future__ import annotations

import pytest

from luminal.backends.cuda import nvrtc


@pytest.fixture
def no_cache(monkeypatch):
    """NVRTC really compiles: no on-disk or in-process kernel cache."""
    monkeypatch.setenv("LUMINAL_CACHE", "off")
    nvrtc.clear_memory_cache()
    yield
    nvrtc.clear_memory_cache()
