"""The benchmark's model sizes and the arithmetic both sides share (stdlib only).

The sizes are DESIGN.md §9's anchors; the arithmetic mirrors worker/model/gpt_config.cc
(PaddedVocabSize, CountParameters, TrainingFlopsPerToken), so the engine, the PyTorch peer and
this file must all agree on the parameter count (bench_engine.py checks that they do).
"""

GPT2_VOCAB = 50257
VOCAB_DIVISIBLE_BY = 128  # Megatron's --make-vocab-size-divisible-by default
H200_PEAK_TFLOPS = 989.0  # dense bf16, DESIGN.md §9

# name -> (layers, hidden, heads, seq, micro_batch)
#   124m, 350m: GPT-2 small and medium.
#   1.3b: DESIGN.md §9's "24x2048". Megatron's GPT-3 1.3B has 32 heads of 64; we use 16 heads
#   of 128 (the head size of most current models, and what FlashAttention runs best), on both
#   sides. Parameters and MFU FLOPs do not depend on the head count.
#   tiny: a smoke-test size for the CPU (not in the default set).
SIZES = {
    "124m": (12, 768, 12, 1024, 32),
    "350m": (24, 1024, 16, 1024, 16),
    "1.3b": (24, 2048, 16, 1024, 8),
    "tiny": (2, 128, 4, 128, 4),
    # What users tune at 1.3B (issue #16): other micro-batches, and selective recomputation
    # (the attention core recomputed in backward). Not in the default set; run with --modes ours
    # (the peer has no recomputation switch).
    "1.3b-mb4": (24, 2048, 16, 1024, 4),
    "1.3b-mb16": (24, 2048, 16, 1024, 16),
    "1.3b-sel": (24, 2048, 16, 1024, 8),
    "1.3b-mb16-sel": (24, 2048, 16, 1024, 16),
}
DEFAULT_SIZES = ("124m", "350m", "1.3b")
TUNING_SIZES = ("1.3b-mb4", "1.3b-mb16", "1.3b-sel", "1.3b-mb16-sel")


def recompute(name):
    """The spec's training.recompute_granularity for a size name."""
    return "selective" if name.endswith("-sel") else "none"

# DESIGN.md §9, one H200, PyTorch 2.11: tokens/s of eager and torch.compile.
ANCHOR_GPU = "H200"  # the GPU DESIGN.md section 9's anchors were measured on
ANCHORS = {
    "124m": {"eager": 374e3, "compile": 519e3},
    "350m": {"eager": 157e3, "compile": 193e3},
    "1.3b": {"eager": 56e3, "compile": 62e3},
}


def padded_vocab(vocab=GPT2_VOCAB, divisible_by=VOCAB_DIVISIBLE_BY, tp=1):
    multiple = divisible_by * tp
    return (vocab + multiple - 1) // multiple * multiple


def count_parameters(layers, hidden, seq, vocab=GPT2_VOCAB):
    """CountParameters of gpt_config.cc: tied output, ffn = 4h, biases, LayerNorms."""
    h, f, v = hidden, 4 * hidden, padded_vocab(vocab)
    embeddings = v * h + seq * h
    per_layer = (2 * h                  # input LayerNorm
                 + h * 3 * h + 3 * h    # fused QKV
                 + h * h + h            # attention output projection
                 + 2 * h                # pre-MLP LayerNorm
                 + h * f + f            # fc1
                 + f * h + h)           # fc2
    return embeddings + layers * per_layer + 2 * h  # + final LayerNorm


def flops_per_token(params, layers, hidden, seq):
    """DESIGN.md §9: 6 * params + 12 * layers * hidden * seq (forward + backward)."""
    return 6.0 * params + 12.0 * layers * hidden * seq


def mfu(tokens_per_second, params, layers, hidden, seq, peak_tflops=H200_PEAK_TFLOPS):
    if not peak_tflops or peak_tflops <= 0:
        return 0.0
    return tokens_per_second * flops_per_token(params, layers, hidden, seq) / (peak_tflops * 1e12)


def size(name):
    """(layers, hidden, heads, seq, micro_batch) of a size name; KeyError names the choices."""
    try:
        return SIZES[name]
    except KeyError:
        raise KeyError("unknown size %r (choose from %s)" % (name, ", ".join(SIZES))) from None
