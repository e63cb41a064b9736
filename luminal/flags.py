"""Environment flags: the one registry of LUMINAL_* variables (documented in docs/env.md).

Flags are read when used (not at import), so tests and scripts may set them at any time.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Flag:
    name: str
    default: str
    help: str

    def raw(self) -> str:
        return os.environ.get(self.name, self.default)


DEBUG = Flag("LUMINAL_DEBUG", "0", "1: log each compile's per-phase table (timings, sizes, matches) at INFO")
DUMP = Flag("LUMINAL_DUMP", "", "a directory: write each compile's egglog program, e-graph stats and LLIR (.html)")
CACHE = Flag("LUMINAL_CACHE", "", "compile-cache directory; '0' or 'off' disables it (default: user cache dir)")
TF32 = Flag("LUMINAL_TF32", "0", "1: f32 cuBLASLt matmuls may round inputs to TF32 (tensor cores); default exact f32")
PROFILE = Flag(
    "LUMINAL_PROFILE",
    "0",
    "1: log a per-op table (launches, time, bytes, % of step, % of roofline) for the first step of each CUDA plan",
)
PDL = Flag(
    "LUMINAL_PDL",
    "1",
    "0: CUDA graph kernel->kernel edges are full dependencies; default programmatic (sm_90+: a kernel starts "
    "while the one before drains and waits for it itself)",
)
NVRTC_PROCS = Flag(
    "LUMINAL_NVRTC_PROCS",
    "",
    "worker processes NVRTC programs compile in; 0: in-process threads; default min(16, CPUs) with >= 8 CPUs, else 0",
)
NVRTC_THREADS = Flag("LUMINAL_NVRTC_THREADS", "", "NVRTC programs compiled at once in threads (default: CPUs)")
FLAGS = (DEBUG, DUMP, CACHE, TF32, PROFILE, PDL, NVRTC_PROCS, NVRTC_THREADS)


def debug() -> bool:
    on = DEBUG.raw().strip().lower() not in ("", "0", "false", "no", "off")
    if on:
        _ensure_handler()
    return on


def profile() -> bool:
    on = PROFILE.raw().strip().lower() not in ("", "0", "false", "no", "off")
    if on:
        _ensure_handler()
    return on


def pdl() -> bool:
    """Whether CUDA graphs chain kernels with programmatic dependent launch (read when a graph is built)."""
    return PDL.raw().strip().lower() not in ("", "0", "false", "no", "off")


def tf32() -> bool:
    return TF32.raw().strip().lower() not in ("", "0", "false", "no", "off")


def dump_dir() -> Path | None:
    v = DUMP.raw().strip()
    return Path(v).expanduser() if v else None


def cache_dir() -> Path | None:
    """The compile-cache root, or None when caching is off."""
    v = CACHE.raw().strip()
    if v.lower() in ("0", "off", "false", "no", "none"):
        return None
    if v:
        return Path(v).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "luminal"


def _ensure_handler() -> None:
    """LUMINAL_DEBUG asks to see the logs: give the `luminal` logger a stderr handler if none is set."""
    lg = logging.getLogger("luminal")
    if not lg.handlers and not logging.getLogger().handlers:
        h = logging.StreamHandler()
        h.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        lg.addHandler(h)
    if lg.level == logging.NOTSET or lg.level > logging.INFO:
        lg.setLevel(logging.INFO)
