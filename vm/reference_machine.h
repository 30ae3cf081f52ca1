// The machine the ReferenceVm runs a task on (vm/reference_vm.cpp): the CPU twin of each opcode of
// the megakernel (named after the device function, the semantics of abi/abi.h to the letter) and
// the one dispatch switch. Each opcode is a template over the weight element type and a recorder:
// the recorder that records nothing compiles away, so the fast path has no per-element callbacks.
// Private to the ReferenceVm; nothing else includes it.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "abi/abi.h"
#include "schedule/model.h"
#include "schedule/program.h"
#include "vm/reference_vm.h"

namespace megasched::vm::reference_machine {

using ms_abi::Instr;

#define MS_VM_ASSERT(cond, msg)                                                              \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::fprintf(stderr, "%s:%d: ReferenceVm: %s (%s)\n", __FILE__, __LINE__, msg, #cond); \
      std::abort();                                                                          \
    }                                                                                        \
  } while (0)

inline float upcast(float w) { return w; }
inline float upcast(uint16_t w) { return std::bit_cast<float>(static_cast<uint32_t>(w) << 16); }

/// Records nothing; every call compiles away.
struct NoRecord {
  static constexpr bool kOn = false;
  void operator()(uint32_t, uint64_t, bool) const {}
};

/// Forwards every access to the caller's callback.
struct FnRecord {
  static constexpr bool kOn = true;
  const std::function<void(const ElementAccess&)>& fn;
  void operator()(uint32_t buffer, uint64_t index, bool write) const {
    fn(ElementAccess{buffer, index, write});
  }
};

/// sum_c w[c] * x[c] with 16 independent accumulators (vectorisable; fixed association order).
template <typename W>
float dot(const W* w, const float* x, uint32_t n) {
  float acc[16] = {};
  uint32_t c = 0;
  for (; c + 16 <= n; c += 16)
    for (int j = 0; j < 16; ++j) acc[j] += upcast(w[c + j]) * x[c + j];
  float tail = 0.0f;
  for (; c < n; ++c) tail += upcast(w[c]) * x[c];
  for (int width = 8; width >= 1; width /= 2)
    for (int j = 0; j < width; ++j) acc[j] += acc[j + width];
  return acc[0] + tail;
}

/// 1 / sqrt(mean(x^2) + eps) over n elements (8 accumulators, fixed order).
inline float inv_rms(const float* x, uint32_t n, float eps) {
  float acc[8] = {};
  uint32_t c = 0;
  for (; c + 8 <= n; c += 8)
    for (int j = 0; j < 8; ++j) acc[j] += x[c + j] * x[c + j];
  float tail = 0.0f;
  for (; c < n; ++c) tail += x[c] * x[c];
  const float sum =
      ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) + tail;
  return 1.0f / std::sqrt(sum / static_cast<float>(n) + eps);
}

inline float silu(float x) { return x / (1.0f + std::exp(-x)); }

/// The machine state one task sees: the program, the weights, the activations, the KV cache.
template <typename W>
struct MachineState {
  const schedule::Program& program;
  const ms_abi::ModelParams& m;
  const W* weights;
  float* act;
  float* kv_f32;
  uint16_t* kv_bf16;
  ms_abi::StepCell& cell;
  std::vector<float>& scratch;

  void store_kv(uint64_t index, float value) {
    if (kv_f32 != nullptr)
      kv_f32[index] = value;
    else
      kv_bf16[index] = schedule::f32_to_bf16(value);
  }
  float load_kv(uint64_t index) const {
    return kv_f32 != nullptr ? kv_f32[index] : upcast(kv_bf16[index]);
  }
};

/// The attention twins of the device code (vm/device/attention_tasks.cuh, stream.cuh): the partial
/// and combine tasks, and the two GEMV input prologues that attend or combine in place.
template <typename W>
struct AttentionOps : MachineState<W> {
  using MachineState<W>::program;
  using MachineState<W>::m;
  using MachineState<W>::act;
  using MachineState<W>::cell;
  using MachineState<W>::scratch;
  using MachineState<W>::load_kv;

  /// kFlagCombinePrologue: x[c - col_begin] = kAttnCombine's value of column c over the param2
  /// partial records at act[in] (abi/abi.h), head by head.
  template <typename Rec>
  void combine_input(const Instr& t, float* x, const Rec& rec) {
    const uint32_t hd = m.head_dim, parts = t.param2;
    std::vector<float> weight(parts);
    for (uint32_t c0 = t.col_begin; c0 < t.col_end;) {
      const uint32_t h = c0 / hd, c1 = std::min(t.col_end, (h + 1) * hd);
      const auto record = [&](uint32_t p) {
        return t.in + (static_cast<uint64_t>(p) * m.heads + h) * (hd + 2);
      };
      float mx = -std::numeric_limits<float>::infinity();
      for (uint32_t p = 0; p < parts; ++p) {
        if constexpr (Rec::kOn) {
          rec(ms_abi::kBufActivations, record(p), false);
          rec(ms_abi::kBufActivations, record(p) + 1, false);
        }
        mx = std::max(mx, act[record(p)]);
      }
      float l = 0.0f;
      for (uint32_t p = 0; p < parts; ++p) {
        weight[p] = std::exp(act[record(p)] - mx);
        l += act[record(p) + 1] * weight[p];
      }
      for (uint32_t c = c0; c < c1; ++c) {
        float o = 0.0f;
        for (uint32_t p = 0; p < parts; ++p) {
          if constexpr (Rec::kOn) rec(ms_abi::kBufActivations, record(p) + 2 + c % hd, false);
          o += act[record(p) + 2 + c % hd] * weight[p];
        }
        x[c - t.col_begin] = o / l;
      }
      c0 = c1;
    }
  }

  /// kFlagAttentionPrologue: x[c - col_begin] = kAttnPartial's output (P = 1, keys [0, position])
  /// of column c's query head, head by head (abi/abi.h).
  template <typename Rec>
  void attention_input(const Instr& t, float* x, const Rec& rec) {
    const uint32_t hd = m.head_dim, group = m.heads / m.kv_heads;
    if constexpr (Rec::kOn) rec(ms_abi::kBufStep, 1, false);
    const uint32_t n = static_cast<uint32_t>(cell.position) + 1;
    std::vector<float> head(hd);
    for (uint32_t c0 = t.col_begin; c0 < t.col_end;) {
      const uint32_t h = c0 / hd, c1 = std::min(t.col_end, (h + 1) * hd);
      float mx = 0.0f, l = 0.0f;
      attend(t.layer, h / group, t.in, h, 0, n, head.data(), &mx, &l, rec);
      for (uint32_t c = c0; c < c1; ++c) x[c - t.col_begin] = head[c % hd] / l;
      c0 = c1;
    }
  }

  /// Query head h (its query at act[q + h * hd]) of kv head g in `layer` over keys [t0, t1): the
  /// largest score *mx, the sum of exp(s - mx) *l and the unnormalized output o[hd].
  template <typename Rec>
  void attend(uint32_t layer, uint32_t g, uint32_t q_at, uint32_t h, uint32_t t0, uint32_t t1,
              float* o, float* mx_out, float* l_out, const Rec& rec) {
    const uint32_t hd = m.head_dim;
    const uint64_t k_base = ms_abi::kv_offset(m, layer, 0, g);
    const uint64_t v_base = ms_abi::kv_offset(m, layer, 1, g);
    // Its own buffer: a GEMV's attention prologue writes its input in `scratch` meanwhile.
    std::vector<float> work(static_cast<size_t>(t1 - t0) + hd);
    float* scores = work.data();
    float* kv_row = work.data() + (t1 - t0);
    const float* q = act + q_at + static_cast<uint64_t>(h) * hd;
    if constexpr (Rec::kOn)
      for (uint32_t d = 0; d < hd; ++d) rec(ms_abi::kBufActivations, q_at + h * hd + d, false);
    float mx = -std::numeric_limits<float>::infinity();
    for (uint32_t k = t0; k < t1; ++k) {
      for (uint32_t d = 0; d < hd; ++d) {
        if constexpr (Rec::kOn) rec(ms_abi::kBufKv, k_base + k * hd + d, false);
        kv_row[d] = load_kv(k_base + static_cast<uint64_t>(k) * hd + d);
      }
      const float s = m.attn_scale * dot(kv_row, q, hd);
      scores[k - t0] = s;
      mx = std::max(mx, s);
    }
    float l = 0.0f;
    std::fill(o, o + hd, 0.0f);
    for (uint32_t k = t0; k < t1; ++k) {
      const float p = std::exp(scores[k - t0] - mx);
      l += p;
      for (uint32_t d = 0; d < hd; ++d) {
        if constexpr (Rec::kOn) rec(ms_abi::kBufKv, v_base + k * hd + d, false);
        o[d] += p * load_kv(v_base + static_cast<uint64_t>(k) * hd + d);
      }
    }
    *mx_out = mx;
    *l_out = l;
  }

  template <typename Rec>
  void attn_partial(const Instr& t, const Rec& rec) {
    const uint32_t hd = m.head_dim;
    const uint32_t part = t.param1;
    const uint32_t parts = t.param2;
    if constexpr (Rec::kOn) rec(ms_abi::kBufStep, 1, false);
    const uint32_t n = static_cast<uint32_t>(cell.position) + 1;
    const uint32_t chunk = (n + parts - 1) / parts;
    const uint32_t t0 = std::min(n, part * chunk);
    const uint32_t t1 = std::min(n, (part + 1) * chunk);
    scratch.resize(hd);
    float* o = scratch.data();
    for (uint32_t h = t.row_begin; h < t.row_end; ++h) {
      float mx = 0.0f, l = 0.0f;
      attend(t.layer, t.param0, t.in, h, t0, t1, o, &mx, &l, rec);
      if (parts == 1) {
        for (uint32_t d = 0; d < hd; ++d) {
          if constexpr (Rec::kOn) rec(ms_abi::kBufActivations, t.out + h * hd + d, true);
          act[t.out + static_cast<uint64_t>(h) * hd + d] = o[d] / l;
        }
      } else {
        const uint64_t rec_at = t.aux + (static_cast<uint64_t>(part) * m.heads + h) * (hd + 2);
        if constexpr (Rec::kOn)
          for (uint32_t i = 0; i < hd + 2; ++i) rec(ms_abi::kBufActivations, rec_at + i, true);
        act[rec_at] = mx;  // -inf and l = 0 for an empty partition
        act[rec_at + 1] = l;
        std::copy(o, o + hd, act + rec_at + 2);
      }
    }
  }

  template <typename Rec>
  void attn_combine(const Instr& t, const Rec& rec) {
    const uint32_t hd = m.head_dim;
    const uint32_t parts = t.param2;
    scratch.resize(static_cast<size_t>(hd) + parts);
    float* o = scratch.data();
    float* weight = scratch.data() + hd;
    for (uint32_t h = t.row_begin; h < t.row_end; ++h) {
      const auto record = [&](uint32_t p) {
        return t.aux + (static_cast<uint64_t>(p) * m.heads + h) * (hd + 2);
      };
      float mx = -std::numeric_limits<float>::infinity();
      for (uint32_t p = 0; p < parts; ++p) {
        if constexpr (Rec::kOn) {
          for (uint32_t i = 0; i < hd + 2; ++i) rec(ms_abi::kBufActivations, record(p) + i, false);
        }
        mx = std::max(mx, act[record(p)]);
      }
      float l = 0.0f;
      for (uint32_t p = 0; p < parts; ++p) {
        weight[p] = std::exp(act[record(p)] - mx);
        l += act[record(p) + 1] * weight[p];
      }
      std::fill(o, o + hd, 0.0f);
      for (uint32_t p = 0; p < parts; ++p)
        for (uint32_t d = 0; d < hd; ++d) o[d] += act[record(p) + 2 + d] * weight[p];
      for (uint32_t d = 0; d < hd; ++d) {
        if constexpr (Rec::kOn) rec(ms_abi::kBufActivations, t.out + h * hd + d, true);
        act[t.out + static_cast<uint64_t>(h) * hd + d] = o[d] / l;
      }
    }
  }
};

/// Every opcode of the task loop, one method each, and the dispatch switch.
template <typename W>
struct Machine : AttentionOps<W> {
  using MachineState<W>::program;
  using MachineState<W>::m;
  using MachineState<W>::weights;
  using MachineState<W>::act;
  using MachineState<W>::cell;
  using MachineState<W>::scratch;
  using MachineState<W>::store_kv;
  using MachineState<W>::load_kv;
  using AttentionOps<W>::combine_input;
  using AttentionOps<W>::attention_input;
  using AttentionOps<W>::attn_partial;
  using AttentionOps<W>::attn_combine;

  // The QKV rows h + d and h + d + hd/2 (h a head's first row, d < hd/2) with values x1 and x2:
  // rotated unless a value head, then query rows to act[out + row], key / value rows into the KV
  // cache at the step's position. Both QKV epilogue forms below write every row through it.
  template <typename Rec>
  void rope_pair(const Instr& t, uint32_t h, uint32_t d, float x1, float x2, const Rec& rec) {
    const uint32_t hd = m.head_dim;
    const uint32_t half = hd / 2;
    const uint32_t q_dim = m.heads * hd;
    const uint32_t kv_dim = m.kv_heads * hd;
    MS_VM_ASSERT(h + hd <= q_dim + 2 * kv_dim, "RoPE rows beyond the QKV rows");
    const bool is_v = h >= q_dim + kv_dim;
    float y1 = x1, y2 = x2;
    if (!is_v) {
      if constexpr (Rec::kOn) rec(ms_abi::kBufActivations, m.rope_table + d, false);
      const float angle = static_cast<float>(cell.position) * act[m.rope_table + d];
      const float c = std::cos(angle);
      const float s = std::sin(angle);
      y1 = x1 * c - x2 * s;
      y2 = x2 * c + x1 * s;
    }
    if (h < q_dim) {
      if constexpr (Rec::kOn) {
        rec(ms_abi::kBufActivations, t.out + h + d, true);
        rec(ms_abi::kBufActivations, t.out + h + d + half, true);
      }
      act[t.out + h + d] = y1;
      act[t.out + h + d + half] = y2;
    } else {
      const uint32_t kv = is_v ? 1 : 0;
      const uint32_t g = (h - q_dim - kv * kv_dim) / hd;
      const uint64_t base =
          ms_abi::kv_offset(m, t.layer, kv, g) + static_cast<uint64_t>(cell.position) * hd;
      if constexpr (Rec::kOn) {
        rec(ms_abi::kBufKv, base + d, true);
        rec(ms_abi::kBufKv, base + d + half, true);
      }
      store_kv(base + d, y1);
      store_kv(base + d + half, y2);
    }
  }

  // QKV rows [r0, r1) of whole heads with values vals[r - r0].
  template <typename Rec>
  void qkv_rows(const Instr& t, const float* vals, uint32_t r0, uint32_t r1, const Rec& rec) {
    const uint32_t hd = m.head_dim;
    const uint32_t half = hd / 2;
    MS_VM_ASSERT(r0 % hd == 0 && r1 % hd == 0, "a RoPE task must cover whole heads");
    if constexpr (Rec::kOn) rec(ms_abi::kBufStep, 1, false);
    for (uint32_t h = r0; h < r1; h += hd)
      for (uint32_t d = 0; d < half; ++d)
        rope_pair(t, h, d, vals[h - r0 + d], vals[h - r0 + d + half], rec);
  }

  // kFlagRopePairs: pairs [row_begin, row_end), vals[2 i] and vals[2 i + 1] the two rows of pair
  // row_begin + i.
  template <typename Rec>
  void qkv_pairs(const Instr& t, const float* vals, const Rec& rec) {
    const uint32_t hd = m.head_dim;
    if constexpr (Rec::kOn) rec(ms_abi::kBufStep, 1, false);
    for (uint32_t p = t.row_begin; p < t.row_end; ++p) {
      const uint32_t r = ms_abi::pair_row(p, 0, hd);
      const uint32_t i = p - t.row_begin;
      rope_pair(t, r - r % hd, r % hd, vals[2 * i], vals[2 * i + 1], rec);
    }
  }

  // The GEMV / reduce epilogue over the task's rows, vals[j] for local row j.
  template <typename Rec>
  void epilogue(const Instr& t, const float* vals, const Rec& rec) {
    if (t.flags & ms_abi::kFlagRopePairs) {
      qkv_pairs(t, vals, rec);
      return;
    }
    if (t.flags & ms_abi::kFlagRopeKv) {
      qkv_rows(t, vals, t.row_begin, t.row_end, rec);
      return;
    }
    const bool residual = (t.flags & ms_abi::kFlagResidual) != 0;
    for (uint32_t r = t.row_begin; r < t.row_end; ++r) {
      float v = vals[r - t.row_begin];
      if (residual) {
        if constexpr (Rec::kOn) rec(ms_abi::kBufActivations, t.aux + r, false);
        v += act[t.aux + r];
      }
      if constexpr (Rec::kOn) rec(ms_abi::kBufActivations, t.out + r, true);
      act[t.out + r] = v;
    }
    if (t.flags & ms_abi::kFlagArgmaxPartial) argmax_record(t, rec);
  }

  // kFlagArgmaxPartial: the record of the rows just written, {largest value, float(its smallest
  // row)} at act[aux], act[aux + 1]. (The values are the task's own: read back here, they are not
  // recorded as an access, as the footprint does not list them; schedule/footprint.cpp.)
  template <typename Rec>
  void argmax_record(const Instr& t, const Rec& rec) {
    uint32_t best = t.row_begin;
    for (uint32_t r = t.row_begin; r < t.row_end; ++r)
      if (act[t.out + r] > act[t.out + best]) best = r;
    if constexpr (Rec::kOn) {
      rec(ms_abi::kBufActivations, t.aux, true);
      rec(ms_abi::kBufActivations, uint64_t{t.aux} + 1, true);
    }
    act[t.aux] = act[t.out + best];
    act[uint64_t{t.aux} + 1] = static_cast<float>(best);
  }

  template <typename Rec>
  void embed(const Instr& t, const Rec& rec) {
    if constexpr (Rec::kOn) rec(ms_abi::kBufStep, 0, false);
    const uint64_t row = t.weight + static_cast<uint64_t>(cell.token) * t.ld;
    for (uint32_t r = t.row_begin; r < t.row_end; ++r) {
      if constexpr (Rec::kOn) {
        rec(ms_abi::kBufWeights, row + r, false);
        rec(ms_abi::kBufActivations, t.out + r, true);
      }
      act[t.out + r] = upcast(weights[row + r]);
    }
  }

  template <typename Rec>
  void rms_norm(const Instr& t, const Rec& rec) {
    if constexpr (Rec::kOn)
      for (uint32_t c = 0; c < t.col_end; ++c) rec(ms_abi::kBufActivations, t.in + c, false);
    const float inv = inv_rms(act + t.in, t.col_end, m.rms_eps);
    for (uint32_t r = t.row_begin; r < t.row_end; ++r) {
      if constexpr (Rec::kOn) {
        rec(ms_abi::kBufWeights, t.weight2 + r, false);
        rec(ms_abi::kBufActivations, t.out + r, true);
      }
      act[t.out + r] = act[t.in + r] * inv * upcast(weights[t.weight2 + r]);
    }
  }

  template <typename Rec>
  void gemv(const Instr& t, const Rec& rec) {
    const uint32_t cb = t.col_begin;
    const uint32_t n = t.col_end - t.col_begin;
    const uint32_t rows = ms_abi::task_rows(t);
    scratch.resize(static_cast<size_t>(n) + rows);
    float* x = scratch.data();
    float* vals = scratch.data() + n;
    const float* xin = x;
    if (t.flags & ms_abi::kFlagNormPrologue) {
      if constexpr (Rec::kOn)
        for (uint32_t c = 0; c < t.ld; ++c) rec(ms_abi::kBufActivations, t.in + c, false);
      const float inv = inv_rms(act + t.in, t.ld, m.rms_eps);
      for (uint32_t c = 0; c < n; ++c) {
        if constexpr (Rec::kOn) {
          rec(ms_abi::kBufActivations, t.in + cb + c, false);
          rec(ms_abi::kBufWeights, t.weight2 + cb + c, false);
        }
        x[c] = act[t.in + cb + c] * inv * upcast(weights[t.weight2 + cb + c]);
      }
    } else if (t.flags & ms_abi::kFlagSiluMulPrologue) {
      for (uint32_t c = 0; c < n; ++c) {
        if constexpr (Rec::kOn) {
          rec(ms_abi::kBufActivations, t.in + cb + c, false);
          rec(ms_abi::kBufActivations, t.in2 + cb + c, false);
        }
        x[c] = silu(act[t.in + cb + c]) * act[t.in2 + cb + c];
      }
    } else if (t.flags & ms_abi::kFlagCombinePrologue) {
      combine_input(t, x, rec);
    } else if (t.flags & ms_abi::kFlagAttentionPrologue) {
      attention_input(t, x, rec);
    } else {
      if constexpr (Rec::kOn)
        for (uint32_t c = 0; c < n; ++c) rec(ms_abi::kBufActivations, t.in + cb + c, false);
      xin = act + t.in + cb;
    }
    for (uint32_t j = 0; j < rows; ++j) {
      const uint64_t row =
          t.weight + static_cast<uint64_t>(ms_abi::task_row(t, j, m.head_dim)) * t.ld + cb;
      if constexpr (Rec::kOn)
        for (uint32_t c = 0; c < n; ++c) rec(ms_abi::kBufWeights, row + c, false);
      vals[j] = dot(weights + row, xin, n);
    }
    if (t.flags & ms_abi::kFlagPartial) {
      for (uint32_t r = t.row_begin; r < t.row_end; ++r) {
        if constexpr (Rec::kOn) rec(ms_abi::kBufActivations, t.out + r, true);
        act[t.out + r] = vals[r - t.row_begin];
      }
      return;
    }
    epilogue(t, vals, rec);
  }

  template <typename Rec>
  void gemv_reduce(const Instr& t, const Rec& rec) {
    const uint32_t rows = t.row_end - t.row_begin;
    scratch.resize(rows);
    float* vals = scratch.data();
    for (uint32_t r = t.row_begin; r < t.row_end; ++r) {
      float acc = 0.0f;
      for (uint32_t s = 0; s < t.param0; ++s) {
        const uint64_t i = t.in + static_cast<uint64_t>(s) * t.param1 + r;
        if constexpr (Rec::kOn) rec(ms_abi::kBufActivations, i, false);
        acc = s == 0 ? act[i] : acc + act[i];
      }
      vals[r - t.row_begin] = acc;
    }
    epilogue(t, vals, rec);
  }

  template <typename Rec>
  void rope_kv(const Instr& t, const Rec& rec) {
    if constexpr (Rec::kOn)
      for (uint32_t r = t.row_begin; r < t.row_end; ++r)
        rec(ms_abi::kBufActivations, t.in + r, false);
    qkv_rows(t, act + t.in + t.row_begin, t.row_begin, t.row_end, rec);
  }

  template <typename Rec>
  void silu_mul(const Instr& t, const Rec& rec) {
    for (uint32_t r = t.row_begin; r < t.row_end; ++r) {
      if constexpr (Rec::kOn) {
        rec(ms_abi::kBufActivations, t.in + r, false);
        rec(ms_abi::kBufActivations, t.in2 + r, false);
        rec(ms_abi::kBufActivations, t.out + r, true);
      }
      act[t.out + r] = silu(act[t.in + r]) * act[t.in2 + r];
    }
  }

  template <typename Rec>
  void add(const Instr& t, const Rec& rec) {
    for (uint32_t r = t.row_begin; r < t.row_end; ++r) {
      if constexpr (Rec::kOn) {
        rec(ms_abi::kBufActivations, t.in + r, false);
        rec(ms_abi::kBufActivations, t.in2 + r, false);
        rec(ms_abi::kBufActivations, t.out + r, true);
      }
      act[t.out + r] = act[t.in + r] + act[t.in2 + r];
    }
  }

  template <typename Rec>
  void argmax(const Instr& t, const Rec& rec) {
    if (t.flags & ms_abi::kFlagArgmaxPartial) {  // records {value, float(index)}
      float value = 0.0f;
      int32_t index = 0;
      for (uint32_t k = 0; k < t.col_end; ++k) {
        const uint64_t at = t.in + 2ull * k;
        if constexpr (Rec::kOn) {
          rec(ms_abi::kBufActivations, at, false);
          rec(ms_abi::kBufActivations, at + 1, false);
        }
        const float v = act[at];
        const auto i = static_cast<int32_t>(act[at + 1]);
        if (k == 0 || v > value || (v == value && i < index)) {
          value = v;
          index = i;
        }
      }
      if constexpr (Rec::kOn) rec(ms_abi::kBufStep, 3, true);
      cell.argmax = index;
      return;
    }
    int32_t best = 0;
    for (uint32_t c = 0; c < t.col_end; ++c) {
      if constexpr (Rec::kOn) rec(ms_abi::kBufActivations, t.in + c, false);
      if (act[t.in + c] > act[t.in + best]) best = static_cast<int32_t>(c);
    }
    if constexpr (Rec::kOn) rec(ms_abi::kBufStep, 3, true);
    cell.argmax = best;
  }

  template <typename Rec>
  void execute(const Instr& t, const Rec& rec) {
    switch (static_cast<ms_abi::Opcode>(t.opcode)) {
      case ms_abi::kEmbed:
        return embed(t, rec);
      case ms_abi::kRmsNorm:
        return rms_norm(t, rec);
      case ms_abi::kGemv:
        return gemv(t, rec);
      case ms_abi::kGemvReduce:
        return gemv_reduce(t, rec);
      case ms_abi::kRopeKv:
        return rope_kv(t, rec);
      case ms_abi::kAttnPartial:
        return attn_partial(t, rec);
      case ms_abi::kAttnCombine:
        return attn_combine(t, rec);
      case ms_abi::kSiluMul:
        return silu_mul(t, rec);
      case ms_abi::kAdd:
        return add(t, rec);
      case ms_abi::kArgmax:
        return argmax(t, rec);
      case ms_abi::kOpcodeCount:
        break;
    }
    MS_VM_ASSERT(false, "opcode out of range");
  }
};

}  // namespace megasched::vm::reference_machine
