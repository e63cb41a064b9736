"""Shared fixtures of the e-graph tests: a private compile cache per test (never ~/.cache)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LUMINAL_CACHE", str(tmp_path / "cache"))
