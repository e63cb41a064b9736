"""CompiledModel: the object `Graph.compile` returns. Checks inputs, infers dims, runs the plan."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from luminal.dtype import to_dtype
from luminal.errors import BackendError, DTypeError, InputError, ShapeError
from luminal.graph import Graph, empty_max_message
from luminal.shape.expr import Expression

log = logging.getLogger(__name__)


class CompiledModel:
    """A graph compiled for one backend. `run(inputs, dims=None)` -> {output name: np.ndarray}."""

    def __init__(self, graph: Graph, executor: Any, backend: str, stats: dict, plans: list | None = None):
        self.backend = backend
        self.stats = stats
        self.plans = list(plans or [])  # the chosen LLIR graph(s), one per dim bucket
        self._executor = executor
        self._inputs = {n: (graph.input_shapes[n], graph.nodes[i].dtype) for n, i in graph.inputs.items()}
        self._outputs = {n: (graph.output_shapes[n], graph.nodes[i].dtype) for n, i in graph.outputs.items()}
        self._persistent_names = frozenset(graph.persistent)
        if hasattr(executor, "set_persistent"):  # device backends keep these inputs resident (cuda)
            executor.set_persistent(self._persistent_names)
        if isinstance(getattr(executor, "stats", None), dict):  # live runtime stats (cuda: arena_bytes, ...)
            self.stats["runtime"] = executor.stats
        self._bound: dict[str, np.ndarray] = {}
        self._dims = graph.dims()
        self._max_lengths = graph.max_lengths()  # symbolic lengths of max reductions: none may be 0 at run time

    @property
    def input_names(self) -> list[str]:
        return list(self._inputs)

    @property
    def output_names(self) -> list[str]:
        return list(self._outputs)

    def run(self, inputs: Mapping[str, np.ndarray], dims: Mapping[str, int] | None = None) -> dict[str, np.ndarray]:
        """Run once. Persistent inputs given once stay bound; dims are inferred from input shapes."""
        feed = self._check_inputs(inputs)
        env = self._infer_dims(feed, {} if dims is None else dims)
        t0 = time.perf_counter()
        outs = self._executor.run(feed, env)
        self.stats["time_last_run_s"] = time.perf_counter() - t0
        result: dict[str, np.ndarray] = {}
        for name, (shape, dt) in self._outputs.items():
            concrete = tuple(int(d.evaluate(env)) for d in shape)
            arr = np.asarray(outs[name]).reshape(concrete).astype(dt.np, copy=False)
            # outputs are the caller's to modify: never hand out a view of an input (a bound weight)
            # or of another output
            if any(np.may_share_memory(arr, a) for a in (*feed.values(), *result.values())):
                arr = arr.copy()
            result[name] = arr
        return result

    __call__ = run

    def viz(self, path: str | Path, bucket: int = 0) -> Path:
        """Render the chosen plan (LLIR) of `bucket` as .html, .dot or .json (by suffix)."""
        if not self.plans:
            raise BackendError("this model has no LLIR plan to render")
        return self.plans[bucket].save(path)

    # -- input checking ---------------------------------------------------------------------------
    def _check_inputs(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if not isinstance(inputs, Mapping):
            raise InputError(f"run() takes a dict of input name -> numpy array, got {type(inputs).__name__}")
        bad_keys = [k for k in inputs if not isinstance(k, str)]
        if bad_keys:
            raise InputError(
                f"input names are strings; got the key(s) {bad_keys!r}. This model's inputs are {sorted(self._inputs)}"
            )
        extra = set(inputs) - set(self._inputs)
        if extra:
            raise InputError(f"unknown inputs {sorted(extra)}; this model's inputs are {sorted(self._inputs)}")
        feed: dict[str, np.ndarray] = {}
        for name, (shape, dt) in self._inputs.items():
            if name in inputs:
                arr = inputs[name]
                if not isinstance(arr, np.ndarray):
                    raise InputError(f"input {name!r}: expected a numpy array of {dt}, got {type(arr).__name__}")
                if arr.dtype != dt.np:
                    try:  # name the array's dtype in luminal's spelling: that is what a declaration would take
                        have = f" or declare the input with dtype={to_dtype(arr.dtype).value!r}"
                    except DTypeError:
                        have = ""
                    raise InputError(
                        f"input {name!r}: dtype {arr.dtype} but the graph declares {dt} "
                        f"(convert with arr.astype({dt.np.name!r}){have})"
                    )
                if arr.ndim != len(shape):
                    raise InputError(f"input {name!r}: rank {arr.ndim} array for declared shape {list(shape)}")
                feed[name] = arr
                if name in self._persistent_names:
                    self._bound[name] = arr
            elif name in self._bound:
                feed[name] = self._bound[name]
            else:
                hint = " (it is persistent: pass it once, it stays bound)" if name in self._persistent_names else ""
                raise InputError(f"missing input {name!r} of shape {list(shape)} and dtype {dt}{hint}")
        return feed

    def _infer_dims(self, feed: Mapping[str, np.ndarray], dims: Mapping[str, int]) -> dict[str, int]:
        if not isinstance(dims, Mapping):
            raise InputError(f"dims must be a dict of dim name -> int (dims={{'s': 3}}), got {type(dims).__name__}")
        env: dict[str, int] = {}
        for k, v in dims.items():
            if not isinstance(k, str):
                raise InputError(f"dims: dim names are strings, got the key {k!r} ({type(k).__name__})")
            if not isinstance(v, (int, np.integer)) or isinstance(v, (bool, np.bool_)) or v < 0:
                raise InputError(f"dims[{k!r}] = {v!r}: dims must be non-negative ints")
            env[k] = int(v)
        for name, arr in feed.items():
            for ax, (d, n) in enumerate(zip(self._inputs[name][0], arr.shape, strict=True)):
                if d.op == "var":
                    prev = env.setdefault(d.args[0], int(n))
                    if prev != n:
                        raise InputError(
                            f"input {name!r} axis {ax}: size {n} but dim '{d.args[0]}' is already {prev} "
                            f"(from another input or dims=)"
                        )
        for name, arr in feed.items():
            shape = self._inputs[name][0]
            want = tuple(_eval(d, env, name) for d in shape)
            if want != arr.shape:
                raise InputError(f"input {name!r}: shape {arr.shape} but the graph expects {list(shape)} = {want}")
        missing = sorted(self._dims - set(env))
        if missing:
            raise InputError(f"dims {missing} are not determined by any input shape; pass dims={{'{missing[0]}': n}}")
        for n in self._max_lengths:
            if n.dims() <= env.keys() and int(n.evaluate(env)) == 0:
                at = ", ".join(f"{d}={env[d]}" for d in sorted(n.dims()))
                raise ShapeError(empty_max_message(f"an axis of length {n} = 0 (at {at})"))
        return env


def _eval(d: Expression, env: Mapping[str, int], name: str) -> int:
    try:
        return int(d.evaluate(env))
    except InputError as e:
        raise InputError(f"input {name!r}: {e}") from None


def compile_graph(graph: Graph, backend: str = "auto", **options) -> CompiledModel:
    """Compile `graph` for `backend` ("reference" | "cuda" | "auto") through the e-graph pipeline.

    Options (luminal.egraph.compile.CompileOptions): seed, search_budget, search_time_s,
    population, buckets={"s": [(1, 1), (2, 4096)]}, profile_dims, cache.
    """
    from luminal.backends.base import get_backend
    from luminal.egraph.compile import CompileOptions, compile_plans

    if not graph.outputs:
        raise InputError("the graph has no outputs: mark at least one tensor with .output(name)")
    opts = CompileOptions.from_kwargs(options)
    if backend == "auto":
        backend = "cuda" if _cuda_usable() else "reference"
    if not isinstance(backend, str):
        raise BackendError(f"backend must be a name ('reference', 'cuda', 'auto'), got {type(backend).__name__}")
    be = get_backend(backend)
    executor, plans, stats = compile_plans(graph, be, opts)
    return CompiledModel(graph, executor, be.name, stats, plans)


def _cuda_usable() -> bool:
    try:
        from luminal.backends.cuda.driver import device_available
    except ImportError:
        return False
    return device_available()
