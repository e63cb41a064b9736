"""CUDA driver layer (cuda.bindings.driver only): device, context, stream, memory, modules, launches,
events and CUDA graphs. Every call goes through `call()`, which checks the CUresult and raises
BackendError naming the driver function that failed.

Nothing here is imported by `import luminal`; `device_available()` answers without raising on a
machine without a GPU or driver.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from luminal.errors import BackendError

log = logging.getLogger(__name__)


@functools.cache
def _drv():
    try:
        from cuda.bindings import driver
    except ImportError as e:
        raise BackendError(f"the cuda backend needs cuda-bindings (pip install 'luminal[cuda]'): {e}") from None
    return driver


def check(result: tuple, name: str) -> Any:
    """Unpack a driver call's `(CUresult, *values)`; raise BackendError(name, error) unless success."""
    drv = _drv()
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != drv.CUresult.CUDA_SUCCESS:
        _, ename = drv.cuGetErrorName(err)
        _, estr = drv.cuGetErrorString(err)
        ename = ename.decode() if isinstance(ename, bytes) else str(err)
        estr = estr.decode() if isinstance(estr, bytes) else ""
        raise BackendError(f"CUDA driver call {name} failed: {ename} ({estr})")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def call(name: str, *args) -> Any:
    """Call `cuda.bindings.driver.<name>(*args)` and check its status."""
    fn = getattr(_drv(), name)
    try:
        result = fn(*args)
    except BackendError:
        raise
    except Exception as e:  # noqa: BLE001 - e.g. DynamicLibNotFoundError when there is no libcuda
        raise BackendError(f"CUDA driver call {name} failed: {type(e).__name__}: {e}") from e
    return check(result, name)


@functools.cache
def device_available() -> bool:
    """True when a CUDA driver and at least one device are usable (never raises)."""
    try:
        call("cuInit", 0)
        return call("cuDeviceGetCount") > 0
    except Exception as e:  # noqa: BLE001 - any failure means "no usable GPU"
        log.debug("no usable CUDA device: %s", e)
        return False


@dataclass
class Device:
    """Device 0 with its primary context made current, and one compute stream."""

    ordinal: int
    handle: Any
    ctx: Any
    stream: Any
    name: str
    arch: str  # "sm_90"

    def synchronize(self) -> None:
        call("cuStreamSynchronize", self.stream)


_DEVICE: Device | None = None


def device() -> Device:
    """The process-wide device (created on first use). BackendError when no GPU is usable."""
    global _DEVICE
    if _DEVICE is not None:
        call("cuCtxSetCurrent", _DEVICE.ctx)
        return _DEVICE
    if not device_available():
        raise BackendError(
            "backend 'cuda' needs an NVIDIA GPU with a working driver, and none is usable on this machine; "
            "use backend='reference' (or 'auto')"
        )
    drv = _drv()
    call("cuInit", 0)
    dev = call("cuDeviceGet", 0)
    ctx = call("cuDevicePrimaryCtxRetain", dev)
    call("cuCtxSetCurrent", ctx)
    attr = drv.CUdevice_attribute
    major = call("cuDeviceGetAttribute", attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
    minor = call("cuDeviceGetAttribute", attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)
    raw = call("cuDeviceGetName", 256, dev)
    name = raw.split(b"\0", 1)[0].decode() if isinstance(raw, bytes) else str(raw)
    stream = call("cuStreamCreate", int(drv.CUstream_flags.CU_STREAM_NON_BLOCKING))
    _DEVICE = Device(0, dev, ctx, stream, name, f"sm_{major}{minor}")
    log.info("cuda device 0: %s (%s)", name, _DEVICE.arch)
    return _DEVICE


# -- memory -----------------------------------------------------------------------------------------
class DeviceBuffer:
    """An owned device allocation (freed when dropped)."""

    __slots__ = ("ptr", "nbytes", "__weakref__")

    def __init__(self, nbytes: int):
        self.nbytes = int(nbytes)
        self.ptr = int(call("cuMemAlloc", max(self.nbytes, 1)))

    def free(self) -> None:
        if self.ptr:
            try:
                call("cuMemFree", self.ptr)
            finally:
                self.ptr = 0

    def __del__(self):
        try:
            self.free()
        except Exception:  # noqa: BLE001 - interpreter shutdown / context already gone
            pass

    def __repr__(self) -> str:
        return f"DeviceBuffer(0x{self.ptr:x}, {self.nbytes} bytes)"


def htod(dst: int, arr: np.ndarray, stream) -> None:
    """Copy a C-contiguous host array to device address `dst` (stream-ordered)."""
    if arr.nbytes:
        call("cuMemcpyHtoDAsync", dst, arr.ctypes.data, arr.nbytes, stream)


def dtoh(arr: np.ndarray, src: int, stream) -> None:
    """Copy device memory into a C-contiguous host array (stream-ordered; sync before reading)."""
    if arr.nbytes:
        call("cuMemcpyDtoHAsync", arr.ctypes.data, src, arr.nbytes, stream)


def dtod(dst: int, src: int, nbytes: int, stream) -> None:
    if nbytes:
        call("cuMemcpyDtoDAsync", dst, src, nbytes, stream)


def memset8(dst: int, value: int, nbytes: int, stream) -> None:
    if nbytes:
        call("cuMemsetD8Async", dst, value, nbytes, stream)


# -- modules and launches ---------------------------------------------------------------------------
STATIC_SHARED = 48 << 10  # shared bytes per block a launch gets without the function's opt-in


class Module:
    """A loaded cubin; `function(name, shared)` looks up a kernel entry."""

    def __init__(self, image: bytes):
        self.handle = call("cuModuleLoadData", image)
        self._funcs: dict[str, Any] = {}
        self._shared: dict[str, int] = {}  # the opt-in each function has

    def function(self, name: str, shared: int = 0):
        """The entry `name`, opted in to `shared` bytes of dynamic shared memory per block (its
        launches' Launch.shared) where that is beyond the 48 KB every function gets."""
        f = self._funcs.get(name)
        if f is None:
            f = self._funcs[name] = call("cuModuleGetFunction", self.handle, name.encode())
        if shared > max(STATIC_SHARED, self._shared.get(name, 0)):
            self._shared[name] = shared
            attr = _drv().CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            call("cuFuncSetAttribute", f, attr, shared)
        return f


class Params:
    """A kernel's argument block: every argument is a 64-bit value (device pointers)."""

    __slots__ = ("values", "addrs")

    def __init__(self, values: Sequence[int]):
        self.values = np.array(values, dtype=np.uint64)
        base = self.values.ctypes.data
        self.addrs = np.array([base + 8 * i for i in range(len(values))], dtype=np.uint64)

    @property
    def ptr(self) -> int:
        return self.addrs.ctypes.data


def launch(func, grid: int, block: int, shared: int, params: Params, stream) -> None:
    call("cuLaunchKernel", func, grid, 1, 1, block, 1, 1, shared, stream, params.ptr, 0)


def kernel_node_params(func, grid: int, block: int, shared: int, params: Params):
    p = _drv().CUDA_KERNEL_NODE_PARAMS()
    p.func = func
    p.gridDimX, p.gridDimY, p.gridDimZ = grid, 1, 1
    p.blockDimX, p.blockDimY, p.blockDimZ = block, 1, 1
    p.sharedMemBytes = shared
    p.kernelParams = params.ptr
    p.extra = 0
    return p


# -- CUDA graphs ------------------------------------------------------------------------------------
KERNEL, HOST = "kernel", "host"  # node kinds: a kernel node, a child graph (a captured host op)
FULL, PROGRAMMATIC = "full", "programmatic"  # edge kinds


def edge_kind(prev: str, node: str, pdl: bool) -> str:
    """How a node depends on the node before it in the chain. Kernel -> kernel under PDL: a
    programmatic edge (the second kernel may launch once every block of the first has passed its
    griddepcontrol.launch_dependents, and waits for the first's completion itself: kernel.py
    PDL_SYNC). Any edge touching a child graph (library calls that know nothing of PDL): full."""
    return PROGRAMMATIC if pdl and prev == KERNEL and node == KERNEL else FULL


def pdl_enabled() -> bool:
    """LUMINAL_PDL (default on) and a device that has griddepcontrol (sm_90+; the kernels are compiled
    for the device's arch, so below it their PDL sync compiles to nothing and PDL would race)."""
    from luminal import flags

    return flags.pdl() and not _PDL_FAILED and int(device().arch.removeprefix("sm_")) >= 90


_PDL_FAILED: list[str] = []  # why the driver refused a programmatic edge (then no graph asks again)


@functools.cache
def _programmatic_edge():
    drv = _drv()
    e = drv.CUgraphEdgeData()
    e.type = drv.CUgraphDependencyType.CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC
    # fires when every block has passed griddepcontrol.launch_dependents (or exited), not at the end
    e.from_port = getattr(drv, "CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC", 1)
    e.to_port = 0
    return e


class Graph:
    """A CUDA graph built node by node: a chain, each node depending on the previous one, kernel ->
    kernel edges programmatic under PDL (`edge_kind`; `pdl` None = `pdl_enabled()`). `edges` records
    (from, to, kind) per edge."""

    def __init__(self, pdl: bool | None = None):
        self.pdl = pdl_enabled() if pdl is None else pdl
        self.handle = call("cuGraphCreate", 0)
        self.nodes: list[Any] = []
        self.kinds: list[str] = []
        self.edges: list[tuple[int, int, str]] = []
        self.exec = None

    def _add(self, kind: str, make) -> int:
        """Add a node made by `make(dependencies)` after the last one, with the edge `edge_kind` says."""
        if not self.nodes:
            node = make([])
        elif edge_kind(self.kinds[-1], kind, self.pdl) == FULL:
            node = make([self.nodes[-1]])
            self.edges.append((len(self.nodes) - 1, len(self.nodes), FULL))
        else:  # cuGraphAddKernelNode takes no edge data: the node first, then its programmatic edge
            node, prev, kind_ = make([]), self.nodes[-1], PROGRAMMATIC
            try:
                call("cuGraphAddDependencies", self.handle, [prev], [node], [_programmatic_edge()], 1)
            except BackendError as e:
                self._no_pdl(e)
                call("cuGraphAddDependencies", self.handle, [prev], [node], None, 1)
                kind_ = FULL
            self.edges.append((len(self.nodes) - 1, len(self.nodes), kind_))
        self.nodes.append(node)
        self.kinds.append(kind)
        return len(self.nodes) - 1

    def add_kernel(self, params) -> int:
        return self._add(KERNEL, lambda deps: call("cuGraphAddKernelNode", self.handle, deps, len(deps), params))

    def add_child(self, child) -> int:
        """Add a child-graph node (the driver clones `child`, which is destroyed here)."""
        try:
            return self._add(HOST, lambda deps: call("cuGraphAddChildGraphNode", self.handle, deps, len(deps), child))
        finally:
            call("cuGraphDestroy", child)

    def set_child(self, index: int, child) -> None:
        """Replace the instantiated child graph of node `index` (same topology; `child` is destroyed)."""
        try:
            call("cuGraphExecChildGraphNodeSetParams", self.exec, self.nodes[index], child)
        finally:
            call("cuGraphDestroy", child)

    def instantiate(self) -> None:
        """Instantiate; if the driver refuses the graph with programmatic edges, make them full (logged)."""
        try:
            self.exec = call("cuGraphInstantiate", self.handle, 0)
        except BackendError as e:
            prog = [(a, b) for a, b, k in self.edges if k == PROGRAMMATIC]
            if not prog:
                raise
            self._no_pdl(e)
            for a, b in prog:
                ends = (self.handle, [self.nodes[a]], [self.nodes[b]])
                call("cuGraphRemoveDependencies", *ends, [_programmatic_edge()], 1)
                call("cuGraphAddDependencies", *ends, None, 1)
            self.edges = [(a, b, FULL) for a, b, _ in self.edges]
            self.exec = call("cuGraphInstantiate", self.handle, 0)

    def _no_pdl(self, err: BackendError) -> None:
        if not _PDL_FAILED:
            log.warning("CUDA graphs without programmatic dependent launch (full edges): %s", err)
        _PDL_FAILED.append(str(err))
        self.pdl = False

    def set_kernel_params(self, index: int, params) -> None:
        call("cuGraphExecKernelNodeSetParams", self.exec, self.nodes[index], params)

    def launch(self, stream) -> None:
        call("cuGraphLaunch", self.exec, stream)

    def destroy(self) -> None:
        if self.exec is not None:
            call("cuGraphExecDestroy", self.exec)
            self.exec = None
        if self.handle is not None:
            call("cuGraphDestroy", self.handle)
            self.handle = None

    def __del__(self):
        try:
            self.destroy()
        except Exception:  # noqa: BLE001
            pass


# -- events -----------------------------------------------------------------------------------------
class Event:
    def __init__(self):
        self.handle = call("cuEventCreate", int(_drv().CUevent_flags.CU_EVENT_DEFAULT))

    def record(self, stream) -> None:
        call("cuEventRecord", self.handle, stream)

    def synchronize(self) -> None:
        call("cuEventSynchronize", self.handle)

    def elapsed_ms(self, start: Event) -> float:
        return float(call("cuEventElapsedTime", start.handle, self.handle))

    def __del__(self):
        try:
            call("cuEventDestroy", self.handle)
        except Exception:  # noqa: BLE001
            pass
