"""CUDA C -> cubin with NVRTC (cuda.bindings.nvrtc), headers located by cuda.pathfinder.

Compiled images are cached in process (by key) and on disk under `<cache dir>/kernels/<key>.cubin`
where key = sha256(source, arch, NVRTC version, options, toolchain digest: the include directories'
headers (name, size, mtime) and the CUDA backend's generator sources); writes are atomic (temp file +
rename), so concurrent processes never read a torn file. `compile_units` caches per kernel: each
kernel's code is indexed (`<cache dir>/kernels/by-code/<code key>` names the image holding it; the code
key hashes the translation unit the kernel alone renders to, so the prelude and its includes are in it:
a changed prelude is a miss, never an old cubin), so a batch that mixes kernels compiled before, in any
grouping, with new ones compiles only the new ones: in one program per worker (`workers()`; each program
parses the headers once, so a handful of programs, balanced by code size), compiled at once in worker
processes (nvrtc_procs.py, LUMINAL_NVRTC_PROCS) or, with that 0, in threads. `prefetch` starts such
compiles in the background (the search hands it every candidate plan's kernels), and compile_units
waits for them. `summary` is the `nvrtc:` line LUMINAL_DEBUG prints.
Works without a GPU: the arch defaults to sm_90 (the GPU machine's H200) when no device is usable.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import re
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from luminal import flags
from luminal.backends.cuda import nvrtc_procs
from luminal.errors import BackendError

log = logging.getLogger(__name__)

DEFAULT_ARCH = "sm_90"
STD = "c++17"
_MEMORY: dict[str, bytes] = {}
_LOCK = threading.Lock()
# programs compiled, cache hits (programs, or kernels for compile_units), seconds (wall and this
# process's CPU: the CPU figure does not grow with other processes' load), kernels compiled; kernels
# compiled ahead (`prefetch`), and the wall seconds callers spent in compile_units (compiling, or waiting
# for kernels under way: NVRTC on the compile's critical path; compile_s sums the programs' own seconds);
# busy_s: wall seconds in which at least one program was compiling
STATS = {"compiles": 0, "memory_hits": 0, "disk_hits": 0, "compile_s": 0.0, "compile_cpu_s": 0.0, "kernels": 0,
         "prefetched": 0, "wait_s": 0.0, "busy_s": 0.0}  # fmt: skip
_BUSY = [0, 0.0]  # programs compiling now, when the current busy stretch began
_BY_CODE: dict[str, bytes] = {}  # code key -> image holding that kernel (compile_units)
_PENDING: dict[str, Future] = {}  # code key -> the image holding it, being compiled ahead (`prefetch`)
_CODE_KEYS: dict[tuple, str] = {}  # (code, prelude, arch, options) -> its index key (`_code_key`)
_POOL: list[ThreadPoolExecutor] = []  # the threads programs compile in (one per CPU)


@functools.cache
def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except ImportError as e:
        raise BackendError(f"the cuda backend needs cuda-bindings (pip install 'luminal[cuda]'): {e}") from None
    return nvrtc


def _check(result, name: str, prog=None):
    nv = _nvrtc()
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != nv.nvrtcResult.NVRTC_SUCCESS:
        _, msg = nv.nvrtcGetErrorString(err)
        raise BackendError(f"NVRTC call {name} failed: {msg.decode() if isinstance(msg, bytes) else err}")
    return values[0] if len(values) == 1 else tuple(values) if values else None


@functools.cache
def version() -> tuple[int, int]:
    major, minor = _check(_nvrtc().nvrtcVersion(), "nvrtcVersion")
    return int(major), int(minor)


@functools.cache
def include_dirs() -> tuple[str, ...]:
    """Directories holding cuda_fp16.h / cuda_bf16.h (the cudart headers wheel, else the toolkit)."""
    dirs: list[str] = []
    try:
        import cuda.pathfinder as pf

        d = pf.find_nvidia_header_directory("cudart")
        if d:
            dirs.append(str(d))
    except Exception as e:  # noqa: BLE001 - fall back to a toolkit below
        log.debug("cuda.pathfinder found no cudart headers: %s", e)
    for env in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(env)
        if root and (Path(root) / "include" / "cuda_fp16.h").exists():
            dirs.append(str(Path(root) / "include"))
    if not dirs:
        raise BackendError(
            "NVRTC needs the CUDA runtime headers (cuda_fp16.h) and none were found: "
            "pip install nvidia-cuda-runtime (cu13) or set CUDA_HOME to a CUDA toolkit"
        )
    return tuple(dict.fromkeys(dirs))


def cache_dir() -> Path | None:
    """`<LUMINAL_CACHE>/kernels`, or None when the cache is off (luminal/flags.py)."""
    root = flags.cache_dir()
    return None if root is None else Path(root) / "kernels"


@functools.cache
def toolchain_digest() -> str:
    """What beyond the source and options decides a cubin: the headers NVRTC includes (name, size,
    mtime of every file in the include directories: a reinstalled wheel or toolkit is a miss) and the
    kernel generators' sources (this package's .py files)."""
    h = hashlib.sha256()
    for d in include_dirs():
        for f in sorted(Path(d).iterdir()):
            try:
                st = f.stat()
            except OSError:
                continue
            h.update(f"{f.name} {st.st_size} {st.st_mtime_ns}\n".encode())
    for f in sorted(Path(__file__).parent.rglob("*.py")):
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _key(source: str, arch: str, options: tuple[str, ...]) -> str:
    h = hashlib.sha256()
    major, minor = version()
    for part in (source, arch, f"{major}.{minor}", *options, toolchain_digest()):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:40]


def compile_cubin(source: str, arch: str | None = None, name: str = "luminal.cu") -> bytes:
    """Compile one translation unit to a cubin for `arch` ("sm_90"); cached in memory and on disk."""
    arch = arch or default_arch()
    options = _options(arch)
    key = _key(source, arch, options)
    hit = _MEMORY.get(key)
    if hit is not None:
        STATS["memory_hits"] += 1
        return hit
    root = cache_dir()
    path = None if root is None else root / f"{key}.cubin"
    try:
        if path is None:
            raise OSError("cache off")
        image = path.read_bytes()
        STATS["disk_hits"] += 1
    except OSError:
        image = _compile(source, options, name)
        if path is not None:
            atomic_write(path, image)
    with _LOCK:
        _MEMORY[key] = image
    return image


def compile_units(
    codes: Sequence[str], render: Callable[[list[str]], str], arch: str | None = None
) -> dict[str, bytes]:
    """The image holding each kernel of `codes` (its source text, an entry point): kernels compiled before
    (this process, or any process through the disk index) or being compiled ahead (`prefetch`) are
    reused whatever batch they came in; the others are compiled together, `render(codes)` being their
    translation unit, in one program per CPU."""
    t0 = time.perf_counter()
    arch = arch or default_arch()
    options = _options(arch)
    out: dict[str, bytes] = {}
    todo: list[str] = []
    for code in dict.fromkeys(codes):
        ck = _code_key(code, render, arch, options)
        img = _known(ck)
        if img is not None:
            _PENDING.pop(ck, None)  # compiled ahead and indexed by now
        elif ck in _PENDING:
            try:
                img = _PENDING[ck].result()
            except Exception as e:  # noqa: BLE001 - compiled again below, with its own batch
                log.debug("nvrtc: a kernel compiled ahead failed (%s); compiling it with its batch", str(e)[:200])
            finally:
                _PENDING.pop(ck, None)
        if img is None:
            todo.append(code)
            continue
        out[code] = img
    groups = [(g, render(g)) for g in _groups(todo, workers())]
    if len(groups) > 1:
        built = list(_pool().map(lambda gs: _build(gs[0], gs[1], render, arch, options), groups))
    else:
        built = [_build(g, src, render, arch, options) for g, src in groups]
    for (group, _), img in zip(groups, built, strict=True):
        out.update(dict.fromkeys(group, img))
    STATS["wait_s"] += time.perf_counter() - t0
    return out


def prefetch(codes: Sequence[str], render: Callable[[list[str]], str], arch: str | None = None) -> int:
    """Start compiling the kernels of `codes` that are neither compiled nor on disk nor under way, in the
    background (one program per CPU, the longest first); `compile_units` waits for them when it is asked
    for them. Returns how many kernels were started. The search calls it with every candidate plan it
    prices, so the long kernels (prefill attention: ~5 s of NVRTC) compile while the rest goes on."""
    arch = arch or default_arch()
    options = _options(arch)
    todo = []
    for code in dict.fromkeys(codes):
        ck = _code_key(code, render, arch, options)
        if ck not in _PENDING and _known(ck) is None:
            todo.append(code)
    for group in _groups(todo, workers()):
        fut = _pool().submit(_build, group, render(group), render, arch, options)
        for code in group:
            _PENDING[_code_key(code, render, arch, options)] = fut
    STATS["prefetched"] += len(todo)
    return len(todo)


def _code_key(code: str, render: Callable[[list[str]], str], arch: str, options: tuple[str, ...]) -> str:
    """Index key of one kernel: the key of the translation unit it alone renders to (prelude and
    includes with it), so the index never serves an image built around another prelude. Memoized in
    process by the code and the empty unit `render([])` (the prelude: rendering a kernel walks its
    braces, ~2.5 ms for 8 KB, and the search asks for the same kernels' keys batch after batch)."""
    memo = (code, render([]), arch, options)
    ck = _CODE_KEYS.get(memo)
    if ck is None:
        ck = _CODE_KEYS[memo] = _key(render([code]), arch, options)
    return ck


def _options(arch: str) -> tuple[str, ...]:
    return (f"--gpu-architecture={arch}", f"-std={STD}", *(f"-I{d}" for d in include_dirs()))


def _known(ck: str) -> bytes | None:
    """The image holding kernel `ck` from this process or the disk index, or None (counts the hit)."""
    img = _BY_CODE.get(ck)
    if img is not None:
        STATS["memory_hits"] += 1
        return img
    root = cache_dir()
    if root is None:
        return None
    try:
        ik = (root / "by-code" / ck).read_text().strip()
        img = _MEMORY.get(ik) or (root / f"{ik}.cubin").read_bytes()
    except OSError:
        return None
    with _LOCK:
        _MEMORY.setdefault(ik, img)  # one read (and one bytes object: one module) per image
    STATS["disk_hits"] += 1
    _BY_CODE[ck] = img
    return img


def _build(group: list[str], src: str, render: Callable, arch: str, options: tuple[str, ...]) -> bytes:
    """Compile one program of kernels `group` (source `src`) and index each kernel (memory and disk)."""
    img = compile_cubin(src, arch, name=program_name(group))
    ik = _key(src, arch, options)
    root = cache_dir()
    for code in group:
        ck = _code_key(code, render, arch, options)
        _BY_CODE[ck] = img
        if root is not None:
            atomic_write(root / "by-code" / ck, ik.encode())
    return img


def _pool() -> ThreadPoolExecutor:
    if not _POOL:
        with _LOCK:
            if not _POOL:
                _POOL.append(ThreadPoolExecutor(max_workers=workers(), thread_name_prefix="nvrtc"))
    return _POOL[0]


def workers() -> int:
    """Programs compile_units compiles at once: the worker processes (LUMINAL_NVRTC_PROCS) or, with
    those off, threads: the CPUs this process may use (LUMINAL_NVRTC_THREADS)."""
    n = nvrtc_procs.procs()
    if n > 0:
        return n
    env = flags.NVRTC_THREADS.raw().strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    return nvrtc_procs.cpus()


_ENTRY_NAME = re.compile(r"__global__\s+void\s+(\w+)")


def program_name(codes: Sequence[str]) -> str:
    """The name a program of kernels `codes` compiles under (NVRTC errors name it): its entries."""
    names = [m for c in codes for m in _ENTRY_NAME.findall(c)]
    if not names:
        return "luminal.cu"
    shown = ",".join(names[:4])
    return f"{shown}+{len(names) - 4}more.cu" if len(names) > 4 else f"{shown}.cu"


def summary(counters: dict[str, float]) -> str:
    """The `nvrtc:` line LUMINAL_DEBUG prints for a compile (`counters`: the change of STATS over it)."""
    how = f"{nvrtc_procs.procs()} processes" if nvrtc_procs.enabled() else f"{workers()} threads"
    hits = int(counters.get("memory_hits", 0) + counters.get("disk_hits", 0))
    return (f"nvrtc: {int(counters.get('kernels', 0))} kernels compiled in {int(counters.get('compiles', 0))} "
            f"programs, {hits} cache hits ({int(counters.get('disk_hits', 0))} disk), "
            f"busy {counters.get('busy_s', 0.0):.2f} s wall, waited {counters.get('wait_s', 0.0):.2f} s, "
            f"{counters.get('compile_cpu_s', 0.0):.2f} s CPU; workers: {how}")  # fmt: skip


def _groups(codes: list[str], n: int) -> list[list[str]]:
    """`codes` in at most n programs of similar size (longest first, each to the lightest program): every
    program pays the header parsing once, so few programs; NVRTC time grows with the code, so balanced."""
    if not codes:
        return []
    groups: list[list[str]] = [[] for _ in range(min(n, len(codes)))]
    load = [0] * len(groups)
    for code in sorted(codes, key=len, reverse=True):
        k = load.index(min(load))
        groups[k].append(code)
        load[k] += len(code)
    return [sorted(g, key=codes.index) for g in groups]


def _compile(source: str, options: tuple[str, ...], name: str) -> bytes:
    """One program's cubin, compiled in a worker process (nvrtc_procs) or in this thread; counted."""
    t0 = time.perf_counter()
    with _LOCK:
        _BUSY[0] += 1
        if _BUSY[0] == 1:
            _BUSY[1] = t0
    try:
        done = nvrtc_procs.compile_program(source, options, name) if nvrtc_procs.enabled() else None
        image, dt, cpu = done if done is not None else nvrtc_compile(source, options, name)
    finally:
        with _LOCK:
            _BUSY[0] -= 1
            if _BUSY[0] == 0:
                STATS["busy_s"] += time.perf_counter() - _BUSY[1]
    with _LOCK:  # programs may compile in parallel threads (compile_units)
        STATS["compiles"] += 1
        STATS["compile_s"] += dt
        STATS["compile_cpu_s"] += cpu
        STATS["kernels"] += source.count("__global__")
    log.debug("nvrtc: compiled %s (%d bytes of CUDA) in %.1f ms", name, len(source), dt * 1e3)
    return image


def nvrtc_compile(source: str, options: tuple[str, ...], name: str) -> tuple[bytes, float, float]:
    """(cubin, wall seconds, CPU seconds of this thread) of one program; BackendError with NVRTC's log
    and the offending lines when it does not compile. Runs in this process (or a worker's)."""
    nv = _nvrtc()
    t0 = time.perf_counter()
    c0 = time.thread_time()  # NVRTC runs in this thread; other threads may compile at once
    prog = _check(nv.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], []), "nvrtcCreateProgram")
    try:
        opts = [o.encode() for o in options]
        err = nv.nvrtcCompileProgram(prog, len(opts), opts)[0]
        if err != nv.nvrtcResult.NVRTC_SUCCESS:
            raise BackendError(_format_log(_log(prog), source, name))
        n = _check(nv.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
        buf = b" " * n
        _check(nv.nvrtcGetCUBIN(prog, buf), "nvrtcGetCUBIN")
    finally:
        nv.nvrtcDestroyProgram(prog)
    return bytes(buf), time.perf_counter() - t0, time.thread_time() - c0


def _log(prog) -> str:
    nv = _nvrtc()
    n = _check(nv.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
    buf = b" " * n
    _check(nv.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
    return buf.rstrip(b"\0 ").decode(errors="replace")


_LINE = re.compile(r"\((\d+)\): (?:error|catastrophic error)")


def _format_log(text: str, source: str, name: str) -> str:
    """The NVRTC log followed by each offending source line with two lines of context."""
    lines = source.splitlines()
    shown = []
    for m in dict.fromkeys(int(x) for x in _LINE.findall(text)):
        lo, hi = max(1, m - 2), min(len(lines), m + 2)
        ctx = "\n".join(f"{'>' if k == m else ' '}{k:5d} | {lines[k - 1]}" for k in range(lo, hi + 1))
        shown.append(ctx)
    msg = f"NVRTC failed to compile {name}:\n{text.strip()}"
    if shown:
        msg += "\n--- offending source lines ---\n" + "\n...\n".join(shown[:8])
    return msg


def atomic_write(path: Path, data: bytes) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as e:  # a read-only cache must not break compiling
        log.warning("could not write the kernel cache entry %s: %s", path, e)


def default_arch() -> str:
    """The arch of device 0 when one is usable, else sm_90."""
    from luminal.backends.cuda import driver

    if driver.device_available():
        return driver.device().arch
    return DEFAULT_ARCH


def clear_memory_cache() -> None:
    for fut in list(_PENDING.values()):  # compiles under way finish first (they write _BY_CODE)
        fut.exception()
    _PENDING.clear()
    _MEMORY.clear()
    _BY_CODE.clear()
    _CODE_KEYS.clear()
