"""The fused kernels' CUDA C, compiled by g++ and run on the CPU, against the reference backend bit
for bit (no GPU needed); the same chains on the GPU (`cuda` marker).

Each chain below is compiled for the CUDA backend (its preferred plan: the chain in one
`KernelFused`, or a `KernelGemvFused` epilogue), every fused kernel's rendered C runs under a small
shim (CUDA's types and intrinsics as plain C++; elementwise and one-thread-per-row kernels run one
CUDA thread after another, the GEMV with one std::thread per CUDA thread), and the other kernels
run by their reference semantics (`CpuCudaBackend`). The chains are made of ops whose results jump
with the last bit of an operand (`//`, `%`, `<`, `where`, casts to an integer or to f32): a fused
kernel that held a 16/8-bit value in f32 where the reference rounds it would give a different
number there, not a slightly different one. docs/numerics.md ("Fused kernels"): every 16/8-bit op
result inside a fused body is rounded to its dtype, as the reference rounds it op by op.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from types import SimpleNamespace

import numpy as np
import pytest

import luminal as lm
from luminal.backends.cuda.kernel import FP8_PRELUDE, PRELUDE, KernelOp
from luminal.backends.cuda.kernels import KernelFused, KernelSumReduce
from luminal.backends.reference.executor import ReferenceExecutor
from luminal.egraph.compile import CompileOptions, compile_plans
from tests.backends.cuda.test_lowering import CpuCudaBackend

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to run the CUDA C on the CPU")

SLOTS = {"n": 0, "!error": 1}

# Elementwise kernels only: CUDA's types and intrinsics as plain C++ (f16 through GCC's _Float16,
# which rounds to nearest even from float and from double, once).
_SHIM = r"""
#include <cmath>
#include <cstdint>
#include <cstring>
struct dim3 { unsigned x; };
static dim3 threadIdx, blockIdx;
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
template <class T, class F> static inline T bits(F f) {
  static_assert(sizeof(T) == sizeof(F)); T t; memcpy(&t, &f, sizeof t); return t;
}
static inline float __int_as_float(int x) { return bits<float>(x); }
static inline float __uint_as_float(unsigned x) { return bits<float>(x); }
static inline unsigned __float_as_uint(float x) { return bits<unsigned>(x); }
static inline double __longlong_as_double(long long x) { return bits<double>(x); }
static inline long long __double_as_longlong(double x) { return bits<long long>(x); }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline long long min(long long a, long long b) { return a < b ? a : b; }
static inline long long max(long long a, long long b) { return a > b ? a : b; }
struct __nv_bfloat16 { uint16_t b; };
static inline float __bfloat162float(__nv_bfloat16 h) { return bits<float>((uint32_t)h.b << 16); }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  uint32_t u = bits<uint32_t>(f);
  if (std::isnan(f)) return {(uint16_t)((u >> 16) | 0x40)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return {(uint16_t)(u >> 16)};
}
static inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short x) { return {x}; }
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.b; }
struct __half { _Float16 h; };
static inline float __half2float(__half h) { return (float)h.h; }
static inline __half __float2half_rn(float f) { return {(_Float16)f}; }
static inline __half __double2half(double d) { return {(_Float16)d}; }
static inline __half __ushort_as_half(unsigned short x) { return {bits<_Float16>(x)}; }
static inline unsigned short __half_as_ushort(__half h) { return bits<unsigned short>(h.h); }
// fp8 (OCP e4m3fn / e5m2) as ml_dtypes has them: f32 -> fp8 rounds to nearest even, without
// saturation (a finite overflow is NaN in e4m3, inf in e5m2)
enum __nv_saturation_t { __NV_NOSAT, __NV_SATFINITE };
enum __nv_fp8_interpretation_t { __NV_E4M3, __NV_E5M2 };
static inline float fp8_value(unsigned char x, int eb, int mb) {
  const int bias = (1 << (eb - 1)) - 1, e = (x >> mb) & ((1 << eb) - 1), m = x & ((1 << mb) - 1);
  const float s = (x & 0x80) ? -1.0f : 1.0f;
  if (eb == 4 && (x & 0x7f) == 0x7f) return NAN;
  if (eb == 5 && e == 31) return m ? NAN : s * INFINITY;
  if (e == 0) return s * std::ldexp((float)m, 1 - bias - mb);
  return s * std::ldexp((float)(m | (1 << mb)), e - bias - mb);
}
static inline unsigned char __nv_cvt_float_to_fp8(float v, __nv_saturation_t, __nv_fp8_interpretation_t k) {
  const int eb = k == __NV_E4M3 ? 4 : 5, mb = 7 - eb, bias = (1 << (eb - 1)) - 1;
  const unsigned char s = std::signbit(v) ? 0x80 : 0, over = eb == 4 ? 0x7f : 0x7c;
  if (std::isnan(v)) return s | 0x7f;
  if (std::isinf(v)) return s | over;
  int ex;
  std::frexp(std::fabs(v), &ex);  // |v| in [2^(ex-1), 2^ex)
  const int q = (ex - 1 > 1 - bias ? ex - 1 : 1 - bias) - mb;  // exponent of the quantum at |v|
  const float r = std::ldexp(std::nearbyint(std::ldexp(std::fabs(v), -q)), q);  // nearest even
  if (r > (eb == 4 ? 448.0f : 57344.0f)) return s | over;
  if (r == 0) return s;
  std::frexp(r, &ex);
  if (ex - 1 < 1 - bias) return s | (unsigned char)std::ldexp(r, bias - 1 + mb);  // subnormal
  return s | (unsigned char)(((ex - 1 + bias) << mb) | ((unsigned)std::ldexp(r, mb - ex + 1) - (1u << mb)));
}
struct __nv_fp8_e4m3 { unsigned char __x; operator float() const { return fp8_value(__x, 4, 3); } };
struct __nv_fp8_e5m2 { unsigned char __x; operator float() const { return fp8_value(__x, 5, 2); } };
"""

_RUN = r"""
extern "C" void run_{name}(void** a, const long long* dims, long long grid, int block) {{
  for (long long b = 0; b < grid; ++b)
    for (int t = 0; t < block; ++t) {{ blockIdx.x = (unsigned)b; threadIdx.x = (unsigned)t; {name}({args}dims); }}
}}
"""


def _abc(g, dt, shape=("n",)):
    return (g.tensor(k, shape, dt) for k in "abc")


def _rows(g, dt):  # (n, 8): a row-layout fused kernel of one thread per row (no shuffles, no barriers)
    return _abc(g, dt, ("n", ROW))


ROW = 8


def _trunc(t):  # read at two places: a value held at two precisions would make this no integer
    return t - t % 1.0


# name -> build(g, dtype) -> output tensor: 16-bit chains whose value jumps with an operand's last bit
CHAINS = {
    "floordiv": lambda g, dt: (lambda a, b, c: a // b)(*_abc(g, dt)),
    "floordiv_of_product": lambda g, dt: (lambda a, b, c: (a * c) // b + a)(*_abc(g, dt)),
    "trunc_of_sum": lambda g, dt: (lambda a, b, c: ((a + b) - (a + b) % 1.0) * c)(*_abc(g, dt)),
    "mod_of_product": lambda g, dt: (lambda a, b, c: (a * b) % c + a)(*_abc(g, dt)),
    "compare_of_sum": lambda g, dt: (lambda a, b, c: ((a + b) < c).cast(dt) * a + b)(*_abc(g, dt)),
    "where_of_products": lambda g, dt: (lambda a, b, c: lm.where(a * b < c, a * c, b - c) + a)(*_abc(g, dt)),
    "cast_to_int": lambda g, dt: (lambda a, b, c: ((a * b) * 7.0).cast(lm.i32))(*_abc(g, dt)),
    "cast_to_f32": lambda g, dt: (lambda a, b, c: (a * b + c).cast(lm.f32) * 3.0)(*_abc(g, dt)),
    "add_mul_cast_int": lambda g, dt: (lambda a, b, c: ((a + b) * c).cast(lm.i32))(*_abc(g, dt)),
    "compare_after_sub": lambda g, dt: (lambda a, b, c: ((a * b - c) < a * b).cast(lm.i32))(*_abc(g, dt)),
    # reductions in the body: the sum's final value is rounded to the dtype (like the reference's)
    # before `%` and `-` read it, and its operands (products) are rounded before it adds them
    "sum_mod_1": lambda g, dt: (lambda a, b, c: (a * b).sum(-1) % 1.0)(*_rows(g, dt)),
    "trunc_of_row_sum": lambda g, dt: _trunc((lambda a, b, c: (a * b + c).sum(-1))(*_rows(g, dt))) * 2.0,
}
ROW_CHAINS = frozenset({"sum_mod_1", "trunc_of_row_sum"})
FP8_CHAINS = ("add_mul_cast_int", "cast_to_f32", "compare_after_sub", "trunc_of_sum", "mod_of_product")


def _plan(g: lm.Graph):
    _, (llir,), _ = compile_plans(g, CpuCudaBackend(), CompileOptions(cache=False, search_budget=1))
    return llir


class _OnCpu:
    """A KernelFused whose `reference` runs its rendered CUDA C (compiled by g++) instead."""

    def __init__(self, op: KernelFused, kernel, so):
        self.op, self.kernel, self.fn = op, kernel, getattr(so, f"run_{kernel.launches[0].name}")

    def __getattr__(self, name):
        return getattr(self.op, name)

    def reference(self, ins, in_dtypes, env):
        n_out = int(self.op.out_size().evaluate(env))
        odt = self.op.out_dtype(in_dtypes).np
        raw = np.zeros(n_out * odt.itemsize + 64, np.uint8)  # 16-byte aligned view for vector stores
        off = (-raw.ctypes.data) % 16
        out = raw[off : off + n_out * odt.itemsize].view(odt)
        bufs = [out]
        for x in ins:
            x = np.ascontiguousarray(x)
            a = np.zeros(x.nbytes + 64, np.uint8)
            o = (-a.ctypes.data) % 16
            a[o : o + x.nbytes] = x.view(np.uint8).ravel()
            bufs.append(a[o : o + x.nbytes].view(x.dtype))
        ptrs = (ctypes.c_void_p * len(bufs))(*(b.ctypes.data for b in bufs))
        dims = np.array([env.get(k, 0) for k in sorted(SLOTS, key=SLOTS.get)], np.int64)
        (ln,) = self.kernel.launches
        self.fn(ptrs, ctypes.c_void_p(dims.ctypes.data), ctypes.c_longlong(int(ln.grid.evaluate(env))), ln.block)
        return out.copy()


def _compile(kernels: dict, tmp_path) -> ctypes.CDLL:
    runs = ""
    for op, k in kernels.items():
        params = [op.out_dtype(op.in_dtypes()), *op.in_dtypes()]
        args = "".join(f"({'' if j == 0 else 'const '}{d.cuda}*)a[{j}], " for j, d in enumerate(params))
        runs += _RUN.format(name=k.launches[0].name, args=args)
    src, lib = tmp_path / "fused.cpp", tmp_path / "fused.so"
    src.write_text(_SHIM + PRELUDE + FP8_PRELUDE + "".join(dict.fromkeys(k.code for k in kernels.values())) + runs)
    done = subprocess.run(["g++", "-std=c++20", "-O1", "-ffp-contract=off", "-shared", "-fPIC", "-w", "-o", str(lib),
                           str(src)], capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return ctypes.CDLL(str(lib))


def _feed(dt, n: int, seed: int, row: bool = False) -> dict[str, np.ndarray]:
    """Values spread over many binades (quotients up to ~2^12), some on a 1/4 grid (ties, whole
    numbers), a few zeros: every rounding boundary of the chains gets hit. fp8: fewer binades (some
    products still overflow to NaN / inf, on both sides). Rows (n, 8): multiples of 1/16 below 8 in
    magnitude, so every product has more bits than the dtype (its rounding matters) and every sum
    of rounded products is exact in f32, whatever its order (the kernel's f32 sum then rounds once,
    like the reference's f64 one)."""
    rng = np.random.default_rng(seed)
    out = {}
    for k in "abc":
        if row:
            out[k] = (np.round(rng.uniform(-8, 8, (n, ROW)) * 16) / 16).astype(dt.np)
            continue
        x = rng.uniform(-4, 4, n) * 2.0 ** rng.integers(-3, 4 if dt.bits == 8 else 7, n)
        x = np.where(rng.random(n) < 0.3, np.round(x * 4) / 4, x)
        x = np.where(rng.random(n) < 0.03, 0.0, x)
        out[k] = x.astype(dt.np)
    return out


CASES = [(name, dt) for name in CHAINS for dt in (lm.bf16, lm.f16)]
CASES += [(name, dt) for name in FP8_CHAINS for dt in (lm.f8e4m3, lm.f8e5m2)]


def _build(name: str, dt) -> lm.Graph:
    g = lm.Graph()
    CHAINS[name](g, dt).output("y")
    return g


def _compare(name: str, dt, run, ref, n: int, seed: int) -> None:
    feed = _feed(dt, n, seed, name in ROW_CHAINS)
    want = ref.run(feed)["y"]
    got = np.asarray(run(feed, {"n": n})["y"]).reshape(want.shape)
    w64, g64 = want.astype(np.float64).reshape(-1), got.astype(np.float64).reshape(-1)
    bad = ~((w64 == g64) | (np.isnan(w64) & np.isnan(g64)))
    if bad.any():
        k = int(np.nonzero(bad)[0][0])
        r = k if name not in ROW_CHAINS else (k, slice(None))
        raise AssertionError(
            f"{name} {dt} n={n}: {int(bad.sum())}/{bad.size} elements differ from the reference; first at {k}: "
            f"got {g64[k]!r}, want {w64[k]!r} for " + ", ".join(f"{a}={feed[a][r]!r}" for a in "abc")
        )


SIZES = ((1, 0), (13, 1), (3000, 2))  # scalar tail, vector body + tail, several blocks


@needs_gxx
@pytest.mark.parametrize(("name", "dt"), CASES, ids=[f"{n}-{d.value}" for n, d in CASES])
def test_fused_chain_runs_bit_exact_on_cpu(name, dt, tmp_path, no_cache):
    g = _build(name, dt)
    llir = _plan(g)
    fused = list(dict.fromkeys(n.op for n in llir.nodes if isinstance(n.op, KernelFused)))
    assert fused, f"{name}: the preferred plan has no fused kernel: {[type(n.op).__name__ for n in llir.nodes]}"
    if name in ROW_CHAINS:  # the reduction is computed inside the fused kernel
        assert any(isinstance(nd.op, KernelSumReduce) for op in fused for nd in op.nodes()), fused
    kernels = {op: op.render(SLOTS) for op in fused}
    so = _compile(kernels, tmp_path)
    nodes = [SimpleNamespace(op=_OnCpu(nd.op, kernels[nd.op], so), inputs=nd.inputs, dtype=nd.dtype)
             if isinstance(nd.op, KernelFused) else nd for nd in llir.nodes]  # fmt: skip
    assert all(isinstance(nd.op, (KernelOp, _OnCpu)) or type(nd.op).__name__ in ("Input", "Output") for nd in nodes)
    ref = g.compile("reference", cache=False)
    run = ReferenceExecutor(nodes, llir.outputs).run
    for n, seed in SIZES:
        _compare(name, dt, run, ref, n, seed)


@pytest.mark.cuda
@pytest.mark.parametrize(("name", "dt"), CASES, ids=[f"{n}-{d.value}" for n, d in CASES])
def test_fused_chain_bit_exact_on_the_gpu(name, dt):
    """The preferred plan (the chain fused) and the plan search picks, on the device: bit for bit
    the reference (the chains use + * % < and casts only, which CUDA rounds exactly like numpy)."""
    from luminal.backends.cuda.backend import CudaBackend

    g = _build(name, dt)
    backend = CudaBackend()
    _, (llir,), _ = compile_plans(g, backend, CompileOptions(cache=False, search_budget=1))
    assert any(isinstance(nd.op, KernelFused) for nd in llir.nodes), llir.op_counts()
    searched = g.compile("cuda", cache=False, search_budget=4)  # a few timed candidates: GPU time is scarce
    ref = g.compile("reference", cache=False)
    for n, seed in SIZES:
        _compare(name, dt, backend.load(llir).run, ref, n, seed)
        _compare(name, dt, lambda f, env: searched.run(f), ref, n, seed)


# -- GEMV epilogues (KernelGemvFused): the dot products rounded where the unfused GEMV stores them ---------
K, N = 64, 96


def _lin(g, x, name: str):
    return x @ g.tensor(name, (N, K), x.dtype).persist().T


def _gemv_residual(g, x):  # h + x @ W.T: the residual add reads the dot product
    return g.tensor("h", ("s", N), x.dtype) + _lin(g, x, "W")


def _gemv_gated_cast(g, x):  # act(gate) * up with casts in act: an integer step, then the gating product
    return (_lin(g, x, "Wg") * 3.0).cast(lm.i32).cast(x.dtype) * _lin(g, x, "Wu")


GEMV_EPILOGUES = {"residual": _gemv_residual, "gated_cast": _gemv_gated_cast}


def _gemv_graph(name: str, dt) -> lm.Graph:
    g = lm.Graph()
    GEMV_EPILOGUES[name](g, g.tensor("x", ("s", K), dt)).output("y")
    return g


def _gemv_feed(g: lm.Graph, seed: int) -> dict[str, np.ndarray]:
    """x and the weights whole numbers in [-15, 15]: every product and every partial sum of a dot
    product is exact in f32, so the dot products are exact in any order (the kernel's and the
    reference's), with up to 14 significant bits: their rounding to bf16 shows. h in (-2, 2)."""
    rng = np.random.default_rng(seed)
    out = {}
    for n, sh in g.input_shapes.items():
        shape = tuple(int(d.evaluate({"s": 1})) for d in sh)
        x = rng.uniform(-2, 2, shape) if n == "h" else rng.integers(-15, 16, shape).astype(np.float64)
        out[n] = x.astype(g.nodes[g.inputs[n]].dtype.np)
    return out


@needs_gxx
@pytest.mark.parametrize("name", sorted(GEMV_EPILOGUES))
def test_gemv_epilogue_bit_exact_on_cpu(name, tmp_path, monkeypatch, dt=lm.bf16):
    """The fused decode GEMV's C (one std::thread per CUDA thread, tests/backends/cuda/test_gemv.py's
    shim) equals the reference bit for bit: its epilogue rounds each dot product to bf16 before the
    add / the gating product reads it, and every epilogue op after that, as the unfused plan does."""
    from luminal.backends.cuda.kernels import gemv
    from luminal.backends.cuda.kernels.gemvfused import KernelGemvFused
    from tests.backends.cuda import test_gemvfused as tg
    from tests.backends.cuda.test_gemv import _SHIM as THREADS_SHIM

    monkeypatch.setattr(gemv, "SMS", 1)  # at most 4 blocks: few threads to start
    g = _gemv_graph(name, dt)
    llir = tg._preferred(g)
    ops = list(dict.fromkeys(n.op for n in llir.nodes if isinstance(n.op, KernelGemvFused)))
    assert len(ops) == 1 and ops[0].epi, llir.op_counts()
    kernels = {op: op.render(tg.SLOTS) for op in ops}
    runs = ""
    for op, k in kernels.items():
        params = [op.out_dtype((op.dtype,) * op.base + op.leaf_dtypes()), *(op.dtype,) * op.base, *op.leaf_dtypes()]
        args = "".join(f"({'' if j == 0 else 'const '}{tg._CTYPE[d]}*)a[{j}], " for j, d in enumerate(params))
        runs += tg._RUN.format(name=k.launches[0].name, args=args)
    src, lib = tmp_path / "gemvfused.cpp", tmp_path / "gemvfused.so"
    src.write_text(THREADS_SHIM + PRELUDE + "".join(dict.fromkeys(k.code for k in kernels.values())) + runs)
    done = subprocess.run(["g++", "-std=c++20", "-O1", "-ffp-contract=off", "-shared", "-fPIC", "-pthread", "-w",
                           "-o", str(lib), str(src)], capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    so = ctypes.CDLL(str(lib))
    nodes = [SimpleNamespace(op=tg._OnCpu(n.op, kernels[n.op], so), inputs=n.inputs, dtype=n.dtype)
             if isinstance(n.op, KernelGemvFused) else n for n in llir.nodes]  # fmt: skip
    ref = g.compile("reference", cache=False)
    for seed in (1, 2):
        feed = _gemv_feed(g, seed)
        want = ref.run(feed)["y"]
        got = np.asarray(ReferenceExecutor(nodes, llir.outputs).run(feed, {"s": 1})["y"]).reshape(want.shape)
        bad = want.astype(np.float64) != got.astype(np.float64)
        assert not bad.any(), f"{name}: {int(bad.sum())}/{bad.size} differ: got {got[bad][:4]}, want {want[bad][:4]}"
        # the model the runtime's CPU tests use (KernelGemvFused.reference) rounds at the same places
        model = np.asarray(CpuCudaBackend().load(llir).run(feed, {"s": 1})["y"]).reshape(want.shape)
        assert (model.astype(np.float64) == want.astype(np.float64)).all(), name


@pytest.mark.cuda
@pytest.mark.parametrize("name", sorted(GEMV_EPILOGUES))
def test_gemv_epilogue_bit_exact_on_the_gpu(name):
    from luminal.backends.cuda.backend import CudaBackend
    from tests.backends.cuda import test_gemvfused as tg

    g = _gemv_graph(name, lm.bf16)
    backend = CudaBackend()
    llir = tg._preferred(g, backend)
    ref = g.compile("reference", cache=False)
    for seed in (1, 2):
        feed = _gemv_feed(g, seed)
        want = ref.run(feed)["y"]
        got = np.asarray(backend.load(llir).run(feed, {"s": 1})["y"]).reshape(want.shape)
        assert (got.astype(np.float64) == want.astype(np.float64)).all(), (name, got, want)
