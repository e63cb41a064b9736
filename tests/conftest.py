"""Shared pytest set-up: hypothesis profiles (fixed seeds), the `cuda` marker auto-skip."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=100, derandomize=True, deadline=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)  # fmt: skip
settings.register_profile(
    "dev", max_examples=25, derandomize=True, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)  # fmt: skip
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# Compiles in tests go to a throw-away cache, not the user's ~/.cache/luminal. Set here, at import in
# the controller process, so xdist workers inherit one directory and share its hits.
if "LUMINAL_CACHE" not in os.environ:
    os.environ["LUMINAL_CACHE"] = tempfile.mkdtemp(prefix="luminal-test-cache-")
    atexit.register(shutil.rmtree, os.environ["LUMINAL_CACHE"], True)
# Under pytest-xdist the test processes are the parallelism: each starting its own NVRTC worker
# processes (LUMINAL_NVRTC_PROCS, up to 16 on a big host) would only multiply processes and memory.
if "PYTEST_XDIST_WORKER" in os.environ:
    os.environ.setdefault("LUMINAL_NVRTC_PROCS", "0")


def _gpu_available() -> bool:
    try:
        from luminal.backends.cuda.driver import device_available
    except ImportError:
        return False
    return device_available()


def pytest_collection_modifyitems(config, items):
    # get_closest_marker, not `"cuda" in item.keywords`: keywords also hold the path's package
    # names, which would skip every CPU test under tests/backends/cuda/.
    marked = [item for item in items if item.get_closest_marker("cuda") is not None]
    if marked and not _gpu_available():
        skip = pytest.mark.skip(reason="no usable NVIDIA GPU on this machine")
        for item in marked:
            item.add_marker(skip)
