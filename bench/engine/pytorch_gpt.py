#!/usr/bin/env python3
"""The PyTorch peer of the engine benchmark: the engine's GPT in plain PyTorch.

The model is worker/model/gpt.cc's, module for module (same parameter count):
  tokens -> word embedding (vocab padded to a multiple of 128) + learned position embedding
  -> dropout -> layers x pre-LayerNorm block:
       x = x + dropout(linear_proj(SDPA(linear_qkv(LN(x)), causal)))
       x = x + dropout(linear_fc2(gelu_tanh(linear_fc1(LN(x)))))
  -> final LayerNorm -> logits = x W_emb^T (tied) -> fp32 cross entropy.
The fused QKV output is laid out per head as [q_h, k_h, v_h] (Megatron-core's layout, as the
engine does). Initialisation as Megatron's (normal 0.02; output projections 0.02/sqrt(2L)).

The recipe is PyTorch's standard one (nanoGPT's): fp32 parameters, the forward under
torch.autocast(bfloat16), backward outside it, fused AdamW (torch.optim.AdamW(fused=True)) on
the fp32 parameters with weight decay on matrices only, global grad-norm clipping at 1.0,
zero_grad(set_to_none=True); F.scaled_dot_product_attention(is_causal=True) for attention.
The engine instead keeps bf16 parameters and fp32 master weights in its optimizer (Megatron's
recipe); both do the same model FLOPs per token.

Modes: eager, compile (torch.compile of the whole model, loss included, default mode).
Dropout: --dropout P (default 0) on the embeddings' sum, the attention probabilities (SDPA's
dropout_p) and both residual branches, as the engine's hidden_dropout and attention_dropout;
the model trains in train mode, so it applies in both modes.
Synthetic data: eight random [micro_batch, seq + 1] batches made on the device, cycled.
Timing: `warmup` steps (torch.compile compiles in the first), torch.cuda.synchronize(), then
`steps` steps, torch.cuda.synchronize(); tokens/s = steps * micro_batch * seq / seconds.
--step-times adds each step's own time (`step_ms_each`), for effects within the window such as
the board's power cap taking hold about a second into full load (bench/RESULTS.md).
--trace-dir DIR profiles --trace-steps more steps after the timed ones and writes their Chrome
trace to DIR/peer-SIZE-MODE.json: bench/engine/kernel_kinds.py sets it beside ours by kind.
MFU = tokens/s * (6 * params + 12 * layers * hidden * seq) / peak (DESIGN.md §9).

Output: one JSON line per (size, mode) on stdout; progress on stderr. Exit code 0 when every
run succeeded, 1 when one failed (its JSON line has "error"), 2 for bad arguments.

  python3 bench/engine/pytorch_gpt.py --size 124m --mode eager
  python3 bench/engine/pytorch_gpt.py --size 124m,350m,1.3b --mode eager,compile
  python3 bench/engine/pytorch_gpt.py --size tiny --mode eager --device cpu --warmup 1 --steps 2

It runs on old PyTorch too (the CPU smoke test): without F.scaled_dot_product_attention it
falls back to math attention, without fused AdamW to the default one, and says so in the JSON.
"""

import argparse
import gc
import json
import math
import os
import platform
import resource
import sys
import time
import traceback

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sizes  # noqa: E402

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

HAVE_SDPA = hasattr(F, "scaled_dot_product_attention")


def log(msg):
    print("pytorch_gpt: " + msg, file=sys.stderr, flush=True)


class Config:
    def __init__(self, layers, hidden, heads, seq, vocab=sizes.GPT2_VOCAB, dropout=0.0):
        self.layers = layers
        self.hidden = hidden
        self.heads = heads
        self.head_dim = hidden // heads
        self.seq = seq
        self.vocab = vocab
        self.padded_vocab = sizes.padded_vocab(vocab)
        self.dropout = dropout
        self.init_std = 0.02
        self.ln_eps = 1e-5


def causal_attention(q, k, v, dropout_p):
    if HAVE_SDPA:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)
    # PyTorch < 2.0 (CPU smoke tests only): the engine's math path.
    s = q.size(-2)
    scores = torch.matmul(q, k.transpose(-2, -1)).float() / math.sqrt(q.size(-1))
    mask = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
    probs = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1).to(q.dtype)
    if dropout_p > 0:
        probs = F.dropout(probs, dropout_p)
    return torch.matmul(probs, v)


class SelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.linear_qkv = nn.Linear(c.hidden, 3 * c.hidden)
        self.linear_proj = nn.Linear(c.hidden, c.hidden)

    def forward(self, x):
        b, s, _ = x.shape
        c = self.c
        # [b, s, heads, 3d] -> q, k, v [b, heads, s, d] (per-head [q, k, v] layout)
        q, k, v = self.linear_qkv(x).view(b, s, c.heads, 3 * c.head_dim).split(c.head_dim, dim=-1)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        y = causal_attention(q, k, v, c.dropout if self.training else 0.0)
        y = y.transpose(1, 2).reshape(b, s, c.hidden)
        return self.linear_proj(y)


class Mlp(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.linear_fc1 = nn.Linear(c.hidden, 4 * c.hidden)
        self.linear_fc2 = nn.Linear(4 * c.hidden, c.hidden)

    def forward(self, x):
        return self.linear_fc2(F.gelu(self.linear_fc1(x), approximate="tanh"))


class TransformerLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = nn.LayerNorm(c.hidden, eps=c.ln_eps)
        self.self_attention = SelfAttention(c)
        self.pre_mlp_layernorm = nn.LayerNorm(c.hidden, eps=c.ln_eps)
        self.mlp = Mlp(c)
        self.dropout = nn.Dropout(c.dropout)

    def forward(self, x):
        x = x + self.dropout(self.self_attention(self.input_layernorm(x)))
        return x + self.dropout(self.mlp(self.pre_mlp_layernorm(x)))


class Gpt(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.word_embeddings = nn.Embedding(c.padded_vocab, c.hidden)
        self.position_embeddings = nn.Embedding(c.seq, c.hidden)
        self.dropout = nn.Dropout(c.dropout)
        self.layers = nn.ModuleList(TransformerLayer(c) for _ in range(c.layers))
        self.final_layernorm = nn.LayerNorm(c.hidden, eps=c.ln_eps)
        self.init_weights()

    @torch.no_grad()
    def init_weights(self):
        std = self.c.init_std
        scaled = std / math.sqrt(2.0 * self.c.layers)
        self.word_embeddings.weight.normal_(0.0, std)
        self.position_embeddings.weight.normal_(0.0, std)
        for layer in self.layers:
            for lin, s in ((layer.self_attention.linear_qkv, std),
                           (layer.self_attention.linear_proj, scaled),
                           (layer.mlp.linear_fc1, std), (layer.mlp.linear_fc2, scaled)):
                lin.weight.normal_(0.0, s)
                lin.bias.zero_()
        # nn.LayerNorm starts at weight 1, bias 0 already.

    def forward(self, tokens, targets):
        s = tokens.size(1)
        positions = torch.arange(s, device=tokens.device)
        x = self.dropout(self.word_embeddings(tokens) + self.position_embeddings(positions))
        for layer in self.layers:
            x = layer(x)
        x = self.final_layernorm(x)
        logits = F.linear(x, self.word_embeddings.weight)  # tied output layer
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))


def make_optimizer(model, lr, weight_decay, device):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    kwargs = dict(lr=lr, betas=(0.9, 0.999), eps=1e-8)
    if device.type == "cuda":
        return torch.optim.AdamW(groups, fused=True, **kwargs), True  # fail loudly if absent
    return torch.optim.AdamW(groups, **kwargs), False


def peak_host_rss_bytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


class StepClock:
    """Each step's own time (--step-times): on CUDA, events recorded on the stream before and
    after the step, read after the run's final sync, so the loop gains no host sync and a
    step's figure is the GPU's time from the end of the previous step's work to the end of its
    own; on the CPU, the host's time around the step."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"
        self.marks = []

    def _mark(self):
        if not self.cuda:
            return time.perf_counter()
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        return e

    def time(self, fn, i):
        start = self._mark()
        out = fn(i)
        self.marks.append((start, self._mark()))
        return out

    def milliseconds(self):
        if self.cuda:
            return [round(a.elapsed_time(b), 3) for a, b in self.marks]
        return [round((b - a) * 1e3, 3) for a, b in self.marks]


def trace_steps(step_fn, args, name, mode, device):
    """--trace-dir: args.trace_steps more steps under the profiler, their Chrome trace written
    to DIR/peer-SIZE-MODE.json (bench/engine/kernel_kinds.py reads it); returns the path."""
    from torch.profiler import ProfilerActivity, profile
    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        for i in range(args.trace_steps):
            step_fn(i)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    path = os.path.join(args.trace_dir, "peer-%s-%s.json" % (name, mode))
    prof.export_chrome_trace(path)
    log("%s %s: %d steps traced to %s" % (name, mode, args.trace_steps, path))
    return path


def run_one(name, mode, args, device):
    layers, hidden, heads, seq, micro_batch = sizes.size(name)
    if args.micro_batch:
        micro_batch = args.micro_batch
    c = Config(layers, hidden, heads, seq, dropout=args.dropout)
    result = {
        "impl": "pytorch", "size": name, "mode": mode, "layers": layers, "hidden": hidden,
        "heads": heads, "head_dim": c.head_dim, "seq": seq, "micro_batch": micro_batch,
        "vocab": c.vocab, "padded_vocab": c.padded_vocab, "dropout": args.dropout,
        "precision": "fp32 params + autocast bf16" if args.precision == "bf16" else "fp32",
        "warmup": args.warmup, "steps": args.steps, "torch": torch.__version__,
        "device": str(device), "peak_tflops": args.peak_tflops,
        "attention": "sdpa" if HAVE_SDPA else "math",
    }
    if device.type == "cuda":
        result["device_name"] = torch.cuda.get_device_name(device)
    model = opt = batches = step_fn = forward = clock = timed_step = None
    try:
        if mode == "compile" and not hasattr(torch, "compile"):
            raise RuntimeError("torch.compile needs PyTorch >= 2.0; this is " + torch.__version__)
        torch.manual_seed(1234)
        if device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
        if hasattr(torch.device, "__enter__"):  # PyTorch >= 2.0: build and init on the device
            with device:
                model = Gpt(c)
        else:
            model = Gpt(c).to(device)
        model.train()  # dropout (--dropout) applies only in train mode
        params = sum(p.numel() for p in model.parameters())
        expected = sizes.count_parameters(layers, hidden, seq, c.vocab)
        result["params"] = params
        result["params_formula"] = expected
        if params != expected:
            log("WARNING: %s has %d parameters, the engine's formula says %d" %
                (name, params, expected))
        result["flops_per_token"] = sizes.flops_per_token(params, layers, hidden, seq)
        opt, fused = make_optimizer(model, args.lr, args.weight_decay, device)
        result["fused_adamw"] = fused
        forward = model
        if mode == "compile":
            kw = {} if args.compile_mode == "default" else {"mode": args.compile_mode}
            forward = torch.compile(model, **kw)
            result["compile_mode"] = args.compile_mode

        g = torch.Generator(device=device)
        g.manual_seed(1234)
        batches = []
        for _ in range(8):
            t = torch.randint(0, c.vocab, (micro_batch, seq + 1), device=device, generator=g)
            batches.append((t[:, :-1].contiguous(), t[:, 1:].contiguous()))
        use_autocast = args.precision == "bf16"
        params_list = list(model.parameters())

        def step_fn(i):
            x, y = batches[i % len(batches)]
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_autocast):
                loss = forward(x, y)
            loss.backward()
            if args.clip_grad > 0:
                torch.nn.utils.clip_grad_norm_(params_list, args.clip_grad)
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss.detach()

        def sync():
            if device.type == "cuda":
                torch.cuda.synchronize(device)

        log("%s %s: %d parameters, micro-batch %d x seq %d, %d warm-up + %d timed steps" %
            (name, mode, params, micro_batch, seq, args.warmup, args.steps))
        clock = StepClock(device) if args.step_times else None
        timed_step = step_fn if clock is None else (lambda i: clock.time(step_fn, i))
        t0 = time.perf_counter()
        first_loss = None
        for i in range(args.warmup):
            loss = timed_step(i)
            if i == 0:
                first_loss = loss.item()  # also ends the first (compiling) step
                log("%s %s: first step %.1f s" % (name, mode, time.perf_counter() - t0))
        sync()
        result["warmup_seconds"] = time.perf_counter() - t0
        start = time.perf_counter()
        for i in range(args.warmup, args.warmup + args.steps):
            loss = timed_step(i)
        sync()
        seconds = time.perf_counter() - start
        if clock is not None:
            result["step_ms_each"] = clock.milliseconds()
            log("%s %s: ms per step, warm-up then timed: %s" % (
                name, mode, " ".join("%.2f" % ms for ms in result["step_ms_each"])))
        last_loss = loss.item()
        if args.trace_dir:
            result["trace"] = trace_steps(step_fn, args, name, mode, device)
        if first_loss is None:
            first_loss = last_loss
        tokens = args.steps * micro_batch * seq
        tps = tokens / seconds
        result.update({
            "seconds": seconds, "tokens": tokens, "tokens_per_second": tps,
            "step_ms": seconds / args.steps * 1e3,
            "mfu": sizes.mfu(tps, params, layers, hidden, seq, args.peak_tflops),
            "loss_first": first_loss, "loss_last": last_loss,
        })
        if not math.isfinite(last_loss):
            result["error"] = "loss is not finite: %r" % last_loss
        if device.type == "cuda":
            result["peak_memory_bytes"] = torch.cuda.max_memory_allocated(device)
            result["peak_reserved_bytes"] = torch.cuda.max_memory_reserved(device)
            result["memory_kind"] = "cuda max_memory_allocated"
        else:
            result["peak_memory_bytes"] = peak_host_rss_bytes()
            result["memory_kind"] = "host peak RSS"
        log("%s %s: %.0f tokens/s, %.1f ms/step, MFU %.1f%%, peak %.2f GiB, loss %.3f -> %.3f" %
            (name, mode, tps, result["step_ms"], result["mfu"] * 100,
             result["peak_memory_bytes"] / 2**30, first_loss, last_loss))
    except Exception as e:  # one JSON line per run, whatever happened
        oom = "out of memory" in str(e).lower()
        result["error"] = ("out of memory: " if oom else "") + "%s: %s" % (
            type(e).__name__, str(e).strip().splitlines()[0] if str(e).strip() else "")
        traceback.print_exc(file=sys.stderr)
    finally:
        del model, opt, batches, step_fn, forward, clock, timed_step
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
        if mode == "compile" and hasattr(torch, "_dynamo"):
            torch._dynamo.reset()
    return result


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", default=",".join(sizes.DEFAULT_SIZES),
                   help="comma-separated sizes from %s (default %%(default)s)" %
                   ", ".join(sizes.SIZES))
    p.add_argument("--mode", default="eager,compile", help="eager, compile or both (comma)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--micro-batch", type=int, default=0, help="override the size's micro-batch")
    p.add_argument("--precision", choices=("bf16", "fp32"), default="bf16")
    p.add_argument("--dropout", type=float, default=0.0,
                   help="hidden and attention dropout, in [0, 1) (default 0)")
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--clip-grad", type=float, default=1.0)
    p.add_argument("--peak-tflops", type=float, default=sizes.H200_PEAK_TFLOPS)
    p.add_argument("--step-times", action="store_true",
                   help="also time each step on its own (CUDA events; no sync inside the "
                   "loop): the JSON's step_ms_each, warm-up steps first")
    p.add_argument("--trace-dir", default="",
                   help="after the timed steps, profile --trace-steps more and write their "
                   "Chrome trace to DIR/peer-SIZE-MODE.json (for kernel_kinds.py)")
    p.add_argument("--trace-steps", type=int, default=3)
    p.add_argument("--compile-mode", default="default",
                   help="torch.compile mode: default, reduce-overhead, max-autotune ...")
    args = p.parse_args(argv)

    names = [s for s in args.size.replace(" ", ",").split(",") if s]
    modes = [m for m in args.mode.replace(" ", ",").split(",") if m]
    for n in names:
        if n not in sizes.SIZES:
            p.error("unknown size %r (choose from %s)" % (n, ", ".join(sizes.SIZES)))
    for m in modes:
        if m not in ("eager", "compile"):
            p.error("unknown mode %r (eager, compile)" % m)
    if args.warmup < 1 or args.steps < 1:
        p.error("--warmup and --steps must be >= 1")
    if args.trace_steps < 1:
        p.error("--trace-steps must be >= 1")
    if args.trace_dir and not os.path.isdir(args.trace_dir):
        p.error("--trace-dir %s: not a directory (make it first)" % args.trace_dir)
    if not 0.0 <= args.dropout < 1.0:  # NaN fails too
        p.error("--dropout %r: must be in [0, 1)" % args.dropout)
    device = torch.device(args.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            p.error("--device %s: this PyTorch sees no CUDA device" % args.device)
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(device)
        # No TF32 switch: every matmul runs under autocast in bf16; nothing fp32 is a matmul.
    log("torch %s, python %s, device %s" % (torch.__version__, platform.python_version(),
                                             torch.cuda.get_device_name(device)
                                             if device.type == "cuda" else "cpu"))
    failed = False
    for n in names:
        for m in modes:
            r = run_one(n, m, args, device)
            failed |= "error" in r
            print(json.dumps(r, sort_keys=True), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
