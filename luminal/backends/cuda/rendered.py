"""Rendering kernel ops to code, memoized: in process and on disk beside the NVRTC cache.

Rendering a fused kernel costs 35-70 ms of Python (luminal/backends/cuda/emit.py); a plan's layers
share their ops, and a warm compile would render every distinct kernel of its plans again just to
find the code NVRTC's per-kernel index already holds. `render(op, slots)` is `op.render(slots)`
memoized by (op, slots) in process and by sha256(op class, canonical op text, slots, digest of the
compiler and CUDA backend sources) under `<cache dir>/kernels/rendered/` (JSON: the code, headers and
launches; atomic writes, so concurrent processes never read a torn entry). `plan_slots` numbers a
plan's dims in the dims buffer; given the graph's dims, a kernel renders the same code in a one-op plan
(the search's per-op measurements) as in the whole plan, so it compiles once.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from luminal.backends.cuda import nvrtc
from luminal.backends.cuda.host import HostOp
from luminal.backends.cuda.kernel import ERROR_SLOT, Kernel, KernelOp, Launch
from luminal.egraph.llir import _dec_expr, _enc, _op_text

log = logging.getLogger(__name__)
_MEMORY: dict[tuple, Kernel] = {}  # (op, slots) -> its kernel
STATS = {"renders": 0, "render_s": 0.0, "render_memory_hits": 0, "render_disk_hits": 0}


def plan_slots(nodes: Sequence, dims: Iterable[str] = ()) -> dict[str, int]:
    """Dims-buffer slot of every dim the plan's ops read, plus `dims` (the graph's: profiling passes the
    bucket's profile dims), numbered in sorted order, then the error word (ERROR_SLOT)."""
    names: set[str] = set(dims)
    # an unrolled plan repeats its body's op objects in every layer: each distinct object once (a fused
    # op's dim_names walks its whole body: ~0.1 s per gemma plan when asked per node)
    for op in {id(n.op): n.op for n in nodes}.values():
        if isinstance(op, (KernelOp, HostOp)):
            names |= op.dim_names() | op.out_size().dims()
        if isinstance(op, KernelOp):
            names |= op.scratch_bytes().dims()
        a = op.alias()
        if a is not None:
            names |= a[1].dims()
    slots = {d: i for i, d in enumerate(sorted(names))}
    return {**slots, ERROR_SLOT: len(slots)}


def render(op: KernelOp, slots: Mapping[str, int]) -> Kernel:
    """`op.render(slots)`, memoized (module docstring)."""
    key = (op, tuple(slots.items()), _salt(op))
    try:
        hit = _MEMORY.get(key)
    except TypeError:  # an op with an unhashable field: not memoized in process
        key, hit = None, None
    if hit is not None:
        STATS["render_memory_hits"] += 1
        return hit
    path = _path(op, slots)
    k = _read(path) if path is not None else None
    if k is not None:
        STATS["render_disk_hits"] += 1
    else:
        t = time.perf_counter()
        k = op.render(slots)
        STATS["renders"] += 1
        STATS["render_s"] += time.perf_counter() - t
        if path is not None:
            _write(path, k)
    if key is not None:
        _MEMORY[key] = k
    return k


def _salt(op: KernelOp) -> str:
    """What decides an op's code besides its fields: a schedule its class picks from module knobs
    (`render_salt`, e.g. KernelGemvFused's variant name), so flipping a knob renders anew."""
    f = getattr(op, "render_salt", None)
    return f() if f is not None else ""


def clear_memory() -> None:
    _MEMORY.clear()


def _path(op: KernelOp, slots: Mapping[str, int]) -> Path | None:
    root = nvrtc.cache_dir()
    if root is None:
        return None
    h = hashlib.sha256()
    for part in (type(op).__module__, type(op).__qualname__, _op_text(op), json.dumps(list(slots.items())), _digest(),
                 _salt(op)):  # fmt: skip
        h.update(part.encode())
        h.update(b"\0")
    return root / "rendered" / f"{h.hexdigest()[:40]}.json"


def _digest() -> str:
    """Digest of the sources rendering depends on (the compiler's and the CUDA backend's)."""
    from luminal.egraph.compile import source_digest

    return source_digest(Path(__file__).parent)


def _read(path: Path) -> Kernel | None:
    try:
        d = json.loads(path.read_text())
        launches = tuple(Launch(n, _dec_expr(g), int(b), int(s)) for n, g, b, s in d["launches"])
        return Kernel(d["code"], launches, frozenset(d["headers"]))
    except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
        if not isinstance(e, FileNotFoundError):
            log.warning("ignoring the unreadable rendered-kernel cache entry %s: %s", path, e)
        return None


def _write(path: Path, k: Kernel) -> None:
    launches = [[ln.name, _enc(ln.grid), ln.block, ln.shared] for ln in k.launches]
    data = json.dumps({"code": k.code, "headers": sorted(k.headers), "launches": launches})
    nvrtc.atomic_write(path, data.encode())
