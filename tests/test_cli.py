"""The `luminal` console script: subcommands reach the model CLIs and the demo, and a LuminalError
raised anywhere under them is one `error:` line with exit status 1."""

from __future__ import annotations

from pathlib import Path

import pytest

from luminal import cli

GOLDENS = Path(__file__).parent / "models" / "goldens"


def test_run_subcommand_reaches_the_model_cli(capsys):
    assert cli.main(["run", "llama", "--model", str(GOLDENS / "llama"), "--max-new-tokens", "1",
                     "--backend", "reference", "--dtype", "bf16"]) == 0  # fmt: skip
    assert "+ 1 tokens" in capsys.readouterr().err


def test_run_subcommand_error_during_generate_is_one_line():
    with pytest.raises(SystemExit) as e:
        cli.main(["run", "llama", "--model", str(GOLDENS / "llama"), "--max-seq", "6", "--backend", "reference"])
    assert e.value.code.startswith("error: ") and "capacity 6" in e.value.code and "\n" not in e.value.code


def test_whisper_cli_missing_audio_is_one_error_line():
    with pytest.raises(SystemExit) as e:
        cli.main(["run", "whisper", "--model", str(GOLDENS / "whisper"), "--audio", "/nonexistent.wav",
                  "--backend", "reference"])  # fmt: skip
    assert e.value.code.startswith("error: /nonexistent.wav: cannot read as a PCM WAV file")


def test_demo_error_is_one_line(monkeypatch):
    from luminal.models import whisper
    from luminal.models.checkpoint import CheckpointError

    def broken(*a, **k):
        raise CheckpointError("model.bin: truncated\nsecond line")

    monkeypatch.setattr(whisper, "load", broken)
    monkeypatch.setattr(whisper, "default_model_dir", lambda: Path("."))
    with pytest.raises(SystemExit) as e:
        cli.main(["demo", "--backend", "reference"])
    assert e.value.code == "error: model.bin: truncated second line"
