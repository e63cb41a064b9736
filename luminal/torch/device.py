"""torch CUDA tensors <-> the CUDA runtime: device addresses and stream ordering.

The runtime launches on its own stream (luminal/backends/cuda/driver.py: one non-blocking stream,
needed for CUDA-graph capture of library calls), torch on its current stream. `StreamOrder` puts
one run between them, without blocking the host:

1. an event recorded on torch's current stream, waited on by the runtime's stream: the run sees
   everything torch queued before the call (the token an `argmax` just wrote, a cache `reset()`);
2. the run (per-run inputs copied device-to-device into the runtime's buffers, the graph launch,
   state updated in the bound memory, outputs copied into torch tensors allocated on torch's stream);
3. an event recorded on the runtime's stream, waited on by torch's current stream: torch's next
   ops (on the outputs, on the updated cache) and its allocator's reuse of anything freed after
   the call come after the run.

Per-run input tensors are marked with `record_stream`, so torch's caching allocator does not hand
their memory out before the runtime's stream has read it even when the caller frees them on
another stream. Bound tensors (weights, caches) are kept alive by the Program while bound.
"""

from __future__ import annotations

import torch

from luminal.compiled import DeviceArray
from luminal.errors import InputError
from luminal.torch.tensors import lm_dtype


def device_array(t: torch.Tensor) -> DeviceArray:
    """The address, shape and dtype of a contiguous tensor's memory (no copy)."""
    if not t.is_contiguous():
        raise InputError(f"device_array needs a contiguous tensor, got strides {t.stride()}")
    if t.device.type == "cuda" and (t.device.index or 0) != 0:
        raise InputError(f"luminal's CUDA runtime uses device 0; this tensor is on {t.device}")
    return DeviceArray(int(t.data_ptr()), tuple(int(n) for n in t.shape), lm_dtype(t.dtype).np)


class StreamOrder:
    """`with order:` around a run orders the runtime's stream after torch's current stream and
    torch's current stream after the run (see the module docstring). A no-op off CUDA (the CPU
    tests' stand-in driver runs synchronously)."""

    def __init__(self, handle: int | None, device: torch.device):
        self.cuda = device.type == "cuda" and handle is not None
        if self.cuda:
            self.device = device
            self.stream = torch.cuda.ExternalStream(handle, device=device)
            self.before, self.after = torch.cuda.Event(), torch.cuda.Event()

    def reads(self, t: torch.Tensor) -> None:
        """`t` is read by the runtime's stream during the run."""
        if self.cuda:
            t.record_stream(self.stream)

    def __enter__(self) -> StreamOrder:
        if self.cuda:
            self.current = torch.cuda.current_stream(self.device)
            self.before.record(self.current)
            self.stream.wait_event(self.before)
        return self

    def __exit__(self, *exc) -> None:
        if self.cuda:
            self.after.record(self.stream)
            self.current.wait_event(self.after)
