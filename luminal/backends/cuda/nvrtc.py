"""CUDA C -> cubin with NVRTC (cuda.bindings.nvrtc), headers located by cuda.pathfinder.

Compiled images are cached in process (by key) and on disk under `<cache dir>/kernels/<key>.cubin`
where key = sha256(source, arch, NVRTC version, options); writes are atomic (temp file + rename), so
concurrent processes never read a torn file. `compile_units` caches per kernel: each kernel's code is
indexed (`<cache dir>/kernels/by-code/<code key>` names the image holding it), so a batch that mixes
kernels compiled before, in any grouping, with new ones compiles only the new ones: in one program per
CPU (`workers()`), compiled in parallel threads (NVRTC releases the GIL; each program parses the headers
once, so a handful of programs, balanced by code size).
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from luminal.errors import BackendError

log = logging.getLogger(__name__)

DEFAULT_ARCH = "sm_90"
STD = "c++17"
_MEMORY: dict[str, bytes] = {}
_LOCK = threading.Lock()
# programs compiled, cache hits (programs, or kernels for compile_units), seconds (wall and this
# process's CPU: the CPU figure does not grow with other processes' load), kernels compiled
STATS = {"compiles": 0, "memory_hits": 0, "disk_hits": 0, "compile_s": 0.0, "compile_cpu_s": 0.0, "kernels": 0}
_BY_CODE: dict[str, bytes] = {}  # code key -> image holding that kernel (compile_units)


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
    from luminal import flags

    root = flags.cache_dir()
    return None if root is None else Path(root) / "kernels"


def _key(source: str, arch: str, options: tuple[str, ...]) -> str:
    h = hashlib.sha256()
    major, minor = version()
    for part in (source, arch, f"{major}.{minor}", *options):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:40]


def compile_cubin(source: str, arch: str | None = None, name: str = "luminal.cu") -> bytes:
    """Compile one translation unit to a cubin for `arch` ("sm_90"); cached in memory and on disk."""
    arch = arch or default_arch()
    options = (f"--gpu-architecture={arch}", f"-std={STD}", *(f"-I{d}" for d in include_dirs()))
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
    (this process, or any process through the disk index) are reused whatever batch they came in; the
    others are compiled together, `render(codes)` being their translation unit."""
    arch = arch or default_arch()
    options = (f"--gpu-architecture={arch}", f"-std={STD}", *(f"-I{d}" for d in include_dirs()))
    root = cache_dir()
    out: dict[str, bytes] = {}
    images: dict[str, bytes] = {}  # image key -> image (read once per batch)
    todo: list[str] = []
    for code in dict.fromkeys(codes):
        ck = _key(code, arch, options)
        img = _BY_CODE.get(ck)
        if img is None and root is not None:
            try:
                ik = (root / "by-code" / ck).read_text().strip()
                img = images.get(ik) or (root / f"{ik}.cubin").read_bytes()
                images[ik] = img
            except OSError:
                img = None
        if img is None:
            todo.append(code)
            continue
        STATS["memory_hits" if ck in _BY_CODE else "disk_hits"] += 1
        _BY_CODE[ck] = out[code] = img
    groups = [(g, render(g)) for g in _groups(todo, workers())]
    if len(groups) > 1:
        with ThreadPoolExecutor(max_workers=len(groups)) as pool:  # NVRTC releases the GIL
            built = list(pool.map(lambda gs: compile_cubin(gs[1], arch), groups))
    else:
        built = [compile_cubin(src, arch) for _, src in groups]
    for (group, src), img in zip(groups, built, strict=True):
        ik = _key(src, arch, options)
        for code in group:
            ck = _key(code, arch, options)
            _BY_CODE[ck] = out[code] = img
            if root is not None:
                atomic_write(root / "by-code" / ck, ik.encode())
    return out


def workers() -> int:
    """Programs compile_units compiles at once: the CPUs this process may use (LUMINAL_NVRTC_THREADS)."""
    env = os.environ.get("LUMINAL_NVRTC_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


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
    dt = time.perf_counter() - t0
    with _LOCK:  # programs may compile in parallel threads (compile_units)
        STATS["compiles"] += 1
        STATS["compile_s"] += dt
        STATS["compile_cpu_s"] += time.thread_time() - c0
        STATS["kernels"] += source.count("__global__")
    log.debug("nvrtc: compiled %d bytes of CUDA in %.1f ms", len(source), dt * 1e3)
    return bytes(buf)


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
    _MEMORY.clear()
    _BY_CODE.clear()
