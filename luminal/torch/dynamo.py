"""The `torch.compile` backend "luminal": Dynamo captures a graph, AOTAutograd functionalizes it to
ATen (same decompositions as torch.export, SDPA kept whole), luminal translates and compiles it.

Dynamo passes sizes it made dynamic as SymInt inputs, so with `dynamic=True` (or after its automatic
dynamic-shape recompile) one luminal compile serves every length. Input mutations (a StaticCache's
`index_copy_`) stay in the graph (`keep_inference_input_mutations=True`) as `copy_(input, new)`,
which the translator turns into luminal state: the runtime updates the tensor's memory itself (in
place on CUDA). Parameters and unmutated buffers (Dynamo's static inputs) are persistent inputs,
bound once.

Options (`torch.compile(m, backend="luminal", options={...})`): `fallback` (run a graph luminal cannot
translate eagerly, logged, instead of raising), `backend` ("reference" | "cuda" | "auto"), and any
`Graph.compile` option (search_budget, seed, ...).
"""

from __future__ import annotations

import logging

import torch
from torch._dynamo.backends.common import aot_autograd

from luminal.errors import CompileError, LuminalError
from luminal.torch.export import decompositions
from luminal.torch.program import COUNTERS, Program
from luminal.torch.translate import translate

log = logging.getLogger(__name__)


def _static_inputs() -> tuple[set[int], set[int]]:
    """(static input indices, mutated input indices) of the graph AOTAutograd is compiling."""
    ctx = torch._guards.TracingContext.try_get()
    meta = getattr(ctx, "fw_metadata", None) if ctx is not None else None
    if meta is None:
        return set(), set()
    mutated = {i for i, info in enumerate(meta.input_info) if info.mutates_data or info.mutates_metadata}
    return set(meta.static_input_indices or ()), mutated


def _no_backward(gm, example_inputs):
    raise CompileError("luminal is an inference compiler: run the compiled model under torch.no_grad()")


def backend(gm: torch.fx.GraphModule, example_inputs, options: dict | None = None):
    """torch.compile backend entry point (registered as "luminal")."""
    opts = dict(options or {})
    fallback = bool(opts.pop("fallback", False))
    target = opts.pop("backend", "auto")

    def fw_compiler(fx: torch.fx.GraphModule, inputs):
        static, mutated = _static_inputs()
        try:
            tr = translate(fx, static - mutated)
            return Program(tr, target, **opts)
        except LuminalError as e:
            if not fallback:
                raise
            COUNTERS["fallbacks"] += 1
            log.warning("luminal: running this graph eagerly (fallback=True): %s", e)
            return fx.forward

    return aot_autograd(
        fw_compiler=fw_compiler,
        bw_compiler=_no_backward,
        decompositions=dict(decompositions().items()),
        keep_inference_input_mutations=True,
    )(gm, example_inputs)


def with_options(**options):
    """A backend callable with options bound: `torch.compile(m, backend=luminal.torch.with_options(fallback=True))`."""

    def compiler(gm, example_inputs):
        return backend(gm, example_inputs, options)

    return compiler
