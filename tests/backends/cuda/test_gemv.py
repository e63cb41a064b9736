"""KernelGemv (kernels/gemv.py): every GemvVariant preset compiles for sm_90, computes the GEMV
(CPU: the rendered CUDA C run by g++ with one std::thread per CUDA thread; GPU: launched through the
driver), and `render` refuses what the kernel cannot do."""

from __future__ import annotations

import ctypes
import shutil
import subprocess

import numpy as np
import pytest

from luminal.backends.cuda import nvrtc
from luminal.backends.cuda.kernel import PRELUDE, source
from luminal.backends.cuda.kernels import gemv
from luminal.backends.cuda.kernels.gemv import (
    DEFAULT,
    SMS,
    VARIANTS,
    X_SMEM_MAX,
    GemvVariant,
    KernelGemv,
    looped,
)
from luminal.dtype import DType
from luminal.errors import BackendError
from luminal.shape.expr import num, var
from tests.backends.cuda.test_pdl import check_syncs
from tests.helpers import assert_matches

DTYPES = (DType.f32, DType.f16, DType.bf16)
# (n, k, ld): symbolic n with a partial last block, whole batches plus a guarded last one for every
# preset (k = 8200 is 1025 bf16 / 2050 f32 vectors; the largest batch is 512), a row stride past k;
# and a row shorter than one batch.
CASES = ((37, 8200, 8216), (1, 16, 16))


def _inputs(dt: DType, n: int, k: int, ld: int):
    rng = np.random.default_rng(n * 7 + k)
    x = rng.uniform(-1, 1, k).astype(dt.np)
    w = rng.uniform(-1, 1, n * ld).astype(dt.np)
    want = w.reshape(n, ld)[:, :k].astype(np.float64) @ x.astype(np.float64)
    return x, w, want


def _tol(dt: DType, k: int) -> float:
    return 1.0 + (k / 256 if dt == DType.f32 else 0.0)  # f32 sums k products in another order


def _op(dt: DType, k: int, ld: int) -> KernelGemv:
    return KernelGemv(var("n"), num(k), num(ld), dt)


def ptxas_usage(kernels, arch: str = "sm_90") -> dict[str, tuple[int, int]]:
    """Registers and spill bytes (stores + loads) per entry, from ptxas's report through NVRTC."""
    import re

    from cuda.bindings import nvrtc as nv

    opts = [f"--gpu-architecture={arch}", f"-std={nvrtc.STD}", "--ptxas-options=-v",
            *(f"-I{d}" for d in nvrtc.include_dirs())]  # fmt: skip
    _, prog = nv.nvrtcCreateProgram(source(kernels).encode(), b"usage.cu", 0, [], [])
    try:
        err = nv.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])[0]
        _, size = nv.nvrtcGetProgramLogSize(prog)
        buf = b" " * size
        nv.nvrtcGetProgramLog(prog, buf)
    finally:
        nv.nvrtcDestroyProgram(prog)
    log = buf.rstrip(b"\0 ").decode(errors="replace")
    assert err == nv.nvrtcResult.NVRTC_SUCCESS, log
    out, entry, spill = {}, None, 0
    for line in log.splitlines():
        if m := re.search(r"Compiling entry function '(\w+)'", line):
            entry = m.group(1)
        elif m := re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line):
            spill = int(m.group(1)) + int(m.group(2))
        elif (m := re.search(r"Used (\d+) registers", line)) and entry:
            out[entry] = (int(m.group(1)), spill)
    assert {k.launches[0].name for k in kernels} <= set(out), log
    return out


def test_every_variant_compiles_for_sm90():
    kernels = [_op(dt, k, k).render({"n": 0}, v) for dt in DTYPES for v in VARIANTS.values() for k in (16, 8192, 14336)]
    for kern in kernels:  # the PDL sync once, after the L2 prefetch, before x is read (test_pdl.py)
        check_syncs(kern, gemv=True)
    assert nvrtc.compile_cubin(source(kernels), arch="sm_90")[:4] == b"\x7fELF"


def test_presets_are_named_by_their_knobs_and_default_covers_every_dtype():
    assert all(name == v.name for name, v in VARIANTS.items())
    assert set(DEFAULT) == set(DTYPES) and all(v in VARIANTS.values() for v in DEFAULT.values())
    assert "__launch_bounds__(256)\n" in _op(DType.f32, 64, 64).render({"n": 0}, VARIANTS["w8r1s1u4"]).code


@pytest.mark.parametrize("dt", DTYPES, ids=str)
def test_looped_schedule_at_decode_shapes(dt):
    """gemv.looped at llama-3.2-1b / 3.1-8b shapes (n x k, lm_head included): one wave of blocks, every
    lane a whole batch per row, and the kernels keep ptxas's 4-blocks-per-SM promise without spilling."""
    per = 16 // dt.itemsize
    kernels = []
    for n, k in ((2048, 2048), (3072, 2048), (2048, 8192), (128256, 2048), (4096, 14336), (128256, 4096)):
        v = looped(num(n), k // per, 1, 8 if dt.itemsize == 2 else 4)
        kernels.append(KernelGemv(num(n), num(k), num(k), dt).render({}, v))
        grid = int(kernels[-1].launches[0].grid.evaluate({}))
        assert grid <= SMS * v.occupancy and v.waves == 1, (n, k, v, grid)
        assert k // per >= 32 * v.split * v.unroll, (n, k, v)
    for name, (regs, spill) in ptxas_usage(kernels).items():
        assert spill == 0 and regs <= 65536 // (256 * 4), (name, regs, spill)


@pytest.mark.parametrize("ld", [64, 72])
def test_reference_matches_numpy(ld):
    x, w, want = _inputs(DType.f32, 5, 64, ld)
    got = _op(DType.f32, 64, ld).reference([x, w], [DType.f32, DType.f32], {"n": 5})
    assert_matches(got, want, DType.f32, 1.0, f"gemv reference ld={ld}")


def test_x_in_shared_memory_only_when_it_fits():
    v = GemvVariant(split=2, x_smem=True)
    fits = X_SMEM_MAX // 4
    assert "__shared__ uint4 xs" in _op(DType.f32, fits, fits).render({"n": 0}, v).code
    assert "__shared__ uint4 xs" not in _op(DType.f32, fits + 4, fits + 4).render({"n": 0}, v).code


@pytest.mark.parametrize(
    "dt,k,ld",
    [(DType.f64, 16, 16), (DType.f32, 6, 8), (DType.bf16, 12, 16), (DType.f32, 16, 12)],
    ids=["f64", "k-not-vector", "bf16-k-not-vector", "ld-below-k"],
)
def test_render_refuses(dt, k, ld):
    with pytest.raises(BackendError):
        _op(dt, k, ld).render({"n": 0})


def test_render_refuses_symbolic_k():
    with pytest.raises(BackendError, match="literal"):
        KernelGemv(var("n"), var("k"), num(64), DType.f32).render({"n": 0, "k": 1})


@pytest.mark.parametrize(
    "knobs",
    [dict(split=3), dict(warps=64), dict(unroll=0), dict(rows=4, unroll=8)],
    ids=["split-not-dividing", "block-too-big", "no-batch", "batch-spills"],
)
def test_variant_refuses(knobs):
    with pytest.raises(BackendError):
        GemvVariant(**knobs)


# -- the rendered C on the CPU: one std::thread per CUDA thread, blocks one after another ------------
_SHIM = r"""
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>
struct uint4 { unsigned x, y, z, w; };
struct float4 { float x, y, z, w; };
struct float2 { float x, y; };
struct dim3 { unsigned x; };
static inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return {a, b, c, d}; }
template <class T> static inline T __ldg(const T* p) { return *p; }
static inline float __fadd_rn(float a, float b) { return a + b; }  // never contracted into an fma
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
struct __nv_bfloat16 { uint16_t b; };
struct __nv_bfloat162 { __nv_bfloat16 x, y; };
static inline float bf(__nv_bfloat16 h) { uint32_t u = (uint32_t)h.b << 16; float f; memcpy(&f, &u, 4); return f; }
static inline float2 __bfloat1622float2(__nv_bfloat162 v) { return {bf(v.x), bf(v.y)}; }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) {  // finite values: round to nearest even
  uint32_t u; memcpy(&u, &f, 4); u += 0x7fffu + ((u >> 16) & 1u); return {(uint16_t)(u >> 16)};
}
thread_local dim3 threadIdx, blockIdx;
static dim3 gridDim;
static std::barrier<>* block_bar;
static std::barrier<>* warp_bar[32];
static unsigned long long lanes[32][32];
static inline void __syncthreads() { block_bar->arrive_and_wait(); }
template <class T> static inline T shfl(T v, int src_of_lane(int, int), int arg) {  // src < 0: own value
  static_assert(sizeof(T) <= 8, "shuffle of a type wider than 8 bytes");
  const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
  memcpy(&lanes[w][l], &v, sizeof(T)); warp_bar[w]->arrive_and_wait();
  const int s = src_of_lane(l, arg);
  T r = v; if (s >= 0) memcpy(&r, &lanes[w][s], sizeof(T)); warp_bar[w]->arrive_and_wait(); return r;
}
template <class T> static inline T __shfl_xor_sync(unsigned, T v, int off) {
  return shfl(v, [](int l, int o) { return l ^ o; }, off);
}
template <class T> static inline T __shfl_down_sync(unsigned, T v, int off) {
  return shfl(v, [](int l, int o) { return l + o < 32 ? l + o : -1; }, off);
}
template <class T> static inline T __shfl_sync(unsigned, T v, int src) {
  return shfl(v, [](int, int s) { return s; }, src);
}
static inline float __bfloat162float(__nv_bfloat16 h) { return bf(h); }
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __shared__ static
#define __launch_bounds__(...)
"""
_RUN = r"""
extern "C" void run_{name}(void* out, const void* x, const void* w, const long long* dims, int grid, int block) {{
  gridDim.x = grid;
  for (int b = 0; b < grid; ++b) {{
    std::barrier<> bar(block); block_bar = &bar;
    for (int i = 0; i < block / 32; ++i) warp_bar[i] = new std::barrier<>(32);
    std::vector<std::thread> ts;
    for (int t = 0; t < block; ++t)
      ts.emplace_back([=] {{ threadIdx.x = t; blockIdx.x = b; {name}(({T}*)out, (const {T}*)x, (const {T}*)w, dims);
      }});
    for (auto& t : ts) t.join();
    for (int i = 0; i < block / 32; ++i) delete warp_bar[i];
  }}
}}
"""


def _cpu_launcher(tmp_path, kernels, dt: DType):
    """Compile every kernel with g++; returns launch(kernel, out, x, w, dims, grid) on host arrays."""
    ctype = {DType.f32: "float", DType.bf16: "__nv_bfloat16"}[dt]
    runs = "".join(_RUN.format(name=k.launches[0].name, T=ctype) for k in kernels)
    src, lib = tmp_path / f"gemv_{dt.value}.cpp", tmp_path / f"gemv_{dt.value}.so"
    src.write_text(_SHIM + PRELUDE + "".join(k.code for k in kernels) + runs)
    cmd = ["g++", "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", "-o", str(lib), str(src)]
    subprocess.run(cmd, check=True, capture_output=True)
    so = ctypes.CDLL(str(lib))

    def launch(kernel, out, x, w, dims, grid):
        fn = getattr(so, f"run_{kernel.launches[0].name}")
        fn(*(ctypes.c_void_p(a.ctypes.data) for a in (out, x, w, dims)), grid, kernel.launches[0].block)

    return launch


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ (C++20) to run the CUDA C on the CPU")
@pytest.mark.parametrize("dt", [DType.f32, DType.bf16], ids=str)
def test_every_variant_computes_the_gemv_on_cpu(tmp_path, dt, monkeypatch):
    monkeypatch.setattr(gemv, "SMS", 1)  # a capped grid of 4 blocks: looping variants walk 2-5 tiles each
    rendered = {(name, case): _op(dt, *case[1:]).render({"n": 0}, v) for name, v in VARIANTS.items() for case in CASES}
    launch = _cpu_launcher(tmp_path, list({k.code: k for k in rendered.values()}.values()), dt)
    for (name, (n, k, ld)), kern in rendered.items():
        x, w, want = _inputs(dt, n, k, ld)
        out = np.full(n + 1, np.nan, dt.np)  # one past the end: must stay untouched
        launch(kern, out, x, w, np.array([n], np.int64), int(kern.launches[0].grid.evaluate({"n": n})))
        assert_matches(out[:n], want, dt, _tol(dt, k), f"{name} {n}x{k} ld={ld}")
        assert np.isnan(out[n].astype(np.float32)), name


@pytest.mark.cuda
@pytest.mark.parametrize("dt", DTYPES, ids=str)
def test_every_variant_computes_the_gemv_on_gpu(dt):
    from luminal.backends.cuda import driver

    dev = driver.device()
    cases = (*CASES, (4097, 4096, 4096), (20000, 64, 64))  # the last: looped presets walk 5 tiles a block
    rendered = {(name, case): _op(dt, *case[1:]).render({"n": 0}, v) for name, v in VARIANTS.items() for case in cases}
    module = driver.Module(nvrtc.compile_cubin(source(list(rendered.values()))))
    for (name, (n, k, ld)), kern in rendered.items():
        (ln,) = kern.launches
        x, w, want = _inputs(dt, n, k, ld)
        host = (x, w, np.array([n], np.int64))
        bufs = [driver.DeviceBuffer(a.nbytes) for a in host]
        for b, a in zip(bufs, host, strict=True):
            driver.htod(b.ptr, a, dev.stream)
        out = driver.DeviceBuffer(n * dt.itemsize)
        params = driver.Params([out.ptr, *(b.ptr for b in bufs)])
        driver.launch(
            module.function(ln.name), int(ln.grid.evaluate({"n": n})), ln.block, ln.shared, params, dev.stream
        )
        got = np.empty(n, dt.np)
        driver.dtoh(got, out.ptr, dev.stream)
        dev.synchronize()
        assert_matches(got, want, dt, _tol(dt, k), f"{name} {n}x{k} ld={ld}")
