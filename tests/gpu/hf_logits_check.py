#!/usr/bin/env python3
"""Loads mt's Hugging Face GPT-2 export with transformers and compares its logits with ours.

worker/checkpoint/hf_export_gpu_test.cc trains a tiny GPT, exports it with mt's exporter
(config.json + model.safetensors) and writes our logits on a fixed input with mt's safetensors
writer (input_ids I64 [b, s], logits F32 [b, s, vocab]). This script loads the directory with
transformers' GPT2LMHeadModel (fp32, CPU, eval), runs the same input_ids and checks

    max |theirs - ours| <= tolerance * max |ours|

It prints the max abs and relative differences, and the same for the model loaded with
activation_function "gelu_new" (GPT-2's own spelling of the tanh GELU; the export writes
"gelu_pytorch_tanh", torch's kernel, which is what mt runs), for information.

Exit codes: 0 the logits match; 1 they do not (or the export does not load cleanly); 77
torch, transformers or safetensors is missing (the caller skips).

  hf_logits_check.py --hf-dir DIR --expected expected.safetensors [--tolerance 5e-5]
"""
import argparse
import json
import os
import sys


def compare(ours, theirs):
    diff = (theirs - ours).abs()
    scale = ours.abs().max().item()
    return diff.max().item(), scale, diff.max().item() / scale


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--hf-dir", required=True)
    parser.add_argument("--expected", required=True)
    parser.add_argument("--tolerance", type=float, default=5e-5,
                        help="of the largest |logit| (ours)")
    args = parser.parse_args()
    try:
        import torch
        import transformers
        from safetensors.torch import load_file
        from transformers import GPT2LMHeadModel
    except ImportError as e:
        print(f"SKIP: {e}; pip install torch transformers safetensors to run this check")
        return 77

    with open(os.path.join(args.hf_dir, "config.json")) as f:
        config = json.load(f)
    expected = load_file(args.expected)
    ids, ours = expected["input_ids"], expected["logits"].float()
    print(f"transformers {transformers.__version__}, torch {torch.__version__}; "
          f"export: activation {config.get('activation_function')}, "
          f"tied {config.get('tie_word_embeddings')}, vocab {config.get('vocab_size')}, "
          f"n_positions {config.get('n_positions')}, "
          f"layer_norm_epsilon {config.get('layer_norm_epsilon')}")
    failures = []

    def load(**overrides):
        model, info = GPT2LMHeadModel.from_pretrained(
            args.hf_dir, output_loading_info=True, **overrides)
        model = model.float().eval()
        # A tied lm_head is not in the file; the attention's causal-mask buffers never are.
        missing = [k for k in info.get("missing_keys", [])
                   if not (k == "lm_head.weight" and config.get("tie_word_embeddings", True))
                   and not k.endswith((".attn.bias", ".attn.masked_bias"))]
        unexpected = list(info.get("unexpected_keys", []))
        mismatched = list(info.get("mismatched_keys", []))
        if missing or unexpected or mismatched:
            failures.append(f"loading {args.hf_dir}: missing {missing}, unexpected "
                            f"{unexpected}, mismatched {mismatched}")
        return model

    with torch.no_grad():
        model = load()
        theirs = model(input_ids=ids).logits.float()
        if tuple(theirs.shape) != tuple(ours.shape):
            print(f"FAIL: transformers' logits are {tuple(theirs.shape)}, ours "
                  f"{tuple(ours.shape)}")
            return 1
        max_abs, scale, rel = compare(ours, theirs)
        print(f"as exported: max abs diff {max_abs:.3e}, max |logit| {scale:.3f}, "
              f"relative {rel:.3e} (tolerance {args.tolerance:g})")
        if not rel <= args.tolerance:
            failures.append(f"logits differ: max abs {max_abs:.3e} = {rel:.3e} of the largest "
                            f"|logit| {scale:.3f}, over the tolerance {args.tolerance:g}")
        if config.get("tie_word_embeddings", True):
            same = model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr()
            print(f"lm_head tied to wte: {same}")
            if not same:
                failures.append("tie_word_embeddings is true but lm_head is not wte")
        gelu_new = load(activation_function="gelu_new")
        g_abs, _, g_rel = compare(ours, gelu_new(input_ids=ids).logits.float())
        print(f"with gelu_new instead: max abs diff {g_abs:.3e}, relative {g_rel:.3e} "
              "(the same function up to float rounding; informative)")
    for f in failures:
        print(f"FAIL: {f}")
    if not failures:
        print("OK: transformers' GPT2LMHeadModel gives our logits")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
