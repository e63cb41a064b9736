"""CPU: memoized kernel rendering (luminal/backends/cuda/rendered.py) and the graph's dims slots."""

from __future__ import annotations

from luminal.backends.cuda import rendered
from luminal.backends.cuda.kernel import KernelOp
from luminal.egraph.costs import one_op_plan
from tests.backends.cuda.graphs import build
from tests.backends.cuda.test_runtime_cpu import plan


def _kernel_nodes(llir):
    return [i for i, n in enumerate(llir.nodes) if isinstance(n.op, KernelOp)]


def test_render_is_memoized_in_process_and_on_disk(tmp_path, monkeypatch):
    monkeypatch.setenv("LUMINAL_CACHE", str(tmp_path))
    g, _ = build("reduce_f32")
    llir = plan(g)
    slots = rendered.plan_slots(llir.nodes)
    ops = [llir.nodes[i].op for i in _kernel_nodes(llir)]
    rendered.clear_memory()
    before = dict(rendered.STATS)
    fresh = [rendered.render(op, slots) for op in ops]
    assert rendered.STATS["renders"] - before["renders"] == len(set(ops))
    assert fresh == [op.render(slots) for op in ops]
    again = [rendered.render(op, slots) for op in ops]  # in process: the same objects, nothing rendered
    assert all(a is b for a, b in zip(again, fresh, strict=True))
    assert rendered.STATS["render_memory_hits"] - before["render_memory_hits"] >= len(ops)
    rendered.clear_memory()  # a new process: read back from disk, equal to what was rendered
    n = rendered.STATS["renders"]
    assert [rendered.render(op, slots) for op in ops] == fresh
    assert rendered.STATS["renders"] == n and rendered.STATS["render_disk_hits"] - before["render_disk_hits"] >= 1
    other = {**{d: i + 1 for d, i in slots.items()}}  # other slots: another entry, rendered again
    rendered.clear_memory()
    assert rendered.render(ops[0], other) == ops[0].render(other)
    assert rendered.STATS["renders"] == n + 1
    rendered.clear_memory()


def test_a_one_op_plan_renders_its_kernel_as_the_whole_plan_does(monkeypatch):
    """With the graph's dims, a kernel's code does not depend on which plan renders it: one NVRTC compile."""
    monkeypatch.setenv("LUMINAL_CACHE", "off")
    g, _ = build("index_f32")
    llir = plan(g)
    env = {d: 5 for d in g.dims()} | {"extra": 3}  # a graph dim no op reads still gets its slot
    whole = rendered.plan_slots(llir.nodes, env)
    assert set(whole) >= set(env)
    for i in _kernel_nodes(llir):
        one = one_op_plan(llir, i)
        assert rendered.plan_slots(one.nodes, env) == whole
        assert (
            rendered.render(one.nodes[-2].op, rendered.plan_slots(one.nodes, env)).code
            == rendered.render(llir.nodes[i].op, whole).code
        )
