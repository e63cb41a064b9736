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


# -- damaged files: every one is a CheckpointError naming the file (and tensor or key) ------------
def _raw(path, header: dict, data: bytes) -> None:
    h = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(h)) + h + data)


def _library_rejects(path) -> bool:
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="np"):
            return False
    except SafetensorError:
        return True


A = {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}
B = {"dtype": "F32", "shape": [4], "data_offsets": [24, 40]}
BAD_HEADERS = {
    "size mismatch": ({"a": A, "b": {**B, "shape": [3]}}, 40, r"'b'.*needs 12 bytes.*span 16"),
    "overlap": ({"a": A, "b": {**B, "shape": [6], "data_offsets": [16, 40]}}, 40, r"'b'.*overlaps"),
    "gap": ({"a": A, "b": {**B, "data_offsets": [28, 44]}}, 44, r"'b'.*gap after byte 24"),
    "past the end": ({"a": A, "b": {**B, "shape": [8], "data_offsets": [24, 56]}}, 40, r"cover 56 data.*holds 40"),
    "trailing bytes": ({"a": A, "b": B}, 48, r"cover 40 data bytes.*holds 48"),
    "reversed offsets": ({"a": A, "b": {**B, "data_offsets": [40, 24]}}, 40, r"'b'.*data_offsets \[40, 24\]"),
    "bad shape": ({"a": A, "b": {**B, "shape": [-4]}}, 40, r"'b'.*shape \[-4\]"),
    "no offsets": ({"a": A, "b": {"dtype": "F32", "shape": [4]}}, 40, r"'b'.*data_offsets None"),
}


@pytest.mark.parametrize("case", sorted(BAD_HEADERS))
def test_safetensors_header_validated_as_strictly_as_the_library(tmp_path, case):
    header, nbytes, msg = BAD_HEADERS[case]
    path = tmp_path / "model.safetensors"
    _raw(path, header, bytes(nbytes))
    assert _library_rejects(path)  # the reference for "strict": safetensors refuses the file too
    with pytest.raises(CheckpointError, match=msg) as e:
        Safetensors([path])
    assert str(path) in str(e.value)


def test_unsupported_dtype_names_tensor_and_dtype(tmp_path):
    path = tmp_path / "model.safetensors"
    _raw(path, {"a": A, "u": {"dtype": "U32", "shape": [4], "data_offsets": [24, 40]}}, bytes(40))
    with pytest.raises(CheckpointError, match=r"model.safetensors: tensor 'u' has dtype 'U32', not one of"):
        Safetensors([path])


@pytest.mark.parametrize("header", [b"[1, 2]", b"{not json", b"\xff\xfe{}"])
def test_header_that_is_not_a_json_object(tmp_path, header):
    path = tmp_path / "model.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header)
    with pytest.raises(CheckpointError, match="model.safetensors: safetensors header"):
        Safetensors([path])


def test_every_truncation_of_a_valid_file_is_a_checkpoint_error(tmp_path):
    good = tmp_path / "good.safetensors"
    _write_safetensors(good, {"a": np.ones((2, 3), np.float32), "b": np.arange(4, dtype=np.int32)})
    raw = good.read_bytes()
    np.testing.assert_array_equal(Safetensors([good])["b"], np.arange(4))
    cut = tmp_path / "cut.safetensors"
    for n in range(len(raw)):  # 0 bytes, inside the size prefix, mid-header, mid-data
        cut.write_bytes(raw[:n])
        with pytest.raises(CheckpointError, match="cut.safetensors"):
            Safetensors([cut])


def test_sharded_index_errors_name_the_index_and_shard(tmp_path):
    _write_safetensors(tmp_path / "model-1.safetensors", {"a": np.ones(2, np.float32)})
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"a": "model-1.safetensors", "b": "model-2.safetensors"}}))
    with pytest.raises(CheckpointError, match=r"index.json: shard 'model-2.safetensors' \(holding e.g. 'b'\)"):
        Safetensors.from_dir(tmp_path)
    index.write_text(json.dumps({"weight_map": {"a": "model-1.safetensors", "c": "model-1.safetensors"}}))
    with pytest.raises(CheckpointError, match=r"maps tensor 'c' to 'model-1.safetensors', which does not hold it"):
        Safetensors.from_dir(tmp_path)
    index.write_text("{")
    with pytest.raises(CheckpointError, match="index.json: not valid JSON"):
        Safetensors.from_dir(tmp_path)
    index.write_text("[]")
    with pytest.raises(CheckpointError, match="weight_map"):
        Safetensors.from_dir(tmp_path)


@pytest.mark.parametrize(
    ("text", "msg"),
    [("{", r"config.json: not valid JSON"), ("[1]", r"config.json: expected a JSON object, got list"),
     ("drop:num_attention_heads", r"config.json: required key 'num_attention_heads' is missing"),
     ("set:hidden_size=abc", r"config.json: bad value 'abc' for the model's dim")],
)  # fmt: skip
def test_bad_config_json_is_a_checkpoint_error(copy_golden, text, msg):
    d = copy_golden("llama")
    cfg = json.loads((d / "config.json").read_text())
    if text.startswith("drop:"):
        del cfg[text[5:]]
        text = json.dumps(cfg)
    elif text.startswith("set:"):
        key, value = text[4:].split("=")
        text = json.dumps({**cfg, key: value})
    (d / "config.json").write_text(text)
    with pytest.raises(CheckpointError, match=msg):
        llama.load(d, backend="reference")


def test_multimodal_text_config_with_a_bad_value(copy_golden):
    d = copy_golden("gemma3")
    text = {**json.loads((d / "config.json").read_text()), "num_hidden_layers": None}
    cfg = {"architectures": ["Gemma3ForConditionalGeneration"], "text_config": text}
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="config.json: bad value None for the model's n_layers"):
        gemma.load(d, backend="reference")


def test_whisper_config_missing_a_key(copy_golden):
    d = copy_golden("whisper")
    cfg = json.loads((d / "config.json").read_text())
    del cfg["encoder_layers"]
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="required key 'encoder_layers'"):
        whisper.load(d, backend="reference")


def test_truncated_ctranslate2_file(tmp_path):
    w = np.arange(4, dtype=np.float16)
    body = struct.pack("<I", 6) + struct.pack("<H", 4) + b"abc\0" + struct.pack("<II", 3, 1)
    body += struct.pack("<H", 2) + b"w\0" + struct.pack("<BI", 1, 4) + struct.pack("<BI", 4, w.nbytes) + w.tobytes()
    body += struct.pack("<I", 0)
    (tmp_path / "model.bin").write_bytes(body)
    assert read_ctranslate2(tmp_path / "model.bin")[1]["w"].tolist() == w.tolist()
    for n in range(1, len(body)):
        (tmp_path / "model.bin").write_bytes(body[:n])
        with pytest.raises(CheckpointError, match="model.bin"):
            read_ctranslate2(tmp_path / "model.bin")


def test_files_the_library_writes_are_read_back(tmp_path):
    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    tensors = {"f32": rng.standard_normal((3, 5)).astype(np.float32), "f16": np.arange(7, dtype=np.float16),
               "i64": np.array([-(2**40), 3]), "u8": np.arange(5, dtype=np.uint8), "b": np.array([True, False]),
               "empty": np.zeros((0, 4), np.float32), "scalar": np.array(2.5, np.float64)}  # fmt: skip
    save_file(tensors, tmp_path / "m.safetensors", metadata={"format": "pt"})
    st = Safetensors([tmp_path / "m.safetensors"])
    assert set(st) == set(tensors)
    for k, v in tensors.items():
        assert st[k].dtype == v.dtype and st.shape(k) == v.shape, k
        np.testing.assert_array_equal(st[k], v, err_msg=k)


def test_unreadable_safetensors_path(tmp_path):
    (tmp_path / "model.safetensors").mkdir()  # a directory where a file should be
    with pytest.raises(CheckpointError, match="model.safetensors: cannot read"):
        Safetensors.from_dir(tmp_path)
