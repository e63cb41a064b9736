"""CPU: the memory a cuBLASLt host op touches on the GPU stays inside the buffers the runtime gives it.

* Extents: for llama-like blocks (GQA attention over a KV cache + SwiGLU MLP, symbolic s), every
  host op that an extraction can pick reads and writes, through the exact layouts `lt.plan` would
  create (`lt.matrices`), only bytes of its inputs' buffers (the producers' out_size, or the
  profiled input extents) and of its output slot (out_size * itemsize), at several s.
* Workspace: the per-stream cuBLASLt workspace never moves or is freed once handed out. CUDA
  graphs capture its pointer (split-K GEMMs write partial sums there), so growing it by freeing
  the old buffer made every earlier captured GEMM write into freed memory: the H200 crash of
  `bench/models.py --preset llama-3.2-1b --layers 1` during search profiling (compute-sanitizer:
  an invalid write of an sm80_xmma splitK GEMM, block z = the K slice).
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from luminal.backends.cuda import driver
from luminal.backends.cuda.backend import input_extents, view_extent
from luminal.backends.cuda.host import HostOp, lt
from luminal.backends.cuda.host.cublaslt import CublasLt
from luminal.backends.cuda.kernel import KernelOp
from luminal.egraph.compile import build_egraph
from luminal.hlir import Input
from luminal.models import llama
from tests.backends.cuda import fake_driver
from tests.backends.cuda.test_matmul_rules import LIBRARY, MatmulCpuBackend

TINY = replace(llama.CONFIGS["llama-3.2-1b"], vocab_size=96, dim=64, n_layers=1, n_heads=8, n_kv_heads=2,
               hidden=192, head_dim=8)  # fmt: skip


def _llama_graph(cfg=TINY, capacity: int = 10):
    return llama.Transformer(cfg, capacity).graph


def _plans(g, bounds=None, n_random: int = 24):
    view = build_egraph(g, MatmulCpuBackend(), bounds)
    r = random.Random(0)
    for gen in [view.preferred_genome(LIBRARY)] + [view.random_genome(r) for _ in range(n_random)]:
        yield view.extract(view.repair(gen))


def _violations(llir, env) -> tuple[set[str], list[str]]:
    """(host op kinds seen, what reads or writes past its buffer) for one plan at dims `env`."""
    nodes = llir.nodes
    ins_n = input_extents(nodes, env)  # what profiling uploads for each Input (elements)

    def nbytes(i: int) -> int:
        n = nodes[i]
        if isinstance(n.op, Input):
            return ins_n[n.op.label] * n.dtype.itemsize
        return int(n.op.out_size().evaluate(env)) * n.dtype.itemsize

    seen, bad = set(), []
    for i, n in enumerate(nodes):
        if type(n.op).__name__ in LIBRARY:
            seen.add(type(n.op).__name__)
        if isinstance(n.op, (KernelOp, HostOp)):  # every view an op reads fits its producer's buffer
            for j, shape, strides in n.op.input_reads():
                src = n.inputs[j]
                need = view_extent(shape, strides, env) * nodes[src].dtype.itemsize
                if need > nbytes(src):
                    bad.append(f"{n.op!r} at {env}: input {j} reads {need} bytes of a {nbytes(src)}-byte buffer")
        if not isinstance(n.op, HostOp):
            continue
        op = n.op
        if not isinstance(op, CublasLt) or op._empty(env) or int(op.k.evaluate(env)) == 0:
            continue
        spec = op.spec(env, [256] * (1 + len(n.inputs)))
        read_b, read_a, write_d = lt.extent_bytes(spec)  # cuBLAS's A is luminal's B (the swap)
        checks = [("A", n.inputs[0], read_a), ("B", n.inputs[1], read_b), ("D", i, write_d)]
        if op.beta:
            checks.append(("C", n.inputs[2], write_d))
        if op.has_bias:
            checks.append(("bias", n.inputs[2], int(op.n.evaluate(env)) * op.d_dtype.itemsize))
        for what, buf, need in checks:
            if need > nbytes(buf):
                bad.append(f"{op!r} at {env}: {what} touches {need} bytes of a {nbytes(buf)}-byte buffer")
    return seen, bad


@pytest.mark.parametrize("bounds", [None, {"s": (1, 1)}], ids=["any-s", "decode"])
def test_llama_block_host_ops_stay_in_their_buffers(bounds):
    svals = [1] if bounds else [1, 2, 7, 64]  # 64 = the profile value (DEFAULT_DIM)
    seen: set[str] = set()
    bad: list[str] = []
    for llir in _plans(_llama_graph(), bounds):
        for s in svals:
            for p in (0, 3, 64):
                got, b = _violations(llir, {"s": s, "p": p, "r": min(s, 2)})
                seen |= got
                bad += b
    assert "CublasLt" in seen, seen
    assert bounds is None or "KernelGemv" in seen, seen  # the decode bucket's GEMV alternative
    assert not bad, "\n".join(sorted(set(bad))[:20])


def test_gqa_value_gemm_is_one_strided_batch_per_kv_head():
    """The attention @ V matmul of GQA merges (group, s) into m = groups * s against the shared V
    head (stride 0): its write is batch (kv heads) * groups * s * head_dim, out_size exactly."""
    for llir in _plans(_llama_graph(), n_random=0):
        batched = [n.op for n in llir.nodes if isinstance(n.op, CublasLt) and n.op.batch.evaluate({}) != 1]
        assert batched, llir.op_counts()
        for op in batched:
            env = {"s": 64, "p": 64, "r": 2}
            spec = op.spec(env, [256, 256, 256])
            assert lt.extent_bytes(spec)[2] == int(op.out_size().evaluate(env)) * op.d_dtype.itemsize


@pytest.fixture
def fake_device_memory(monkeypatch):
    monkeypatch.setattr(driver, "DeviceBuffer", fake_driver.DeviceBuffer)
    monkeypatch.setattr(lt, "_WORKSPACES", {})
    monkeypatch.setattr(lt, "_RETIRED", [], raising=False)
    fake_driver.reset()
    yield
    fake_driver.reset()


def test_workspace_pointers_stay_valid_as_it_grows(fake_device_memory):
    """prepare() of a later GEMM asking for more workspace must not free (or move under) the
    workspace an earlier, already captured GEMM was given."""
    stream = 7
    handed = []
    for need in (1 << 10, 1 << 20, 4 << 20, 0, 3 << 20, lt.WORKSPACE_BYTES):
        ptr, size = lt.workspace(stream, need)
        assert size >= need
        handed.append((ptr, need))
    for ptr, need in handed:
        if need:
            assert ptr in fake_driver._HEAP, f"workspace 0x{ptr:x} ({need} bytes asked) was freed"
            assert fake_driver._HEAP[ptr].size >= need
    # and it does not move: graphs captured before and after a growth share one buffer
    assert len({p for p, need in handed if need}) == 1
