"""Programmatic dependent launch (PDL) in the step's CUDA graph.

Kernel side (kernel.py `with_pdl`, gemv.py): every __global__ entry calls PDL_SYNC
(griddepcontrol.wait, then griddepcontrol.launch_dependents) exactly once, as its first statement;
the GEMV after its L2 prefetch, having read only dims and weight addresses. Checked on the rendered
code of real llama decode and prefill plans and on the PTX NVRTC makes of them (sm_90: one wait
then one launch_dependents per entry; below sm_90: none).
Graph side (driver.py `Graph`, LUMINAL_PDL): kernel -> kernel edges programmatic, every edge that
touches a child graph (a captured cuBLASLt call) full; off = every edge full. Checked on the real
`driver.Graph` with its driver calls recorded, and on the graphs the runtime builds over the fake
driver. GPU (`cuda`): a 2-layer llama bf16 Decoder gives bit-identical logits with PDL on and off.
"""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest

from luminal.backends.cuda import driver, nvrtc, runtime
from luminal.backends.cuda.kernel import ERROR_SLOT, PDL_SYNC, Kernel, KernelOp, entry_bodies, source, with_pdl
from luminal.backends.cuda.kernels.gemv import KernelGemv
from luminal.backends.cuda.kernels.gemvfused import KernelGemvFused
from tests.backends.cuda import fake_driver
from tests.backends.cuda.test_gemvfused import _preferred
from tests.backends.cuda.test_launches import BOUNDS, _feed, step

PREFILL = {"s": (2, 16), "r": (1, 16), "p": (0, 239)}  # the prefill bucket: cuBLASLt host ops
_GEMVS = (KernelGemv, KernelGemvFused)
# what a GEMV may touch before its sync: kernel parameters (pointer arithmetic) and the dims words
_PRE_SYNC_MEMORY = re.compile(r"\b(?:in\d+|out|scratch|xs|part)\s*\[|\*\s*(?:in\d+|out)\b|\bxs\b|\bpart\b")


def entries(code: str) -> list[tuple[str, str]]:
    """(entry name, body between its braces) of every __global__ entry of `code`."""
    heads = [0] + [close + 1 for _, close in entry_bodies(code)]
    return [(re.findall(r"(\w+)\s*\(", code[head:open_])[-1], code[open_ + 1 : close])
            for head, (open_, close) in zip(heads, entry_bodies(code), strict=False)]  # fmt: skip


def check_syncs(kern: Kernel, gemv: bool = False) -> None:
    """Every entry of `kern` calls PDL_SYNC once: first (a GEMV: after dims reads and its prefetch)."""
    for name, body in entries(kern.code):
        assert body.count(PDL_SYNC) == 1, f"{name}: {body.count(PDL_SYNC)} PDL syncs"
        pre = body[: body.index(PDL_SYNC)]
        if not gemv:
            assert pre.strip() == "", f"{name} runs before its PDL sync:\n{pre}"
            continue
        pre = re.sub(r"//[^\n]*", "", pre)
        pre = re.sub(r"\w+_prefetch\((?:[^;])*\);", "", pre)  # the L2 prefetch of weights: no data read
        bad = _PRE_SYNC_MEMORY.search(pre)
        assert bad is None, f"{name} touches buffers before its PDL sync ({bad.group(0)!r}):\n{pre}"


def _slots(llir) -> dict[str, int]:
    names: set[str] = set()
    for n in llir.nodes:
        if isinstance(n.op, KernelOp):
            names |= n.op.dim_names() | n.op.out_size().dims() | n.op.scratch_bytes().dims()
    slots = {d: i for i, d in enumerate(sorted(names))}
    return {**slots, ERROR_SLOT: len(slots)}


@pytest.fixture(scope="module")
def plans():
    """The preferred 1-layer llama bf16 decode and prefill plans (scaled-down shapes, same structure)."""
    g = step("llama", 1, small=True).graph
    return {"decode": _preferred(g, None, BOUNDS), "prefill": _preferred(g, None, PREFILL)}


def _rendered(llir) -> list[tuple[KernelOp, Kernel]]:
    slots = _slots(llir)
    return [(n.op, n.op.render(slots)) for n in llir.nodes if isinstance(n.op, KernelOp)]


# -- kernel side --------------------------------------------------------------------------------------
def test_with_pdl_inserts_one_sync_first_and_keeps_a_placed_one():
    code = (
        '__device__ __forceinline__ unsigned KNAME_ld(const unsigned* p) {\n  unsigned r;\n'
        '  asm("ld.global.u32 {%0}, [%1];" : "=r"(r) : "l"(p));  // braces in a string: "}"\n  return r;\n}\n'
        'extern "C" __global__ void __launch_bounds__(256, 4) KNAME_a(float* __restrict__ out, '
        "const long long* __restrict__ dims) {\n  if (threadIdx.x) { return; }\n  /* } */ out[0] = 1.0f;\n}\n"
        'extern "C" __global__ void KNAME_b(float* out, const long long* dims) {\n'
        f"  const long long n = dims[0];\n  {PDL_SYNC}\n  out[0] = n;\n}}\n"
    )  # fmt: skip
    got = with_pdl(code)
    assert with_pdl(got) == got  # idempotent: `source` may see code `name_code` already gave it
    (a, body_a), (b, body_b) = entries(got)
    assert (a, b) == ("KNAME_a", "KNAME_b")
    assert body_a.startswith(f"\n  {PDL_SYNC}\n  if (threadIdx.x)") and body_a.count(PDL_SYNC) == 1
    assert body_b.count(PDL_SYNC) == 1 and body_b.index("dims[0]") < body_b.index(PDL_SYNC)  # placed: kept
    assert got.count(PDL_SYNC) == 2 and "KNAME_ld" in got.split(PDL_SYNC)[0]  # device functions untouched


@pytest.mark.parametrize("plan", ["decode", "prefill"])
def test_every_entry_of_a_llama_plan_syncs_before_touching_memory(plans, plan):
    rendered = _rendered(plans[plan])
    kinds = {type(op).__name__ for op, _ in rendered}
    writes = "KernelScatterPair" if plan == "decode" else "KernelScatterFused"  # (one launch for k and v)
    assert {"KernelAttentionRope", writes, "KernelGatherFused", "KernelFused"} <= kinds, kinds
    for op, kern in rendered:
        check_syncs(kern, gemv=isinstance(op, _GEMVS))
    prefetching = [k for op, k in rendered if isinstance(op, _GEMVS) and "_prefetch(" in k.code]
    assert plan == "prefill" or len(prefetching) >= 4  # the looped decode GEMVs prefetch their first tile


def _ptx(src: str, arch: str) -> str:
    from cuda.bindings import nvrtc as nv

    opts = [f"--gpu-architecture={arch}", f"-std={nvrtc.STD}", *(f"-I{d}" for d in nvrtc.include_dirs())]
    _, prog = nv.nvrtcCreateProgram(src.encode(), b"pdl.cu", 0, [], [])
    try:
        err = nv.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])[0]
        assert err == nv.nvrtcResult.NVRTC_SUCCESS, "NVRTC failed"
        _, size = nv.nvrtcGetPTXSize(prog)
        buf = b" " * size
        nv.nvrtcGetPTX(prog, buf)
    finally:
        nv.nvrtcDestroyProgram(prog)
    return buf.rstrip(b"\0 ").decode()


def test_the_ptx_of_a_decode_plan_waits_once_per_entry_on_sm90_only(plans, no_cache):
    kernels = [k for _, k in _rendered(plans["decode"])]
    src = source(kernels)
    ptx = _ptx(src, "compute_90")
    bodies = re.split(r"\.visible \.entry ", ptx)[1:]
    assert len(bodies) == src.count("__global__") == len({ln.name for k in kernels for ln in k.launches})
    for body in bodies:
        name = body.split("(", 1)[0]
        assert body.count("griddepcontrol.wait") == 1 and body.count("griddepcontrol.launch_dependents") == 1, name
        assert body.index("griddepcontrol.wait") < body.index("griddepcontrol.launch_dependents"), name
        if name.startswith("gemv"):  # the GEMV's weight prefetch overlaps the previous kernel
            assert "cp.async.bulk.prefetch.L2" in body, name
            assert body.index("cp.async.bulk.prefetch.L2") < body.index("griddepcontrol.wait"), name
    assert "griddepcontrol" not in _ptx(src, "compute_80")  # no such instruction there: PDL stays off
    assert nvrtc.compile_cubin(src, arch="sm_90")[:4] == b"\x7fELF"


# -- graph side ---------------------------------------------------------------------------------------
class _Recorder:
    """driver.call stand-in: records (name, args) and hands out node handles."""

    def __init__(self):
        self.calls: list[tuple[str, tuple]] = []
        self.n = 0

    def __call__(self, name, *args):
        self.calls.append((name, args))
        if name in ("cuGraphCreate", "cuGraphAddKernelNode", "cuGraphAddChildGraphNode", "cuGraphInstantiate"):
            self.n += 1
            return f"{name}#{self.n}"
        return None


@pytest.mark.parametrize("pdl", [True, False])
def test_driver_graph_makes_kernel_edges_programmatic_and_host_edges_full(monkeypatch, pdl):
    rec = _Recorder()
    monkeypatch.setattr(driver, "call", rec)
    drv = driver._drv()
    g = driver.Graph(pdl=pdl)
    for kind in ("k", "k", "h", "k", "h", "h", "k", "k"):
        g.add_kernel(f"params{len(g.nodes)}") if kind == "k" else g.add_child(f"child{len(g.nodes)}")
    expect = [driver.edge_kind(a, b, pdl) for a, b in zip(g.kinds, g.kinds[1:], strict=False)]
    assert [e[2] for e in g.edges] == expect and [(a, b) for a, b, _ in g.edges] == [(i, i + 1) for i in range(7)]
    assert expect.count(driver.PROGRAMMATIC) == (2 if pdl else 0)  # nodes 0->1 and 6->7
    deps = [c for c in rec.calls if c[0] == "cuGraphAddDependencies"]
    assert len(deps) == expect.count(driver.PROGRAMMATIC)
    for (_, (handle, frm, to, data, count)), (a, b, _) in zip(deps, [e for e in g.edges if e[2] != driver.FULL],
                                                              strict=True):  # fmt: skip
        assert (handle, frm, to, count) == (g.handle, [g.nodes[a]], [g.nodes[b]], 1)
        (e,) = data
        assert e.type == drv.CUgraphDependencyType.CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC
        assert (e.from_port, e.to_port) == (drv.CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC, 0)
    adds = [c for c in rec.calls if c[0] in ("cuGraphAddKernelNode", "cuGraphAddChildGraphNode")]
    for k, (_, (_, dep, ndep, _)) in enumerate(adds):  # full edges as dependencies, programmatic ones after
        full = k > 0 and driver.edge_kind(g.kinds[k - 1], g.kinds[k], pdl) == driver.FULL
        assert (dep, ndep) == (([g.nodes[k - 1]], 1) if full else ([], 0))
    assert sum(c == ("cuGraphDestroy", (f"child{k}",)) for c in rec.calls for k in range(8)) == 3


@pytest.mark.parametrize("refused", ["cuGraphAddDependencies", "cuGraphInstantiate"])
def test_a_driver_that_refuses_programmatic_edges_gets_full_ones(monkeypatch, caplog, refused):
    """Adding a programmatic edge or instantiating a graph with them fails: the graph falls back to full
    edges (logged once) and later graphs do not ask again."""
    from luminal.errors import BackendError

    rec = _Recorder()

    def refusing(name, *args):
        programmatic = name == "cuGraphAddDependencies" and args[3] is not None
        if name == refused and (programmatic or name == "cuGraphInstantiate") and not rec.refused:
            rec.refused = True
            raise BackendError(f"CUDA driver call {name} failed: CUDA_ERROR_NOT_SUPPORTED")
        return rec(name, *args)

    rec.refused = False
    monkeypatch.setattr(driver, "call", refusing)
    monkeypatch.setattr(driver, "_PDL_FAILED", [])
    monkeypatch.setattr(driver, "device", lambda: fake_driver.Device(arch="sm_90"))
    monkeypatch.setenv("LUMINAL_PDL", "1")
    g = driver.Graph()
    for k in range(4):
        g.add_kernel(f"params{k}")
    g.instantiate()
    assert rec.refused and g.exec is not None and [k for *_, k in g.edges] == [driver.FULL] * 3
    added = [c[1] for c in rec.calls if c[0] == "cuGraphAddDependencies"]
    if refused == "cuGraphInstantiate":  # the three programmatic edges were made, then swapped
        removed = [c[1] for c in rec.calls if c[0] == "cuGraphRemoveDependencies"]
        assert len(removed) == 3 and [a[3] is None for a in added] == [False] * 3 + [True] * 3
    else:  # the first edge fell back at once; the rest were full from the start
        assert [a[3] for a in added] == [None] and sum(c[0] == "cuGraphAddKernelNode" and c[1][2] == 1
                                                       for c in rec.calls) == 2  # fmt: skip
    assert not driver.pdl_enabled() and "without programmatic dependent launch" in caplog.text


@pytest.mark.parametrize(("flag", "arch", "want"), [("1", "sm_90", True), ("0", "sm_90", False),
                                                     ("1", "sm_80", False), (None, "sm_100", True)])  # fmt: skip
def test_pdl_needs_the_flag_and_sm90(monkeypatch, flag, arch, want):
    if flag is None:
        monkeypatch.delenv("LUMINAL_PDL", raising=False)
    else:
        monkeypatch.setenv("LUMINAL_PDL", flag)
    monkeypatch.setattr(driver, "device", lambda: fake_driver.Device(arch=arch))
    assert driver.pdl_enabled() is want


@pytest.mark.parametrize("pdl", ["1", "0"])
def test_runtime_graphs_are_programmatic_between_kernels_only(plans, fake, monkeypatch, pdl):
    """The graphs CudaExecutor builds for the decode plan (kernels only) and the prefill plan
    (kernels around cuBLASLt child graphs), over the fake driver."""
    monkeypatch.setenv("LUMINAL_PDL", pdl)
    monkeypatch.setattr(runtime, "capture", fake_driver.capture)
    model = step("llama", 1, small=True)
    feed, dims = _feed(model)
    for name, s in (("decode", 1), ("prefill", 5)):
        ex = runtime.CudaExecutor(plans[name].nodes)
        fake_driver.bind(ex)
        run = {**feed, "tokens": np.arange(1, s + 1, dtype=np.int32), "rows": np.array([s - 1], np.int32)}
        ex.run({k: v.copy() for k, v in run.items()}, {**dims, "s": s})
        g = ex._graph
        assert g.kinds == [driver.KERNEL if st.host is None else driver.HOST for st in ex.steps]
        assert [(a, b) for a, b, _ in g.edges] == [(i, i + 1) for i in range(len(g.nodes) - 1)]  # one chain
        for a, b, kind in g.edges:
            both = g.kinds[a] == g.kinds[b] == driver.KERNEL
            assert kind == (driver.PROGRAMMATIC if both and pdl == "1" else driver.FULL), (a, b, g.kinds[a], g.kinds[b])
        hosts = [i for i, k in enumerate(g.kinds) if k == driver.HOST]
        assert bool(hosts) == (name == "prefill"), g.kinds  # cuBLASLt GEMMs in prefill, GEMVs in decode
        assert all(0 < i < len(g.kinds) - 1 for i in hosts)  # a full edge on each side of every host op
        if name == "decode" and pdl == "1":
            assert all(kind == driver.PROGRAMMATIC for _, _, kind in g.edges) and len(g.edges) >= 10


# -- GPU ----------------------------------------------------------------------------------------------
@pytest.mark.cuda
def test_pdl_on_and_off_give_bit_identical_decode_steps(monkeypatch):
    """A 2-layer llama-3.2-1b-shaped bf16 Decoder (vocab cut to 8192): a 16-token prefill and 32
    teacher-forced decode steps, logits with PDL on, off, and on again, equal bit for bit. A race
    (a kernel reading before the one before it finished) shows as a mismatch; on == on again rules
    out run-to-run noise."""
    from bench.pdl import edge_kinds, rebuild_graphs
    from luminal.models import llama
    from luminal.models.common import random_weights
    from luminal.models.engine import Decoder

    cfg = replace(llama.CONFIGS["llama-3.2-1b"], n_layers=2, vocab_size=8192)
    model = llama.Transformer(cfg, 64, "bf16")
    weights = {**random_weights(model.weight_shapes(), seed=0), **model.extra_inputs()}
    monkeypatch.setenv("LUMINAL_PDL", "1")
    dec = Decoder(model.graph, model.cache_shapes, 64, weights, "cuda", model.extra_inputs(), cfg.vocab_size)
    rng = np.random.default_rng(7)
    prompt, forced = rng.integers(0, cfg.vocab_size, 16).tolist(), rng.integers(0, cfg.vocab_size, 32).tolist()

    def run() -> list[np.ndarray]:
        dec.reset(clear=True)
        out = [np.array(dec.step(prompt), copy=True)]
        out += [np.array(dec.step([t]), copy=True) for t in forced]
        return out

    on = run()
    assert set(edge_kinds(dec)) == {driver.PROGRAMMATIC, driver.FULL}  # decode all programmatic; prefill mixed
    monkeypatch.setenv("LUMINAL_PDL", "0")
    rebuild_graphs(dec)
    off = run()
    assert set(edge_kinds(dec)) == {driver.FULL}
    monkeypatch.setenv("LUMINAL_PDL", "1")
    rebuild_graphs(dec)
    again = run()
    assert np.isfinite(on[-1]).all() and np.abs(on[-1]).max() > 0
    for k, (a, b, c) in enumerate(zip(on, off, again, strict=True)):
        np.testing.assert_array_equal(a, c, err_msg=f"step {k}: PDL on is not reproducible")
        np.testing.assert_array_equal(a, b, err_msg=f"step {k}: PDL on differs from PDL off")


@pytest.mark.cuda
def test_a_pdl_graph_of_dependent_kernels_keeps_their_order(monkeypatch):
    """Many launches of one kernel chained by programmatic edges, each reading what the one before
    wrote (y = x + 1, ping-ponging between two buffers): the result counts every launch. A kernel that
    ran ahead of its predecessor would read a stale value."""
    from luminal.dtype import DType

    monkeypatch.setenv("LUMINAL_PDL", "1")
    dev = driver.device()
    if not driver.pdl_enabled():
        pytest.skip(f"PDL needs sm_90+ ({dev.arch})")
    n, steps = 1 << 20, 64
    code = with_pdl(
        'extern "C" __global__ void pdl_inc(float* __restrict__ out, const float* __restrict__ in0, '
        "const long long* __restrict__ dims) {\n  const long long i = (long long)blockIdx.x * 256 + threadIdx.x;\n"
        "  if (i < dims[0]) out[i] = in0[i] + 1.0f;\n}\n"
    )  # fmt: skip
    mod = driver.Module(nvrtc.compile_cubin(source([Kernel(code, (), frozenset())]), dev.arch))
    f = mod.function("pdl_inc")
    bufs = [driver.DeviceBuffer(4 * n) for _ in range(2)]
    dims = driver.DeviceBuffer(8)
    driver.htod(dims.ptr, np.array([n], np.int64), dev.stream)
    driver.htod(bufs[0].ptr, np.zeros(n, DType.f32.np), dev.stream)
    params = [driver.Params([bufs[(k + 1) % 2].ptr, bufs[k % 2].ptr, dims.ptr]) for k in range(steps)]
    g = driver.Graph()
    for p in params:
        g.add_kernel(driver.kernel_node_params(f, n // 256, 256, 0, p))
    assert {kind for *_, kind in g.edges} == {driver.PROGRAMMATIC}
    g.instantiate()
    for _ in range(3):
        g.launch(dev.stream)  # each replay adds `steps` again
    out = np.empty(n, np.float32)
    driver.dtoh(out, bufs[(3 * steps) % 2].ptr, dev.stream)
    dev.synchronize()
    np.testing.assert_array_equal(out, np.full(n, 3 * steps, np.float32))
