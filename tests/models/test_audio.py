from __future__ import annotations

import wave

import numpy as np
import pytest

from luminal.errors import InputError
from luminal.models.audio import log_mel, mel_filters, read_wav


def test_mel_filters_match_whisper_mel_filters_npz():
    # values read from openai-whisper's assets/mel_filters.npz ("mel_80", librosa's Slaney filterbank)
    f = mel_filters(80)
    assert f.shape == (80, 201) and f.dtype == np.float32
    assert np.count_nonzero(f) == 391
    for (m, k), v in {(0, 1): 0.02486259490251541, (3, 3): 0.0059724655002355576, (44, 51): 0.007608682848513126,
                      (73, 149): 0.0014076193328946829, (79, 199): 0.0004487590049393475}.items():  # fmt: skip
        assert f[m, k] == pytest.approx(v, rel=1e-6)
    assert float(f.sum()) == pytest.approx(1.9990241527557373, rel=1e-6)
    assert float((f * np.arange(201)).sum()) == pytest.approx(119.87237175975315, rel=1e-6)


def test_log_mel_pads_to_whole_window_and_normalizes():
    t = np.arange(16000) / 16000
    mel = log_mel((0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32))
    assert mel.shape == (80, 3000) and mel.dtype == np.float32
    assert mel.max() == pytest.approx(mel.max()) and mel.max() - mel.min() <= 2.0 + 1e-6  # clamp at max - 8 (/4)
    peak = mel[:, 10:90].mean(axis=1).argmax()
    assert 3 <= peak <= 12  # 440 Hz falls in the low mel bands


def test_read_wav_rejects_other_sample_rates(tmp_path):
    p = tmp_path / "x.wav"
    with wave.open(str(p), "wb") as w:
        w.setnchannels(2), w.setsampwidth(2), w.setframerate(8000)
        w.writeframes(np.zeros(20, "<i2").tobytes())
    with pytest.raises(InputError, match="8000 Hz"):
        read_wav(p)


def test_read_wav_averages_channels(tmp_path):
    p = tmp_path / "x.wav"
    with wave.open(str(p), "wb") as w:
        w.setnchannels(2), w.setsampwidth(2), w.setframerate(16000)
        w.writeframes(np.array([16384, 0, -16384, -16384], "<i2").tobytes())
    np.testing.assert_allclose(read_wav(p), [0.25, -0.5])
