"""Audio front end for Whisper in numpy: WAV reading, the Slaney mel filterbank (computed, as
librosa.filters.mel builds it) and Whisper's log-mel spectrogram (25 ms Hann window, 10 ms hop)."""

from __future__ import annotations

import wave
from functools import cache
from pathlib import Path

import numpy as np

from luminal.errors import InputError

SAMPLE_RATE, N_FFT, HOP = 16000, 400, 160
CHUNK_SAMPLES = 30 * SAMPLE_RATE  # Whisper always sees 30 s windows (3000 frames)


def read_wav(path: str | Path) -> np.ndarray:
    """Mono float32 samples in [-1, 1] of a 16 kHz PCM WAV file (channels are averaged)."""
    try:
        with wave.open(str(path), "rb") as w:
            rate, width, channels, n = w.getframerate(), w.getsampwidth(), w.getnchannels(), w.getnframes()
            raw = w.readframes(n)
    except (OSError, EOFError, wave.Error) as e:
        raise InputError(f"{path}: cannot read as a PCM WAV file ({type(e).__name__}: {e})") from None
    if rate != SAMPLE_RATE:
        raise InputError(f"{path}: sample rate {rate} Hz; Whisper needs {SAMPLE_RATE} Hz audio (resample it first)")
    if width == 2:
        x = np.frombuffer(raw, "<i2").astype(np.float32) / 32768.0
    elif width == 4:
        x = np.frombuffer(raw, "<i4").astype(np.float32) / 2147483648.0
    elif width == 1:
        x = (np.frombuffer(raw, np.uint8).astype(np.float32) - 128.0) / 128.0
    else:
        raise InputError(f"{path}: {8 * width}-bit samples are not supported (use 8, 16 or 32-bit PCM)")
    return x.reshape(-1, channels).mean(axis=1).astype(np.float32)


def _hz_to_mel(f: np.ndarray) -> np.ndarray:
    """Slaney mel scale: linear below 1 kHz (3 mels per 200 Hz), logarithmic above."""
    f = np.asarray(f, np.float64)
    logstep = np.log(6.4) / 27.0
    return np.where(f >= 1000.0, 15.0 + np.log(np.maximum(f, 1e-10) / 1000.0) / logstep, f / (200.0 / 3))


def _mel_to_hz(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, np.float64)
    logstep = np.log(6.4) / 27.0
    return np.where(m >= 15.0, 1000.0 * np.exp(logstep * (m - 15.0)), m * (200.0 / 3))


@cache
def mel_filters(n_mels: int = 80, sr: int = SAMPLE_RATE, n_fft: int = N_FFT) -> np.ndarray:
    """(n_mels, n_fft/2+1) triangular filters on the Slaney scale with Slaney area normalisation
    (= librosa.filters.mel(sr=sr, n_fft=n_fft, n_mels=n_mels), which Whisper ships as mel_filters.npz)."""
    fft_freqs = np.fft.rfftfreq(n_fft, 1.0 / sr)
    mel_f = _mel_to_hz(np.linspace(_hz_to_mel(0.0), _hz_to_mel(sr / 2.0), n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = mel_f[:, None] - fft_freqs[None, :]
    lower = -ramps[:-2] / fdiff[:-1, None]
    upper = ramps[2:] / fdiff[1:, None]
    weights = np.maximum(0.0, np.minimum(lower, upper))
    weights *= (2.0 / (mel_f[2 : n_mels + 2] - mel_f[:n_mels]))[:, None]
    return weights.astype(np.float32)


def log_mel(audio: np.ndarray, n_mels: int = 80, n_frames: int = 3000) -> np.ndarray:
    """(n_mels, n_frames) Whisper log-mel features of 16 kHz audio, zero-padded (or cut) to
    n_frames * 10 ms like `whisper.audio.log_mel_spectrogram(pad_or_trim(audio))`."""
    audio = np.asarray(audio, np.float32).reshape(-1)
    n_samples = n_frames * HOP
    audio = np.pad(audio[:n_samples], (0, max(0, n_samples - audio.size)))
    window = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(N_FFT) / N_FFT)).astype(np.float32)  # periodic Hann
    x = np.pad(audio, (N_FFT // 2, N_FFT // 2), mode="reflect")  # torch.stft(center=True)
    n = 1 + (x.size - N_FFT) // HOP
    frames = np.lib.stride_tricks.as_strided(x, (n, N_FFT), (x.strides[0] * HOP, x.strides[0]))
    power = (np.abs(np.fft.rfft(frames * window, axis=-1)) ** 2)[:-1].T  # (n_fft/2+1, n_frames)
    mel = np.log10(np.maximum(mel_filters(n_mels) @ power, 1e-10))
    mel = np.maximum(mel, mel.max() - 8.0)
    return ((mel + 4.0) / 4.0).astype(np.float32)
