#!/usr/bin/env python3
"""The PyTorch peer of allreduce_bench: torch.distributed.all_reduce over NCCL (or Gloo).

One process per rank, started by run_allreduce.sh with the same arguments as ours; rank 0
prints one JSON line per size: {"impl": "pytorch", "bytes": ..., "seconds_per_op": ...,
"busbw_gbps": ...}. Bus bandwidth = bytes / time * 2 (N - 1) / N, as NCCL's tests define it.

  python3 torch_allreduce.py --rank R --world N --master HOST:PORT [--sizes_mib 1,16]
"""
import argparse
import json
import sys
import time

import torch
import torch.distributed as dist


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--master", required=True)
    p.add_argument("--sizes_mib", default="1,16,128,1024")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--backend", default="nccl")
    a = p.parse_args()
    cuda = a.backend == "nccl"
    if cuda:
        torch.cuda.set_device(a.rank)
    dist.init_process_group(a.backend, init_method="tcp://" + a.master, rank=a.rank,
                            world_size=a.world)
    device = torch.device("cuda", a.rank) if cuda else torch.device("cpu")
    for s in a.sizes_mib.split(","):
        nbytes = int(float(s) * (1 << 20))
        t = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
        for _ in range(a.warmup):
            dist.all_reduce(t)
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(a.iters):
            dist.all_reduce(t)
        if cuda:
            torch.cuda.synchronize()
        sec = (time.perf_counter() - start) / a.iters
        if a.rank == 0:
            print(json.dumps({"impl": "pytorch", "backend": a.backend, "world": a.world,
                              "bytes": nbytes, "seconds_per_op": sec,
                              "busbw_gbps": nbytes / sec * 2 * (a.world - 1) / a.world / 1e9}))
            sys.stdout.flush()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
