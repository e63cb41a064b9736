"""NVRTC in worker processes: the programs nvrtc.py compiles run in a pool of processes, not threads.

In-process threads serialise on the GIL between NVRTC calls and on NVRTC's own locks, so a batch of
programs spread over 16 threads compiles little faster than one after another; processes do not share
either. The pool (forkserver start: safe with the threads and the CUDA context of the compiling
process; workers never touch a GPU, NVRTC needs none) is started on the first compile, once per process,
its workers importing NVRTC up front, and shut down at exit. `procs()` reads LUMINAL_NVRTC_PROCS: 0 keeps
the in-process threads; unset: up to 16 workers where at least 8 CPUs are usable, else 0. A worker
compiles exactly what the in-process path compiles (`nvrtc.nvrtc_compile`: same source and options,
same cubin); an NVRTC error comes back as the BackendError the in-process path raises, and a worker
that dies is reported as a BackendError naming the program, the pool being restarted for the next one.
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing as mp
import os
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from luminal.errors import BackendError

log = logging.getLogger(__name__)
MAX_PROCS = 16  # NVRTC programs of one batch are few (nvrtc._groups); more workers only cost memory
MIN_CPUS = 8  # below this many usable CPUs the default is the in-process threads
_POOL: list[ProcessPoolExecutor] = []
_LOCK = threading.Lock()


def cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def procs() -> int:
    """Worker processes NVRTC programs compile in; 0: in-process threads (module docstring)."""
    from luminal import flags

    env = flags.NVRTC_PROCS.raw().strip()
    if env:
        if not env.isdigit():
            raise BackendError(f"LUMINAL_NVRTC_PROCS must be a whole number of processes (0: threads), got {env!r}")
        return int(env)
    n = cpus()
    return min(MAX_PROCS, n) if n >= MIN_CPUS else 0


def compile_program(source: str, options: tuple[str, ...], name: str) -> tuple[bytes, float, float]:
    """(cubin, wall seconds, CPU seconds) of one program, compiled in a worker process."""
    pool = _pool()
    try:
        return pool.submit(_worker_compile, source, options, name).result()
    except BrokenProcessPool as e:
        _drop(pool)
        raise BackendError(f"NVRTC worker process died compiling {name}: {e}") from None


def _worker_compile(source: str, options: tuple[str, ...], name: str) -> tuple[bytes, float, float]:
    from luminal.backends.cuda import nvrtc

    return nvrtc.nvrtc_compile(source, options, name)


def _worker_init() -> None:
    from luminal.backends.cuda import nvrtc

    nvrtc.version()  # loads NVRTC once per worker, before its first program


def _warm() -> int:
    return os.getpid()


def _context():
    methods = mp.get_all_start_methods()
    return mp.get_context("forkserver" if "forkserver" in methods else "spawn")


def _pool() -> ProcessPoolExecutor:
    if _POOL:
        return _POOL[0]
    with _LOCK:
        if not _POOL:
            n = max(1, procs())
            pool = ProcessPoolExecutor(max_workers=n, mp_context=_context(), initializer=_worker_init)
            for _ in range(n):  # start every worker now: a batch's programs then compile at once
                pool.submit(_warm)
            _POOL.append(pool)
            log.debug("nvrtc: started %d worker processes", n)
    return _POOL[0]


def _drop(pool: ProcessPoolExecutor) -> None:
    with _LOCK:
        if _POOL and _POOL[0] is pool:
            _POOL.clear()
    pool.shutdown(wait=False, cancel_futures=True)


def running() -> int:
    """Worker processes of the started pool (0 when none is started)."""
    return len(getattr(_POOL[0], "_processes", None) or {}) if _POOL else 0


def shutdown() -> None:
    """Stop the pool (waits for programs under way); the next compile starts a new one."""
    with _LOCK:
        pools = list(_POOL)
        _POOL.clear()
    for pool in pools:
        pool.shutdown(wait=True, cancel_futures=True)


atexit.register(shutdown)
