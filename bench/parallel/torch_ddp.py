#!/usr/bin/env python3
"""The PyTorch peer of the data-parallel scaling benchmark: bench/engine/pytorch_gpt.py's GPT
under DistributedDataParallel (NCCL), one process per GPU, fp32 parameters + autocast bf16,
fused AdamW, grad clipping 1.0 — the recipe of the engine benchmark's eager peer.

  python3 torch_ddp.py --rank R --world N --master HOST:PORT [--size 124m] [--steps 20]

Rank 0 prints one JSON line: {"impl": "pytorch-ddp", "world": N, "tokens_per_second_per_gpu":
...}. Synthetic batches made on the device (the data path is not what is measured).
"""
import argparse
import json
import os
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "engine"))
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import pytorch_gpt  # noqa: E402
import sizes  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--master", required=True)
    p.add_argument("--size", default="124m")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--steps", type=int, default=20)
    a = p.parse_args()
    torch.cuda.set_device(a.rank)
    device = torch.device("cuda", a.rank)
    if a.world > 1:
        dist.init_process_group("nccl", init_method="tcp://" + a.master, rank=a.rank,
                                world_size=a.world)
    layers, hidden, heads, seq, micro = sizes.size(a.size)
    c = pytorch_gpt.Config(layers, hidden, heads, seq)
    torch.manual_seed(1234)
    with device:
        model = pytorch_gpt.Gpt(c)
    opt, _ = pytorch_gpt.make_optimizer(model, 6e-4, 0.1, device)
    fwd = DDP(model, device_ids=[a.rank]) if a.world > 1 else model
    g = torch.Generator(device=device)
    g.manual_seed(1234 + a.rank)
    batches = []
    for _ in range(4):
        t = torch.randint(0, c.vocab, (micro, seq + 1), device=device, generator=g)
        batches.append((t[:, :-1].contiguous(), t[:, 1:].contiguous()))
    params = list(model.parameters())

    def step(i):
        x, y = batches[i % len(batches)]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = fwd(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    for i in range(a.warmup):
        step(i)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for i in range(a.steps):
        step(i)
    torch.cuda.synchronize()
    sec = time.perf_counter() - start
    if a.rank == 0:
        print(json.dumps({"impl": "pytorch-ddp", "size": a.size, "world": a.world,
                          "tokens_per_second_per_gpu": a.steps * micro * seq / sec}))
    if a.world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
