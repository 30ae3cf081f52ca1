#!/usr/bin/env python3
"""Peer baseline: transformers' own greedy decode of a llama-1b-shaped LlamaForCausalLM (bf16,
batch 1) on this GPU, per generated token, in four modes: eager attention with the dynamic cache,
the static cache, and the static cache with torch.compile in its default mode and in
"reduce-overhead" (CUDA graphs).
Random weights (the speed does not depend on them). Prints one JSON line per mode and writes a
summary; a mode that fails to run is reported with its error, not dropped.

Usage (GPU machine with torch + transformers):
    python3 bench/hf_peer_timing.py --out $OUT/hf_peer.json
"""
import argparse
import json
import time

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM


def per_token_us(model, ids, tokens, repeats, **kwargs):
    with torch.no_grad():
        model.generate(ids, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False, pad_token_id=0, **kwargs)
        times = []
        for _ in range(repeats):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            model.generate(ids, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False, pad_token_id=0, **kwargs)
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) / tokens * 1e6)
    return float(np.median(times)), [float(t) for t in times]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="hf_peer.json")
    ap.add_argument("--modes", default="", help="comma-separated mode indices to run (default: all)")
    args = ap.parse_args()
    cfg = LlamaConfig(hidden_size=2048, num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                      intermediate_size=8192, vocab_size=128256, max_position_embeddings=8192,
                      rope_theta=500000.0, tie_word_embeddings=True)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to(device="cuda", dtype=torch.bfloat16).eval()
    ids = torch.tensor([[1, 15, 27, 3]], device="cuda")
    rows = []
    modes = [("eager, dynamic cache", {}, None),
             ("static cache", {"cache_implementation": "static"}, None),
             ("static cache + torch.compile(default)", {"cache_implementation": "static"}, "default"),
             ("static cache + torch.compile(reduce-overhead)", {"cache_implementation": "static"}, "reduce-overhead")]
    if args.modes:
        modes = [m for i, m in enumerate(modes) if str(i) in args.modes.split(",")]
    for name, kwargs, compile_mode in modes:
        try:
            if compile_mode:
                model.forward = torch.compile(model.__class__.forward.__get__(model), mode=compile_mode, fullgraph=True)
            t0 = time.perf_counter()
            median, samples = per_token_us(model, ids, args.tokens, args.repeats, **kwargs)
            row = {"mode": name, "us_per_token": median, "samples": samples,
                   "wall_s_incl_warmup": time.perf_counter() - t0}
        except Exception as e:  # report, do not hide, a mode that does not work here
            row = {"mode": name, "error": f"{type(e).__name__}: {str(e)[:300]}"}
        rows.append(row)
        print(json.dumps(row), flush=True)
    summary = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "tokens": args.tokens,
               "model": "llama-1b shape, bf16, batch 1", "results": rows}
    with open(args.out, "w") as f:
        json.dump(summary, f, indent=2)


if __name__ == "__main__":
    main()
