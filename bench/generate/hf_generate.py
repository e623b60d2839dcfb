"""transformers' generate, the peer of decode_bench: GPT2LMHeadModel with random weights of the
same shape, eager, greedy, the same prompt length and new tokens; one key=value line per batch.

  python3 hf_generate.py --size 124m --batches 1,16 --prompt 128 --new 128 --dtype bf16
"""
import argparse
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel

SIZES = {"124m": (12, 768, 12), "350m": (24, 1024, 16), "1.3b": (24, 2048, 16)}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--size", default="124m")
    p.add_argument("--batches", default="1,16")
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--new", type=int, default=128)
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args()
    layers, hidden, heads = SIZES[a.size]
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[a.dtype]
    cfg = GPT2Config(n_layer=layers, n_embd=hidden, n_head=heads, n_positions=1024,
                     vocab_size=50257, activation_function="gelu_pytorch_tanh")
    model = GPT2LMHeadModel(cfg).to("cuda", dtype).eval()
    ids = torch.tensor([[(i * 7919) % 50257 for i in range(a.prompt)]], device="cuda")
    for batch in [int(b) for b in a.batches.split(",")]:
        x = ids.expand(batch, -1).contiguous()
        mask = torch.ones_like(x)
        best = 1e30
        for r in range(a.repeat + 1):
            torch.cuda.synchronize()
            t = time.perf_counter()
            with torch.no_grad():
                model.generate(x, attention_mask=mask, max_new_tokens=a.new, min_new_tokens=a.new,
                               do_sample=False, pad_token_id=50256)
            torch.cuda.synchronize()
            if r > 0:
                best = min(best, time.perf_counter() - t)
        step = best / a.new
        print(f"hf size={a.size} dtype={a.dtype} batch={batch} prompt={a.prompt} new={a.new} "
              f"ms_per_token={step * 1e3:.3f} tokens_per_s={batch / step:.1f}", flush=True)


if __name__ == "__main__":
    main()
