#!/usr/bin/env python3
"""An external oracle nobody here wrote: transformers' LlamaForCausalLM against megasched.

For each shape: build a randomly initialised LlamaForCausalLM in transformers, save it with
save_pretrained (safetensors, bf16), run greedy decode in transformers (fp32 compute on the bf16
weights, eager attention; the rotary inv_freq kept fp32 through every cast, as from_pretrained keeps
it) and `megasched generate` on the saved directory (CPU ReferenceVm for the
first few steps, GPU megakernel for all of them), and compare: identical greedy tokens over
--steps steps, and per-step logits within the bf16 tolerance. It also times transformers' own
bf16 greedy decode on the same GPU as a peer baseline.

Usage (on a GPU machine with torch + transformers; megasched built in BUILD):
    python3 bench/hf_crosscheck.py --megasched build/megasched --out $OUT/crosscheck.json
Prints one line per shape and writes a JSON summary.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import transformers.models.llama.modeling_llama as modeling_llama
from transformers import LlamaConfig, LlamaForCausalLM

SHAPES = {
    # name: (hidden, layers, heads, kv_heads, ffn, vocab, tied)
    "small-gqa1-untied": (512, 2, 8, 8, 1024, 4096, False),
    "small-gqa4-tied": (512, 2, 8, 2, 1024, 4096, True),
    "llama-1b": (2048, 16, 32, 8, 8192, 128256, True),
}
BF16_REL_TOL = 2e-2  # eval/oracle.cpp tolerance_for(bf16)
F32_REL_TOL = 1e-4   # eval/oracle.cpp tolerance_for(f32)
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
# A bf16 run may part from transformers only where transformers' own top two logits are closer
# than this (a near-tie that bf16 rounding of K/V and summation order can flip).
NEAR_TIE_LOGITS = 0.01
KV_ROUNDING = {"on": False}  # set while transformers decodes a bf16 checkpoint with --hf-kv bf16


def init_weights(model):
    """transformers' default init (std 0.02) gives nearly flat logits and greedy near-ties; scale so
    activations stay O(1) and logits are well spread."""
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if p.dim() == 2 and "embed" not in pname and "lm_head" not in pname:
                p.normal_(0.0, 1.0 / p.shape[1] ** 0.5)
            elif "embed" in pname or "lm_head" in pname:
                p.normal_(0.0, 0.05)
            else:
                p.fill_(1.0).add_(torch.randn_like(p) * 0.05)


def rope_buffers(model):
    """The rotary embeddings' inverse-frequency buffers (inv_freq, original_inv_freq), fp32 copies."""
    return {name: b.detach().float().clone() for name, b in model.named_buffers() if name.endswith("inv_freq")}


def cast_keeping_rope(model, rope, dtype=None, device=None):
    """model.to(device, dtype) with the rotary inv_freq buffers put back in fp32, as from_pretrained
    keeps them. A plain Module.to rounds floating buffers: an inv_freq rounded to bf16 rotates by a
    slightly wrong angle, an error that grows with position (0.4-0.8 max abs logit at positions
    300-1024, over 1 at 4096: dev/bf16_precision.md) and that a later .to(float32) cannot undo."""
    model = model.to(device=device, dtype=dtype)
    for name, value in rope.items():
        owner, _, leaf = name.rpartition(".")
        module = model.get_submodule(owner)
        if leaf in module._buffers:
            device_of = next((p.device for p in model.parameters()), value.device)
            module.register_buffer(leaf, value.to(device_of), persistent=False)
    return model


def build_model(name, seed, max_pos, dtype):
    hidden, layers, heads, kv, ffn, vocab, tied = SHAPES[name]
    cfg = LlamaConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                      num_key_value_heads=kv, intermediate_size=ffn, vocab_size=vocab,
                      max_position_embeddings=max_pos, rope_theta=500000.0, rms_norm_eps=1e-5,
                      tie_word_embeddings=tied, attn_implementation="eager")
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg)
    init_weights(model)
    model.megasched_rope = rope_buffers(model)  # fp32, before any cast
    return cast_keeping_rope(model, model.megasched_rope, dtype=dtype)


def round_kv_to_bf16():
    """Make transformers store K (after RoPE) and V rounded to bf16, as megasched's bf16 KV cache
    does; everything else stays transformers' own fp32 computation."""
    rope = modeling_llama.apply_rotary_pos_emb

    def rope_then_round(q, k, *args, **kwargs):
        q_out, k_out = rope(q, k, *args, **kwargs)
        if not KV_ROUNDING["on"]:
            return q_out, k_out
        return q_out, k_out.to(torch.bfloat16).to(k_out.dtype)

    modeling_llama.apply_rotary_pos_emb = rope_then_round
    return lambda attn: attn.v_proj.register_forward_hook(
        lambda _m, _i, out: out.to(torch.bfloat16).to(out.dtype))


def hf_greedy(model, prompt, steps, device):
    """Greedy decode with fp32 compute on the bf16 weights; returns tokens and per-step logits."""
    m = cast_keeping_rope(model, model.megasched_rope, dtype=torch.float32, device=device).eval()
    ids = torch.tensor([prompt], device=device)
    with torch.no_grad():
        out = m.generate(ids, max_new_tokens=steps, do_sample=False, output_logits=True,
                         return_dict_in_generate=True, pad_token_id=0)
    tokens = out.sequences[0, len(prompt):].tolist()
    logits = torch.stack(out.logits, 0)[:, 0, :].float().cpu().numpy()
    return tokens, logits


def time_hf_bf16(model, prompt, steps, device, repeats=3):
    m = cast_keeping_rope(model, model.megasched_rope, dtype=torch.bfloat16, device=device).eval()
    ids = torch.tensor([prompt], device=device)
    times = []
    with torch.no_grad():
        m.generate(ids, max_new_tokens=4, do_sample=False, pad_token_id=0)
        for _ in range(repeats):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            m.generate(ids, max_new_tokens=steps, do_sample=False, pad_token_id=0, min_new_tokens=steps)
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) / steps * 1e6)
    return float(np.median(times))


def megasched_generate(binary, model_dir, prompt, steps, device, logits_path):
    cmd = [binary, "generate", "--model", model_dir, "--gpu", "auto" if device == "gpu" else "h100",
           "--device", device, "--prompt-ids", ",".join(map(str, prompt)),
           "--max-tokens", str(steps), "--logits-out", logits_path]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout)


def compare(name, hf_tokens, hf_logits, ms, logits_path, vocab, prompt_len, tol):
    raw = np.fromfile(logits_path, dtype=np.float32).reshape(-1, vocab)
    gen = raw[prompt_len - 1:]  # the logits that produced each generated token
    n = min(len(gen), len(hf_logits), len(ms["tokens"]))
    rel = [float(np.linalg.norm(gen[i] - hf_logits[i]) / np.linalg.norm(hf_logits[i])) for i in range(n)]
    same = ms["tokens"][:n] == hf_tokens[:n]
    first_diff = next((i for i in range(n) if ms["tokens"][i] != hf_tokens[i]), -1)
    # Logits after a token differs belong to different contexts: hold only the shared prefix to the
    # tolerance, and at the first difference say how close the two top logits were in transformers.
    shared = rel[:first_diff + 1] if first_diff >= 0 else rel
    row = {"steps": n, "tokens_identical": same, "first_token_difference": first_diff,
           "max_rel_err": max(shared) if shared else None,
           "rel_err_ok": all(r <= tol for r in shared)}
    if first_diff >= 0:
        top2 = np.sort(hf_logits[first_diff])[-2:]
        row["hf_top2_gap_at_difference"] = float(top2[1] - top2[0])
        row["rel_err_at_difference"] = rel[first_diff]
    return row, gen[:n]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--megasched", default="build/megasched")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--steps", type=int, default=128)
    ap.add_argument("--cpu-steps", type=int, default=128, help="steps checked on the CPU ReferenceVm (small shapes)")
    ap.add_argument("--cpu-steps-large", type=int, default=8, help="steps checked on the CPU for llama-1b")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="crosscheck.json")
    ap.add_argument("--dtypes", default="fp32,bf16", help="checkpoint dtypes to check")
    ap.add_argument("--hf-kv", choices=["bf16", "fp32"], default="bf16",
                    help="precision of transformers' K/V: bf16 (as megasched stores them) or its own fp32")
    args = ap.parse_args()
    hook_v = round_kv_to_bf16() if args.hf_kv == "bf16" else None  # applied to bf16 checkpoints only
    device = "cuda" if torch.cuda.is_available() else "cpu"
    prompt = [1, 15, 27, 3]
    results = []
    ok = True
    for dtype_name, name in [(d, n) for d in args.dtypes.split(",") for n in args.shapes.split(",")]:
        vocab = SHAPES[name][5]
        with tempfile.TemporaryDirectory() as d:
            model = build_model(name, args.seed, 8192, DTYPES[dtype_name])
            model.save_pretrained(d, safe_serialization=True)
            hooks = [hook_v(layer.self_attn) for layer in model.model.layers] if hook_v and dtype_name == "bf16" else []
            KV_ROUNDING["on"] = bool(hooks)
            hf_tokens, hf_logits = hf_greedy(model, prompt, args.steps, device)
            KV_ROUNDING["on"] = False
            for h in hooks:
                h.remove()
            row = {"shape": name, "dtype": dtype_name, "gqa": SHAPES[name][2] // SHAPES[name][3], "tied": SHAPES[name][6]}
            cpu_steps = args.cpu_steps if SHAPES[name][0] < 2048 else args.cpu_steps_large
            ms_logits = {}
            for dev, steps in (("cpu", cpu_steps), ("gpu", args.steps)):
                if dev == "gpu" and device != "cuda":
                    continue
                path = os.path.join(d, f"logits_{dev}.f32")
                ms = megasched_generate(args.megasched, d, prompt, steps, dev, path)
                c, ms_logits[dev] = compare(name, hf_tokens[:steps], hf_logits[:steps], ms, path, vocab,
                                            len(prompt), F32_REL_TOL if dtype_name == "fp32" else BF16_REL_TOL)
                c["tokens"] = ms["tokens"]
                c["megasched_tokens_per_s"] = ms.get("tokens_per_s")
                row[dev] = c
                near_tie = c.get("hf_top2_gap_at_difference", 1e9) < NEAR_TIE_LOGITS
                c["pass"] = c["rel_err_ok"] and (c["tokens_identical"] or (dtype_name == "bf16" and near_tie))
                ok = ok and c["pass"]
            if "cpu" in ms_logits and "gpu" in ms_logits:
                # The GPU kernel against the CPU ReferenceVm of the same program (same bf16 KV).
                k = min(len(ms_logits["cpu"]), len(ms_logits["gpu"]))
                ct, gt = row["cpu"]["tokens"][:k], row["gpu"]["tokens"][:k]
                d = next((i for i in range(k) if ct[i] != gt[i]), -1)
                upto = k if d < 0 else d + 1
                row["gpu_vs_cpu"] = {"steps": k, "first_token_difference": d, "max_rel_err": max(
                    float(np.linalg.norm(ms_logits["gpu"][i] - ms_logits["cpu"][i]) / np.linalg.norm(ms_logits["cpu"][i]))
                    for i in range(upto))}
            row["hf_tokens"] = hf_tokens
            if device == "cuda" and dtype_name == "bf16":
                row["hf_bf16_eager_us_per_token"] = time_hf_bf16(model, prompt, 64, device)
            results.append(row)
            print(json.dumps(row), flush=True)
            del model
            torch.cuda.empty_cache() if device == "cuda" else None
    summary = {"ok": ok, "hf_kv": args.hf_kv, "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
               "steps": args.steps, "results": results}
    with open(args.out, "w") as f:
        json.dump(summary, f, indent=2)
    print(f"crosscheck {'PASSED' if ok else 'FAILED'}: {args.out}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
