"""DType: the element types of luminal tensors, with their numpy, egglog and CUDA spellings."""

from __future__ import annotations

import enum

import ml_dtypes
import numpy as np

from luminal.errors import DTypeError


class DType(enum.Enum):
    """An element type. `value` is the canonical short name (`"f32"`)."""

    f32 = "f32"
    f16 = "f16"
    bf16 = "bf16"
    f64 = "f64"
    i8 = "i8"
    i16 = "i16"
    i32 = "i32"
    i64 = "i64"
    u8 = "u8"
    bool = "bool"
    f8e4m3 = "f8e4m3"
    f8e5m2 = "f8e5m2"

    # -- classification ---------------------------------------------------------------------------
    @property
    def is_float(self) -> bool:
        return self in _FLOATS

    @property
    def is_int(self) -> bool:
        return self in _INTS

    @property
    def is_signed(self) -> bool:
        return self.is_float or self in (DType.i8, DType.i16, DType.i32, DType.i64)

    @property
    def bits(self) -> int:
        return _BITS[self]

    @property
    def itemsize(self) -> int:
        return max(1, self.bits // 8)

    # -- spellings --------------------------------------------------------------------------------
    @property
    def np(self) -> np.dtype:
        """The numpy dtype that stores this type (bf16 and fp8 through ml_dtypes)."""
        return _NUMPY[self]

    @property
    def egglog(self) -> str:
        """The egglog constructor name of this dtype in the DType datatype."""
        return _EGGLOG[self]

    @property
    def cuda(self) -> str:
        """The CUDA C type that stores this dtype."""
        return _CUDA[self]

    def __repr__(self) -> str:
        return f"lm.{self.value}"

    __str__ = __repr__


_FLOATS = frozenset({DType.f32, DType.f16, DType.bf16, DType.f64, DType.f8e4m3, DType.f8e5m2})
_INTS = frozenset({DType.i8, DType.i16, DType.i32, DType.i64, DType.u8})
_BITS = {
    DType.f32: 32, DType.f16: 16, DType.bf16: 16, DType.f64: 64, DType.i8: 8, DType.i16: 16,
    DType.i32: 32, DType.i64: 64, DType.u8: 8, DType.bool: 8, DType.f8e4m3: 8, DType.f8e5m2: 8,
}  # fmt: skip
_NUMPY = {
    DType.f32: np.dtype(np.float32), DType.f16: np.dtype(np.float16),
    DType.bf16: np.dtype(ml_dtypes.bfloat16), DType.f64: np.dtype(np.float64),
    DType.i8: np.dtype(np.int8), DType.i16: np.dtype(np.int16), DType.i32: np.dtype(np.int32),
    DType.i64: np.dtype(np.int64), DType.u8: np.dtype(np.uint8), DType.bool: np.dtype(np.bool_),
    DType.f8e4m3: np.dtype(ml_dtypes.float8_e4m3fn), DType.f8e5m2: np.dtype(ml_dtypes.float8_e5m2),
}  # fmt: skip
_EGGLOG = {
    DType.f32: "F32", DType.f16: "F16", DType.bf16: "Bf16", DType.f64: "F64", DType.i8: "I8",
    DType.i16: "I16", DType.i32: "Int", DType.i64: "Int64", DType.u8: "U8", DType.bool: "Bool",
    DType.f8e4m3: "F8E4M3", DType.f8e5m2: "F8E5M2",
}  # fmt: skip
_CUDA = {
    DType.f32: "float", DType.f16: "__half", DType.bf16: "__nv_bfloat16", DType.f64: "double",
    DType.i8: "signed char", DType.i16: "short", DType.i32: "int", DType.i64: "long long",
    DType.u8: "unsigned char", DType.bool: "bool", DType.f8e4m3: "__nv_fp8_e4m3",
    DType.f8e5m2: "__nv_fp8_e5m2",
}  # fmt: skip
_FROM_NUMPY = {v: k for k, v in _NUMPY.items()}
_FROM_EGGLOG = {v: k for k, v in _EGGLOG.items()}
_ALIASES = {"float32": DType.f32, "float16": DType.f16, "bfloat16": DType.bf16, "float64": DType.f64,
            "int8": DType.i8, "int16": DType.i16, "int32": DType.i32, "int64": DType.i64,
            "uint8": DType.u8, "bool_": DType.bool, "half": DType.f16, "float": DType.f32}  # fmt: skip


def to_dtype(x: object) -> DType:
    """Accept a DType, its short name ("bf16"), a numpy dtype or type, or an egglog name."""
    if isinstance(x, DType):
        return x
    if isinstance(x, str):
        if x in DType.__members__:
            return DType[x]
        if x in _ALIASES:
            return _ALIASES[x]
        if x in _FROM_EGGLOG:
            return _FROM_EGGLOG[x]
    try:
        d = np.dtype(x)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        d = None
    if d is not None and d in _FROM_NUMPY:
        return _FROM_NUMPY[d]
    names = ", ".join(DType.__members__)
    raise DTypeError(f"unknown dtype {x!r}; use one of {names} (or a numpy dtype of one of them)")


def from_egglog(name: str) -> DType:
    """The DType of an egglog DType constructor name ("Bf16" -> bf16)."""
    try:
        return _FROM_EGGLOG[name]
    except KeyError:
        raise DTypeError(f"unknown egglog dtype {name!r}") from None


f32, f16, bf16, f64 = DType.f32, DType.f16, DType.bf16, DType.f64
i8, i16, i32, i64, u8 = DType.i8, DType.i16, DType.i32, DType.i64, DType.u8
bool_ = DType.bool
f8e4m3, f8e5m2 = DType.f8e4m3, DType.f8e5m2
