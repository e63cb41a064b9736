"""Checkpoint reading for the model zoo: config.json, lazily memory-mapped safetensors (one file or
a sharded index), CTranslate2 `model.bin`, and the errors a bad checkpoint raises."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator, Mapping
from pathlib import Path

import ml_dtypes
import numpy as np

from luminal.errors import LuminalError


class CheckpointError(LuminalError, ValueError):
    """A model directory that cannot be loaded: missing files, tensors, or an unknown architecture."""


class MissingWeightError(CheckpointError):
    """The graph needs a tensor the checkpoint does not have."""


class WeightShapeError(CheckpointError):
    """A checkpoint tensor's shape differs from the one the config implies."""


class UnsupportedModelError(CheckpointError):
    """config.json names an architecture (or option) this model file does not implement."""


_ST_DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16,
    "F8_E4M3": ml_dtypes.float8_e4m3fn, "F8_E5M2": ml_dtypes.float8_e5m2, "I64": np.int64, "I32": np.int32,
    "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_,
}  # fmt: skip


def read_config(model_dir: str | Path, name: str = "config.json") -> dict:
    path = Path(model_dir) / name
    if not path.is_file():
        raise CheckpointError(f"{model_dir}: no config.json (expected a Hugging Face model directory)")
    return json.loads(path.read_text())


class Safetensors:
    """Tensors of one or many .safetensors files, mapped on first access (nothing is read up front)."""

    def __init__(self, files: list[Path]):
        self._where: dict[str, tuple[Path, dict, int]] = {}
        for f in files:
            with open(f, "rb") as fh:
                (n,) = struct.unpack("<Q", fh.read(8))
                header = json.loads(fh.read(n))
            header.pop("__metadata__", None)
            for name, info in header.items():
                self._where[name] = (f, info, 8 + n)

    @classmethod
    def from_dir(cls, model_dir: str | Path) -> Safetensors:
        d = Path(model_dir)
        index = d / "model.safetensors.index.json"
        if index.is_file():
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
            files = [d / s for s in shards]
        else:
            files = sorted(d.glob("*.safetensors"))
        if not files:
            raise CheckpointError(f"{model_dir}: no *.safetensors files")
        return cls(files)

    def __contains__(self, name: str) -> bool:
        return name in self._where

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._where[name][1]["shape"])

    def __getitem__(self, name: str) -> np.ndarray:
        path, info, base = self._where[name]
        dt = np.dtype(_ST_DTYPES[info["dtype"]])
        start, end = info["data_offsets"]
        shape = tuple(info["shape"])
        if end == start:
            return np.zeros(shape, dt)
        return np.memmap(path, dtype=dt, mode="r", offset=base + start, shape=shape)


class Renamed:
    """A tensor source seen through other names: graph name -> the first of `candidates(name)` it has
    (e.g. the text tower of a multimodal checkpoint under `model.language_model.`)."""

    def __init__(self, source, candidates):
        self.source, self.candidates = source, candidates

    def _find(self, name: str) -> str | None:
        return next((c for c in self.candidates(name) if c in self.source), None)

    def __contains__(self, name: str) -> bool:
        return self._find(name) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self.source)

    def __getitem__(self, name: str) -> np.ndarray:
        found = self._find(name)
        if found is None:
            raise KeyError(name)
        return self.source[found]


_CT2_DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16, 5: ml_dtypes.bfloat16}


def read_ctranslate2(path: str | Path) -> tuple[str, dict[str, np.ndarray]]:
    """(spec name, {variable: array}) of a CTranslate2 `model.bin` (binary version 6); aliases resolved."""
    buf = np.memmap(path, dtype=np.uint8, mode="r")
    o = 0

    def u(fmt: str) -> int:
        nonlocal o
        (v,) = struct.unpack_from(fmt, buf, o)
        o += struct.calcsize(fmt)
        return v

    def s() -> str:
        nonlocal o
        n = u("<H")
        r = bytes(buf[o : o + n - 1]).decode()
        o += n
        return r

    version = u("<I")
    if version != 6:
        raise CheckpointError(f"{path}: CTranslate2 binary version {version} (only version 6 is supported)")
    spec, _rev, n = s(), u("<I"), u("<I")
    out: dict[str, np.ndarray] = {}
    for _ in range(n):
        name = s()
        dims = tuple(u("<I") for _ in range(u("<B")))
        dt = np.dtype(_CT2_DTYPES[u("<B")])
        nbytes = u("<I")
        out[name] = np.frombuffer(buf, dt, count=nbytes // dt.itemsize, offset=o).reshape(dims)
        o += nbytes
    for _ in range(u("<I")):
        alias, target = s(), s()
        out[alias] = out[target]
    return spec, out


def bind(names: Mapping[str, tuple[tuple[int, ...], np.dtype]], source, progress=None) -> dict[str, np.ndarray]:
    """Arrays for every graph input in `names` ({name: (shape, dtype)}) from `source` (name -> array
    lookups), converted to the graph's dtype; says which tensor is missing or mis-shaped."""
    missing = [n for n in names if n not in source]
    if missing:
        have = sorted(source)[:6]
        more = f" (and {len(missing) - 1} more missing)" if missing[1:] else ""
        raise MissingWeightError(f"checkpoint has no tensor {missing[0]!r}{more}; it has e.g. {have}")
    out = {}
    items = progress(names.items(), "loading weights") if progress else names.items()
    for name, (shape, dt) in items:
        arr = source[name]
        if tuple(arr.shape) != tuple(shape):
            raise WeightShapeError(f"tensor {name!r} has shape {list(arr.shape)} but the config implies {list(shape)}")
        out[name] = np.ascontiguousarray(arr, dtype=dt)
    return out
