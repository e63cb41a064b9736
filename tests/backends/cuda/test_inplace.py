"""The in-place KV-cache writes (kernels/inplace.py): KernelScatterFused -- the rotary embedding of k
(with qwen3's k-norm, a row reduction) or v read from the stacked q/k/v GEMV, computed by the launch
that writes the cache -- and KernelScatterPair (both of a layer's writes in one launch, at decode)
compile for sm_90, and their rendered CUDA C (run on the CPU by g++, one std::thread per CUDA
thread: tests/backends/cuda/test_gemv.py's shim) computes what their reference computes, in both
launch shapes (one block, or three grid-wide launches) and at decode and prefill sizes."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

import luminal as lm
from luminal.backends.cuda import nvrtc
from luminal.backends.cuda.kernel import PRELUDE, source
from luminal.backends.cuda.kernels.inplace import KernelScatterFused, KernelScatterPair
from luminal.backends.reference.executor import ReferenceExecutor
from luminal.models.common import random_weights
from tests.backends.cuda.test_gemv import _SHIM
from tests.backends.cuda.test_gemvfused import _preferred
from tests.backends.cuda.test_launches import CAP, step
from tests.helpers import assert_matches

SLOTS = {"p": 0, "r": 1, "s": 2, "!error": 3}
_CTYPE = {lm.f32: "float", lm.bf16: "__nv_bfloat16", lm.i32: "int"}
_EXTRA = r"""
#include <atomic>
#include <memory>
static inline unsigned atomicMax(unsigned* p, unsigned v) {
  std::atomic_ref<unsigned> a(*p); unsigned o = a.load();
  while (o < v && !a.compare_exchange_weak(o, v)) {}
  return o;
}
"""
_RUN = r"""
extern "C" void run_{name}(void** a, const long long* dims, unsigned* win, int grid, int block) {{
  std::barrier<> bar(block); block_bar = &bar;
  std::vector<std::unique_ptr<std::barrier<>>> warps;  // the shim's warp shuffles
  for (int w = 0; w < block / 32; ++w) warp_bar[w] = warps.emplace_back(new std::barrier<>(32)).get();
  gridDim.x = grid;  // the shim's one gridDim, shared by the threads
  std::vector<std::thread> ts;
  for (int t = 0; t < block; ++t)
    ts.emplace_back([=, &bar] {{
      threadIdx.x = t;
      for (int b = 0; b < grid; ++b) {{ blockIdx.x = b; {name}({args}dims{win}); bar.arrive_and_wait(); }}
    }});
  for (auto& t : ts) t.join();
}}
"""


def compile_on_cpu(kernels: dict, params, tmp_path) -> ctypes.CDLL:
    """g++-compiled `kernels` ({op: Kernel}); `params(op)`: the dtypes of out, in0, in1, .."""
    runs = ""
    for op, k in kernels.items():
        mut = {0, *(k + 1 for k in op.also_writes())}  # out, and inputs written in place (KernelScatterPair's v)
        args = "".join(f"({'' if j in mut else 'const '}{_CTYPE[d]}*)a[{j}], " for j, d in enumerate(params(op)))
        win = ", win" if op.inplace else ""
        runs += "".join(_RUN.format(name=ln.name, args=args, win=win) for ln in k.launches)
    src, lib = tmp_path / "kernels.cpp", tmp_path / "kernels.so"
    src.write_text(_SHIM + _EXTRA + PRELUDE + "".join(dict.fromkeys(k.code for k in kernels.values())) + runs)
    done = subprocess.run(["g++", "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", "-w", "-o", str(lib), str(src)],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return ctypes.CDLL(str(lib))


class OnCpu:
    """A kernel op whose `reference` runs its rendered CUDA C (g++): an in-place op on a copy of the
    buffer it updates (input 0, also its output; the buffers of `also_writes` in place, as the
    executor gives them), any other into a fresh output."""

    def __init__(self, op, kernel, so):
        self.op, self.kernel, self.so = op, kernel, so

    def __getattr__(self, name):
        return getattr(self.op, name)

    def reference(self, ins, in_dtypes, env):
        ins = [np.ascontiguousarray(x) for x in ins]
        if self.op.inplace:
            out = ins[0].reshape(-1).copy()
            bufs = [out, out, *ins[1:]]
        else:
            out = np.full(int(self.op.out_size().evaluate(env)) + 1, 7, self.op.out_dtype(in_dtypes).np)
            bufs = [out, *ins]
        ptrs = (ctypes.c_void_p * len(bufs))(*(b.ctypes.data for b in bufs))
        dims = np.zeros(len(SLOTS) + 1, np.int64)
        dims[: len(SLOTS)] = [env.get(k, 0) for k in sorted(SLOTS, key=SLOTS.get)]
        win = np.zeros(out.size, np.uint32)
        for ln in self.kernel.launches:
            fn = getattr(self.so, f"run_{ln.name}")
            fn(ptrs, ctypes.c_void_p(dims.ctypes.data), ctypes.c_void_p(win.ctypes.data),
               max(1, int(ln.grid.evaluate(env))), ln.block)  # fmt: skip
        self.error = int(dims[SLOTS["!error"]])  # a gather's out-of-range report
        if self.op.inplace:
            return out
        assert out[-1] == 7, "the kernel wrote past its output"
        return out[:-1]


def plans(name: str):
    """(model, {bucket: plan}) for the small bf16 one-layer step: decode (s = 1) and prefill."""
    model = step(name, 1, small=True)
    buckets = {1: {"s": (1, 1), "r": (1, 1), "p": (0, CAP - 1)}, 5: {"s": (2, CAP), "r": (1, CAP), "p": (0, CAP - 2)}}
    return model, {s: _preferred(model.graph, None, b) for s, b in buckets.items()}


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ (C++20) to run the CUDA C on the CPU")
@pytest.mark.parametrize("name", ["llama", "qwen3", "gemma3"])
def test_fused_cache_writes_run_on_cpu(name, tmp_path):
    model, steps = plans(name)
    ops = {n.op for p in steps.values() for n in p.nodes if isinstance(n.op, KernelScatterFused)}
    pairs = {n.op for n in steps[1].nodes if isinstance(n.op, KernelScatterPair)}
    assert len(ops) == 2 and len(pairs) == 1, steps[1].op_counts()  # k and v at prefill; one pair at decode
    shapes = {op: [replace(op, wide=w) for w in (False, True)] for op in ops}  # both launch shapes
    shapes |= {op: [op, op] for op in pairs}  # (one block only)
    kernels = {v: v.render(SLOTS) for vs in shapes.values() for v in vs}
    assert nvrtc.compile_cubin(source(list(kernels.values())), arch="sm_90")[:4] == b"\x7fELF"
    so = compile_on_cpu(kernels, lambda op: [op.dtype] * (2 + len(op.also_writes())) + [*op.leaf_dtypes()], tmp_path)
    rng = np.random.default_rng(0)
    weights = {**random_weights(model.weight_shapes(), seed=2, std=0.05), **model.extra_inputs()}
    caches = {n: rng.uniform(-1, 1, sh).astype(lm.bf16.np) for n, sh in model.cache_shapes.items()}
    for s, llir in steps.items():
        p = 11
        feed = {"tokens": rng.integers(0, 256, s).astype(np.int32), "rows": np.array([s - 1], np.int32),
                **weights, **caches}  # fmt: skip
        env = {"p": p, "s": s, "r": 1}
        want = ReferenceExecutor(llir.nodes, llir.outputs).run(dict(feed), env)
        for wide in (False, True):
            nodes = [SimpleNamespace(op=OnCpu(n.op, kernels[shapes[n.op][wide]], so), inputs=n.inputs,
                                     dtype=n.dtype) if n.op in shapes else n
                     for n in llir.nodes]  # fmt: skip
            got = ReferenceExecutor(nodes, llir.outputs).run(dict(feed), env)
            for label, shape in model.cache_shapes.items():
                g, w = np.asarray(got[label]).reshape(shape), np.asarray(want[label]).reshape(shape)
                what = f"{name} s={s} wide={wide} {label}"
                np.testing.assert_array_equal(g[:, :p], caches[label][:, :p], err_msg=what)
                np.testing.assert_array_equal(g[:, p + s :], caches[label][:, p + s :], err_msg=what)
                assert_matches(g[:, p : p + s], w[:, p : p + s], lm.bf16, 1.0, what)
                assert not np.array_equal(g[:, p : p + s], caches[label][:, p : p + s]), what
