"""The goldens on the GPU: every zoo model in f32, bf16 and f16 on the cuda backend against
transformers in that dtype, with the CPU tests' tolerances (docs/numerics.md, "Models in bf16 and f16").
The reference-backend versions of these checks are in test_llama/qwen/gemma/whisper.py."""

from __future__ import annotations

import pytest

from luminal.models import gemma, llama, qwen
from tests.models.decoder_checks import check_golden
from tests.models.test_whisper import test_whisper_golden_encoder_prefill_and_decode as whisper_golden

pytestmark = pytest.mark.cuda
DTYPES = ["f32", "bf16", "f16"]
TEXT = {"llama": llama.load, "qwen2": qwen.load, "qwen3": qwen.load, "gemma3": gemma.load}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(TEXT))
def test_text_golden_on_cuda(name, dtype):
    check_golden(TEXT[name], name, dtype, backend="cuda")


@pytest.mark.parametrize("dtype", DTYPES)
def test_whisper_golden_on_cuda(dtype):
    whisper_golden(dtype, backend="cuda")
