"""Model zoo built on luminal: Llama, Qwen 2/3, Gemma 3 and Whisper, loading Hugging Face checkpoints."""
