"""NVRTC in worker processes: the programs nvrtc.py compiles run in a pool of processes, not threads.

In-process threads share the GIL between NVRTC calls and whatever locks NVRTC takes inside one
process; processes share neither. A worker is a plain subprocess reading pickled requests on its stdin
and writing pickled replies on its stdout, importing NVRTC and this module but not the luminal package
(`_BOOT`): not multiprocessing, whose spawn and forkserver starts run the user's main module again in
every worker (a script without an `if __name__ == "__main__"` guard would compile in each), and whose
fork start is unsafe with the threads and CUDA context of a compiling process. Workers never touch a
GPU (NVRTC needs none).

The pool is started on the first compile, once per process (every worker at once: each loads NVRTC
before its first program), and shut down at exit. `procs()` reads LUMINAL_NVRTC_PROCS: 0 keeps the
in-process threads; unset: up to 16 workers where at least 8 CPUs are usable, else 0. A worker compiles
exactly what the in-process path compiles (`nvrtc.nvrtc_compile`: same source and options, same
cubin); an NVRTC error comes back as the BackendError the in-process path raises, and a worker that
dies is reported as a BackendError naming the program, and replaced. Workers that cannot be started,
or keep dying (more deaths than workers), turn the pool off for the process (logged): programs then
compile in its threads, never failing a compile for want of processes.
"""

from __future__ import annotations

import atexit
import logging
import os
import pickle
import queue
import struct
import subprocess
import sys
import threading
from pathlib import Path
from typing import BinaryIO

from luminal.errors import BackendError

log = logging.getLogger(__name__)
MAX_PROCS = 16  # NVRTC programs of one batch are few (nvrtc._groups); more workers only cost memory
MIN_CPUS = 8  # below this many usable CPUs the default is the in-process threads
_HEAD = struct.Struct("<Q")
# A worker's entry (argv[1]: the directory holding the luminal package): the packages down to this one
# as bare modules, so their __init__s (numpy, the frontend: ~0.15 s CPU, ~20 MB per worker) do not run;
# nvrtc.py and this module import only luminal.errors and luminal.flags beside them.
_BOOT = """import sys, types
for name in ("luminal", "luminal.backends", "luminal.backends.cuda"):
    mod = sys.modules[name] = types.ModuleType(name)
    mod.__path__ = [sys.argv[1] + "/" + name.replace(".", "/")]
from luminal.backends.cuda.nvrtc_procs import serve
serve()
"""


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


# -- the parent's side ------------------------------------------------------------------------------------
class _Worker:
    def __init__(self) -> None:
        root = str(Path(__file__).resolve().parents[3])  # the directory holding the luminal package
        self.proc = subprocess.Popen([sys.executable, "-c", _BOOT, root], stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def call(self, request: tuple) -> tuple:
        if self.proc.stdin is None or self.proc.stdout is None:
            raise OSError("the worker has no pipes")
        _send(self.proc.stdin, request)
        return _recv(self.proc.stdout)  # type: ignore[return-value]

    def close(self) -> None:
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()  # the worker's loop ends at EOF
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()


class _Pool:
    def __init__(self, n: int) -> None:
        self.n = n
        self.deaths = 0
        self.idle: queue.SimpleQueue[_Worker] = queue.SimpleQueue()
        self.all = [_Worker() for _ in range(n)]
        for w in self.all:
            self.idle.put(w)

    def compile(self, source: str, options: tuple[str, ...], name: str) -> tuple[bytes, float, float]:
        w = self.idle.get()
        if w.proc.poll() is not None:  # died while idle (killed, out of memory): replace it first
            w = self._replace(w)
        try:
            status, value = w.call((source, options, name))
        except (OSError, EOFError, pickle.UnpicklingError) as e:  # died on this program
            code = w.proc.poll()
            self.deaths += 1
            if self.deaths > self.n:  # workers keep dying (cannot start?): compile in process from now on
                _BROKEN.append(f"{self.deaths} workers died, the last on {name} (exit {code})")
                log.warning("nvrtc: %s; compiling in threads of this process from now on", _BROKEN[-1])
            self.idle.put(self._replace(w))
            raise BackendError(f"NVRTC worker process died compiling {name} (exit {code}): {e}") from None
        self.idle.put(w)
        if status == "ok":
            return value
        raise value if isinstance(value, BaseException) else BackendError(f"NVRTC worker failed on {name}: {value}")

    def _replace(self, dead: _Worker) -> _Worker:
        dead.close()
        fresh = _Worker()
        with _LOCK:
            self.all = [fresh if x is dead else x for x in self.all]
        return fresh

    def close(self) -> None:
        for w in self.all:
            w.close()


_POOL: list[_Pool] = []
_BROKEN: list[str] = []  # why worker processes are off for the rest of this process (none: usable)
_LOCK = threading.Lock()


def enabled() -> bool:
    """Whether programs go to worker processes: LUMINAL_NVRTC_PROCS > 0 and the workers could run."""
    return procs() > 0 and not _BROKEN


def compile_program(source: str, options: tuple[str, ...], name: str) -> tuple[bytes, float, float] | None:
    """(cubin, wall seconds, CPU seconds) of one program, compiled in a worker process; None when the
    workers cannot be started (logged once): the caller compiles in process."""
    pool = _pool()
    return None if pool is None else pool.compile(source, options, name)


def _pool() -> _Pool | None:
    if not _POOL:
        with _LOCK:
            if _BROKEN:
                return None
            if not _POOL:
                try:
                    _POOL.append(_Pool(max(1, procs())))
                except OSError as e:  # no interpreter to start, no processes left
                    _BROKEN.append(f"cannot start worker processes: {e}")
                    log.warning("nvrtc: %s; compiling in threads of this process", _BROKEN[-1])
                    return None
                log.debug("nvrtc: started %d worker processes", _POOL[0].n)
    return _POOL[0]


def running() -> int:
    """Live worker processes of the started pool (0 when none is started)."""
    return sum(w.proc.poll() is None for w in _POOL[0].all) if _POOL else 0


def shutdown() -> None:
    """Stop the workers (each finishes the program it compiles); the next compile starts a new pool."""
    with _LOCK:
        pools = list(_POOL)
        _POOL.clear()
    for pool in pools:
        pool.close()


atexit.register(shutdown)


# -- the wire and the worker's side -----------------------------------------------------------------------
def _send(f: BinaryIO, obj: object) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    f.write(_HEAD.pack(len(data)) + data)
    f.flush()


def _recv(f: BinaryIO) -> object:
    head = f.read(_HEAD.size)
    if len(head) < _HEAD.size:
        raise EOFError("the NVRTC worker closed its pipe")
    (n,) = _HEAD.unpack(head)
    data = f.read(n)
    if len(data) < n:
        raise EOFError("the NVRTC worker closed its pipe mid-reply")
    return pickle.loads(data)


def serve() -> None:
    """A worker's loop: (source, options, name) in, ("ok", (cubin, wall, cpu)) or ("error", exception) out."""
    from luminal.backends.cuda import nvrtc

    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything printed goes to stderr, never into the replies
    inp = os.fdopen(os.dup(0), "rb")
    nvrtc.version()  # load NVRTC before the first program
    while True:
        try:
            source, options, name = _recv(inp)
        except EOFError:
            return
        try:
            reply: tuple = ("ok", nvrtc.nvrtc_compile(source, tuple(options), name))
        except Exception as e:  # noqa: BLE001 - every error goes back to the compiling process
            reply = ("error", e if isinstance(e, BackendError) else BackendError(f"{type(e).__name__}: {e}"))
        _send(out, reply)


if __name__ == "__main__":
    serve()
