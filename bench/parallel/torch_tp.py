#!/usr/bin/env python3
"""The PyTorch peer of the tensor-parallel benchmark: bench/engine/pytorch_gpt.py's GPT with its
transformer layers split over N GPUs by torch.distributed.tensor.parallel (DTensor), one
process per GPU, NCCL.

Plan (PyTorch's own Megatron-style recipe, as in its TP tutorial): in every layer linear_qkv
and linear_fc1 ColwiseParallel, linear_proj and linear_fc2 RowwiseParallel (one all-reduce
after each in forward, one in backward); attention runs on the rank's heads (the fused QKV is
laid out per head, so a contiguous split of its output keeps whole heads). The embeddings,
LayerNorms and the tied output layer stay replicated: every rank computes them in full (the
engine splits the vocabulary instead). Recipe otherwise the engine benchmark's eager peer: fp32
parameters + autocast bf16, AdamW (fused where this PyTorch has it for DTensor, else foreach),
global grad-norm clipping at 1.0 (the norm over the shards, all-reduced over the group).
With --world 1 it is the plain single-GPU model.

  python3 torch_tp.py --rank R --world N --master HOST:PORT [--size 1.3b] [--vocab-multiple M]
                      [--warmup 10] [--steps 20]

Every rank feeds the same synthetic batches (made on the device). Rank 0 prints one JSON line:
{"impl": "pytorch-tp", "world": N, "tokens_per_second": ..., ...} (tokens/s of the whole group,
which processes one micro-batch per step).
"""
import argparse
import json
import math
import os
import sys
import time
import types

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "engine"))
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import pytorch_gpt  # noqa: E402
import sizes  # noqa: E402


def log(msg):
    print("torch_tp: " + msg, file=sys.stderr, flush=True)


def tp_attention_forward(self, x):
    """SelfAttention.forward on this rank's heads: linear_qkv's local output holds
    3 * head_dim * (heads / tp) features, per head [q, k, v]."""
    b, s, _ = x.shape
    d = self.c.head_dim
    qkv = self.linear_qkv(x)
    heads = qkv.size(-1) // (3 * d)
    q, k, v = qkv.view(b, s, heads, 3 * d).split(d, dim=-1)
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    y = pytorch_gpt.causal_attention(q, k, v, self.c.dropout if self.training else 0.0)
    return self.linear_proj(y.transpose(1, 2).reshape(b, s, heads * d))


def local(t):
    """The rank's part of a DTensor (itself for a plain tensor)."""
    return t._local_tensor if hasattr(t, "_local_tensor") else t


def is_sharded(p):
    return hasattr(p, "placements") and any(pl.is_shard() for pl in p.placements)


def make_optimizers(model, lr, weight_decay):
    """One AdamW per kind of parameter (DTensor / plain): a fused or foreach kernel takes one
    kind per call. Returns (optimizers, how)."""
    kinds = {}
    for p in model.parameters():
        kinds.setdefault(hasattr(p, "placements"), []).append(p)
    out, how = [], []
    for is_dtensor, params in sorted(kinds.items()):
        groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
        groups = [g for g in groups if g["params"]]
        kw = dict(lr=lr, betas=(0.9, 0.999), eps=1e-8)
        out.append(torch.optim.AdamW(groups, fused=True, **kw))
        how.append("fused")
    return out, how


def clip_grad_norm(params, max_norm, group):
    """Global L2 norm over every rank's shards (replicated gradients counted once), then clip."""
    sharded = [local(p.grad) for p in params if p.grad is not None and is_sharded(p)]
    replicated = [local(p.grad) for p in params if p.grad is not None and not is_sharded(p)]
    dev = (sharded or replicated)[0].device

    def sumsq(ts):
        if not ts:
            return torch.zeros((), device=dev)
        return torch.stack([n.float() for n in torch._foreach_norm(ts)]).pow(2).sum()

    s = sumsq(sharded)
    if group is not None:
        dist.all_reduce(s, group=group)
    total = (s + sumsq(replicated)).sqrt()
    coef = (max_norm / (total + 1e-6)).clamp(max=1.0)
    torch._foreach_mul_(sharded + replicated, coef)
    return total


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--master", required=True)
    p.add_argument("--size", default="1.3b")
    p.add_argument("--micro-batch", type=int, default=0)
    p.add_argument("--vocab-multiple", type=int, default=sizes.VOCAB_DIVISIBLE_BY,
                   help="pad the vocabulary to a multiple of this (the same model as ours)")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--steps", type=int, default=20)
    a = p.parse_args()
    torch.cuda.set_device(a.rank)
    device = torch.device("cuda", a.rank)
    layers, hidden, heads, seq, micro = sizes.size(a.size)
    if a.micro_batch:
        micro = a.micro_batch
    if heads % a.world:
        sys.exit("torch_tp.py: %d heads do not split over %d ranks" % (heads, a.world))
    c = pytorch_gpt.Config(layers, hidden, heads, seq)
    c.padded_vocab = sizes.padded_vocab(c.vocab, a.vocab_multiple)
    mesh = group = None
    if a.world > 1:
        dist.init_process_group("nccl", init_method="tcp://" + a.master, rank=a.rank,
                                world_size=a.world, device_id=device)
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                       parallelize_module)
        mesh = init_device_mesh("cuda", (a.world,))
        group = mesh.get_group()
    torch.manual_seed(1234)
    with device:
        model = pytorch_gpt.Gpt(c)
    params_total = sum(q.numel() for q in model.parameters())
    if mesh is not None:
        plan = {
            "self_attention.linear_qkv": ColwiseParallel(),
            "self_attention.linear_proj": RowwiseParallel(),
            "mlp.linear_fc1": ColwiseParallel(),
            "mlp.linear_fc2": RowwiseParallel(),
        }
        for layer in model.layers:
            parallelize_module(layer, mesh, plan)
            layer.self_attention.forward = types.MethodType(tp_attention_forward,
                                                            layer.self_attention)
    model.train()
    opts, how = make_optimizers(model, 6e-4, 0.1)
    params = list(model.parameters())
    g = torch.Generator(device=device)
    g.manual_seed(1234)  # the same batches on every rank of the group
    batches = []
    for _ in range(4):
        t = torch.randint(0, c.vocab, (micro, seq + 1), device=device, generator=g)
        batches.append((t[:, :-1].contiguous(), t[:, 1:].contiguous()))

    def step(i):
        x, y = batches[i % len(batches)]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x, y)
        loss.backward()
        clip_grad_norm(params, 1.0, group)
        for k, o in enumerate(opts):
            try:
                o.step()
            except (RuntimeError, NotImplementedError) as e:
                if how[k] != "fused":
                    raise
                # No fused AdamW for this kind of tensor here: PyTorch's foreach one instead.
                log("fused AdamW failed (%s); foreach instead" % str(e).splitlines()[0])
                opts[k] = torch.optim.AdamW(o.param_groups, lr=6e-4, betas=(0.9, 0.999),
                                            eps=1e-8, foreach=True)
                how[k] = "foreach"
                opts[k].step()
            o.zero_grad(set_to_none=True)
        return loss.detach()

    for i in range(a.warmup):
        step(i)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for i in range(a.steps):
        loss = step(i)
    torch.cuda.synchronize()
    sec = time.perf_counter() - start
    last = loss.item()
    if a.rank == 0:
        print(json.dumps({
            "impl": "pytorch-tp", "size": a.size, "world": a.world, "micro_batch": micro,
            "seq": seq, "padded_vocab": c.padded_vocab, "params": params_total,
            "optimizer": how, "torch": torch.__version__, "loss_last": last,
            "tokens_per_second": a.steps * micro * seq / sec,
            "peak_memory_bytes": torch.cuda.max_memory_allocated(device)}), flush=True)
    if not math.isfinite(last):
        sys.exit("torch_tp.py: loss is not finite: %r" % last)
    if a.world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
