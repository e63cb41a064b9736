"""HLIR op base: frozen dataclass fields double as the op's egglog constructor signature.

Every HLIR op is a frozen dataclass whose class name is its egglog constructor and whose field
order is the constructor's argument order. Its inputs (other nodes' buffers) are not fields: the
graph stores them as an ordered tuple. Each op also carries its exact reference semantics in
numpy (`reference`), run by the reference backend: inputs are flat physical buffers, the result is
a flat contiguous buffer.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from typing import ClassVar

import numpy as np

from luminal.dtype import DType
from luminal.shape.expr import Expression
from luminal.shape.tracker import ShapeTracker

EList = tuple[Expression, ...]
Env = Mapping[str, int]

# python field type -> egglog sort
SORTS = {"Expression": "Expression", "EList": "EList", "DType": "DType", "int": "i64", "str": "String",
         "float": "f64", "bool": "bool"}  # fmt: skip


class Op:
    """Base of HLIR (and backend LLIR) ops. Subclasses are frozen dataclasses."""

    n_inputs: ClassVar[int] = 0
    # "IR" ops are graph-level (Input, Output); "OpKind" ops are wrapped as (Op <kind> <inputs>).
    sort_class: ClassVar[str] = "OpKind"

    @classmethod
    def field_sorts(cls) -> list[tuple[str, str]]:
        hints = typing.get_type_hints(cls, globalns={"EList": EList, **globals()})
        out = []
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            t = hints[f.name]
            name = "EList" if t == EList else getattr(t, "__name__", str(t))
            out.append((f.name, SORTS[name]))
        return out

    def fields(self) -> tuple:
        return tuple(getattr(self, f.name) for f in dataclasses.fields(self))  # type: ignore[arg-type]

    def out_dtype(self, in_dtypes: tuple[DType, ...]) -> DType:
        return in_dtypes[0]

    def out_size(self) -> Expression:
        """Number of elements of the op's (contiguous) output buffer."""
        raise NotImplementedError

    def reference(self, ins: list[np.ndarray], in_dtypes: tuple[DType, ...], env: Env) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} has no reference semantics")


def view(buf: np.ndarray, dims: EList, strides: EList, env: Env) -> np.ndarray:
    """Read a strided view of a flat buffer as an array of the view's logical shape."""
    tr = ShapeTracker(dims, strides)
    if tr.is_contiguous():
        n = int(tr.n_elements().evaluate(env))
        return buf[:n].reshape(tuple(int(d.evaluate(env)) for d in dims))
    return buf[tr.physical_indices(env)]


def compute_dtype(dt: DType) -> np.dtype:
    """The numpy type arithmetic on `dt` is done in: 16-bit and 8-bit floats compute in f32."""
    if dt.is_float:
        return np.dtype(np.float64) if dt == DType.f64 else np.dtype(np.float32)
    return dt.np
