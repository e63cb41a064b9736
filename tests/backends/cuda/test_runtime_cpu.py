"""CPU: the CUDA runtime's bookkeeping over a fake driver (fake_driver.py) that runs each kernel op's
reference semantics on shared fake device memory: arena reuse never corrupts live buffers, dims
changes patch the graph instead of rebuilding it, pointers stay stable, persistent inputs are
uploaded once, state stays on the device, zero-size runs, eager == graph."""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
from luminal.backends.cuda import runtime
from luminal.backends.cuda.backend import KERNEL_LOWER, MATMUL_BACKEND
from luminal.egraph.rulesets import MATMUL_FLATTEN, main_cycle
from tests.backends.cuda import fake_driver
from tests.backends.cuda.graphs import build, cases, make_inputs
from tests.backends.cuda.test_lowering import CpuCudaBackend
from tests.helpers import assert_matches


class UnfusedCpuCudaBackend(CpuCudaBackend):
    """Without the fusion phase: one kernel (and one buffer) per primitive, to exercise the arena."""

    phases = main_cycle([MATMUL_FLATTEN, KERNEL_LOWER, MATMUL_BACKEND])


def plan(g, fused: bool = True):
    from luminal.egraph.compile import CompileOptions, compile_plans

    backend = CpuCudaBackend() if fused else UnfusedCpuCudaBackend()
    _, llirs, _ = compile_plans(g, backend, CompileOptions(cache=False, search_budget=1))
    return llirs[0]


def executor(g, fused: bool = True, **kw):
    ex = runtime.CudaExecutor(plan(g, fused).nodes, **kw)
    fake_driver.bind(ex)
    return ex


@pytest.mark.parametrize("case", ["reduce_f32", "binary_bf16", "index_f32", "ints_i8", "cast_f16", "unary_f64"])
@pytest.mark.parametrize("graphs", [True, False], ids=["graph", "eager"])
def test_fake_device_matches_reference_as_dims_change(fake, case, graphs):
    g, specs = build(case)
    ex = executor(g, use_graphs=graphs)
    ref = g.compile("reference", cache=False)
    # s = 0 only where no output takes a max over s (an empty max raises, docs/numerics.md)
    sizes = (17, 3, 1, 40, 17) if case.startswith(("index", "reduce", "ints")) else (17, 3, 1, 0, 40, 17)
    for k, s in enumerate(sizes):
        feed = make_inputs(specs, s, seed=k)
        got, want = ex.run(feed, {"s": s}), ref.run(feed)
        for name, arr in want.items():
            dt = g.nodes[g.outputs[name]].dtype
            assert_matches(got[name].reshape(arr.shape), arr, dt, 1.0, f"{case}/{name} s={s}")
    assert ex.stats["replans"] <= 2 and ex.stats["arena_bytes"] > 0
    before = dict(ex.stats)
    ex.run(make_inputs(specs, 17, seed=99), {"s": 17})  # same dims again: nothing moves or rebuilds
    assert ex.stats["pointer_moves"] == before["pointer_moves"] and ex.stats["replans"] == before["replans"]
    if graphs:
        assert ex.stats["graph_builds"] == ex.stats["pointer_moves"] == before["graph_builds"]


def test_arena_is_smaller_than_the_sum_of_buffers(fake):
    g = lm.Graph()
    x = g.tensor("x", (1000,))
    y = x
    for _ in range(10):
        y = (y * 1.5).sin()
    y.output("y")
    ex = executor(g, fused=False)
    out = ex.run({"x": np.linspace(0, 1, 1000, dtype=np.float32)}, {})["y"]
    want = np.linspace(0, 1, 1000, dtype=np.float32)
    for _ in range(10):
        want = np.sin(want * np.float32(1.5))
    np.testing.assert_allclose(out, want, rtol=1e-5)
    total = sum(n for i, n in ex._nbytes.items() if i not in ex.inputs.values())
    assert ex.stats["arena_bytes"] < total / 3  # dead buffers are reused


def test_dims_change_patches_instead_of_rebuilding(fake):
    g = lm.Graph()
    x = g.tensor("x", ("s", 1024))
    x.exp2().sum(axis=1).output("y")
    ex = executor(g)
    for s in (64, 8, 33, 64, 1):
        xa = np.random.default_rng(s).standard_normal((s, 1024)).astype(np.float32)
        np.testing.assert_allclose(ex.run({"x": xa}, {"s": s})["y"], np.exp2(xa.astype(np.float64)).sum(1), rtol=1e-5)
    assert ex.stats["graph_builds"] == 1 and ex.stats["graph_patches"] >= 4, ex.stats
    assert fake.LOG.count("instantiate") == 1


def test_persistent_inputs_upload_once_and_state_stays_on_device(fake):
    g = lm.Graph()
    w = g.tensor("w", (4,)).persist()
    st = g.tensor("state", (4,)).persist()
    x = g.tensor("x", (4,))
    (x * w).output("y")
    (st + x).output("state")  # named like the persistent input: its next value
    ex = executor(g)
    ex.set_persistent(frozenset({"w", "state"}))
    w_np, s_np, x_np = np.arange(4, dtype=np.float32), np.zeros(4, np.float32), np.ones(4, np.float32)
    ex.bind("state", s_np)
    for step in range(3):
        fake.LOG.clear()
        out = ex.run({"w": w_np, "x": x_np * (step + 1)}, {}, fetch=["y"])
        np.testing.assert_array_equal(out["y"], w_np * (step + 1))
        uploads = fake.LOG.count("htod 16") - 1  # 16 bytes each; minus the dims buffer (2 error words)
        assert uploads == (2 if step == 0 else 1), fake.LOG  # only x travels after step 0
        assert ex.stats["d2h_bytes"] == 16 and ex.stats["d2d_bytes"] == 16  # y back; state copied on the device
    np.testing.assert_array_equal(ex.run({"x": x_np}, {}, fetch=["state"])["state"], np.full(4, 7, np.float32))
    np.testing.assert_array_equal(s_np, 0)  # the caller's array is never written
    with pytest.raises(lm.InputError, match="persist"):
        ex.bind("x", x_np)


@pytest.fixture
def memset(fake, monkeypatch):
    """The fake driver plus `driver.call` for the device fills (cuMemsetD8/D16/D32Async), logged."""

    def call(name, *args):
        if name not in ("cuMemsetD8Async", "cuMemsetD16Async", "cuMemsetD32Async"):
            raise AssertionError(f"unexpected driver call {name}")
        ptr, bits, count, _stream = args
        size = int(name[len("cuMemsetD") : -len("Async")]) // 8
        fake_driver.mem(ptr, count * size).view(f"u{size}")[:] = bits
        fake_driver.LOG.append(f"{name} {count * size}")

    monkeypatch.setattr(fake_driver, "call", call, raising=False)
    return fake


def test_profile_on_ones_and_extents(memset):
    from luminal.backends.cuda.backend import input_extents

    g, specs = build("reduce_f32")
    llir = plan(g)
    ex = runtime.CudaExecutor(llir.nodes)
    fake_driver.bind(ex)
    ext = input_extents(llir.nodes, {"s": 5})
    assert ext == {"x": 5 * 40}
    assert ex.profile({"s": 5}, ext) > 0
    assert not ex.resident.src


@pytest.mark.parametrize("case", ["binary_bf16", "ints_i8", "cast_f16"])
def test_profile_fills_inputs_on_the_device_once_per_pool(memset, case):
    """Profiling inputs are ones filled by a device memset of the dtype's bit pattern (no host upload
    of input bytes), shared by every plan timed with one pool; the plan really computes on ones; the
    executor's own inputs are bound again by the next run (its results equal the reference)."""
    from luminal.backends.cuda.backend import input_extents

    g, specs = build(case)
    llir = plan(g)
    env = {"s": 5}
    ext = input_extents(llir.nodes, env)
    ref = g.compile("reference", cache=False)
    pool = runtime.OnesPool()
    ex = runtime.CudaExecutor(llir.nodes)
    fake_driver.bind(ex)
    fake_driver.LOG.clear()
    ex.profile(env, ext, reps=2, warmup=1, pool=pool)
    fills = [e for e in fake_driver.LOG if e.startswith("cuMemset")]
    in_bytes = sum(ext[n.op.label] * n.dtype.itemsize for n in llir.nodes if type(n.op).__name__ == "Input")
    assert fills and sum(int(e.split()[1]) for e in fills) >= in_bytes
    assert all(int(e.split()[1]) <= 8 * (len(ex.slots) + 2) for e in fake_driver.LOG if e.startswith("htod"))
    ones = {lb: np.ones((5, ext[lb] // 5), specs[lb][1].np) for lb in ext}  # what the kernels read
    for label, want in ref.run(ones).items():
        s = ex.outputs[label]
        got = fake_driver.mem(ex._ptrs[s], ex._bytes(s)).view(want.dtype).reshape(want.shape)
        assert_matches(got, want, g.nodes[g.outputs[label]].dtype, 1.0, f"{case}/{label} on ones")
    # a second plan (and the same one again) on the same pool: nothing allocated or filled again
    stats = dict(pool.stats)
    runtime.CudaExecutor(llir.nodes).profile(env, ext, reps=1, warmup=0, pool=pool)
    assert pool.stats == stats
    # the executor runs on its own inputs afterwards
    feed = make_inputs(specs, 5, seed=3)
    for label, want in ref.run(feed).items():
        got = ex.run(feed, env)[label]
        assert_matches(got.reshape(want.shape), want, g.nodes[g.outputs[label]].dtype, 1.0, f"{case}/{label}")


def test_unsupported_ops_are_refused(fake):
    from luminal.hlir import Add, Input, Output
    from luminal.shape.expr import z

    class N:
        def __init__(self, op, inputs, dtype):
            self.op, self.inputs, self.dtype = op, inputs, dtype

    add = Add((lm.Graph().tensor("q", (2,)).shape[0],), (z,), (z,))  # an HLIR op the egglog rules did not lower
    nodes = [N(Input("a", lm.f32), (), lm.f32), N(add, (0, 0), lm.f32), N(Output("y"), (1,), lm.f32)]
    with pytest.raises(lm.BackendError, match="Add"):
        runtime.CudaExecutor(nodes)


def test_all_cases_listed():
    assert {"reduce_f32", "index_f32", "ints_i8"} <= set(cases())


def test_the_fake_device_catches_overlapping_buffers(fake, monkeypatch):
    # the harness can fail: an arena planner that puts every buffer at offset 0 corrupts results
    from luminal.backends.cuda import memory

    real = memory.plan

    def overlapping(bufs):
        p = real(bufs)
        return memory.ArenaPlan(dict.fromkeys(p.offsets, 0), p.sizes, max(p.sizes.values()))

    monkeypatch.setattr(memory, "plan", overlapping)
    with pytest.raises(AssertionError):
        test_arena_is_smaller_than_the_sum_of_buffers(fake)


def test_host_ops_are_prepared_launched_and_recaptured(fake, monkeypatch):
    from dataclasses import dataclass
    from typing import ClassVar

    from luminal.backends.cuda.host import HostOp
    from luminal.hlir import Input, Output
    from luminal.shape.expr import Expression, var

    calls: list = []

    @dataclass(frozen=True)
    class DoubleHost(HostOp):  # out[i] = 2 * x[i] through "library" host code
        n: Expression
        n_inputs: ClassVar[int] = 1

        def out_size(self):
            return self.n

        def input_views(self):
            return (((self.n,), (var("z"),)),)

        def prepare(self, env, out_ptr, in_ptrs, stream=None):
            calls.append(("prepare", env["s"]))

        def launch(self, stream, out_ptr, in_ptrs, env):
            n = env["s"]
            x = fake.mem(in_ptrs[0], 4 * n).view(np.float32)
            fake.mem(out_ptr, 4 * n)[:] = (x * 2).view(np.uint8)

    def fake_capture(op, stream, out_ptr, in_ptrs, env):
        op.prepare(env, out_ptr, in_ptrs, stream)
        calls.append(("capture", env["s"]))
        f = fake.Func("host")
        f.run = lambda values, env=dict(env): op.launch(stream, out_ptr, in_ptrs, env)
        return (f, 1, fake.Params([]))

    monkeypatch.setattr(runtime, "capture", fake_capture)

    class N:
        def __init__(self, op, inputs, dtype):
            self.op, self.inputs, self.dtype = op, inputs, dtype

    s = var("s")
    nodes = [N(Input("x", lm.f32), (), lm.f32), N(DoubleHost(s), (0,), lm.f32), N(Output("y"), (1,), lm.f32)]
    for graphs in (True, False):
        calls.clear()
        ex = runtime.CudaExecutor(nodes, use_graphs=graphs)
        for n in (4, 4, 6, 2):
            x = np.arange(n, dtype=np.float32)
            np.testing.assert_array_equal(ex.run({"x": x}, {"s": n})["y"], 2 * x)
            calls.append(("run", n))
        kinds = [c[0] for c in calls if c[0] != "run"]
        if graphs:  # captured once per (dims, pointers): s=4, then s=6 (input regrowth), then s=2
            assert kinds.count("capture") == 3 and ex.stats["host_captures"] == 3, calls
            assert ex.stats["graph_builds"] == 2, ex.stats  # the second s=4 run reuses everything
        else:  # eager: prepared when the dims changed, launched every run
            assert kinds == ["prepare"] * 3, calls


def test_profile_flag_logs_a_per_op_table_once_per_plan(fake, monkeypatch, caplog):
    import logging

    g = lm.Graph()
    x = g.tensor("x", ("s", 256))
    (x.exp2() * 3.0).sum(axis=1).output("y")
    ex = executor(g, fused=False)
    monkeypatch.setenv("LUMINAL_PROFILE", "1")
    xa = np.ones((4, 256), np.float32)
    with caplog.at_level(logging.INFO, logger="luminal.profile"):
        for _ in range(3):
            np.testing.assert_allclose(ex.run({"x": xa}, {"s": 4})["y"], np.full(4, 6 * 256, np.float32))
    tables = [r.getMessage() for r in caplog.records if r.name == "luminal.profile"]
    assert len(tables) == 1, tables  # the first run of the plan only
    lines = tables[0].splitlines()
    assert "launches" in lines[0] and "% roofline" in lines[1]
    ops = {ln.split()[1] for ln in lines[2:-1]}
    assert {"KernelExp2", "KernelMul", "KernelSumReduce"} <= ops, lines
    row = next(ln for ln in lines if "KernelSumReduce" in ln).split()
    assert float(row[-2]) == pytest.approx(4 * 256 * 4 / 1e6 + 4 * 4 / 1e6, rel=1e-3)  # MB read + written


def test_a_view_alias_reads_its_root_and_keeps_it_alive(fake):
    """An aliasing kernel op (a zero-copy slice, as a multi-output kernel's outputs would be) gets no
    arena slot: its pointer is its root's + offset, and the root's bytes stay reserved while it is read."""
    from dataclasses import dataclass
    from typing import ClassVar

    from luminal.backends.cuda.kernel import Kernel, KernelOp
    from luminal.backends.cuda.kernels import KernelExp2, KernelSin
    from luminal.hlir import Input, Output
    from luminal.shape.expr import Expression, expr, z

    @dataclass(frozen=True)
    class Tail(KernelOp):  # elements [start, start + n) of its input, in place (no kernel)
        n: int
        start: int
        n_inputs: ClassVar[int] = 1

        def alias(self):
            return (0, expr(4 * self.start))

        def out_size(self) -> Expression:
            return expr(self.n)

        def out_dtype(self, in_dtypes):
            return in_dtypes[0]

        def reference(self, ins, in_dtypes, env):
            return ins[0][self.start : self.start + self.n]

        def input_views(self):
            return (((expr(self.start + self.n),), (z,)),)

        def render(self, slots):
            return Kernel("", (), frozenset())

    class N:
        def __init__(self, op, inputs, dtype):
            self.op, self.inputs, self.dtype = op, inputs, dtype

    f32 = lm.f32
    one = lambda n: ((expr(n),), (z,))  # noqa: E731
    nodes = [N(Input("x", f32), (), f32), N(KernelExp2(*one(64), f32), (0,), f32),  # 1: root
             N(Tail(16, 48), (1,), f32),  # 2: its last 16 elements
             N(KernelSin(*one(64), f32), (0,), f32), N(KernelSin(*one(64), f32), (3,), f32),  # 3, 4: reuse space
             N(KernelSin(*one(16), f32), (2,), f32),  # 5: reads the alias after 3 and 4 ran
             N(Output("y"), (5,), f32), N(Output("w"), (4,), f32)]  # fmt: skip
    ex = runtime.CudaExecutor(nodes)
    fake_driver.bind(ex)
    x = np.linspace(0, 1, 64, dtype=np.float32)
    out = ex.run({"x": x}, {})
    np.testing.assert_allclose(out["y"], np.sin(np.exp2(x[48:])), rtol=1e-6)
    np.testing.assert_allclose(out["w"], np.sin(np.sin(x)), rtol=1e-6)
    assert ex._ptrs[2] == ex._ptrs[1] + 4 * 48 and ("out", 2) not in ex._plan.offsets


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
def test_every_plan_with_a_gather_reads_its_error_slot_back(fake, fused):
    """A gather (KernelGather, or KernelGatherFused computing its own index) reports an out-of-range
    index in the error slot; the runtime must read that slot after a run, or the wrong answer is
    silent (the H200 showed it: KernelGatherFused plans never raised)."""
    from luminal.backends.cuda.kernels.indexing import INDEXING_KERNELS, KernelScatter

    g = lm.Graph()
    x = g.tensor("x", (5, 3))
    i = g.tensor("i", (2,), lm.i32)
    x.gather(i).output("y")
    ex = executor(g, fused)
    kinds = {type(n.op) for n in ex.nodes} & set(INDEXING_KERNELS)
    assert kinds and KernelScatter not in kinds, kinds
    assert ex._reports


def test_ones_pool_buffers_per_rank_and_written_ones_refilled(memset):
    """OnesPool: the k-th input of a dtype gets its own buffer, grown (and filled) only when a larger one
    is asked for; a buffer a plan writes in place is filled again for the next plan; 8-byte dtypes are
    uploaded (no memset can write their pattern)."""
    pool = runtime.OnesPool()
    a, b = pool.get(lm.bf16, 0, 64), pool.get(lm.bf16, 1, 64)
    assert a != b and pool.get(lm.bf16, 0, 32) == a and pool.stats["allocs"] == 2
    np.testing.assert_array_equal(fake_driver.mem(a, 64).view(lm.bf16.np), np.ones(32, lm.bf16.np))
    grown = pool.get(lm.bf16, 0, 4096)
    np.testing.assert_array_equal(fake_driver.mem(grown, 4096).view(lm.bf16.np), np.ones(2048, lm.bf16.np))
    w = pool.get(lm.f32, 0, 40, written=True)
    fake_driver.mem(w, 40)[:] = 0  # a plan's in-place update wrote it
    assert pool.get(lm.f32, 0, 40, written=True) == w
    np.testing.assert_array_equal(fake_driver.mem(w, 40).view(np.float32), np.ones(10, np.float32))
    before = pool.stats["upload_bytes"]
    x = pool.get(lm.i64, 0, 80)
    np.testing.assert_array_equal(fake_driver.mem(x, 80).view(np.int64), np.ones(10, np.int64))
    assert pool.stats["upload_bytes"] - before >= 80


def test_a_pinned_grid_covers_every_dims_of_its_bucket(fake):
    """A grid fixed at the bucket's upper bounds must be at least the grid at any dims inside the
    bucket (kernels exit past the live sizes, but cannot cover blocks they were not given). The
    attention kernel's decode path, used for short prompts, has the grid 264 * (s < 9) * s: zero
    at the bound. Pinned anyway, prompts of 2..8 tokens ran attention on one block (the H200 gave
    wrong prefill logits for every preset); such a grid must follow the dims."""
    from tests.backends.cuda.test_inplace import CAP, plans

    model, steps = plans("llama")
    bounds = {"s": (2, CAP), "r": (1, CAP), "p": (0, CAP - 2)}
    ex = runtime.CudaExecutor(steps[5].nodes)
    fake_driver.bind(ex)
    ex.set_bounds(bounds)
    ex.stats["pinned"] = True  # the arena fits at the bounds (what a run decides first)
    pins = ex._pinned_grids()
    assert any(p is not None for p in pins)  # the plan does pin grids
    assert any(p is None and s.grid.dims() for p, s in zip(pins, ex.steps, strict=True))
    for pinned, st in zip(pins, ex.steps, strict=True):
        if pinned is None:
            continue
        for s in (2, 3, 8, 9, 64, CAP):
            for p in (0, 7, CAP - s):
                env = {"s": s, "r": 1, "p": p}
                assert max(1, int(st.grid.evaluate(env))) <= pinned, (st.grid, env)
