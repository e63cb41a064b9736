"""The fused elementwise kernels' CUDA C, compiled by g++ and run on the CPU, against the reference
backend bit for bit (no GPU needed).

Each chain of 16-bit ops below is compiled for the CUDA backend (its preferred plan: the chain in
one `KernelFused`), every fused kernel's rendered C runs under a small shim (one CUDA thread after
another; the elementwise layout has no barriers or shuffles), and the other kernels run by their
reference semantics (`CpuCudaBackend`). The chains are made of ops whose results jump with the
last bit of an operand (`//`, `%`, `<`, `where`, casts): there a fused kernel that holds a 16-bit
value in f32 where the reference rounds it gives a different number, not a slightly different one.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from types import SimpleNamespace

import numpy as np
import pytest

import luminal as lm
from luminal.backends.cuda.kernel import PRELUDE, KernelOp
from luminal.backends.cuda.kernels import KernelFused
from luminal.backends.reference.executor import ReferenceExecutor
from luminal.egraph.compile import CompileOptions, compile_plans
from tests.backends.cuda.test_lowering import CpuCudaBackend

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to run the CUDA C on the CPU")

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
"""

_RUN = r"""
extern "C" void run_{name}(void** a, const long long* dims, long long grid, int block) {{
  for (long long b = 0; b < grid; ++b)
    for (int t = 0; t < block; ++t) {{ blockIdx.x = (unsigned)b; threadIdx.x = (unsigned)t; {name}({args}dims); }}
}}
"""


def _abc(g, dt):
    return (g.tensor(k, ("n",), dt) for k in "abc")


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
}

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
    src.write_text(_SHIM + PRELUDE + "".join(dict.fromkeys(k.code for k in kernels.values())) + runs)
    done = subprocess.run(["g++", "-std=c++20", "-O1", "-ffp-contract=off", "-shared", "-fPIC", "-w", "-o", str(lib),
                           str(src)], capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return ctypes.CDLL(str(lib))


def _feed(dt, n: int, seed: int) -> dict[str, np.ndarray]:
    """Values spread over many binades (quotients up to ~2^12), some on a 1/4 grid (ties, whole
    numbers), a few zeros: every rounding boundary of the chains gets hit."""
    rng = np.random.default_rng(seed)
    out = {}
    for k in "abc":
        x = rng.uniform(-4, 4, n) * 2.0 ** rng.integers(-3, 7, n)
        x = np.where(rng.random(n) < 0.3, np.round(x * 4) / 4, x)
        x = np.where(rng.random(n) < 0.03, 0.0, x)
        out[k] = x.astype(dt.np)
    return out


CASES = [(name, dt) for name in CHAINS for dt in (lm.bf16, lm.f16)]


@pytest.mark.parametrize(("name", "dt"), CASES, ids=[f"{n}-{d.value}" for n, d in CASES])
def test_fused_chain_runs_bit_exact_on_cpu(name, dt, tmp_path, no_cache):
    g = lm.Graph()
    CHAINS[name](g, dt).output("y")
    llir = _plan(g)
    fused = list(dict.fromkeys(n.op for n in llir.nodes if isinstance(n.op, KernelFused)))
    assert fused, f"{name}: the preferred plan has no fused kernel: {[type(n.op).__name__ for n in llir.nodes]}"
    kernels = {op: op.render(SLOTS) for op in fused}
    so = _compile(kernels, tmp_path)
    nodes = [SimpleNamespace(op=_OnCpu(nd.op, kernels[nd.op], so), inputs=nd.inputs, dtype=nd.dtype)
             if isinstance(nd.op, KernelFused) else nd for nd in llir.nodes]  # fmt: skip
    assert all(isinstance(nd.op, (KernelOp, _OnCpu)) or type(nd.op).__name__ in ("Input", "Output") for nd in nodes)
    ref = g.compile("reference", cache=False)
    run = ReferenceExecutor(nodes, llir.outputs).run
    for n, seed in ((1, 0), (13, 1), (3000, 2)):  # scalar tail, vector body + tail, several blocks
        feed = _feed(dt, n, seed)
        want = ref.run(feed)["y"]
        got = np.asarray(run(feed, {"n": n})["y"]).reshape(want.shape)
        w64, g64 = want.astype(np.float64), got.astype(np.float64)
        bad = ~((w64 == g64) | (np.isnan(w64) & np.isnan(g64)))
        if bad.any():
            k = int(np.nonzero(bad)[0][0])
            raise AssertionError(
                f"{name} {dt} n={n}: {int(bad.sum())}/{n} elements differ from the reference; first at {k}: "
                f"got {got[k]!r}, want {want[k]!r} for " + ", ".join(f"{a}={feed[a][k]!r}" for a in "abc")
            )
