from __future__ import annotations

import json
import struct

import ml_dtypes
import numpy as np
import pytest

import luminal as lm
from luminal.models import gemma, llama, qwen, whisper
from luminal.models.checkpoint import (
    CheckpointError,
    MissingWeightError,
    Safetensors,
    UnsupportedModelError,
    WeightShapeError,
    read_ctranslate2,
)  # fmt: skip


def _write_safetensors(path, tensors: dict[str, np.ndarray]) -> None:
    names = {np.dtype(np.float32): "F32", np.dtype(ml_dtypes.bfloat16): "BF16", np.dtype(np.int32): "I32"}
    header, blobs, off = {}, [], 0
    for k, a in tensors.items():
        b = np.ascontiguousarray(a).tobytes()
        header[k] = {"dtype": names[a.dtype], "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def test_safetensors_sharded_index_and_bf16_are_read_lazily(tmp_path):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([1.5, -2.0], ml_dtypes.bfloat16)
    _write_safetensors(tmp_path / "model-00001-of-00002.safetensors", {"a": a})
    _write_safetensors(tmp_path / "model-00002-of-00002.safetensors", {"b": b})
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    st = Safetensors.from_dir(tmp_path)
    assert set(st) == {"a", "b"} and st.shape("a") == (2, 3)
    assert isinstance(st["a"], np.memmap)
    np.testing.assert_array_equal(st["a"], a)
    np.testing.assert_array_equal(st["b"].astype(np.float32), [1.5, -2.0])


def test_ctranslate2_reader_resolves_aliases(tmp_path):
    def s(x: str) -> bytes:
        return struct.pack("<H", len(x) + 1) + x.encode() + b"\0"

    w = np.arange(4, dtype=np.float16).reshape(2, 2)
    body = struct.pack("<I", 6) + s("WhisperSpec") + struct.pack("<II", 3, 1)
    body += (
        s("decoder/embeddings/weight") + struct.pack("<BII", 2, 2, 2) + struct.pack("<BI", 4, w.nbytes) + w.tobytes()
    )
    body += struct.pack("<I", 1) + s("decoder/projection/weight") + s("decoder/embeddings/weight")
    (tmp_path / "model.bin").write_bytes(body)
    spec, tensors = read_ctranslate2(tmp_path / "model.bin")
    assert spec == "WhisperSpec"
    np.testing.assert_array_equal(tensors["decoder/projection/weight"], w)


def test_missing_tensor_names_the_tensor(copy_golden):
    d = copy_golden("llama")
    st = Safetensors.from_dir(d)
    tensors = {k: np.array(st[k]) for k in st if k != "model.layers.1.mlp.up_proj.weight"}
    _write_safetensors(d / "model.safetensors", tensors)
    with pytest.raises(MissingWeightError, match="model.layers.1.mlp.up_proj.weight"):
        llama.load(d, backend="reference")


def test_wrong_shape_names_tensor_and_shapes(copy_golden):
    d = copy_golden("qwen3")
    st = Safetensors.from_dir(d)
    tensors = {k: np.array(st[k]) for k in st}
    tensors["model.layers.0.self_attn.q_norm.weight"] = np.ones(8, np.float32)
    _write_safetensors(d / "model.safetensors", tensors)
    with pytest.raises(WeightShapeError, match=r"q_norm.weight.*\[8\].*\[16\]"):
        qwen.load(d, backend="reference")


def test_config_that_disagrees_with_weights_is_a_shape_error(copy_golden):
    d = copy_golden("gemma3")
    cfg = json.loads((d / "config.json").read_text())
    cfg["intermediate_size"] = 96
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(WeightShapeError, match="mlp"):
        gemma.load(d, backend="reference")


@pytest.mark.parametrize("load", [llama.load, qwen.load, gemma.load, whisper.load])
def test_unknown_architecture_is_rejected(copy_golden, load):
    d = copy_golden("llama")
    cfg = json.loads((d / "config.json").read_text())
    cfg["architectures"] = ["MambaForCausalLM"]
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UnsupportedModelError, match="MambaForCausalLM"):
        load(d, backend="reference")


def test_not_a_model_directory(tmp_path):
    with pytest.raises(CheckpointError, match="config.json"):
        llama.load(tmp_path, backend="reference")
    assert issubclass(CheckpointError, lm.LuminalError)


def test_bf16_checkpoint_loads_and_stays_close(copy_golden):
    from tests.models.conftest import golden

    d = copy_golden("llama")
    st = Safetensors.from_dir(d)
    _write_safetensors(d / "model.safetensors", {k: np.array(st[k]).astype(ml_dtypes.bfloat16) for k in st})
    g = golden("llama")
    logits = llama.load(d, backend="reference").logits(g["input_ids"].tolist())
    err = np.abs(logits - g["logits"]).max()
    assert 1e-5 < err < 3e-2  # bf16 rounding of the weights shows, but only at bf16 scale
