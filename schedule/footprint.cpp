#include "schedule/footprint.h"

#include "schedule/build_fit.h"

namespace megasched::schedule {
namespace {

using u128 = unsigned __int128;
constexpr u128 kMax64 = static_cast<u128>(UINT64_MAX);

// Collects ranges for one task; the first failure wins and later calls are ignored.
class Builder {
 public:
  Builder(std::vector<Access>* out, std::string* error) : out_(out), error_(error) {}

  void add(uint32_t buffer, u128 begin, u128 end, bool write) {
    if (failed_) return;
    if (begin >= end) return fail("an empty operand range");
    if (end > kMax64) return fail("an operand range beyond 2^64 elements");
    out_->push_back(
        Access{buffer, static_cast<uint64_t>(begin), static_cast<uint64_t>(end), write});
  }
  void read(uint32_t buffer, u128 begin, u128 end) { add(buffer, begin, end, false); }
  void write(uint32_t buffer, u128 begin, u128 end) { add(buffer, begin, end, true); }
  void fail(const std::string& why) {
    if (failed_) return;
    failed_ = true;
    *error_ = why;
  }
  bool require(bool condition, const char* why) {
    if (!condition) fail(why);
    return condition && !failed_;
  }
  bool failed() const { return failed_; }

 private:
  std::vector<Access>* out_;
  std::string* error_;
  bool failed_ = false;
};

constexpr uint16_t kEpilogueFlags =
    ms_abi::kFlagPartial | ms_abi::kFlagResidual | ms_abi::kFlagRopeKv;
constexpr uint16_t kPrologueFlags = ms_abi::kFlagNormPrologue | ms_abi::kFlagSiluMulPrologue |
                                    ms_abi::kFlagCombinePrologue | ms_abi::kFlagAttentionPrologue;

int popcount16(uint16_t v) { return __builtin_popcount(v); }

// The model constants and the layer a RoPE + KV-append task needs (both QKV epilogue forms).
bool qkv_model_ok(const Program& p, const ms_abi::Instr& in, Builder* b) {
  const ms_abi::ModelParams& m = p.model;
  return b->require(m.head_dim > 0 && m.head_dim % 2 == 0,
                    "RoPE needs an even, nonzero head_dim") &&
         b->require(m.heads > 0 && m.kv_heads > 0 && m.max_seq > 0,
                    "RoPE / KV append needs heads, kv_heads and max_seq > 0") &&
         b->require(in.layer < m.layers, "a KV append in a layer beyond the model");
}

// Rows of the concatenated [Wq; Wk; Wv] matrix, as the kFlagRopeKv epilogue and kRopeKv treat them.
void qkv_rows(const Program& p, const ms_abi::Instr& in, Builder* b) {
  const ms_abi::ModelParams& m = p.model;
  const u128 hd = m.head_dim;
  const u128 q_dim = static_cast<u128>(m.heads) * hd;
  const u128 kv_dim = static_cast<u128>(m.kv_heads) * hd;
  if (!qkv_model_ok(p, in, b)) return;
  if (!b->require(in.row_begin % m.head_dim == 0 && in.row_end % m.head_dim == 0,
                  "a RoPE row range not aligned to head_dim"))
    return;
  const u128 rb = in.row_begin, re = in.row_end;
  if (!b->require(re <= q_dim + 2 * kv_dim, "QKV rows beyond q_dim + 2 kv_dim")) return;
  if (rb < q_dim + kv_dim)
    b->read(ms_abi::kBufActivations, m.rope_table, static_cast<u128>(m.rope_table) + hd / 2);
  b->read(ms_abi::kBufStep, 1, 2);  // position
  if (rb < q_dim)
    b->write(ms_abi::kBufActivations, static_cast<u128>(in.out) + rb,
             static_cast<u128>(in.out) + std::min(re, q_dim));
  const u128 row_len = static_cast<u128>(m.max_seq) * hd;
  // kv = 0: key rows [q_dim, q_dim + kv_dim); kv = 1: value rows after them.
  for (uint32_t kv = 0; kv < 2; ++kv) {
    const u128 lo = q_dim + kv * kv_dim, hi = lo + kv_dim;
    const u128 a = std::max(rb, lo), z = std::min(re, hi);
    if (a >= z) continue;
    const u128 head_lo = (a - lo) / hd, head_hi = (z - lo) / hd;
    const u128 base = (static_cast<u128>(in.layer) * 2 + kv) * m.kv_heads;
    b->write(ms_abi::kBufKv, (base + head_lo) * row_len, (base + head_hi) * row_len);
  }
}

// kFlagRopePairs: the QKV epilogue of pairs [row_begin, row_end), head by head: a query head's
// dims [d0, d1) and [d0 + hd/2, d1 + hd/2) of act[out + head rows], a key or value head's same dims
// of its cache (in the dimension-major coordinates of the file comment in footprint.h).
void qkv_pairs(const Program& p, const ms_abi::Instr& in, Builder* b) {
  const ms_abi::ModelParams& m = p.model;
  if (!qkv_model_ok(p, in, b)) return;
  const u128 hd = m.head_dim, half = hd / 2;
  const u128 q_heads = m.heads, kv_heads = m.kv_heads;
  const u128 rb = in.row_begin, re = in.row_end;
  if (!b->require(re <= (q_heads + 2 * kv_heads) * half, "RoPE pairs beyond the QKV rows")) return;
  if (rb < (q_heads + kv_heads) * half)
    b->read(ms_abi::kBufActivations, m.rope_table, static_cast<u128>(m.rope_table) + half);
  b->read(ms_abi::kBufStep, 1, 2);  // position
  const u128 row_len = static_cast<u128>(m.max_seq) * hd;
  for (u128 head = rb / half; head * half < re; ++head) {
    const u128 d0 = std::max(rb, head * half) - head * half;
    const u128 d1 = std::min(re, (head + 1) * half) - head * half;
    for (u128 second = 0; second < 2; ++second) {
      const u128 lo = d0 + second * half, hi = d1 + second * half;
      if (head < q_heads) {
        b->write(ms_abi::kBufActivations, in.out + head * hd + lo, in.out + head * hd + hi);
      } else {
        const u128 kv = head < q_heads + kv_heads ? 0 : 1;
        const u128 g = head - q_heads - kv * kv_heads;
        const u128 base = ((static_cast<u128>(in.layer) * 2 + kv) * kv_heads + g) * row_len;
        b->write(ms_abi::kBufKv, base + lo * m.max_seq, base + hi * m.max_seq);
      }
    }
  }
}

// The epilogue shared by kGemv and kGemvReduce (the partial case is kGemv only).
void epilogue(const Program& p, const ms_abi::Instr& in, Builder* b) {
  const u128 rb = in.row_begin, re = in.row_end;
  if (in.flags & ms_abi::kFlagArgmaxPartial) {
    if (!b->require((in.flags & kEpilogueFlags) == 0,
                    "an argmax record after an epilogue other than the plain one"))
      return;
    if (!b->require(re <= ms_abi::kArgmaxRecordRows,
                    "an argmax record of rows beyond 2^24 (float index)"))
      return;
  }
  if (in.flags & ms_abi::kFlagRopePairs) return qkv_pairs(p, in, b);
  if (in.flags & ms_abi::kFlagRopeKv) return qkv_rows(p, in, b);
  if (in.flags & ms_abi::kFlagResidual) b->read(ms_abi::kBufActivations, in.aux + rb, in.aux + re);
  b->write(ms_abi::kBufActivations, in.out + rb, in.out + re);
  if (in.flags & ms_abi::kFlagArgmaxPartial) {
    // The record of the rows just written, beside them. (Off the streamed path the GPU reads the
    // rows back after a block barrier: the task's own values, which no other task writes, so not
    // an access of the footprint; the ReferenceVm takes them from the values it wrote.)
    b->write(ms_abi::kBufActivations, in.aux, static_cast<u128>(in.aux) + 2);
  }
}

// kFlagCombinePrologue: the partial records {m, l, o[hd]} of the heads of columns [col_begin,
// col_end) in each of the param2 partitions. (The streamed GEMV, the only path that runs it,
// copies every head's records of each partition: whole rows, so the same heads.)
void combine_records(const Program& p, const ms_abi::Instr& in, Builder* b) {
  const ms_abi::ModelParams& m = p.model;
  if (!b->require(m.heads > 0 && m.head_dim > 0, "a combine prologue needs heads and head_dim"))
    return;
  if (!b->require(in.param2 >= 1 && in.param2 <= kMaxFootprintSplits,
                  "combine prologue partition count (param2) not in [1, 4096]"))
    return;
  const u128 hd = m.head_dim, rec = hd + 2;
  const u128 h0 = in.col_begin / hd, h1 = (static_cast<u128>(in.col_end) + hd - 1) / hd;
  if (!b->require(h1 <= m.heads, "combine prologue columns beyond heads x head_dim")) return;
  for (u128 part = 0; part < in.param2; ++part)
    b->read(ms_abi::kBufActivations, in.in + (part * m.heads + h0) * rec,
            in.in + (part * m.heads + h1) * rec);
}

// kFlagAttentionPrologue: the queries of the heads of columns [col_begin, col_end), the step's
// position, and the whole K and V cache of every KV head of the instr's layer (keys [0, position]
// of each, over-approximated by the whole cache rows, as kAttnPartial's footprint is).
void attention_input(const Program& p, const ms_abi::Instr& in, Builder* b) {
  const ms_abi::ModelParams& m = p.model;
  if (!b->require(m.heads > 0 && m.kv_heads > 0 && m.head_dim > 0 && m.max_seq > 0 &&
                      m.heads % m.kv_heads == 0,
                  "an attention prologue needs heads, kv_heads, head_dim, max_seq > 0 and "
                  "heads % kv_heads == 0"))
    return;
  if (!b->require(in.layer < m.layers, "an attention prologue in a layer beyond the model")) return;
  const u128 hd = m.head_dim;
  if (!b->require(in.col_end <= static_cast<u128>(m.heads) * hd,
                  "attention prologue columns beyond heads x head_dim"))
    return;
  const u128 h0 = in.col_begin / hd, h1 = (static_cast<u128>(in.col_end) + hd - 1) / hd;
  b->read(ms_abi::kBufActivations, in.in + h0 * hd, in.in + h1 * hd);
  const u128 row_len = static_cast<u128>(m.max_seq) * hd;
  for (uint32_t kv = 0; kv < 2; ++kv) {
    const u128 base = (static_cast<u128>(in.layer) * 2 + kv) * m.kv_heads * row_len;
    b->read(ms_abi::kBufKv, base, base + m.kv_heads * row_len);
  }
  b->read(ms_abi::kBufStep, 1, 2);  // position
}

void gemv(const Program& p, const ms_abi::Instr& in, Builder* b) {
  const uint16_t known = kPrologueFlags | kEpilogueFlags | ms_abi::kFlagRopePairs |
                         ms_abi::kFlagArgmaxPartial | ms_abi::kFlagTagOut | ms_abi::kFlagTagIn;
  if (!b->require((in.flags & ~known) == 0, "gemv with unknown flag bits")) return;
  // Tagged words (abi/abi.h): read by the norm and SiLU x up prologues, written by the plain and
  // residual epilogues. (Which elements must be tagged is the race rule's.)
  if ((in.flags & ms_abi::kFlagTagIn) &&
      !b->require((in.flags & (ms_abi::kFlagNormPrologue | ms_abi::kFlagSiluMulPrologue)) != 0 &&
                      (in.flags & ms_abi::kFlagPartial) == 0,
                  "gemv reading tagged words without the norm or SiLU x up prologue, or as a "
                  "split-K partial"))
    return;
  if ((in.flags & ms_abi::kFlagTagOut) &&
      !b->require((in.flags &
                   (ms_abi::kFlagPartial | ms_abi::kFlagRopeKv | ms_abi::kFlagArgmaxPartial)) == 0,
                  "gemv writing tagged words with an epilogue other than the plain or residual "
                  "one"))
    return;
  const bool pairs = (in.flags & ms_abi::kFlagRopePairs) != 0;
  if (pairs) {
    if (!b->require((in.flags & kEpilogueFlags) == ms_abi::kFlagRopeKv,
                    "gemv with RoPE pairs but without the QKV epilogue alone"))
      return;
  }
  if (!b->require(popcount16(in.flags & kPrologueFlags) <= 1,
                  "gemv with more than one prologue flag"))
    return;
  if (!b->require(popcount16(in.flags & kEpilogueFlags) <= 1,
                  "gemv with more than one epilogue flag"))
    return;
  if (!b->require(in.row_begin < in.row_end, "gemv with an empty row range")) return;
  if (!b->require(in.col_begin < in.col_end && in.col_end <= in.ld,
                  "gemv reduction range not inside [0, ld)"))
    return;
  const u128 cb = in.col_begin, ce = in.col_end, ld = in.ld;
  // Weight rows: the task's first to last row (pairs: its first pair's first row to its last
  // pair's second row, which with the rows between over-approximates the two halves).
  if (pairs && !b->require(p.model.head_dim > 0 && p.model.head_dim % 2 == 0,
                           "RoPE needs an even, nonzero head_dim"))
    return;
  const u128 first_row = pairs ? ms_abi::pair_row(in.row_begin, 0, p.model.head_dim) : in.row_begin;
  const u128 last_row =
      pairs ? ms_abi::pair_row(in.row_end - 1, 1, p.model.head_dim) : in.row_end - 1;
  b->read(ms_abi::kBufWeights, in.weight + first_row * ld + cb, in.weight + last_row * ld + ce);
  if (in.flags & ms_abi::kFlagNormPrologue) {
    // Every path reads the whole input row for the RMS statistic; the ring paths also stage
    // act * gamma over the whole row in the same pass (vm/device/ring.cuh gemv_ring), so their
    // gamma reads are [0, ld), not the task's columns.
    b->read(ms_abi::kBufActivations, in.in, static_cast<u128>(in.in) + ld);
    if (ring_path(p, in) == GemvPath::kRegisters)
      b->read(ms_abi::kBufWeights, in.weight2 + cb, in.weight2 + ce);
    else
      b->read(ms_abi::kBufWeights, in.weight2, in.weight2 + ld);
  } else if (in.flags & ms_abi::kFlagSiluMulPrologue) {
    b->read(ms_abi::kBufActivations, in.in + cb, in.in + ce);
    b->read(ms_abi::kBufActivations, in.in2 + cb, in.in2 + ce);
  } else if (in.flags & ms_abi::kFlagCombinePrologue) {
    combine_records(p, in, b);
  } else if (in.flags & ms_abi::kFlagAttentionPrologue) {
    attention_input(p, in, b);
  } else {
    b->read(ms_abi::kBufActivations, in.in + cb, in.in + ce);
  }
  epilogue(p, in, b);
}

void gemv_reduce(const Program& p, const ms_abi::Instr& in, Builder* b) {
  const uint16_t known = ms_abi::kFlagResidual | ms_abi::kFlagRopeKv | ms_abi::kFlagArgmaxPartial;
  if (!b->require((in.flags & ~known) == 0,
                  "gemv_reduce with a flag other than residual / rope_kv / argmax_partial"))
    return;
  if (!b->require(popcount16(in.flags & (ms_abi::kFlagResidual | ms_abi::kFlagRopeKv)) <= 1,
                  "gemv_reduce with more than one epilogue flag"))
    return;
  if (!b->require(in.row_begin < in.row_end, "gemv_reduce with an empty row range")) return;
  const uint32_t n_split = in.param0;
  if (!b->require(n_split >= 1 && n_split <= kMaxFootprintSplits,
                  "gemv_reduce split count (param0) not in [1, 4096]"))
    return;
  const u128 rb = in.row_begin, re = in.row_end, stride = in.param1;
  if (stride <= re - rb) {  // the split slices touch or overlap: one range
    b->read(ms_abi::kBufActivations, in.in + rb, in.in + (n_split - 1) * stride + re);
  } else {
    for (u128 s = 0; s < n_split; ++s)
      b->read(ms_abi::kBufActivations, in.in + s * stride + rb, in.in + s * stride + re);
  }
  epilogue(p, in, b);
}

bool attention_shape(const Program& p, const ms_abi::Instr& in, Builder* b) {
  const ms_abi::ModelParams& m = p.model;
  if (!b->require(
          m.heads > 0 && m.kv_heads > 0 && m.head_dim > 0 && m.max_seq > 0 &&
              m.heads % m.kv_heads == 0,
          "attention needs heads, kv_heads, head_dim, max_seq > 0 and heads % kv_heads == 0"))
    return false;
  if (!b->require(in.flags == 0, "attention with flags")) return false;
  if (!b->require(in.row_begin < in.row_end && in.row_end <= m.heads,
                  "attention heads not inside [0, heads)"))
    return false;
  return b->require(in.param2 >= 1 && in.param2 <= kMaxFootprintSplits,
                    "attention partition count (param2) not in [1, 4096]");
}

void attn_partial(const Program& p, const ms_abi::Instr& in, Builder* b) {
  if (!attention_shape(p, in, b)) return;
  const ms_abi::ModelParams& m = p.model;
  const uint32_t group = m.heads / m.kv_heads;
  const uint32_t g = in.param0, part = in.param1, parts = in.param2;
  if (!b->require(g < m.kv_heads, "attention KV head (param0) beyond kv_heads")) return;
  if (!b->require(in.row_begin >= g * group && in.row_end <= (g + 1) * group,
                  "attention query heads outside their KV group"))
    return;
  if (!b->require(part < parts, "attention partition (param1) not below the partition count"))
    return;
  if (!b->require(in.layer < m.layers, "attention in a layer beyond the model")) return;
  const u128 hd = m.head_dim, rb = in.row_begin, re = in.row_end;
  b->read(ms_abi::kBufActivations, in.in + rb * hd, in.in + re * hd);
  const u128 row_len = static_cast<u128>(m.max_seq) * hd;
  for (uint32_t kv = 0; kv < 2; ++kv) {
    const u128 base = ((static_cast<u128>(in.layer) * 2 + kv) * m.kv_heads + g) * row_len;
    b->read(ms_abi::kBufKv, base, base + row_len);
  }
  b->read(ms_abi::kBufStep, 1, 2);  // position
  if (parts == 1) {
    b->write(ms_abi::kBufActivations, in.out + rb * hd, in.out + re * hd);
  } else {
    const u128 rec = hd + 2, first = static_cast<u128>(part) * m.heads;
    b->write(ms_abi::kBufActivations, in.aux + (first + rb) * rec, in.aux + (first + re) * rec);
  }
}

void attn_combine(const Program& p, const ms_abi::Instr& in, Builder* b) {
  if (!attention_shape(p, in, b)) return;
  const ms_abi::ModelParams& m = p.model;
  const u128 hd = m.head_dim, rec = hd + 2, rb = in.row_begin, re = in.row_end;
  for (u128 part = 0; part < in.param2; ++part) {
    b->read(ms_abi::kBufActivations, in.aux + (part * m.heads + rb) * rec,
            in.aux + (part * m.heads + re) * rec);
  }
  b->write(ms_abi::kBufActivations, in.out + rb * hd, in.out + re * hd);
}

}  // namespace

uint64_t kv_footprint_index(const ms_abi::ModelParams& m, uint64_t memory_index) {
  const uint64_t hd = m.head_dim, row_len = static_cast<uint64_t>(m.max_seq) * hd;
  if (hd == 0 || row_len == 0) return memory_index;
  const uint64_t head = memory_index / row_len, within = memory_index % row_len;
  return head * row_len + (within % hd) * m.max_seq + within / hd;
}

bool task_footprint(const Program& program, uint32_t task, std::vector<Access>* out,
                    std::string* error) {
  if (task >= program.tasks.size()) {
    *error = "task id out of range";
    return false;
  }
  const ms_abi::Instr& in = program.tasks[task];
  Builder b(out, error);
  const u128 rb = in.row_begin, re = in.row_end;
  switch (in.opcode) {
    case ms_abi::kEmbed: {
      if (!b.require(in.flags == 0, "embed with flags")) break;
      if (!b.require(in.row_begin < in.row_end && in.row_end <= in.ld,
                     "embed rows not inside [0, ld)"))
        break;
      if (!b.require(program.model.vocab > 0, "embed with vocab 0")) break;
      b.read(ms_abi::kBufStep, 0, 1);  // token
      b.read(ms_abi::kBufWeights, in.weight + rb,
             in.weight + static_cast<u128>(program.model.vocab - 1) * in.ld + re);
      b.write(ms_abi::kBufActivations, in.out + rb, in.out + re);
      break;
    }
    case ms_abi::kRmsNorm: {
      if (!b.require(in.flags == 0, "rms_norm with flags")) break;
      if (!b.require(in.row_begin < in.row_end && in.row_end <= in.col_end,
                     "rms_norm rows not inside the vector [0, col_end)"))
        break;
      b.read(ms_abi::kBufActivations, in.in, static_cast<u128>(in.in) + in.col_end);
      b.read(ms_abi::kBufWeights, in.weight2 + rb, in.weight2 + re);
      b.write(ms_abi::kBufActivations, in.out + rb, in.out + re);
      break;
    }
    case ms_abi::kGemv:
      gemv(program, in, &b);
      break;
    case ms_abi::kGemvReduce:
      gemv_reduce(program, in, &b);
      break;
    case ms_abi::kRopeKv: {
      if (!b.require(in.flags == 0, "rope_kv with flags")) break;
      if (!b.require(in.row_begin < in.row_end, "rope_kv with an empty row range")) break;
      b.read(ms_abi::kBufActivations, in.in + rb, in.in + re);
      qkv_rows(program, in, &b);
      break;
    }
    case ms_abi::kAttnPartial:
      attn_partial(program, in, &b);
      break;
    case ms_abi::kAttnCombine:
      attn_combine(program, in, &b);
      break;
    case ms_abi::kSiluMul:
    case ms_abi::kAdd: {
      if (!b.require(in.flags == 0, "an elementwise op with flags")) break;
      if (!b.require(in.row_begin < in.row_end, "an elementwise op with an empty row range")) break;
      b.read(ms_abi::kBufActivations, in.in + rb, in.in + re);
      b.read(ms_abi::kBufActivations, in.in2 + rb, in.in2 + re);
      b.write(ms_abi::kBufActivations, in.out + rb, in.out + re);
      break;
    }
    case ms_abi::kArgmax: {
      if (!b.require((in.flags & ~ms_abi::kFlagArgmaxPartial) == 0, "argmax with unknown flags"))
        break;
      if (!b.require(in.col_end >= 1, "argmax over an empty vector (col_end 0)")) break;
      const u128 per = (in.flags & ms_abi::kFlagArgmaxPartial) ? 2 : 1;  // records: {value, index}
      b.read(ms_abi::kBufActivations, in.in, static_cast<u128>(in.in) + per * in.col_end);
      b.write(ms_abi::kBufStep, 3, 4);  // StepCell::argmax
      break;
    }
    case ms_abi::kOpcodeCount:
    default:
      b.fail("unknown opcode " + std::to_string(in.opcode));
      break;
  }
  return !b.failed();
}

}  // namespace megasched::schedule
