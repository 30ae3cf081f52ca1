#!/usr/bin/env python3
"""Writes the transformers fixtures under tests/data/hf/ (run where torch + transformers exist).

Each fixture is a tiny LlamaForCausalLM saved with save_pretrained (config.json +
model.safetensors, transformers' own format), the token ids fed (tokens.json) and the fp32 logits
transformers computes for them after loading the directory back with from_pretrained (logits.f32:
24 x vocab little-endian float32, row per position). tests/schedule/checkpoint_test.cpp imports
each directory and compares the eager model's logits with these: an oracle nobody here wrote.

    python3 tests/data/hf/make_fixtures.py OUT_DIR
Recorded with transformers 5.17.0, torch 2.11.0 (see tokens.json).
"""
import array
import json
import os
import sys

import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM


def make(out, name, tied, dtype, rope_scaling, seed):
    cfg = LlamaConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      head_dim=16, intermediate_size=128, vocab_size=256, max_position_embeddings=256,
                      rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=tied,
                      rope_scaling=rope_scaling, attn_implementation="eager")
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg)
    # Unit-RMS projections, gammas 1 +- 0.1, embeddings scaled for logits of std ~2.
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if "norm" in pname:
                p.fill_(1.0).add_(torch.randn_like(p) * 0.1)
            elif "embed" in pname or "lm_head" in pname:
                p.normal_(0, 2 / 8)
            else:
                p.normal_(0, p.shape[1] ** -0.5)
    path = os.path.join(out, name)
    model.to(dtype).save_pretrained(path)
    os.remove(os.path.join(path, "generation_config.json"))
    ref = LlamaForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager").eval()
    tokens = [(i * 97 + 13) % 256 for i in range(24)]
    with torch.no_grad():
        logits = ref(torch.tensor([tokens])).logits[0].float()
    with open(os.path.join(path, "logits.f32"), "wb") as f:
        array.array("f", logits.flatten().tolist()).tofile(f)
    with open(os.path.join(path, "tokens.json"), "w") as f:
        json.dump({"tokens": tokens, "transformers": transformers.__version__, "torch": torch.__version__}, f)


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    make(out, "llama3_f32_untied", False, torch.float32,
         {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 64}, 3)
    make(out, "plain_bf16_tied", True, torch.bfloat16, None, 4)
