"""cuBLASLt through ctypes: library loading (cuda.pathfinder, cu12 or cu13), status checks, one
handle and one workspace per stream for the process, and matmul plans (descriptors + the
heuristic's algorithm) cached per (shape, layout, dtype, epilogue, alignment).

cuda-bindings wraps neither cuBLAS nor cuBLASLt, so the C API is declared here. Nothing is loaded
at import; `library()` raises BackendError with the fix when no libcublasLt can be found.
Handles are never destroyed (destroying them mid-process crashed the Rust original's search).
"""

from __future__ import annotations

import ctypes
import functools
import logging
import threading
from dataclasses import dataclass

from luminal.dtype import DType
from luminal.errors import BackendError

log = logging.getLogger(__name__)

WORKSPACE_BYTES = 32 << 20  # preference given to the heuristic; most choices need far less
N_CANDIDATES = 8

# enum values of cublasLt.h / library_types.h / cublas_api.h (identical in CUDA 12 and 13)
CUDA_R = {DType.f32: 0, DType.f64: 1, DType.f16: 2, DType.bf16: 14}
COMPUTE = {"32F": 68, "32F_FAST_TF32": 77, "64F": 70}
OPERATION = {"N": 0, "T": 1}
EPILOGUE = {"DEFAULT": 1, "RELU": 2, "BIAS": 4, "RELU_BIAS": 6, "GELU": 32, "GELU_BIAS": 36}
DESC_COMPUTE_TYPE, DESC_SCALE_TYPE, DESC_TRANSA, DESC_TRANSB, DESC_EPILOGUE = 0, 1, 3, 4, 7
DESC_BIAS_POINTER, DESC_BIAS_BATCH_STRIDE, DESC_BIAS_DATA_TYPE = 8, 10, 26
LAYOUT_ORDER, LAYOUT_BATCH_COUNT, LAYOUT_STRIDED_BATCH_OFFSET = 1, 5, 6
PREF_MAX_WORKSPACE_BYTES = 1
PREF_MIN_ALIGNMENT = (5, 6, 7, 8)  # A, B, C, D bytes


class HeuristicResult(ctypes.Structure):
    _fields_ = [("algo", ctypes.c_uint64 * 8), ("workspaceSize", ctypes.c_size_t), ("state", ctypes.c_int),
                ("wavesCount", ctypes.c_float), ("reserved", ctypes.c_int * 4)]  # fmt: skip


_P = ctypes.c_void_p
_SIGNATURES = {
    "cublasLtCreate": [ctypes.POINTER(_P)],
    "cublasLtGetVersion": [],
    "cublasLtGetStatusName": [ctypes.c_int],
    "cublasLtMatmulDescCreate": [ctypes.POINTER(_P), ctypes.c_int, ctypes.c_int],
    "cublasLtMatmulDescSetAttribute": [_P, ctypes.c_int, _P, ctypes.c_size_t],
    "cublasLtMatrixLayoutCreate": [ctypes.POINTER(_P), ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int64],
    "cublasLtMatrixLayoutSetAttribute": [_P, ctypes.c_int, _P, ctypes.c_size_t],
    "cublasLtMatmulPreferenceCreate": [ctypes.POINTER(_P)],
    "cublasLtMatmulPreferenceSetAttribute": [_P, ctypes.c_int, _P, ctypes.c_size_t],
    "cublasLtMatmulAlgoGetHeuristic": [
        _P,
        _P,
        _P,
        _P,
        _P,
        _P,
        _P,
        ctypes.c_int,
        ctypes.POINTER(HeuristicResult),
        ctypes.POINTER(ctypes.c_int),
    ],  # fmt: skip
    "cublasLtMatmul": [_P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P, ctypes.c_size_t, _P],
}


@functools.cache
def library() -> ctypes.CDLL:
    """libcublasLt (the nvidia-cublas wheel's, cu13 or cu12, else the system's), declared."""
    errors = []
    lib = None
    try:
        import cuda.pathfinder as pf

        lib = ctypes.CDLL(pf.load_nvidia_dynamic_lib("cublasLt").abs_path)
    except Exception as e:  # noqa: BLE001 - try the system loader next
        errors.append(f"cuda.pathfinder: {type(e).__name__}: {e}")
        for name in ("libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"):
            try:
                lib = ctypes.CDLL(name)
                break
            except OSError as e2:
                errors.append(f"{name}: {e2}")
    if lib is None:
        raise BackendError("cuBLASLt is not installed: pip install 'luminal[cuda]' (nvidia-cublas); tried "
                           + "; ".join(errors))  # fmt: skip
    for name, args in _SIGNATURES.items():
        f = getattr(lib, name)
        f.argtypes = args
        f.restype = ctypes.c_int
    lib.cublasLtGetVersion.restype = ctypes.c_size_t
    lib.cublasLtGetStatusName.restype = ctypes.c_char_p
    return lib


def version() -> int:
    """cuBLASLt version as major*10000 + minor*100 + patch (13.1.2 -> 130102)."""
    return int(library().cublasLtGetVersion())


def check(status: int, name: str) -> None:
    if status != 0:
        raw = library().cublasLtGetStatusName(status)
        raise BackendError(f"cuBLASLt call {name} failed: {raw.decode() if raw else status}")


def call(name: str, *args) -> None:
    check(getattr(library(), name)(*args), name)


def _set(fn: str, obj, attr: int, value: ctypes._SimpleCData) -> None:
    call(fn, obj, attr, ctypes.byref(value), ctypes.sizeof(value))


_LOCK = threading.Lock()
_HANDLES: dict[int, ctypes.c_void_p] = {}
_WORKSPACES: dict[int, object] = {}
# Workspaces replaced by a larger one. Never freed: a launch captured into a CUDA graph (and work
# already queued) keeps the pointer it was given, so freeing a workspace on growth made earlier
# captured GEMMs (split-K partials) write into freed memory.
_RETIRED: list[object] = []


def _stream_key(stream) -> int:
    return int(stream) if stream is not None else 0


def handle(stream) -> ctypes.c_void_p:
    """The process's cuBLASLt handle for `stream` (created once, never destroyed)."""
    key = _stream_key(stream)
    with _LOCK:
        h = _HANDLES.get(key)
        if h is None:
            h = ctypes.c_void_p()
            call("cublasLtCreate", ctypes.byref(h))
            _HANDLES[key] = h
    return h


def workspace(stream, nbytes: int) -> tuple[int, int]:
    """(pointer, size) of the stream's workspace, grown to at least `nbytes` (outside capture only:
    prepare() asks for it). Calls on one stream are ordered, so they share it. Allocated once at
    WORKSPACE_BYTES (the most any plan's heuristic may ask for), so it does not move; a pointer it
    returned stays valid for the process (captured graphs hold it), even if it ever had to grow."""
    from luminal.backends.cuda import driver

    key = _stream_key(stream)
    with _LOCK:
        buf = _WORKSPACES.get(key)
        if nbytes and (buf is None or buf.nbytes < nbytes):
            if buf is not None:
                _RETIRED.append(buf)
            buf = _WORKSPACES[key] = driver.DeviceBuffer(max(int(nbytes), WORKSPACE_BYTES))
    return (buf.ptr, buf.nbytes) if buf is not None else (0, 0)


@dataclass(frozen=True)
class Spec:
    """A concrete column-major cuBLASLt matmul: D (rows x cols, ld rows) = op(A) op(B) [+ C]."""

    trans_a: str
    trans_b: str
    rows: int  # D rows (luminal's n)
    cols: int  # D cols (luminal's m)
    k: int
    ld_a: int
    ld_b: int
    batch: int
    stride_a: int
    stride_b: int
    dtype: DType  # A and B
    out_dtype: DType  # C and D
    compute: str
    epilogue: str
    bias_dtype: DType | None
    align: int  # bytes every pointer and batch offset is aligned to


@dataclass
class Plan:
    spec: Spec
    desc: ctypes.c_void_p
    layouts: tuple[ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]  # A, B, C=D
    algo: HeuristicResult
    workspace: int


_PLANS: dict[Spec, Plan] = {}


def matrices(spec: Spec) -> tuple[tuple[DType, int, int, int, int], ...]:
    """(dtype, rows, cols, ld, batch stride) of the A, B and C = D layouts `plan` creates (stored
    column-major; batch count spec.batch): what a GEMM of `spec` reads and writes."""
    a_rows, a_cols = (spec.rows, spec.k) if spec.trans_a == "N" else (spec.k, spec.rows)
    b_rows, b_cols = (spec.k, spec.cols) if spec.trans_b == "N" else (spec.cols, spec.k)
    return ((spec.dtype, a_rows, a_cols, spec.ld_a, spec.stride_a),
            (spec.dtype, b_rows, b_cols, spec.ld_b, spec.stride_b),
            (spec.out_dtype, spec.rows, spec.cols, spec.rows, spec.rows * spec.cols))  # fmt: skip


def extent_bytes(spec: Spec) -> tuple[int, int, int]:
    """Bytes past its pointer that the GEMM of `spec` touches in A, B and D (1 + the last byte)."""
    out = []
    for dt, r, c, ld, stride in matrices(spec):
        last = (spec.batch - 1) * stride + (c - 1) * ld + r if r and c and spec.batch else 0
        out.append(last * dt.itemsize)
    return tuple(out)


def plan(spec: Spec, stream) -> Plan:
    """Descriptors + the heuristic's first algorithm for `spec` (cached for the process)."""
    p = _PLANS.get(spec)
    if p is not None:
        return p
    if spec.dtype not in CUDA_R or spec.out_dtype not in CUDA_R:
        raise BackendError(f"cuBLASLt has no {spec.dtype} x {spec.dtype} -> {spec.out_dtype} matmul")
    scale = CUDA_R[DType.f64] if spec.compute == "64F" else CUDA_R[DType.f32]
    desc = ctypes.c_void_p()
    call("cublasLtMatmulDescCreate", ctypes.byref(desc), COMPUTE[spec.compute], scale)
    op = OPERATION
    _set("cublasLtMatmulDescSetAttribute", desc, DESC_TRANSA, ctypes.c_int32(op[spec.trans_a]))
    _set("cublasLtMatmulDescSetAttribute", desc, DESC_TRANSB, ctypes.c_int32(op[spec.trans_b]))
    _set("cublasLtMatmulDescSetAttribute", desc, DESC_EPILOGUE, ctypes.c_int32(EPILOGUE[spec.epilogue]))
    if spec.bias_dtype is not None:
        _set("cublasLtMatmulDescSetAttribute", desc, DESC_BIAS_DATA_TYPE, ctypes.c_int32(CUDA_R[spec.bias_dtype]))
        _set("cublasLtMatmulDescSetAttribute", desc, DESC_BIAS_BATCH_STRIDE, ctypes.c_int64(0))
        # the heuristic reads the bias pointer's alignment: give it one as aligned as the real ones
        _set("cublasLtMatmulDescSetAttribute", desc, DESC_BIAS_POINTER, ctypes.c_void_p(spec.align))
    layouts = []
    for dt, r, c, ld, stride in matrices(spec):
        lay = ctypes.c_void_p()
        call("cublasLtMatrixLayoutCreate", ctypes.byref(lay), CUDA_R[dt], r, c, ld)
        if spec.batch > 1:
            _set("cublasLtMatrixLayoutSetAttribute", lay, LAYOUT_BATCH_COUNT, ctypes.c_int32(spec.batch))
            _set("cublasLtMatrixLayoutSetAttribute", lay, LAYOUT_STRIDED_BATCH_OFFSET, ctypes.c_int64(stride))
        layouts.append(lay)
    pref = ctypes.c_void_p()
    call("cublasLtMatmulPreferenceCreate", ctypes.byref(pref))
    _set("cublasLtMatmulPreferenceSetAttribute", pref, PREF_MAX_WORKSPACE_BYTES, ctypes.c_uint64(WORKSPACE_BYTES))
    for attr in PREF_MIN_ALIGNMENT:
        _set("cublasLtMatmulPreferenceSetAttribute", pref, attr, ctypes.c_uint32(spec.align))
    results = (HeuristicResult * N_CANDIDATES)()
    found = ctypes.c_int(0)
    a, b, c = layouts
    call("cublasLtMatmulAlgoGetHeuristic", handle(stream), desc, a, b, c, c, pref, N_CANDIDATES, results,
         ctypes.byref(found))  # fmt: skip
    if found.value == 0:
        raise BackendError(f"cuBLASLt found no algorithm for {spec}; the matmul rules should not have chosen it")
    best = results[0]
    p = Plan(spec, desc, (a, b, c), best, int(best.workspaceSize))
    _PLANS[spec] = p
    log.debug("cublaslt plan %s: workspace %d bytes", spec, p.workspace)
    return p


def matmul(p: Plan, stream, a: int, b: int, c: int, d: int, bias: int, beta: float) -> None:
    """Enqueue D = epilogue(op(A) op(B) + beta C) of plan `p` (host alpha/beta: capturable)."""
    f64 = p.spec.compute == "64F"
    one = ctypes.c_double(1.0) if f64 else ctypes.c_float(1.0)
    b_ = ctypes.c_double(beta) if f64 else ctypes.c_float(beta)
    if bias:
        _set("cublasLtMatmulDescSetAttribute", p.desc, DESC_BIAS_POINTER, ctypes.c_void_p(bias))
    ws, ws_size = workspace(stream, 0)
    if ws_size < p.workspace:
        raise BackendError("cuBLASLt workspace not prepared: call prepare() before launch()")
    la, lb, lc = p.layouts
    call("cublasLtMatmul", handle(stream), p.desc, ctypes.byref(one), ctypes.c_void_p(a), la, ctypes.c_void_p(b), lb,
         ctypes.byref(b_), ctypes.c_void_p(c), lc, ctypes.c_void_p(d), lc, ctypes.byref(p.algo.algo),
         ctypes.c_void_p(ws) if p.workspace else None, p.workspace, _stream_ptr(stream))  # fmt: skip


def _stream_ptr(stream) -> ctypes.c_void_p:
    return ctypes.c_void_p(int(stream) if stream is not None else 0)
