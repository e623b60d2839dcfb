#!/usr/bin/env python3
"""transformers on mt's Hugging Face export: greedy generate and pipeline("text-generation").

worker/generate/hf_generate_gpu_test.cc exports a tiny trained GPT (tokenizer files included)
and writes expected.json: the prompt text, its token ids and the ids our greedy decoding
produced. This script, fp32 on the CPU:
  1. GPT2LMHeadModel.from_pretrained(DIR).generate(prompt ids, greedy, as many new tokens)
     must give exactly our ids;
  2. AutoTokenizer.from_pretrained(DIR) must encode the prompt text to our prompt ids;
  3. pipeline("text-generation", model=DIR) -- nothing but the export's files -- must continue
     the prompt text with the text of our ids.
Exit codes: 0 all agree; 1 they do not; 77 torch or transformers missing (the caller skips).

  hf_generate_check.py --hf-dir DIR --expected expected.json
"""
import argparse
import json
import sys


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--hf-dir", required=True)
    parser.add_argument("--expected", required=True)
    args = parser.parse_args()
    try:
        import torch
        import transformers
        from transformers import AutoTokenizer, GPT2LMHeadModel, pipeline
    except ImportError as e:
        print(f"SKIP: {e}; pip install torch transformers to run this check")
        return 77
    with open(args.expected) as f:
        expected = json.load(f)
    prompt, ours = expected["prompt"], expected["generated"]
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    failures = []

    model = GPT2LMHeadModel.from_pretrained(args.hf_dir, torch_dtype=torch.float32).eval()
    ids = torch.tensor([prompt])
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                             max_new_tokens=len(ours), min_new_tokens=len(ours),
                             pad_token_id=50256)
    theirs = out[0, len(prompt):].tolist()
    print(f"ours   {ours}\ntheirs {theirs}")
    if theirs != ours:
        failures.append("greedy generate differs")

    tok = AutoTokenizer.from_pretrained(args.hf_dir)
    if tok(expected["prompt_text"])["input_ids"] != prompt:
        failures.append("the export's tokenizer encodes the prompt differently")
    text = tok.decode(ours)

    gen = pipeline("text-generation", model=args.hf_dir, device="cpu")
    result = gen(expected["prompt_text"], do_sample=False, max_new_tokens=len(ours),
                 min_new_tokens=len(ours), pad_token_id=50256)[0]["generated_text"]
    print(f"pipeline: {result!r}")
    if result != expected["prompt_text"] + text:
        failures.append(f"pipeline text {result!r} != {expected['prompt_text'] + text!r}")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
