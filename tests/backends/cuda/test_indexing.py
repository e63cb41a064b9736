"""The gather kernels (kernels/indexing.py): KernelGatherFused -- the embedding and rows gathers of a
decoder step computing their flat index (row * stride + column, the range check) in the gather's own
launch -- compiles for sm_90, and its rendered CUDA C (run on the CPU by g++: test_inplace.py's
harness) reads exactly the elements the plan's reference reads, at decode and prefill sizes, and
reports an out-of-range token in the error slot like KernelGather."""

from __future__ import annotations

import shutil
from types import SimpleNamespace

import numpy as np
import pytest

from luminal.backends.cuda import nvrtc
from luminal.backends.cuda.kernel import source
from luminal.backends.cuda.kernels.indexing import KernelGatherFused
from luminal.backends.reference.executor import ReferenceExecutor
from luminal.models.common import random_weights
from tests.backends.cuda.test_inplace import SLOTS, OnCpu, compile_on_cpu, plans


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ (C++20) to run the CUDA C on the CPU")
def test_fused_gathers_run_on_cpu(tmp_path):
    model, steps = plans("llama")
    ops = {n.op for p in steps.values() for n in p.nodes if isinstance(n.op, KernelGatherFused)}
    assert len(ops) == 4, steps[1].op_counts()  # the embedding and the rows, at each bucket
    kernels = {op: op.render(SLOTS) for op in ops}
    assert nvrtc.compile_cubin(source(list(kernels.values())), arch="sm_90")[:4] == b"\x7fELF"
    so = compile_on_cpu(kernels, lambda op: [op.dtype, op.dtype, *op.leaf_dtypes()], tmp_path)
    rng = np.random.default_rng(0)
    weights = {**random_weights(model.weight_shapes(), seed=2, std=0.05), **model.extra_inputs()}
    caches = {n: np.zeros(sh, "bfloat16") for n, sh in model.cache_shapes.items()}
    for s, llir in steps.items():
        env = {"p": 3, "s": s, "r": 1}
        feed = {"tokens": rng.integers(0, 256, s).astype(np.int32), "rows": np.array([s - 1], np.int32),
                **weights, **caches}  # fmt: skip
        want = ReferenceExecutor(llir.nodes, llir.outputs).run(dict(feed), env)
        on_cpu = {}
        nodes = [SimpleNamespace(op=on_cpu.setdefault(i, OnCpu(n.op, kernels[n.op], so)), inputs=n.inputs,
                                 dtype=n.dtype) if isinstance(n.op, KernelGatherFused) else n
                 for i, n in enumerate(llir.nodes)]  # fmt: skip
        got = ReferenceExecutor(nodes, llir.outputs).run(dict(feed), env)
        for label, arr in want.items():  # a gather copies: the same plan, bit for bit
            np.testing.assert_array_equal(np.asarray(got[label]), np.asarray(arr), err_msg=f"s={s} {label}")
        assert all(op.error == 0 for op in on_cpu.values())
        feed["tokens"][0] = 256 + 7  # past the vocabulary: the embedding gather reports it
        emb = next(i for i, n in enumerate(llir.nodes) if isinstance(n.op, KernelGatherFused)
                   and llir.nodes[n.inputs[0]].op.label == "model.embed_tokens.weight")  # fmt: skip
        leaves = [feed[llir.nodes[k].op.label] for k in llir.nodes[emb].inputs[1:]]  # the token ids
        on_cpu[emb].reference([weights["model.embed_tokens.weight"], *leaves], None, env)
        assert on_cpu[emb].error == 1
