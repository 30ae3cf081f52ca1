// The megakernel ABI: the binary layout shared by the host (lowering, ReferenceVm, validator,
// loader) and the device (vm/device/*.cuh, compiled by NVRTC). Everything here is fixed-width,
// trivially copyable and size-checked with static_assert; the JSON schema of a program
// (schemas/program.schema.json) mirrors it field by field.
//
// A program is a set of tasks. A task is one `Instr`: an opcode, the rows it produces, the operands
// it reads and writes (element offsets into the four buffers below), a list of waits
// `(counter, threshold)` it needs before it runs, and one signal `(counter, +increment)` it
// publishes after its writes. Each block of the persistent kernel runs its own ordered queue of
// tasks.
//
// Last arrivers: a task may name a *chained* task (Instr::chain = its id + 1). The chained task is
// in no queue. Its one wait (c, t) is on the counter its chainers signal; the chainer whose signal
// takes counter c from below the wait's target to it (an atomic add that returns the old value:
// exactly one task per step) runs the chained task on its own block right after that signal, then
// signals the chained task's counter. Every producer of c names the same chained task, so whichever
// arrives last runs it. Chained tasks are kAttnCombine or kArgmax (chainable()) and chain nothing.
//
// Buffers (element offsets, never byte offsets):
//   kBufWeights      model dtype (fp32 or bf16), read-only: the weight arena (see schedule/model.h)
//   kBufActivations  fp32: every activation of one decode step, in static single assignment form
//                    (each layer has its own regions, so nothing is overwritten within a step)
//   kBufKv           model dtype: K and V caches, [layer][k|v][kv_head][max_seq][head_dim]
//   kBufStep         int32: the step cell {token, position, epoch, argmax} (StepCell below)
//
// Counters only grow. Each counter c receives exactly `per_step_total[c]` increments per decode
// step, so at step epoch e a wait (c, t) is satisfied when counter[c] >= e * per_step_total[c] + t.
// No reset launch is needed between tokens. Thresholds in a program are relative to the epoch.
//
// clang-format off
// Opcode semantics (r ranges over [row_begin, row_end); all arithmetic in fp32; weights upcast):
//
//   kEmbed        act[out + r] = W[weight + token * ld + r]     (token = step.token; ld = hidden)
//   kRmsNorm      inv = rsqrt(mean(act[in + 0 .. in + n)^2) + eps),  n = col_end (the full vector)
//                 act[out + r] = act[in + r] * inv * W[weight2 + r]
//   kGemv         acc_r = sum_{c in [col_begin, col_end)} W[weight + r * ld + c] * x(c)
//                 where ld = `ld` and x(c) is the input load:
//                   default:               act[in + c]
//                   kFlagNormPrologue:     act[in + c] * inv_rms(act[in .. in + ld)) * W[weight2+c]
//                   kFlagSiluMulPrologue:  silu(act[in + c]) * act[in2 + c]
//                   kFlagCombinePrologue:  the flash-decoding combine (kAttnCombine's formula,
//                                          p in increasing order) of dim c mod hd of head
//                                          h = c / hd over P = param2 partial records at
//                                          act[in + (p * heads + h) * (hd + 2)], p < P
//                                          (hd = head_dim, heads = the model's query heads)
//                   kFlagAttentionPrologue: kAttnPartial's output with P = 1 (keys [0, position])
//                                          of dim c mod hd of query head h = c / hd, its query
//                                          at act[in + h * hd ..], its kv head h / (heads /
//                                          kv_heads), this instr's layer; the online softmax
//                                          over the keys in increasing order
//                 then the epilogue (exactly one applies):
//                   kFlagPartial:          act[out + r] = acc_r   (out already points at this
//                                          split's slice of the partial buffer; see kGemvReduce)
//                   kFlagResidual:         act[out + r] = acc_r + act[aux + r]
//                   kFlagRopeKv:           rows are QKV rows (see "QKV rows" below)
//                 With kFlagRopePairs (kGemv with kFlagRopeKv, the whole reduction range only)
//                 [row_begin, row_end) are RoPE *pairs*, not rows: pair p is the QKV rows
//                 pair_row(p, 0) and pair_row(p, 1) = pair_row(p, 0) + hd/2 (dims d and d + hd/2
//                 of head p / (hd/2), d = p mod (hd/2)); the task's local row j is
//                 task_row(instr, j, hd) (pairs interleaved), so a task of any pair range holds
//                 both rows of every rotation it applies.
//                   otherwise:             act[out + r] = acc_r
//                 kFlagArgmaxPartial (kGemv / kGemvReduce with the plain epilogue, no k-split
//                 partial): once the rows are written, the task's argmax record: act[aux] = the
//                 largest act[out + r] of its rows, act[aux + 1] = float(the smallest such r)
//                 (the rows index the vocabulary: exact below 2^24); kArgmax reduces the records.
//   kGemvReduce   acc_r = sum_{s = 0 .. n_split - 1} act[in + s * stride + r]   (s in increasing
//                 order: deterministic), n_split = param0, stride = param1; then the same
//                 epilogue as kGemv (kFlagResidual, kFlagRopeKv, or plain) with the same operands.
//   kRopeKv       for the QKV rows r in [row_begin, row_end): value_r = act[in + r], then as
//                 "QKV rows" below (the unfused form of the kFlagRopeKv epilogue).
//   kAttnPartial  kv head g = param0, partition p = param1 of P = param2, q heads
//                 [row_begin, row_end) (all in group g). n = position + 1 keys; chunk = ceil(n/P);
//                 keys t in [p * chunk, min(n, (p + 1) * chunk)). For each q head h:
//                   s_t = scale * dot(act[in + h * hd ..], K[layer][g][t]);   m = max_t s_t;
//                   l = sum_t exp(s_t - m);   o = sum_t exp(s_t - m) * V[layer][g][t]
//                 If P == 1: act[out + h * hd + d] = o_d / l (the final attention output).
//                 Else: the partial record at act[aux + (p * heads + h) * (hd + 2)] = {m,l,o[hd]};
//                 an empty partition writes {-inf, 0, 0...}.
//   kAttnCombine  for q heads h in [row_begin, row_end), P = param2 partial records at
//                 act[aux + (p * heads + h) * (hd + 2)]: M = max_p m_p, L = sum_p l_p * exp(m_p-M),
//                 act[out + h * hd + d] = sum_p o_p,d * exp(m_p - M) / L   (p in increasing order)
//   kSiluMul      act[out + r] = silu(act[in + r]) * act[in2 + r]
//   kAdd          act[out + r] = act[in + r] + act[in2 + r]
//   kArgmax       step.argmax = the smallest index of the maximum of act[in + 0 .. in + col_end);
//                 with kFlagArgmaxPartial the input is col_end argmax records {value, float(index)}
//                 at act[in + 2k]: step.argmax = the index of the largest value, the smallest index
//                 among equal values (so for a vector without NaN both forms agree).
// clang-format on
//
// QKV rows: the rows of the concatenated [Wq; Wk; Wv] matrix of layer `layer`, q_dim = heads * hd,
// kv_dim = kv_heads * hd. A row r < q_dim is a query row: it is rotated (RoPE, rotate-half pairing
// (d, d + hd/2) within its head, angle = position * inv_freq[d mod hd/2], inv_freq read from the
// fp32 table at act[model.rope_table]; the host fills it from theta and any rope scaling) and
// written to act[out + r]. A row in [q_dim, q_dim + kv_dim) is a key row: rotated the same way and
// stored in K[layer][kv head][position][d] (cast to the KV dtype). A row in [q_dim + kv_dim, q_dim
// + 2 kv_dim) is a value row: stored in V[layer][kv head][position][d]. Because of the rotate-half
// pairing a task that applies RoPE covers whole heads (its row range is aligned to head_dim), or
// with kFlagRopePairs any range of pairs (both rows of each pair).
#pragma once

#ifdef __CUDACC_RTC__
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef int int32_t;
typedef unsigned long long uint64_t;
#else
#include <cstdint>
#endif

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define MS_ABI_FN __host__ __device__ inline
#else
#define MS_ABI_FN inline
#endif

namespace ms_abi {

/// Bumped whenever a struct below changes layout or an opcode changes meaning.
constexpr uint32_t kAbiVersion = 2;

/// The instruction set. Both VMs switch over it with no `default:`; kOpcodeCount breaks the build
/// of any name table that is out of date (see kOpcodeNames in schedule/program.cpp).
enum Opcode : uint16_t {
  kEmbed = 0,
  kRmsNorm = 1,
  kGemv = 2,
  kGemvReduce = 3,
  kRopeKv = 4,
  kAttnPartial = 5,
  kAttnCombine = 6,
  kSiluMul = 7,
  kAdd = 8,
  kArgmax = 9,
  kOpcodeCount = 10,
};

/// Instr::flags bits.
enum InstrFlag : uint16_t {
  kFlagNormPrologue = 1u << 0,       // kGemv: RMSNorm the input on load (gamma at weight2)
  kFlagSiluMulPrologue = 1u << 1,    // kGemv: input is silu(act[in]) * act[in2]
  kFlagPartial = 1u << 2,            // kGemv: split-K partial, reduced by a kGemvReduce task
  kFlagResidual = 1u << 3,           // kGemv / kGemvReduce: add act[aux + r]
  kFlagRopeKv = 1u << 4,             // kGemv / kGemvReduce: QKV epilogue (RoPE, KV append)
  kFlagRopePairs = 1u << 5,          // kGemv with kFlagRopeKv: rows are RoPE pairs (see above)
  kFlagArgmaxPartial = 1u << 6,      // kGemv / kGemvReduce: also its argmax record; kArgmax: of
                                     // records (see above)
  kFlagCombinePrologue = 1u << 7,    // kGemv: input is the combine of attention partial records
  kFlagAttentionPrologue = 1u << 8,  // kGemv: input is the attention over every head (P = 1)
  kFlagTagOut = 1u << 9,             // kGemv: also writes its rows as tagged words (see below)
  kFlagTagIn = 1u << 10,             // kGemv: reads its activations as tagged words (see below)
};

/// Tagged words (kFlagTagOut / kFlagTagIn; the device's synchronisation only: both VMs compute the
/// same values with or without them). The tagged mirror of kBufActivations holds one 64-bit word
/// per activation element: the fp32 bits in the low half, in the high half the tag of the step that
/// wrote it, tagged_word_tag(epoch) (never 0, the mirror's initial value, before 2^32 steps). A
/// kFlagTagOut task writes each of its rows twice: the plain element, and the word at the same
/// offset of the mirror, with one 64-bit store (single-copy atomic). A kFlagTagIn task reads every
/// activation element it reads from the mirror, each word once its tag is this step's; it polls its
/// waits only to within tagged_wait_slack of their thresholds before it reads, and acquires them in
/// full before its first write. The validator's rule "race" proves that every element such a task
/// reads is written in the step by kFlagTagOut tasks alone, one word each, all ordered before it by
/// its waits; so a word with this step's tag is that write's value, and everything the waits order
/// before the task is still ordered before its writes and its signal.
MS_ABI_FN uint32_t tagged_word_tag(uint32_t epoch) { return epoch + 1u; }

/// How far below each wait's threshold a kFlagTagIn task stops polling and starts reading its
/// tagged input: an eighth of the threshold (the last producers' words arrive while it reads).
MS_ABI_FN uint32_t tagged_wait_slack(uint32_t threshold) { return threshold / 8u; }

/// Whether the kernel runs `opcode` as a chained (last-arriver) task: opcodes that read no weights
/// (a weight-ring or streamed GEMV needs its block's loader, which walks the queue) and need no
/// staging area.
MS_ABI_FN bool chainable(uint32_t opcode) { return opcode == kAttnCombine || opcode == kArgmax; }

/// The most rows an argmax record indexes: its index is a float, exact up to 2^24.
constexpr uint32_t kArgmaxRecordRows = 1u << 24;

/// The buffers every operand offset points into.
enum BufferId : uint32_t {
  kBufWeights = 0,
  kBufActivations = 1,
  kBufKv = 2,
  kBufStep = 3,
  kBufCount = 4,
};

/// Element dtypes of the weight and KV buffers (activations are always fp32).
enum DTypeCode : uint32_t {
  kDTypeF32 = 0,
  kDTypeBF16 = 1,
};

/// The int32 step cell in kBufStep: what changes from one decode step to the next lives here, in
/// device memory, so one built program serves every token and every position.
struct StepCell {
  int32_t token;     // input token of this step
  int32_t position;  // its position (0-based); attention reads keys 0 .. position
  int32_t epoch;     // decode steps run so far on this counter set (scales every threshold)
  int32_t argmax;    // written by kArgmax
};
static_assert(sizeof(StepCell) == 16, "StepCell layout is part of the ABI");

/// One wait: the task may start once counter >= epoch * per_step_total + threshold.
struct Wait {
  uint32_t counter;
  uint32_t threshold;
};
static_assert(sizeof(Wait) == 8, "Wait layout is part of the ABI");

/// One fixed-width instruction (a task).
struct Instr {
  uint16_t opcode;            // Opcode
  uint16_t flags;             // InstrFlag bits
  uint32_t layer;             // decoder layer (0 .. layers-1); layers for the final norm / LM head
  uint32_t wait_begin;        // first entry of this task's waits in the program's wait table
  uint32_t wait_count;        // number of waits (all must hold)
  uint32_t signal_counter;    // counter bumped after the task's writes are visible
  uint32_t signal_increment;  // +increment (0: the task signals nothing)
  uint32_t row_begin;         // first output row (or head) this task produces
  uint32_t row_end;           // one past the last
  uint32_t col_begin;         // reduction range start (kGemv), vector length (kRmsNorm, kArgmax)
  uint32_t col_end;           // reduction range end
  uint32_t ld;                // row stride of the weight matrix in elements (columns of the full W)
  uint32_t param0;            // opcode-specific (see the semantics above)
  uint32_t param1;            // opcode-specific
  uint32_t param2;            // opcode-specific
  uint64_t weight;            // element offset of W (row 0, column 0) in kBufWeights
  uint64_t weight2;           // element offset of the RMSNorm gamma in kBufWeights (prologue/norm)
  uint32_t in;                // element offsets in kBufActivations
  uint32_t in2;
  uint32_t out;
  uint32_t aux;
  uint32_t op_id;  // index of the logical op (for names in diagnostics and profiles)
  uint32_t chain;  // 0, or the id + 1 of the chained task this one runs when its signal is the
                   // last its wait needs (see "Last arrivers" above)
};
static_assert(sizeof(Instr) == 96, "Instr layout is part of the ABI");

/// Model constants the opcodes need, passed to the kernel once.
struct ModelParams {
  uint32_t hidden;
  uint32_t layers;
  uint32_t heads;
  uint32_t kv_heads;
  uint32_t head_dim;
  uint32_t ffn;
  uint32_t vocab;
  uint32_t max_seq;
  uint32_t weight_dtype;  // DTypeCode
  uint32_t kv_dtype;      // DTypeCode
  float rms_eps;
  float rope_theta;
  float attn_scale;     // 1 / sqrt(head_dim)
  uint32_t rope_table;  // element offset in kBufActivations of head_dim/2 fp32 inverse
                        // frequencies, written once by the host when the program is loaded
};
static_assert(sizeof(ModelParams) == 56, "ModelParams layout is part of the ABI");

/// The largest per-step total a counter may declare (2^31 - 1). Counters, epochs and wait targets
/// are 32-bit on both VMs and wrap; counter_reached compares them wrap-safely, which is exact while
/// a step's increments stay below 2^31 (the validator's rule "reachability" enforces this bound).
constexpr uint32_t kMaxCounterTotal = 0x7fffffffu;

/// The value counter c must reach at step `epoch` for a wait (c, threshold): epoch * total +
/// threshold, modulo 2^32 (the counters are 32-bit and keep growing across steps, so they wrap).
MS_ABI_FN uint32_t wait_target(uint32_t epoch, uint32_t total, uint32_t threshold) {
  return epoch * total + threshold;
}

/// Whether a counter value has reached a wait target, wrap-safe: the signed distance of the two
/// 32-bit values. At step e the counter holds e * total + s (s in [0, total]: this step's
/// increments so far; every earlier step added exactly total) and the target is e * total + t
/// (t <= total), so the true distance s - t lies in [-total, total]; with total <= kMaxCounterTotal
/// it survives the reduction modulo 2^32, and the comparison is s >= t at every step, however
/// often the counter has wrapped. (A plain `value >= target` passes a wait early once the target
/// wraps and the counter has not yet: a race at step ~2^32 / total.)
MS_ABI_FN bool counter_reached(uint32_t value, uint32_t target) {
  return static_cast<int32_t>(value - target) >= 0;
}

/// Whether adding `increment` to a counter that held `old` takes it to `target` (Last arrivers:
/// the one add per step that runs the chained task), wrap-safe like counter_reached.
MS_ABI_FN bool arrival_completes(uint32_t old, uint32_t increment, uint32_t target) {
  return !counter_reached(old, target) && counter_reached(old + increment, target);
}

/// Element offset of K (kv = 0) or V (kv = 1) of (layer, kv head, position 0) in kBufKv.
MS_ABI_FN uint64_t kv_offset(const ModelParams& m, uint32_t layer, uint32_t kv, uint32_t kv_head) {
  return ((static_cast<uint64_t>(layer) * 2 + kv) * m.kv_heads + kv_head) *
         static_cast<uint64_t>(m.max_seq) * m.head_dim;
}

/// kFlagRopePairs: QKV row `second` (0 or 1) of RoPE pair `pair` (head pair / (hd/2), dim
/// pair mod (hd/2), plus hd/2 for the second row).
MS_ABI_FN uint32_t pair_row(uint32_t pair, uint32_t second, uint32_t head_dim) {
  const uint32_t half = head_dim / 2;
  return pair / half * head_dim + pair % half + (second != 0 ? half : 0);
}

/// Output rows a kGemv task produces: row_end - row_begin, twice that with kFlagRopePairs.
MS_ABI_FN uint32_t task_rows(const Instr& in) {
  const uint32_t n = in.row_end - in.row_begin;
  return (in.flags & kFlagRopePairs) != 0 ? 2 * n : n;
}

/// The output row of a kGemv task's local row j (0 <= j < task_rows): row_begin + j, or with
/// kFlagRopePairs the rows of pair row_begin + j / 2 in turn (the partner of local j is j ^ 1).
MS_ABI_FN uint32_t task_row(const Instr& in, uint32_t j, uint32_t head_dim) {
  if ((in.flags & kFlagRopePairs) == 0) return in.row_begin + j;
  return pair_row(in.row_begin + j / 2, j & 1u, head_dim);
}

}  // namespace ms_abi
