"""The reduce-overhead HF llama peer of bench/torch_frontend.py without luminal imported: does
torch.compile(mode="reduce-overhead") on a StaticCache decode crash by itself (it segfaulted with
--peer-only, session 10)? Prints its compile and TPOT."""

import statistics
import time

import torch
import transformers

cfg = transformers.LlamaConfig(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                               num_attention_heads=32, num_key_value_heads=8, head_dim=64, rope_theta=500000.0,
                               tie_word_embeddings=True, max_position_embeddings=4096)  # fmt: skip
torch._dynamo.config.specialize_float = True
torch.manual_seed(0)
dev = torch.device("cuda")
model = transformers.LlamaForCausalLM(cfg).to(device=dev, dtype=torch.bfloat16).eval()
prompt = torch.randint(0, cfg.vocab_size, (1, 32), device=dev)


def run(m, new):
    cache = transformers.StaticCache(config=cfg, max_cache_len=104)
    out = m(input_ids=prompt, past_key_values=cache, use_cache=True, cache_position=torch.arange(32, device=dev))
    tok, steps = out.logits[:, -1:].argmax(-1), []
    for pos in range(32, 32 + new - 1):
        t0 = time.perf_counter()
        out = m(input_ids=tok, past_key_values=cache, use_cache=True, cache_position=torch.tensor([pos], device=dev))
        tok = out.logits[:, -1:].argmax(-1)
        torch.cuda.synchronize()
        steps.append(time.perf_counter() - t0)
    return steps


with torch.no_grad():
    ro = torch.compile(model, mode="reduce-overhead")
    t0 = time.perf_counter()
    run(ro, 2)
    print(f"reduce-overhead compile {time.perf_counter() - t0:.1f} s", flush=True)
    steps = run(ro, 64)
    print(f"reduce-overhead TPOT {statistics.median(steps) * 1e3:.3f} ms", flush=True)
