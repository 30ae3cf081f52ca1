#!/usr/bin/env python3
"""bf16 accuracy with position: megasched's bf16 path and transformers' own bf16, each against
transformers' fp32 compute on the same bf16 checkpoint (dev/bf16_precision.md).

For each shape (head_dim 128 or 64, GQA 3:1, with or without llama3 RoPE scaling): build a random
LlamaForCausalLM (bench/hf_crosscheck.py's init), save it in bf16, load it back with
from_pretrained in float32 (the reference) and in bfloat16 (transformers' bf16), feed one random
prompt of max(--positions) + 1 tokens, and take the max abs logit error at each position of
  megasched   `megasched generate` on the saved directory (GPU megakernel; --devices cpu,gpu adds the
              CPU ReferenceVm),
  hf_bf16     transformers loaded in bfloat16,
  hf_bf16_cast  transformers after a plain model.to(bfloat16), which rounds the rotary inv_freq
against `ref` (from_pretrained float32), and the two casts against `ref_cast` (a plain
.to(bfloat16).to(float32): the reference bench/hf_crosscheck.py used before it kept inv_freq fp32,
which reproduces the drift of that older reference). The rotary inv_freq of each from_pretrained model
is compared with the fp32 formula first (its max relative deviation is in the JSON) and put back
in fp32 if loading changed it.

Usage (GPU machine, torch + transformers, megasched built in BUILD):
    python3 bench/hf_bf16_drift.py --megasched BUILD/megasched --out $OUT/bf16_drift.json
Exit 0 when megasched's error is at most transformers' bf16 error at every position of every shape.
"""
import argparse
import copy
import inspect
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_crosscheck import cast_keeping_rope, init_weights, rope_buffers  # noqa: E402

HIDDEN, LAYERS, FFN, VOCAB, GQA = 768, 2, 2048, 4096, 3
LLAMA3 = {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192}
SHAPES = {  # name: (head_dim, llama3 scaling)
    "hd128-gqa3-llama3": (128, True),
    "hd128-gqa3": (128, False),
    "hd64-gqa3-llama3": (64, True),
    "hd64-gqa3": (64, False),
}


def llama_config(head_dim, llama3):
    heads = HIDDEN // head_dim
    common = dict(hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=heads,
                  num_key_value_heads=heads // GQA, head_dim=head_dim, intermediate_size=FFN,
                  vocab_size=VOCAB, max_position_embeddings=8192, rms_norm_eps=1e-5,
                  tie_word_embeddings=False, attn_implementation="eager")
    rope = dict(LLAMA3) if llama3 else {"rope_type": "default"}
    if "rope_parameters" in inspect.signature(LlamaConfig.__init__).parameters:  # transformers v5
        return LlamaConfig(rope_parameters=dict(rope, rope_theta=500000.0), **common)
    return LlamaConfig(rope_theta=500000.0, rope_scaling=rope if llama3 else None, **common)


def load(d, dtype, rope, device):
    """from_pretrained in `dtype`; returns the model with its inv_freq put back to `rope` (the fp32
    formula) and what loading had left there."""
    m = LlamaForCausalLM.from_pretrained(d, dtype=dtype, attn_implementation="eager")
    loaded = {n: b for n, b in m.named_buffers() if n.endswith("inv_freq")}
    info = {"inv_freq_dtype_on_load": sorted({str(b.dtype) for b in loaded.values()})}
    try:
        info["inv_freq_rel_dev_on_load"] = max(
            float(((loaded[k].detach().float().cpu() - v).abs() / v.abs()).max()) for k, v in rope.items()
            if k in loaded)
    except (RuntimeError, NotImplementedError, ValueError) as e:  # a meta or missing buffer
        info["inv_freq_rel_dev_on_load"] = f"unreadable: {e}"
    return cast_keeping_rope(m, rope, device=device).eval(), info


def all_logits(model, ids):
    with torch.no_grad():
        return model(ids, use_cache=False).logits[0].float().cpu().numpy()


def megasched_logits(binary, d, prompt, device, vocab):
    path = os.path.join(d, f"logits_{device}.f32")
    cmd = [binary, "generate", "--model", d, "--gpu", "auto" if device == "gpu" else "h100",
           "--device", device, "--prompt-ids", ",".join(map(str, prompt)), "--max-tokens", "1",
           "--logits-out", path]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"megasched generate ({device}) failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return np.fromfile(path, dtype=np.float32).reshape(-1, vocab)[:len(prompt)]


def max_abs(a, b):
    return float(np.abs(a - b).max())


def measure(name, args, device):
    head_dim, llama3 = SHAPES[name]
    positions = args.positions
    torch.manual_seed(args.seed)
    base = LlamaForCausalLM(llama_config(head_dim, llama3))
    init_weights(base)
    rope = rope_buffers(base)  # the fp32 formula, before any cast
    base = cast_keeping_rope(base, rope, dtype=torch.bfloat16)  # the checkpoint's bf16 weights
    gen = torch.Generator().manual_seed(args.seed)
    prompt = torch.randint(0, VOCAB, (max(positions) + 1,), generator=gen).tolist()
    ids = torch.tensor([prompt], device=device)
    row = {"shape": name, "head_dim": head_dim, "gqa": GQA, "rope_scaling": "llama3" if llama3 else "none"}
    with tempfile.TemporaryDirectory() as d:
        base.save_pretrained(d, safe_serialization=True)
        logits = {}
        for key, dtype in (("ref", torch.float32), ("hf_bf16", torch.bfloat16)):
            m, row[key + "_load"] = load(d, dtype, rope, device)
            logits[key] = all_logits(m, ids)
            del m
        # A plain cast, as hf_crosscheck.py did before: Module.to rounds inv_freq to bf16.
        cast = copy.deepcopy(base).to(device=device)  # base's inv_freq is fp32: round it as .to would
        for k, v in rope.items():
            owner, _, leaf = k.rpartition(".")
            setattr(cast.get_submodule(owner), leaf, v.to(torch.bfloat16).to(device))
        logits["hf_bf16_cast"] = all_logits(cast.eval(), ids)
        logits["ref_cast"] = all_logits(cast.to(torch.float32).eval(), ids)
        del cast
        for dev in args.devices:
            logits["megasched_" + dev] = megasched_logits(args.megasched, d, prompt, dev, VOCAB)
    row["positions"] = []
    for p in positions:
        e = {"position": p,
             "vs_ref": {k: max_abs(v[p], logits["ref"][p]) for k, v in logits.items() if k not in ("ref", "ref_cast")},
             "vs_ref_cast": {k: max_abs(v[p], logits["ref_cast"][p]) for k, v in logits.items()
                             if k.startswith("megasched") or k == "hf_bf16_cast"}}
        e["megasched_within_hf_bf16"] = all(e["vs_ref"]["megasched_" + dev] <= e["vs_ref"]["hf_bf16"]
                                            for dev in args.devices)
        row["positions"].append(e)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--megasched", default="build/megasched")
    ap.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated: " + ", ".join(SHAPES))
    ap.add_argument("--positions", default="0,300,1024,4096",
                    type=lambda s: [int(x) for x in s.split(",")], help="positions (< 8192)")
    ap.add_argument("--devices", default="gpu", type=lambda s: s.split(","),
                    help="megasched devices: gpu, cpu or both (the CPU ReferenceVm is slow past ~1000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="bf16_drift.json")
    args = ap.parse_args()
    bad = [s for s in args.shapes.split(",") if s not in SHAPES]
    if bad or not args.positions or min(args.positions) < 0 or max(args.positions) >= 8192 or \
            any(d not in ("gpu", "cpu") for d in args.devices):
        ap.error(f"bad --shapes {bad}, --positions (0..8191) or --devices (gpu, cpu)")
    torch.set_float32_matmul_precision("highest")  # the fp32 reference without TF32
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and "gpu" in args.devices:
        ap.error("no CUDA device: pass --devices cpu")
    rows = []
    for name in args.shapes.split(","):
        row = measure(name, args, device)
        for e in row["positions"]:
            print(name, json.dumps(e), flush=True)
        rows.append(row)
    ok = all(e["megasched_within_hf_bf16"] for r in rows for e in r["positions"])
    summary = {"ok": ok, "metric": "max abs logit error", "torch": torch.__version__,
               "transformers": __import__("transformers").__version__,
               "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
               "positions": args.positions, "results": rows}
    with open(args.out, "w") as f:
        json.dump(summary, f, indent=2)
    print(f"bf16 drift {'PASSED' if ok else 'FAILED'}: {args.out}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
