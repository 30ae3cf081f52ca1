#!/usr/bin/env python3
"""PyTorch peer of megasched: a batch-1 bf16 decode step written the way a new user would write it
(gpt-fast style: static KV cache sized for --max-seq positions, masked attention over it, the whole
step captured in one CUDA graph), in two variants: eager ops in the graph, and torch.compile'd ops
in the graph. Plus transformers' own greedy `generate`, per token (dynamic and static cache).

The model comes from safetensors: --checkpoint DIR (a Hugging Face Llama checkpoint, the same
directory `megasched bench --model DIR` loads), or, without one, a randomly initialised
LlamaForCausalLM of --shape's dimensions saved with save_pretrained into --save-dir (then pass that
directory to megasched as --model, so both sides read the same weights). With --megasched BIN the
greedy tokens of the graph step are compared with `megasched generate --device gpu` on the same
prompt and checkpoint (and with transformers' own greedy decode).

Output: one JSON document (--out) that `megasched bench --peers FILE` reads:
  {"peer": "pytorch", "device", "torch", "transformers", "checkpoint", "rows": [{"name", "position",
   "median_us", "p10_us", "p90_us", "status", ...}], "greedy": {...}}
A variant that fails is a row with "status": "error" and its message, never dropped.

With --generate PROMPT_LEN:NEW_TOKENS (and --prompt-file, a JSON list of PROMPT_LEN token ids) it
times whole greedy generations instead, the way `megasched bench --generate` runs it: the CUDA
graph step with eager ops and with torch.compile'd ops (one token per step from position 0, as
megasched feeds its prompt; each step timed on the host from the token in to the argmax read back),
and transformers' generate with a static cache (prefill, then one token per step, each timed by a
logits processor), every row with its greedy tokens. Output (--out): {"peer": "pytorch", ...,
"generate_rows": [{"name", "prompt_len", "new_tokens", "status", "token_p50_us", "token_p90_us",
"tokens_per_s", "prompt_ms", "total_ms", "tokens", ...}]}. Without --checkpoint the random model
is not saved (the rows time the shape; their tokens are another model's).

Usage (GPU machine with torch + transformers):
    python3 bench/peers/torch_peer.py --shape llama-1b --save-dir $OUT/peer_llama-1b \\
        --megasched build/megasched --out $OUT/torch_peer.json
"""
import argparse
import json
import os
import subprocess
import time

import torch
import torch.nn.functional as F

SHAPES = {
    # name: (hidden, layers, heads, kv_heads, ffn, vocab, tied); megasched's presets (schedule/model.cpp)
    "small": (2048, 4, 16, 4, 5632, 32000, False),
    "llama-1b": (2048, 16, 32, 8, 8192, 128256, True),
    "llama-8b": (4096, 32, 32, 8, 14336, 128256, False),
}


def random_checkpoint(shape, seed, directory):
    """A random LlamaForCausalLM of megasched preset `shape`, saved as bf16 safetensors."""
    from transformers import LlamaConfig, LlamaForCausalLM
    hidden, layers, heads, kv, ffn, vocab, tied = SHAPES[shape]
    cfg = LlamaConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                      num_key_value_heads=kv, intermediate_size=ffn, vocab_size=vocab,
                      max_position_embeddings=8192, rope_theta=500000.0, rms_norm_eps=1e-5,
                      tie_word_embeddings=tied)
    torch.manual_seed(seed)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg)
    # As bench/hf_crosscheck.py: weights scaled so activations stay O(1) and logits well spread
    # (transformers' default init gives near-ties that make greedy comparisons meaningless).
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2 and "embed" not in name and "lm_head" not in name:
                p.normal_(0.0, 1.0 / p.shape[1] ** 0.5)
            elif p.dim() == 2:
                p.normal_(0.0, 0.05)
            else:
                p.fill_(1.0).add_(torch.randn_like(p) * 0.05)
    model = model.to(torch.bfloat16)
    if directory:
        model.save_pretrained(directory, safe_serialization=True)
    return model


class StaticDecoder:
    """One decode step over a static KV cache; token and position live in device tensors so one
    CUDA graph serves every step."""

    def __init__(self, model, max_seq):
        cfg = model.config
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads
        self.eps = cfg.rms_norm_eps
        m = model.model
        self.embed = m.embed_tokens.weight
        self.final_norm = m.norm.weight
        self.lm_head = model.lm_head.weight
        self.layers = []
        for layer in m.layers:
            a, f = layer.self_attn, layer.mlp
            self.layers.append({
                "ln1": layer.input_layernorm.weight, "ln2": layer.post_attention_layernorm.weight,
                "wqkv": torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]),
                "wo": a.o_proj.weight,
                "wgu": torch.cat([f.gate_proj.weight, f.up_proj.weight]), "wd": f.down_proj.weight})
        dev, dt = self.embed.device, self.embed.dtype
        shape = (len(self.layers), 1, self.kv_heads, max_seq, self.head_dim)
        self.k_cache = torch.zeros(shape, device=dev, dtype=dt)
        self.v_cache = torch.zeros(shape, device=dev, dtype=dt)
        positions = torch.arange(max_seq, device=dev)[None]
        try:  # transformers' own table (its RoPE scaling included)
            cos, sin = m.rotary_emb(torch.zeros(1, device=dev, dtype=torch.float32), positions)
            cos, sin = cos[0], sin[0]
        except Exception:  # plain RoPE from the config's theta
            theta = getattr(cfg, "rope_theta", None) or (getattr(cfg, "rope_parameters", None) or {}).get(
                "rope_theta", 10000.0)
            inv = 1.0 / theta ** (torch.arange(0, self.head_dim, 2, device=dev).float() / self.head_dim)
            freqs = torch.outer(positions[0].float(), inv)
            cos, sin = torch.cat([freqs, freqs], -1).cos(), torch.cat([freqs, freqs], -1).sin()
        self.cos, self.sin = cos.to(dt), sin.to(dt)  # [max_seq, head_dim]
        self.arange = torch.arange(max_seq, device=dev)
        self.token = torch.zeros(1, dtype=torch.long, device=dev)
        self.pos = torch.zeros(1, dtype=torch.long, device=dev)
        self.ffn = self.layers[0]["wd"].shape[1]

    def rms(self, x, w):
        v = x.float()
        v = v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + self.eps)
        return w * v.to(x.dtype)

    @staticmethod
    def rope(x, cos, sin):
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rotated * sin

    def step(self):
        hd, nh, nkv = self.head_dim, self.heads, self.kv_heads
        x = F.embedding(self.token, self.embed)  # [1, hidden]
        cos = self.cos.index_select(0, self.pos)  # [1, hd]
        sin = self.sin.index_select(0, self.pos)
        mask = (self.arange <= self.pos).view(1, 1, 1, -1)
        for i, L in enumerate(self.layers):
            qkv = self.rms(x, L["ln1"]) @ L["wqkv"].t()
            q, k, v = qkv.split([nh * hd, nkv * hd, nkv * hd], dim=-1)
            q = self.rope(q.view(1, nh, 1, hd), cos, sin)
            k = self.rope(k.view(1, nkv, 1, hd), cos, sin)
            self.k_cache[i].index_copy_(2, self.pos, k)
            self.v_cache[i].index_copy_(2, self.pos, v.view(1, nkv, 1, hd))
            o = F.scaled_dot_product_attention(q, self.k_cache[i], self.v_cache[i], attn_mask=mask,
                                               enable_gqa=True)
            x = x + o.reshape(1, nh * hd) @ L["wo"].t()
            g, u = (self.rms(x, L["ln2"]) @ L["wgu"].t()).split([self.ffn, self.ffn], dim=-1)
            x = x + (F.silu(g) * u) @ L["wd"].t()
        return (self.rms(x, self.final_norm) @ self.lm_head.t()).float()[0]


def capture(fn):
    """fn's work in one CUDA graph (after warm-up on a side stream, as torch requires)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph, out


def stats(samples):
    t = torch.tensor(samples, dtype=torch.float64)
    return {"median_us": float(t.median()), "p10_us": float(t.quantile(0.1)),
            "p90_us": float(t.quantile(0.9))}


def time_graph(dec, graph, position, warmup, iterations):
    dec.pos.fill_(position)
    dec.token.fill_(1)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for i in range(warmup + iterations):
        start.record()
        graph.replay()
        stop.record()
        stop.synchronize()
        if i >= warmup:
            samples.append(start.elapsed_time(stop) * 1000.0)
    return stats(samples)


def greedy(dec, graph, out, prompt, steps):
    dec.k_cache.zero_()
    dec.v_cache.zero_()
    tokens = []
    for p in range(len(prompt) + steps - 1):
        dec.token.fill_(prompt[p] if p < len(prompt) else tokens[-1])
        dec.pos.fill_(p)
        graph.replay()
        if p >= len(prompt) - 1:
            tokens.append(int(out.argmax()))
    return tokens


def transformers_rows(model, prompt, tokens, repeats):
    rows = []
    ids = torch.tensor([prompt], device="cuda")
    for name, kwargs in (("transformers generate, dynamic cache", {}),
                         ("transformers generate, static cache", {"cache_implementation": "static"})):
        row = {"name": name, "position": 0,
               "note": f"per generated token, positions {len(prompt)}-{len(prompt) + tokens - 1}"}
        try:
            with torch.no_grad():
                model.generate(ids, max_new_tokens=4, do_sample=False, pad_token_id=0, **kwargs)
                samples = []
                for _ in range(repeats):
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    model.generate(ids, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False,
                                   pad_token_id=0, **kwargs)
                    torch.cuda.synchronize()
                    samples.append((time.perf_counter() - t0) / tokens * 1e6)
            row.update(stats(samples), status="ok")
        except Exception as e:  # reported, not dropped
            row.update(status="error", message=f"{type(e).__name__}: {e}"[:300])
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def megasched_tokens(binary, checkpoint, prompt, steps):
    cmd = [binary, "generate", "--model", checkpoint, "--gpu", "auto", "--device", "gpu",
           "--prompt-ids", ",".join(map(str, prompt)), "--max-tokens", str(steps)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
    return json.loads(proc.stdout)["tokens"]


def first_difference(a, b):
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), -1 if len(a) == len(b) else n)


def generation_stats(prompt_us, decode_us):
    """Per generated token p50/p90, tokens/s, prompt and total ms, as megasched summarizes its rows:
    prompt_us the time before the first generated token's step, decode_us one time per token."""
    t = torch.tensor(decode_us, dtype=torch.float64)
    return {"token_p50_us": float(t.quantile(0.5)), "token_p90_us": float(t.quantile(0.9)),
            "tokens_per_s": len(decode_us) / (sum(decode_us) * 1e-6),
            "prompt_ms": sum(prompt_us) / 1000.0, "total_ms": (sum(prompt_us) + sum(decode_us)) / 1000.0}


def graph_generation(dec, graph, out, prompt, new_tokens):
    """Greedy generation by replaying the step graph once per position; (prompt step times, the
    generating steps' times, tokens)."""
    dec.k_cache.zero_()
    dec.v_cache.zero_()
    step_us, tokens, token = [], [], prompt[0]
    for p in range(len(prompt) + new_tokens - 1):
        t0 = time.perf_counter()
        dec.token.fill_(token)
        dec.pos.fill_(p)
        graph.replay()
        nxt = int(out.argmax())  # waits for the replay
        step_us.append((time.perf_counter() - t0) * 1e6)
        if p + 1 < len(prompt):
            token = prompt[p + 1]
        else:
            tokens.append(nxt)
            token = nxt
    return step_us[:len(prompt) - 1], step_us[len(prompt) - 1:], tokens


def transformers_generation(model, prompt, new_tokens):
    """transformers' greedy generate with a static cache; (prefill time, the decode steps' times,
    tokens): the prefill yields the first token, each later token one decode step."""
    from transformers import LogitsProcessor, LogitsProcessorList

    class Stamp(LogitsProcessor):
        def __init__(self):
            self.times = []

        def __call__(self, input_ids, scores):
            torch.cuda.synchronize()
            self.times.append(time.perf_counter())
            return scores

    ids = torch.tensor([prompt], device="cuda")
    kwargs = {"do_sample": False, "pad_token_id": 0, "cache_implementation": "static"}
    model.generate(ids, max_new_tokens=4, **kwargs)  # warm-up (the cache, the kernels)
    stamp = Stamp()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = model.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                         logits_processor=LogitsProcessorList([stamp]), **kwargs)
    torch.cuda.synchronize()
    marks = [t0] + stamp.times  # one stamp per generated token, after its forward
    prefill_us = (marks[1] - t0) * 1e6
    decode_us = [(b - a) * 1e6 for a, b in zip(marks[1:], marks[2:])]
    return [prefill_us], decode_us or [prefill_us], out[0, len(prompt):].tolist()


def run_generate(args, model, checkpoint):
    """--generate: every variant's whole generation of one case into one document."""
    import transformers
    prompt_len, new_tokens = (int(v) for v in args.generate.split(":"))
    with open(args.prompt_file) as f:
        prompt = json.load(f)
    if len(prompt) != prompt_len:
        raise SystemExit(f"torch_peer: --prompt-file holds {len(prompt)} ids, --generate says {prompt_len}")
    doc = {"peer": "pytorch", "device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "transformers": transformers.__version__, "checkpoint": checkpoint, "generate_rows": []}
    dec = StaticDecoder(model, prompt_len + new_tokens)
    variants = (("cuda graph, eager ops", dec.step),
                ("cuda graph, torch.compile", torch.compile(dec.step, fullgraph=True, dynamic=False)))
    runs = [(name, lambda fn=fn: graph_generation(dec, *capture(fn), prompt, new_tokens))
            for name, fn in variants]
    runs.append(("transformers generate, static cache",
                 lambda: transformers_generation(model, prompt, new_tokens)))
    for name, run in runs:
        row = {"name": name, "prompt_len": prompt_len, "new_tokens": new_tokens}
        try:
            with torch.no_grad():
                prompt_us, decode_us, tokens = run()
            row.update(generation_stats(prompt_us, decode_us), status="ok", tokens=tokens)
            if name.startswith("transformers"):
                row["note"] = ("prefill in one forward (prompt_ms, the first token's); per-token times of "
                               "the later tokens from a logits processor")
        except Exception as e:  # reported, not dropped
            row.update(status="error", message=f"{type(e).__name__}: {e}"[:300])
        doc["generate_rows"].append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "tokens"}), flush=True)
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", help="Hugging Face Llama checkpoint directory (safetensors)")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="llama-1b",
                    help="random-init model of this megasched preset's dimensions (without --checkpoint)")
    ap.add_argument("--save-dir", help="where the random model is saved (default: a folder beside --out)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--positions", default="0,1024,4096")
    ap.add_argument("--max-seq", type=int, default=4097, help="static KV cache capacity (positions)")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--prompt-ids", default="1,15,27,3")
    ap.add_argument("--steps", type=int, default=64, help="greedy tokens compared")
    ap.add_argument("--generate-tokens", type=int, default=128)
    ap.add_argument("--megasched", help="megasched binary: compare greedy tokens with `megasched generate`")
    ap.add_argument("--out", default="torch_peer.json")
    ap.add_argument("--generate", metavar="PROMPT_LEN:NEW_TOKENS",
                    help="time whole greedy generations of --prompt-file's prompt (see above)")
    ap.add_argument("--prompt-file", help="with --generate: a JSON list of the prompt's token ids")
    ap.add_argument("--save-only", action="store_true",
                    help="save the random model of --shape into --save-dir and exit (for megasched --model)")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("torch_peer: no CUDA device visible to torch; the peer measures on a GPU")
    from transformers import LlamaForCausalLM
    import transformers
    positions = [int(p) for p in args.positions.split(",")]
    if max(positions) >= args.max_seq:
        raise SystemExit(f"torch_peer: --max-seq {args.max_seq} must exceed every position")
    checkpoint = args.checkpoint
    if args.save_only:
        if not args.save_dir:
            raise SystemExit("torch_peer: --save-only needs --save-dir")
        random_checkpoint(args.shape, args.seed, args.save_dir)
        return
    if args.generate:
        if not args.prompt_file:
            raise SystemExit("torch_peer: --generate needs --prompt-file")
        if checkpoint:
            model = LlamaForCausalLM.from_pretrained(checkpoint, torch_dtype=torch.bfloat16).cuda()
        else:
            model = random_checkpoint(args.shape, args.seed, args.save_dir)
        model.eval()
        run_generate(args, model, checkpoint or f"random {args.shape} (seed {args.seed})")
        return
    if checkpoint:
        model = LlamaForCausalLM.from_pretrained(checkpoint, torch_dtype=torch.bfloat16).cuda()
    else:
        checkpoint = args.save_dir or os.path.join(os.path.dirname(os.path.abspath(args.out)), f"peer_{args.shape}")
        model = random_checkpoint(args.shape, args.seed, checkpoint)
    model.eval()
    doc = {"peer": "pytorch", "device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "transformers": transformers.__version__, "checkpoint": checkpoint, "max_seq": args.max_seq,
           "l2_flushed": False, "rows": []}
    prompt = [int(t) for t in args.prompt_ids.split(",")]
    dec = StaticDecoder(model, args.max_seq)
    graphs = {}
    with torch.no_grad():
        for variant, fn in (("cuda graph, eager ops", dec.step),
                            ("cuda graph, torch.compile", torch.compile(dec.step, fullgraph=True, dynamic=False))):
            try:
                graphs[variant] = capture(fn)
            except Exception as e:
                for p in positions:
                    doc["rows"].append({"name": variant, "position": p, "status": "error",
                                        "message": f"{type(e).__name__}: {e}"[:300]})
                continue
            for p in positions:
                row = {"name": variant, "position": p, "status": "ok",
                       **time_graph(dec, graphs[variant][0], p, args.warmup, args.iterations)}
                doc["rows"].append(row)
                print(json.dumps(row), flush=True)
        greedy_doc = {"prompt": prompt, "steps": args.steps}
        if graphs:
            variant = next(iter(graphs))
            greedy_doc["variant"] = variant
            greedy_doc["torch_tokens"] = greedy(dec, *graphs[variant], prompt, args.steps)
    doc["rows"] += transformers_rows(model, prompt, args.generate_tokens, 3)
    try:
        ids = torch.tensor([prompt], device="cuda")
        with torch.no_grad():
            hf = model.generate(ids, max_new_tokens=args.steps, min_new_tokens=args.steps, do_sample=False,
                                pad_token_id=0)
        greedy_doc["transformers_tokens"] = hf[0, len(prompt):].tolist()
    except Exception as e:
        greedy_doc["transformers_error"] = f"{type(e).__name__}: {e}"[:300]
    if args.megasched:
        try:
            greedy_doc["megasched_tokens"] = megasched_tokens(args.megasched, checkpoint, prompt, args.steps)
        except Exception as e:
            greedy_doc["megasched_error"] = str(e)[:600]
    if "torch_tokens" in greedy_doc:
        for other in ("megasched_tokens", "transformers_tokens"):
            if other in greedy_doc:
                d = first_difference(greedy_doc["torch_tokens"], greedy_doc[other])
                greedy_doc[f"first_difference_vs_{other[:-7]}"] = d
                greedy_doc[f"identical_to_{other[:-7]}"] = d < 0
    doc["greedy"] = greedy_doc
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
    print(json.dumps({"greedy": {k: v for k, v in greedy_doc.items() if not k.endswith("_tokens")}}), flush=True)


if __name__ == "__main__":
    main()
