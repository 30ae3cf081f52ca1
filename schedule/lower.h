// lower(): (model shape, GPU target, ScheduleConfig) -> Program. Every knob family of the config
// changes the program or its kernel build (tests/schedule/lower_test.cpp).
//
// What lowering does, in order:
//   1. plan the activation arena (SSA: each layer's q, attn_out, gate_up, ... have their own
//      regions, so no task overwrites what another still reads) and the KV cache layout;
//   2. emit the ops of one decode step in topological order, each split into tiles by the tiling
//      knobs, fused or not by the fusion knobs; a GEMV with gemv_k_split > 1 gets partial tasks
//      and one reduce task per tile;
//   3. give each producer op its counters (one per op, or one per tile when an edge out of it is
//      per_slice) and each task the waits for exactly the producer tiles whose output it reads;
//   4. assign tasks to block queues by the assignment policy (every queue a subsequence of one
//      topological order, so a co-resident grid cannot deadlock); chained tasks (abi/abi.h, Last
//      arrivers: fusion.reduce_by_last_arriver) go in no queue;
//   5. fill the launch shape and kernel build from the launch, smem, pipeline and kernel knobs.
//
// The activation arena (fp32, regions named for diagnostics): "rope_table" (input), "embed.x",
// then per layer l "Ll.xn" (norm unfused), "Ll.q" (roped queries), "Ll.qkv_raw" (RoPE unfused),
// "Ll.attn_partial" (KV partitions > 1: records {m, l, o[head_dim]}), "Ll.attn_out", "Ll.x_mid",
// "Ll.o_out" (residual unfused), "Ll.xn2", "Ll.gate_up" (gate rows then up rows), "Ll.act" (SiLU
// unfused), "Ll.x_out", "Ll.down_out" (residual unfused), "<gemv>.partial" per split-K GEMV;
// then "final.xn" (norm unfused) and "logits". Layer l's residual input is "L(l-1).x_out"
// ("embed.x" for layer 0). Weights ("w.<tensor>"), the step cell ("step") and the KV cache
// ("kv.Ll.k.hg", "kv.Ll.v.hg") are input regions too.
//
// Tiling: every GEMV (QKV, O, gate/up, down) is cut into gemv_rows_per_task rows (QKV rounded up
// to whole heads when RoPE is fused), the LM head into lm_head_rows_per_task rows; a 0 there
// means per block: each op gets the fewest rows per tile (a multiple of 8, of head_dim for fused
// QKV) that cut it into at most one tile per block of the grid. gemv_k_split applies to every
// GEMV including the LM head. Elementwise ops (residual adds, SiLU * up) use gemv_rows_per_task
// rows (per block likewise); an unfused RMSNorm is one task; unfused RoPE is one task per head.
// With tiling.qkv_rope_pairs the fused QKV op is cut into ranges of RoPE pairs instead
// (kFlagRopePairs: gemv_rows_per_task / 2 pairs a tile, or per block the fewest pairs that give at
// most one tile per block), and its slices are pair ranges: a read of whole heads of it waits for
// the tiles holding those heads' pairs.
// Attention is one task per (KV group, chunk of attn_q_heads_per_task query heads, partition).
//
// Counters: an op's granularity follows the edge it feeds: QKV and RoPE -> qkv_to_attention,
// attention / combine -> attention_to_o, gate/up and SiLU -> gate_up_to_down, embed, O, down,
// adds and norms -> residual; a split GEMV's reduce takes its GEMV's edge. The internal edges of a
// split op (partials -> reduce, attention partitions -> combine) are always per slice, and the LM
// head is one counter (argmax reads every row). Every task signals +1 on one counter except the
// argmax, which signals nothing.
#pragma once

#include <optional>
#include <string>

#include "schedule/config.h"
#include "schedule/model.h"
#include "schedule/program.h"
#include "schedule/target.h"

namespace megasched::schedule {

/// Returns nullopt and sets *error (one line, naming the knob) when the config cannot be lowered
/// for this shape (e.g. attn_q_heads_per_task does not divide the KV group).
std::optional<Program> lower(const ModelShape& shape, const GpuTarget& target,
                             const ScheduleConfig& config, std::string* error);

}  // namespace megasched::schedule
