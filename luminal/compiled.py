"""CompiledModel: the object `Graph.compile` returns. Checks inputs, infers dims, runs the plan."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from luminal.dtype import to_dtype
from luminal.errors import BackendError, DTypeError, InputError, ShapeError
from luminal.graph import Graph, empty_max_message
from luminal.shape.expr import Expression

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DeviceArray:
    """A C-contiguous array in device memory the caller owns (a torch CUDA tensor's storage): its
    address, shape and numpy dtype. `run` copies per-run inputs given this way device-to-device on
    the runtime's stream (no host round trip) and writes `into` outputs the same way; the caller keeps
    the memory alive and orders its own stream against the runtime's (`device_stream`)."""

    ptr: int
    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


class CompiledModel:
    """A graph compiled for one backend. `run(inputs, dims=None, fetch=None)` -> {output name: np.ndarray}.

    Persistent inputs (weights, state) are bound once -- `bind(inputs)`, or passed to `run` -- and
    stay with the runtime (on the GPU for cuda); state an in-place op updates (a KV cache) is
    updated there and never copied back unless fetched. Every output of a run stays with the
    runtime until the next run: `fetch` names the ones to copy back (default: all), `sample` draws
    token ids from one of them where it lies."""

    def __init__(self, graph: Graph, executor: Any, backend: str, stats: dict, plans: list | None = None):
        self.backend = backend
        self.stats = stats
        self.plans = list(plans or [])  # the chosen LLIR graph(s), one per dim bucket
        self._executor = executor
        self._inputs = {n: (graph.input_shapes[n], graph.nodes[i].dtype) for n, i in graph.inputs.items()}
        self._outputs = {n: (graph.output_shapes[n], graph.nodes[i].dtype) for n, i in graph.outputs.items()}
        self._persistent_names = frozenset(graph.persistent)
        # the plans (one per dim bucket) share the bound persistent inputs
        self._plans = list(getattr(executor, "plans", None) or [({}, executor)])
        first = self._plans[0][1]
        for bounds, ex in self._plans:
            if hasattr(ex, "set_persistent"):
                ex.set_persistent(self._persistent_names, share=first)
            if bounds and hasattr(ex, "set_bounds"):
                ex.set_bounds(bounds)
        runtimes = [ex.stats for _, ex in self._plans if isinstance(getattr(ex, "stats", None), dict)]
        if runtimes:  # live runtime stats (cuda: arena_bytes, graph_builds, h2d_bytes, ...), one per bucket
            self.stats["runtime"] = runtimes[0]
            self.stats["runtimes"] = runtimes
        self._bound: dict[str, np.ndarray] = {}
        self._resident: set[str] = set()  # bound through bind(): held by the runtime only
        self._device_shapes: dict[str, tuple[int, ...]] = {}  # bound through bind_device(): their shapes
        self._last: Any = None  # the plan of the last run (outputs stay with it)
        self._last_env: dict[str, int] = {}
        self._dims = graph.dims()
        self._max_lengths = graph.max_lengths()  # symbolic lengths of max reductions: none may be 0 at run time

    @property
    def input_names(self) -> list[str]:
        return list(self._inputs)

    @property
    def output_names(self) -> list[str]:
        return list(self._outputs)

    def bind(self, inputs: Mapping[str, np.ndarray]) -> None:
        """Bind persistent inputs now (cuda: uploaded at once, no host reference kept; reference:
        the array is kept). Later runs use them without passing them; binding again replaces them."""
        if not isinstance(inputs, Mapping):
            raise InputError(f"bind() takes a dict of input name -> numpy array, got {type(inputs).__name__}")
        for name, arr in inputs.items():
            if name not in self._inputs:
                raise InputError(f"bind: unknown input {name!r}; this model's inputs are {sorted(self._inputs)}")
            if name not in self._persistent_names:
                raise InputError(f"bind: input {name!r} is not persistent (mark it .persist() to bind it once)")
            shape, dt = self._inputs[name]
            if not isinstance(arr, np.ndarray) or arr.dtype != dt.np:
                got = arr.dtype if isinstance(arr, np.ndarray) else type(arr).__name__
                raise InputError(f"bind: input {name!r} must be a numpy array of {dt}, got {got}")
            want = tuple(_eval(d, {}, name) if not d.dims() else None for d in shape)
            if arr.ndim != len(shape) or any(w is not None and w != n for w, n in zip(want, arr.shape, strict=True)):
                raise InputError(f"bind: input {name!r} has shape {arr.shape}, the graph declares {list(shape)}")
            ex = self._plans[0][1]
            if hasattr(ex, "bind"):  # held by the runtime (shared by every bucket's plan)
                self._bound.pop(name, None)
                ex.bind(name, arr)
                self._resident.add(name)
                self._device_shapes.pop(name, None)
            else:
                self._bound[name] = arr

    def bind_device(self, name: str, arr: DeviceArray) -> None:
        """Bind persistent input `name` to device memory the caller owns (no copy, no upload): the
        runtime reads it there, and state (an output named `name`) is written back there, in place
        when the plan updates it in place. The caller keeps it alive until it binds another address.
        cuda only."""
        ex = self._plans[0][1]
        if not self.binds_device:
            raise InputError(f"bind_device({name!r}): backend {self.backend!r} cannot address device memory")
        if name not in self._inputs or name not in self._persistent_names:
            raise InputError(f"bind_device: {name!r} is not a persistent input of this model")
        shape, dt = self._inputs[name]
        if not isinstance(arr, DeviceArray) or arr.dtype != dt.np:
            raise InputError(f"bind_device: input {name!r} must be a DeviceArray of {dt}, got {arr!r}")
        want = tuple(_eval(d, {}, name) if not d.dims() else None for d in shape)
        if arr.ndim != len(shape) or any(w is not None and w != n for w, n in zip(want, arr.shape, strict=True)):
            raise InputError(f"bind_device: input {name!r} has shape {arr.shape}, the graph declares {list(shape)}")
        self._bound.pop(name, None)
        ex.bind_device(name, arr.ptr, arr.nbytes)
        self._resident.add(name)
        if any(d.dims() for d in shape):  # checked against each run's dims (literal axes were checked here)
            self._device_shapes[name] = arr.shape
        else:  # (a decode step binds ~200 weights: re-checking their literal shapes cost ~1 ms a call)
            self._device_shapes.pop(name, None)

    @property
    def binds_device(self) -> bool:
        """True when the runtime addresses device memory (cuda): `bind_device`, DeviceArray inputs, `into`."""
        return hasattr(self._plans[0][1], "bind_device")

    @property
    def device_stream(self) -> int | None:
        """The runtime's CUDA stream handle, for ordering a caller's stream against it (None when
        the runtime has none: not cuda, or a stand-in driver)."""
        dev = getattr(self._plans[0][1], "dev", None)
        try:
            return None if dev is None else int(dev.stream)
        except (TypeError, ValueError):
            return None

    def run(self, inputs: Mapping[str, np.ndarray], dims: Mapping[str, int] | None = None,
            fetch: Sequence[str] | None = None,
            into: Mapping[str, DeviceArray] | None = None) -> dict[str, np.ndarray]:  # fmt: skip
        """Run once; return the outputs named in `fetch` (default: all). Persistent inputs given once
        stay bound; dims are inferred from input shapes. cuda: inputs may be `DeviceArray`s, and
        `into` names outputs to copy device-to-device into caller-owned memory (the others stay
        with the runtime until the next run)."""
        feed = self._check_inputs(inputs)
        env = self._infer_dims(feed, {} if dims is None else dims)
        if isinstance(fetch, str):  # list("logits") would be six one-letter names
            raise InputError(f"fetch takes a list of output names, like fetch=[{fetch!r}]; got the string {fetch!r}")
        names = list(self._outputs) if fetch is None else list(fetch)
        bad = [n for n in names if n not in self._outputs]
        if bad:
            raise InputError(f"fetch: unknown outputs {bad}; this model's outputs are {sorted(self._outputs)}")
        ex = self._executor.select(env) if hasattr(self._executor, "select") else self._executor
        t0 = time.perf_counter()
        if into:
            self._check_into(into, env)
            outs = ex.run(feed, env, fetch=names, into=into)
        elif fetch is not None:
            outs = ex.run(feed, env, fetch=names)
        else:
            outs = ex.run(feed, env)
        self.stats["time_last_run_s"] = time.perf_counter() - t0
        self._last, self._last_env = ex, env
        result: dict[str, np.ndarray] = {}
        for name in names:
            shape, dt = self._outputs[name]
            concrete = tuple(int(d.evaluate(env)) for d in shape)
            arr = np.asarray(outs[name]).reshape(concrete).astype(dt.np, copy=False)
            # outputs are the caller's to modify: never hand out a view of an input (a bound weight)
            # or of another output
            if any(np.may_share_memory(arr, a) for a in (*feed.values(), *result.values())):
                arr = arr.copy()
            result[name] = arr
        return result

    __call__ = run

    def sample(self, output: str, sampler, position: int) -> np.ndarray:
        """Token ids (rows,) i32 drawn from the last run's (rows, vocab) output `output` where it lies
        (on the GPU for cuda: only the ids come back); `sampler` is a luminal.sampling.Sampler and
        `position` the sampled token's position (the RNG counter). Same algorithm on every backend."""
        if self._last is None:
            raise InputError("sample() reads the outputs of the last run: call run() first")
        shape = self._outputs[output][0] if output in self._outputs else None
        if shape is None or len(shape) != 2:
            raise InputError(f"sample: {output!r} is not a (rows, vocab) output of this model")
        rows, cols = (int(d.evaluate(self._last_env)) for d in shape)
        return self._last.sample(output, rows, cols, sampler, int(position))

    def viz(self, path: str | Path, bucket: int = 0) -> Path:
        """Render the chosen plan (LLIR) of `bucket` as .html, .dot or .json (by suffix)."""
        if not self.plans:
            raise BackendError("this model has no LLIR plan to render")
        return self.plans[bucket].save(path)

    # -- input checking ---------------------------------------------------------------------------
    def _check_into(self, into: Mapping[str, DeviceArray], env: Mapping[str, int]) -> None:
        if not self.binds_device:
            raise InputError(f"into=: backend {self.backend!r} cannot write device memory")
        for name, arr in into.items():
            if name not in self._outputs:
                raise InputError(f"into: unknown output {name!r}; this model's outputs are {sorted(self._outputs)}")
            shape, dt = self._outputs[name]
            want = tuple(int(d.evaluate(env)) for d in shape)
            if not isinstance(arr, DeviceArray) or arr.dtype != dt.np or int(np.prod(arr.shape)) != int(np.prod(want)):
                raise InputError(f"into: output {name!r} is {list(want)} {dt}, got {arr!r}")

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
                if isinstance(arr, DeviceArray):
                    if name in self._persistent_names or not self.binds_device:
                        raise InputError(
                            f"input {name!r}: a DeviceArray is a per-run input of a cuda model "
                            "(bind persistent inputs with bind_device)"
                        )
                elif not isinstance(arr, np.ndarray):
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
                    self._device_shapes.pop(name, None)
            elif name in self._bound:
                feed[name] = self._bound[name]
            elif name in self._resident:
                continue
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
        for name, have in self._device_shapes.items():  # device-bound: the dims must fit what was bound
            if name not in feed and all(d.dims() <= env.keys() for d in self._inputs[name][0]):
                want = tuple(_eval(d, env, name) for d in self._inputs[name][0])
                if want != have:
                    raise InputError(f"input {name!r}: bound with shape {have}, these dims make it {want}")
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
    t = time.perf_counter()
    be = get_backend(backend)  # cuda: the driver, its context and NVRTC load here (warm compiles pay it too)
    t_backend = time.perf_counter() - t
    executor, plans, stats = compile_plans(graph, be, opts, backend_s=t_backend)
    return CompiledModel(graph, executor, be.name, stats, plans)


def _cuda_usable() -> bool:
    try:
        from luminal.backends.cuda.driver import device_available
    except ImportError:
        return False
    return device_available()
