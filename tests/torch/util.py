"""Shared helpers of the torch-frontend tests: trace a function to ATen (make_fx, symbolic sizes, the
frontend's decomposition table), compile it with luminal, compare with eager torch."""

from __future__ import annotations

import torch
from torch.fx.experimental.proxy_tensor import make_fx

import luminal as lm
from luminal.torch import decompositions
from luminal.torch.program import Program
from luminal.torch.tensors import lm_dtype
from luminal.torch.translate import translate
from tests.helpers import TOL

_TABLE: dict | None = None


def table() -> dict:
    global _TABLE
    if _TABLE is None:
        _TABLE = dict(decompositions().items())
    return _TABLE


def trace(fn, args, dynamic: list[set[int]] | None = None) -> torch.fx.GraphModule:
    """fn traced to functional ATen as the frontends do (the frontend's decomposition table), with
    symbolic sizes on the axes listed per argument in `dynamic` (default: none)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

    mode = FakeTensorMode(shape_env=ShapeEnv())
    fakes = []
    for k, a in enumerate(args):
        dyn = dynamic[k] if dynamic else set()
        sizes = [DimDynamic.DUCK if i in dyn else DimDynamic.STATIC for i in range(a.ndim)]  # same size, same dim
        ctx = StatelessSymbolicContext(dynamic_sizes=sizes, constraint_sizes=[None] * a.ndim)
        fakes.append(mode.from_tensor(a, symbolic_context=ctx))
    with mode:
        # decompose, then functionalize what the decompositions wrote in place (torch.export and
        # AOTAutograd hand the translator functional graphs too)
        gm = make_fx(lambda *xs: fn(*xs), decomposition_table=table(), tracing_mode="real")(*fakes)
        return make_fx(torch.func.functionalize(gm, remove="mutations"), tracing_mode="real")(*fakes)


def compile_fn(fn, args, dynamic: list[set[int]] | None = None) -> Program:
    return Program(translate(trace(fn, args, dynamic)), "reference")


def assert_close(got: torch.Tensor, want: torch.Tensor, what: str, scale: float = 1.0) -> None:
    """got (luminal) against want (eager, maybe computed wider): exact for ints/bools, else the
    tolerance of got's dtype (docs/numerics.md) times `scale`."""
    assert tuple(got.shape) == tuple(want.shape), f"{what}: shape {tuple(got.shape)} != eager {tuple(want.shape)}"
    dt = lm_dtype(got.dtype)
    if not dt.is_float:
        assert torch.equal(got, want.to(got.dtype)), f"{what}: {got} != eager {want}"
        return
    rtol, atol = TOL[dt]
    g, w = got.double(), want.double()
    assert torch.equal(g.isnan(), w.isnan()), f"{what}: NaN positions differ:\n{g}\n{w}"
    ok = ((g - w).abs() <= atol * scale + rtol * scale * w.abs()) | (g == w) | (g.isnan() & w.isnan())
    assert bool(ok.all()), f"{what}: max |diff| {(g - w).abs().nan_to_num().max().item():.3g} ({dt}):\n{g}\n{w}"


__all__ = ["trace", "compile_fn", "assert_close", "lm"]


# -- the device path (tests/torch/test_device.py on the fake driver, test_cuda.py on a GPU) -------
def record_programs(monkeypatch) -> list:
    """Every Program the `torch.compile` backend builds from now on, in order."""
    from luminal.torch import dynamo, program

    programs: list = []

    class Recorded(program.Program):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            programs.append(self)

    monkeypatch.setattr(dynamo, "Program", Recorded)
    return programs


def decode_program(programs):
    """The decode graph's Program: its per-call tensors have static sizes of 1 (one token)."""

    def one_token(p) -> bool:
        per_call = [s for s in p.inputs if s.kind == "tensor" and not s.persistent]
        return bool(per_call) and all(e.is_num and int(e) == 1 for s in per_call for e in s.shape)

    (p,) = [p for p in programs if one_token(p)]
    return p


def nbytes(spec, env: dict | None = None) -> int:
    n = 1
    for e in spec.shape:
        n *= int(e.evaluate(env or {}))
    return n * spec.dtype.itemsize


def expected_step_bytes(p) -> dict[str, int]:
    """What one decode step of Program `p` may move (after its first step): up, the runtime's dims
    record only (the host scalars -- Dynamo's 0-d float inputs -- are unchanged, so not uploaded
    again); down, nothing; on the device, the per-call device tensors (the token), the outputs
    (logits) and the state that is not a KV cache (a 0-d position counter, copied: other nodes read
    it). No cache bytes anywhere."""
    ex = p.model._plans[0][1]
    per_call = sum(nbytes(s) for s in p.inputs if s.kind == "tensor" and not s.persistent and s.name not in p.host_fed)
    outs = sum(nbytes(s) for s in p.outputs if s.kind == "tensor")
    small_state = sum(nbytes(s) for s in p.inputs if s.state and not s.shape)
    return {"h2d_bytes": 8 * (len(ex.slots) + 2), "d2h_bytes": 0, "d2d_bytes": per_call + outs + small_state}


def host_scalars(p) -> set[str]:
    """The per-call inputs of `p` that are 0-d (Dynamo's unspecialized floats, fed from the host)."""
    return {s.name for s in p.inputs if s.kind == "tensor" and not s.persistent and not s.shape}


def state_in_place(p) -> set[str]:
    """The state inputs of `p`'s plan that its in-place scatters update (no copy after the run): an
    in-place op's first input, and the inputs it also writes (KernelScatterPair's v cache)."""
    plan = p.model.plans[0]
    out = set()
    for n in plan.nodes:
        if getattr(n.op, "inplace", False):
            for k in (0, *n.op.also_writes()):
                src = plan.nodes[n.inputs[k]].op
                if hasattr(src, "label"):
                    out.add(src.label)
    return out
