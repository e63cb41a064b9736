"""Checkpoint reading for the model zoo: config.json, lazily memory-mapped safetensors (one file or
a sharded index), CTranslate2 `model.bin`, the tensor-by-tensor weight stream a loader binds from,
and the errors a bad checkpoint raises.

Safetensors headers are validated as strictly as the `safetensors` library does (its `validate`:
every tensor's byte range matches its shape and dtype, the ranges tile the data section from 0 to
the end of the file without gaps or overlaps) before any tensor is mapped, so a damaged file is a
`CheckpointError` naming the file and tensor, never a neighbour's bytes read as weights.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterator, Mapping
from pathlib import Path

import ml_dtypes
import numpy as np

from luminal.errors import LuminalError


class CheckpointError(LuminalError, ValueError):
    """A model directory that cannot be loaded: missing or damaged files, tensors or config keys."""


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
_MAX_HEADER = 100_000_000  # the safetensors library's limit on the JSON header


class Config(dict):
    """A config.json object; a missing required key (`c["hidden_size"]`) is a CheckpointError naming
    the file and the key. `.get` keeps its default for optional keys."""

    path: Path

    def __missing__(self, key: str):
        raise CheckpointError(f"{self.path}: required key {key!r} is missing")


def read_json(path: str | Path) -> object:
    """A JSON file's value; a missing file, invalid JSON or bytes that are not UTF-8 are a CheckpointError
    naming the file."""
    path = Path(path)
    try:
        return json.loads(path.read_bytes())
    except OSError as e:
        raise CheckpointError(f"{path}: cannot read ({e.strerror or e})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path}: not valid JSON ({e})") from None


def read_config(model_dir: str | Path, name: str = "config.json") -> Config:
    path = Path(model_dir) / name
    if not path.is_file():
        raise CheckpointError(f"{model_dir}: no {name} (expected a Hugging Face model directory)")
    c = read_json(path)
    if not isinstance(c, dict):
        raise CheckpointError(f"{path}: expected a JSON object, got {type(c).__name__}")
    out = Config(c)
    out.path = path
    return out


def _header(path: Path) -> tuple[dict[str, dict], int]:
    """({tensor: info}, start of the data section) of a safetensors file, validated."""
    size = path.stat().st_size
    if size < 8:
        raise CheckpointError(f"{path}: truncated safetensors file ({size} bytes; the 8-byte header size is missing)")
    with open(path, "rb") as fh:
        (n,) = struct.unpack("<Q", fh.read(8))
        if n > _MAX_HEADER or 8 + n > size:
            raise CheckpointError(f"{path}: header of {n} bytes does not fit in the {size}-byte file (truncated?)")
        raw = fh.read(n)
    try:
        header = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path}: safetensors header is not valid JSON ({e})") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: safetensors header is a JSON {type(header).__name__}, not an object")
    meta = header.pop("__metadata__", None)
    if meta is not None and not (isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values())):
        raise CheckpointError(f"{path}: __metadata__ must map strings to strings")
    end = 0
    for name, info in sorted(header.items(), key=lambda kv: _offsets(path, *kv)):
        begin, stop = _offsets(path, name, info)
        dt = _dtype(path, name, info)
        shape = info.get("shape")
        if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
            raise CheckpointError(f"{path}: tensor {name!r} has shape {shape!r} (expected a list of ints >= 0)")
        if begin != end:
            what = "overlaps the previous tensor" if begin < end else f"leaves a gap after byte {end}"
            raise CheckpointError(f"{path}: tensor {name!r} data_offsets {[begin, stop]} {what}")
        want = math.prod(shape) * dt.itemsize
        if stop - begin != want:
            raise CheckpointError(f"{path}: tensor {name!r} ({info['dtype']} {shape}) needs {want} bytes but its "
                                  f"data_offsets {[begin, stop]} span {stop - begin}")  # fmt: skip
        end = stop
    if 8 + n + end != size:
        raise CheckpointError(f"{path}: the tensors cover {end} data bytes but the file holds {size - 8 - n} "
                              f"(truncated or trailing bytes)")  # fmt: skip
    return header, 8 + n


def _offsets(path: Path, name: str, info: object) -> tuple[int, int]:
    off = info.get("data_offsets") if isinstance(info, dict) else None
    if not (isinstance(off, list) and len(off) == 2 and all(type(o) is int for o in off) and 0 <= off[0] <= off[1]):
        raise CheckpointError(f"{path}: tensor {name!r} has data_offsets {off!r} (expected [begin, end], ints)")
    return off[0], off[1]


def _dtype(path: Path, name: str, info: dict) -> np.dtype:
    dt = info.get("dtype")
    if dt not in _ST_DTYPES:
        raise CheckpointError(f"{path}: tensor {name!r} has dtype {dt!r}, not one of {sorted(_ST_DTYPES)}")
    return np.dtype(_ST_DTYPES[dt])


class Safetensors:
    """Tensors of one or many .safetensors files, mapped on first access (headers are read and
    validated up front, no tensor data)."""

    def __init__(self, files: list[Path]):
        self._where: dict[str, tuple[Path, dict, int]] = {}
        for f in files:
            try:
                header, base = _header(Path(f))
            except OSError as e:  # unreadable, a directory, vanished
                raise CheckpointError(f"{f}: cannot read ({e.strerror or e})") from None
            for name, info in header.items():
                self._where[name] = (Path(f), info, base)

    @classmethod
    def from_dir(cls, model_dir: str | Path) -> Safetensors:
        d = Path(model_dir)
        index = d / "model.safetensors.index.json"
        if not index.is_file():
            files = sorted(d.glob("*.safetensors"))
            if not files:
                raise CheckpointError(f"{model_dir}: no *.safetensors files")
            return cls(files)
        wmap = read_json(index)
        wmap = wmap.get("weight_map") if isinstance(wmap, dict) else None
        if not isinstance(wmap, dict) or not all(isinstance(v, str) for v in wmap.values()):
            raise CheckpointError(f"{index}: expected an object with a 'weight_map' of tensor name -> shard file")
        for name, shard in wmap.items():
            if not (d / shard).is_file():
                raise CheckpointError(f"{index}: shard {shard!r} (holding e.g. {name!r}) does not exist")
        st = cls([d / s for s in sorted(set(wmap.values()))])
        for name, shard in wmap.items():
            if name not in st or st._where[name][0].name != Path(shard).name:
                raise CheckpointError(f"{index}: maps tensor {name!r} to {shard!r}, which does not hold it")
        return st

    def __contains__(self, name: str) -> bool:
        return name in self._where

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._where[name][1]["shape"])

    def dtype(self, name: str) -> np.dtype:
        return np.dtype(_ST_DTYPES[self._where[name][1]["dtype"]])

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

    def shape(self, name: str) -> tuple[int, ...]:
        return shape_of(self.source, self._find(name))

    def dtype(self, name: str) -> np.dtype:
        return dtype_of(self.source, self._find(name))


def shape_of(source, name: str) -> tuple[int, ...]:
    """A tensor's shape without reading it (safetensors headers), or from the array (dicts)."""
    return tuple(source.shape(name)) if hasattr(source, "shape") else tuple(source[name].shape)


def dtype_of(source, name: str) -> np.dtype:
    return source.dtype(name) if hasattr(source, "dtype") else np.dtype(source[name].dtype)


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

    try:
        version = u("<I")
        if version != 6:
            raise CheckpointError(f"{path}: CTranslate2 binary version {version} (only version 6 is supported)")
        spec, _rev, n = s(), u("<I"), u("<I")
        out: dict[str, np.ndarray] = {}
        for _ in range(n):
            name = s()
            dims = tuple(u("<I") for _ in range(u("<B")))
            code = u("<B")
            if code not in _CT2_DTYPES:
                raise CheckpointError(f"{path}: variable {name!r} has unknown dtype code {code}")
            dt, nbytes = np.dtype(_CT2_DTYPES[code]), u("<I")
            if nbytes != math.prod(dims) * dt.itemsize or o + nbytes > buf.size:
                raise CheckpointError(f"{path}: variable {name!r} {list(dims)} of {dt} does not match its "
                                      f"{nbytes} bytes at offset {o} (file of {buf.size} bytes)")  # fmt: skip
            out[name] = np.frombuffer(buf, dt, count=nbytes // dt.itemsize, offset=o).reshape(dims)
            o += nbytes
        for _ in range(u("<I")):
            alias, target = s(), s()
            if target not in out:
                raise CheckpointError(f"{path}: alias {alias!r} names no variable {target!r}")
            out[alias] = out[target]
    except (struct.error, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path}: truncated or damaged CTranslate2 file at byte {o} ({e})") from None
    return spec, out


def check(names: Mapping[str, tuple[tuple[int, ...], np.dtype]], source) -> None:
    """Every graph input in `names` ({name: (shape, dtype)}) is in `source` with that shape (read from
    headers, no tensor data): says which tensor is missing or mis-shaped."""
    missing = [n for n in names if n not in source]
    if missing:
        have = sorted(source)[:6]
        more = f" (and {len(missing) - 1} more missing)" if missing[1:] else ""
        raise MissingWeightError(f"checkpoint has no tensor {missing[0]!r}{more}; it has e.g. {have}")
    for name, (shape, _) in names.items():
        got = shape_of(source, name)
        if got != tuple(shape):
            raise WeightShapeError(f"tensor {name!r} has shape {list(got)} but the config implies {list(shape)}")


def stream(names: Mapping[str, tuple[tuple[int, ...], np.dtype]], source, progress=None
           ) -> Iterator[tuple[str, np.ndarray]]:  # fmt: skip
    """(name, array in the graph's dtype) for every graph input in `names`, one tensor at a time, after
    `check`. A tensor already in that dtype is the memory-mapped file itself (no copy); another dtype
    is converted on its own (round to nearest even; bf16 via ml_dtypes), so a loader that binds and
    drops each array never holds more than one converted tensor."""
    check(names, source)
    items = progress(names.items(), "loading weights") if progress else names.items()
    for name, (_, dt) in items:
        yield name, convert(source[name], dt, f"tensor {name!r}")


def convert(arr: np.ndarray, dt: np.dtype, name: str = "tensor") -> np.ndarray:
    """`arr` as a C-contiguous array of `dt`: a view when it already is one, else one rounding (two
    16/8-bit float formats meet through f32, which holds both exactly). A finite value that overflows
    the target (a bf16 weight beyond f16's 65504) is a CheckpointError, not a silent inf."""
    dt = np.dtype(dt)
    if arr.dtype == dt:
        return np.ascontiguousarray(arr)
    if arr.dtype.kind in "fV" and arr.dtype.itemsize < 4:  # f16, bf16, fp8 (ml_dtypes are kind "V")
        arr = np.asarray(arr, np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        out = np.ascontiguousarray(arr, dtype=dt)
    if dt.kind in "fV" and dt.itemsize < 4 and dt != ml_dtypes.bfloat16:
        bad = ~np.isfinite(out.astype(np.float32)) & np.isfinite(arr)
        if bad.any():
            big = float(np.abs(np.asarray(arr, np.float64)[bad]).max())
            raise CheckpointError(f"{name}: a value of magnitude {big:g} does not fit in {dt.name} "
                                  f"(load in bf16 or f32)")  # fmt: skip
    return out
