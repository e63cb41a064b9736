"""torch <-> luminal values: dtypes, zero-copy numpy views of torch tensors, outputs back to torch.

CPU tensors become numpy arrays over the same memory (bf16 and fp8 through ml_dtypes views of the
same bytes, since numpy has no such dtypes); nothing is copied unless the tensor is not contiguous.
CUDA tensors are not converted here: the CUDA runtime addresses their memory directly
(luminal/torch/device.py).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import torch

from luminal.dtype import DType
from luminal.errors import DTypeError

TORCH_TO_LM: dict[torch.dtype, DType] = {
    torch.float32: DType.f32, torch.float16: DType.f16, torch.bfloat16: DType.bf16, torch.float64: DType.f64,
    torch.int8: DType.i8, torch.int16: DType.i16, torch.int32: DType.i32, torch.int64: DType.i64,
    torch.uint8: DType.u8, torch.bool: DType.bool,
    torch.float8_e4m3fn: DType.f8e4m3, torch.float8_e5m2: DType.f8e5m2,
}  # fmt: skip
LM_TO_TORCH = {v: k for k, v in TORCH_TO_LM.items()}

# dtypes numpy cannot hold natively: reinterpret the bytes as an integer of the same width
_VIA_BITS = {
    torch.bfloat16: (torch.int16, ml_dtypes.bfloat16),
    torch.float8_e4m3fn: (torch.uint8, ml_dtypes.float8_e4m3fn),
    torch.float8_e5m2: (torch.uint8, ml_dtypes.float8_e5m2),
}


def lm_dtype(dt: torch.dtype) -> DType:
    try:
        return TORCH_TO_LM[dt]
    except KeyError:
        supported = sorted(map(str, TORCH_TO_LM))
        raise DTypeError(f"torch dtype {dt} has no luminal equivalent (supported: {supported})") from None


def torch_dtype(dt: DType) -> torch.dtype:
    return LM_TO_TORCH[dt]


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """A numpy view of a CPU tensor's memory (a contiguous copy only if the tensor is strided)."""
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()  # host fallback for device tensors; the CUDA path binds device pointers instead
    if not t.is_contiguous():
        t = t.contiguous()
    bits = _VIA_BITS.get(t.dtype)
    if bits is not None:
        return t.view(bits[0]).numpy().view(bits[1])
    return t.numpy()


def from_numpy(a: np.ndarray, dtype: torch.dtype, device: torch.device | None = None) -> torch.Tensor:
    """A torch tensor of `dtype` over `a`'s memory (then moved to `device` when that is not the CPU)."""
    a = np.require(a, requirements="C")  # keeps 0-d arrays 0-d (ascontiguousarray would not)
    bits = _VIA_BITS.get(dtype)
    if bits is not None:
        t = torch.from_numpy(a.view(np.int16 if bits[0] == torch.int16 else np.uint8)).view(dtype)
    else:
        t = torch.from_numpy(a)
        if t.dtype != dtype:
            t = t.to(dtype)
    if device is not None and device.type != "cpu":
        t = t.to(device)
    return t
