"""Host ops: LLIR ops whose work is issued by host code (library calls) on the plan's stream.

A host op is a frozen dataclass like a kernel op (class name == egglog constructor, field order ==
argument order, its rules in a same-stem .egg beside its module). Instead of rendering CUDA C it
issues GPU work from Python, which the runtime captures into the plan's CUDA graph.

Contract the runtime (luminal/backends/cuda/runtime.py) follows for every node whose op is a HostOp:
  * buffers: the output gets an arena slot of `out_size() * dtype.itemsize` bytes like a kernel
    output; inputs are the nodes' buffers in input order. Host ops never alias or sync.
  * `prepare(env, out_ptr, in_ptrs, stream)` before the first launch, and again whenever the dims
    (`env`) or a pointer changed: host-side planning (descriptors, heuristic query, library handle
    and workspace for `stream`, the stream its launches will use). It never launches work, so it
    may run at any time, but not while the stream is capturing (it may allocate).
  * `launch(stream, out_ptr, in_ptrs, env)` enqueues the op's work on `stream`; capturable.
    Eager runs call it directly. With CUDA graphs the runtime captures it into a child graph,
    `capture(op, stream, out_ptr, in_ptrs, env)` below, adds that with cuGraphAddChildGraphNode
    (depending on the previous node), and on a later change of `signature(env)` or of the
    pointers re-captures it and patches the instantiated graph with
    cuGraphExecChildGraphNodeSetParams (falling back to a rebuild if the topology changed).
  * `input_views()` gives the (shape, strides) each input is read through, like KernelOp, so
    profiling can size inputs; `dim_names()` the dims the op reads.
Dims are never baked into a host op: its fields are Expressions of dim symbols, evaluated from
`env` at prepare time, so one plan serves every value of a dim (symbolic m in particular).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from luminal.hlir.op import EList, Op


class HostOp(Op):
    """Base of host (library-call) ops. Subclasses are frozen dataclasses."""

    def input_views(self) -> tuple[tuple[EList, EList], ...]:
        raise NotImplementedError

    def input_reads(self) -> tuple[tuple[int, EList, EList], ...]:
        """(input position, shape, strides) of every view read, as KernelOp.input_reads."""
        return tuple((k, sh, st) for k, (sh, st) in enumerate(self.input_views()))

    def signature(self, env: Mapping[str, int]) -> tuple:
        """What a captured launch depends on besides pointers: the evaluated dims it reads."""
        return tuple(sorted((d, int(env[d])) for d in self.dim_names()))

    def prepare(self, env: Mapping[str, int], out_ptr: int, in_ptrs: Sequence[int], stream=None) -> None:
        """Host-side planning for these dims, pointers and stream (None: the device's stream);
        cached; launches nothing."""

    def launch(self, stream, out_ptr: int, in_ptrs: Sequence[int], env: Mapping[str, int]) -> None:
        raise NotImplementedError


def capture(op: HostOp, stream, out_ptr: int, in_ptrs: Sequence[int], env: Mapping[str, int]):
    """The op's work for these pointers and dims as a standalone CUgraph (caller owns it), for a
    child-graph node of the plan's graph. `stream` must be a non-default stream."""
    from luminal.backends.cuda import driver

    drv = driver._drv()
    op.prepare(env, out_ptr, in_ptrs, stream)
    driver.call("cuStreamBeginCapture", stream, drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
    try:
        op.launch(stream, out_ptr, in_ptrs, env)
    except BaseException:
        try:
            driver.call("cuStreamEndCapture", stream)
        except Exception:  # noqa: BLE001 - report the launch error, not the aborted capture
            pass
        raise
    return driver.call("cuStreamEndCapture", stream)


class HostStep:
    """The runtime's bookkeeping for one host-op node of a plan: it re-prepares and re-captures
    only when the dims the op reads or its pointers changed (CudaExecutor keeps one per node).

        step = HostStep(op)                                  # at load
        changed = step.update(env, out_ptr, in_ptrs, stream) # every run, before launching/patching
        step.launch(stream)                                  # eager runs
        child = step.graph(stream)                           # CUDA-graph runs: a CUgraph for
                                                             # cuGraphAddChildGraphNode, or when `changed`
                                                             # for cuGraphExecChildGraphNodeSetParams
    """

    def __init__(self, op: HostOp):
        self.op = op
        self._key: tuple | None = None
        self._args: tuple = ()
        self._graph = None

    def update(self, env: Mapping[str, int], out_ptr: int, in_ptrs: Sequence[int], stream) -> bool:
        key = (self.op.signature(env), int(out_ptr), tuple(int(p) for p in in_ptrs))
        if key == self._key:
            return False
        self.op.prepare(env, out_ptr, in_ptrs, stream)
        self._drop()
        self._key, self._args = key, (int(out_ptr), tuple(int(p) for p in in_ptrs), dict(env))
        return True

    def _drop(self) -> None:
        if self._graph is not None:  # child-graph nodes hold clones: the old capture can go
            from luminal.backends.cuda import driver

            graph, self._graph = self._graph, None
            driver.call("cuGraphDestroy", graph)

    def launch(self, stream) -> None:
        out_ptr, in_ptrs, env = self._args
        self.op.launch(stream, out_ptr, in_ptrs, env)

    def graph(self, stream):
        """The op's work as a CUgraph for the current key, captured once per change. The step owns
        it (destroyed at the next change): cuGraphAddChildGraphNode and
        cuGraphExecChildGraphNodeSetParams copy it."""
        if self._graph is None:
            out_ptr, in_ptrs, env = self._args
            self._graph = capture(self.op, stream, out_ptr, in_ptrs, env)
        return self._graph


def host_ops() -> tuple[type[HostOp], ...]:
    """Every host op class (imported lazily: loading them never touches a GPU or a library)."""
    from luminal.backends.cuda.host.cublaslt import CUBLASLT_OPS

    return CUBLASLT_OPS


__all__ = ["HostOp", "HostStep", "capture", "host_ops"]
