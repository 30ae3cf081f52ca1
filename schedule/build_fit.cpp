#include "schedule/build_fit.h"

#include <algorithm>

#include "abi/ring.h"
#include "schedule/config.h"

namespace megasched::schedule {
namespace {

uint32_t weight_bytes(const Program& p) {
  return p.model.weight_dtype == ms_abi::kDTypeBF16 ? 2u : 4u;
}

// The knob's -D values the table allows: the integers themselves, or a named choice's index.
std::vector<int> allowed_values(const KnobSpec& spec) {
  std::vector<int> out;
  for (size_t i = 0; i < spec.choices.size(); ++i)
    out.push_back(spec.choices[i].is_number_integer() ? spec.choices[i].get<int>()
                                                      : static_cast<int>(i));
  return out;
}

std::string join(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ", ") + std::to_string(x);
  return s;
}

void knob_misfits(const Program& p, std::vector<BuildMisfit>* out) {
  std::vector<std::string> known;
  for (const KnobSpec& spec : knob_specs()) {
    if (spec.define.empty()) continue;
    known.push_back(spec.define);
    const std::vector<int> allowed = allowed_values(spec);
    auto it = p.build.knobs.find(spec.define);
    if (it == p.build.knobs.end()) {
      out->push_back({"the kernel build does not set " + spec.define + " (" + spec.path +
                      "), so the device would compile its own default; hint: lower the program "
                      "again (every kernel knob is copied into build.knobs)"});
    } else if (std::find(allowed.begin(), allowed.end(), it->second) == allowed.end()) {
      out->push_back({"the kernel build sets " + spec.define + "=" + std::to_string(it->second) +
                      ", not one of " + join(allowed) + " (" + spec.path +
                      "): the device code divides and loops by it"});
    }
  }
  for (const auto& [name, value] : p.build.knobs)
    if (std::find(known.begin(), known.end(), name) == known.end())
      out->push_back({"the kernel build sets " + name + "=" + std::to_string(value) +
                      ", which is no kernel knob: vm::kernel_defines would pass it as a second -D "
                      "beside the launch and model constants it derives itself"});
}

// Per ring task: the staging fits x_floats and a page holds what the loader copies into it.
void ring_task_misfits(const Program& p, size_t max_task_misfits, size_t* more,
                       std::vector<BuildMisfit>* out) {
  const uint32_t wb = weight_bytes(p);
  const int vector_bytes = p.build.knob("MS_VECTOR_BYTES");
  const uint32_t vec_elems = static_cast<uint32_t>(std::max(vector_bytes, 0)) / wb;
  const uint32_t x_block = ms_abi::ring_x_block(static_cast<uint32_t>(vector_bytes), wb);
  const uint32_t page_elems = static_cast<uint32_t>(p.launch.smem_page_bytes) / wb;
  const uint32_t compute_warps = static_cast<uint32_t>(p.launch.threads_per_block / 32 - 1);
  const uint64_t x_floats = static_cast<uint64_t>(p.build.x_floats);
  size_t listed = 0;
  auto report = [&](uint32_t t, std::string message) {
    if (listed++ < max_task_misfits)
      out->push_back({std::move(message), t});
    else
      ++*more;
  };
  for (uint32_t t = 0; t < p.tasks.size(); ++t) {
    const ms_abi::Instr& in = p.tasks[t];
    if (ring_path(p, in) != GemvPath::kRingPieces) continue;
    const uint32_t cols = in.col_end - in.col_begin;
    const uint64_t extent = ms_abi::ring_x_extent(cols, vec_elems);
    if (extent > x_floats)
      report(t, "streams through the weight ring and stages its " + std::to_string(cols) +
                    " input columns in blocks of " + std::to_string(x_block) +
                    " floats up to float " + std::to_string(extent) + ", past the " +
                    std::to_string(x_floats) +
                    " staging floats: it would write ring page 0 while a bulk copy fills it; "
                    "hint: x_floats must be a whole number of " +
                    std::to_string(x_block) +
                    "-float blocks (schedule::ring_x_floats rounds up to 256)");
    const ms_abi::RingPieces g = ms_abi::ring_pieces(cols, page_elems, compute_warps, x_block);
    if (g.pr == 0)
      report(t, "streams row pieces of " + std::to_string(g.pc) +
                    " weights through ring pages of " + std::to_string(page_elems) +
                    ": no piece fits a page, so the loader's row step is zero and the kernel "
                    "never ends; hint: pages of at least " +
                    std::to_string(x_block * wb) + " bytes");
  }
}

// The streamed GEMV's rule for `in` with the build's constants as vm::kernel_defines passes them.
uint32_t stream_rule(const Program& p, const ms_abi::Instr& in) {
  const uint32_t wb = weight_bytes(p);
  const int vector_bytes = p.build.knob("MS_VECTOR_BYTES");
  const uint32_t vec = vector_bytes > 0 ? static_cast<uint32_t>(vector_bytes) / wb : 0;
  const uint32_t hd = p.model.head_dim;
  const uint32_t epilogue_rows = hd > 0 && hd <= 1024 ? ms_abi::ring_epilogue_rows(hd) : 0;
  const uint64_t smem = static_cast<uint64_t>(std::max(p.launch.smem_bytes, 0));
  return ms_abi::stream_misfit(in, vec, epilogue_rows, smem, hd, p.model.heads);
}

// Why the streamed GEMV would not take stream-only task `in` (abi/ring.h stream_misfit), as the
// sentence after its name; empty when it takes it. `what` names the task's kind ("a task of RoPE
// pairs"), `knob` the knob that made it.
std::string stream_misfit_text(const Program& p, const ms_abi::Instr& in, const std::string& what,
                               const std::string& knob) {
  const int vector_bytes = p.build.knob("MS_VECTOR_BYTES");
  const uint32_t hd = p.model.head_dim, heads = p.model.heads;
  const uint32_t epilogue_rows = hd > 0 && hd <= 1024 ? ms_abi::ring_epilogue_rows(hd) : 0;
  const uint64_t smem = static_cast<uint64_t>(std::max(p.launch.smem_bytes, 0));
  if (p.build.weight_ring())
    return "is " + what +
           " in a weight-ring build, where only the registers build's streamed GEMV runs it; "
           "hint: kernel.weight_stream registers, or " +
           knob + " false";
  switch (stream_rule(p, in)) {
    case ms_abi::kStreamFits:
      return "";
    case ms_abi::kStreamNotWholeRows:
      return "is " + what + " over columns [" + std::to_string(in.col_begin) + ", " +
             std::to_string(in.col_end) + ") of " + std::to_string(in.ld) +
             ": the streamed GEMV that runs it takes whole rows; hint: tiling.gemv_k_split 1";
    case ms_abi::kStreamRows:
      return "is " + what + " of " + std::to_string(ms_abi::task_rows(in)) +
             " rows: the streamed GEMV takes 1 to " + std::to_string(epilogue_rows) +
             "; hint: a smaller tiling.gemv_rows_per_task";
    case ms_abi::kStreamCombine:
      return "is " + what + " over " + std::to_string(in.ld) + " columns and " +
             std::to_string(in.param2) + " partitions: the streamed GEMV combines all " +
             std::to_string(heads) + " heads of " + std::to_string(hd) +
             " dims (an even head_dim) of 1 to " + std::to_string(ms_abi::kStreamCombineParts) +
             " partitions; hint: tiling.attn_kv_partitions <= " +
             std::to_string(ms_abi::kStreamCombineParts);
    case ms_abi::kStreamAttention:
      return "is " + what + " over " + std::to_string(in.ld) +
             " columns: the streamed GEMV computes the attention of all " + std::to_string(heads) +
             " heads of " + std::to_string(hd) + " dims, " + std::to_string(uint64_t{heads} * hd) +
             " columns; hint: fusion.attention_into_o false";
    case ms_abi::kStreamAlignment:
      return "is " + what + " whose weights or input are not aligned to the streamed GEMV's " +
             std::to_string(vector_bytes) +
             "-byte weight vectors and float4 input (or, combined, 16-byte partition blocks)";
    default: {  // kStreamSmem
      const bool combine = (in.flags & ms_abi::kFlagCombinePrologue) != 0;
      const uint64_t need = combine ? ms_abi::stream_combine_min_bytes(in.ld, heads, hd, in.param2)
                                    : ms_abi::stream_stage_bytes(in);
      const bool tagged = (in.flags & ms_abi::kFlagTagIn) != 0;
      return "is " + what + " whose " +
             (combine  ? "input, partition weights and one partition's records of every head"
              : tagged ? std::to_string(in.ld) + " input floats and their tagged words"
                       : std::to_string(in.ld) + " input floats") +
             " do not fit the " + std::to_string(smem) +
             " bytes of dynamic shared memory the streamed GEMV stages them in; hint: "
             "smem.pages x smem.page_bytes >= " +
             std::to_string(need);
    }
  }
}

// Per task of RoPE pairs (kFlagRopePairs), with the combine or attention prologue
// (kFlagCombinePrologue, kFlagAttentionPrologue) or with tagged words (kFlagTagIn, kFlagTagOut):
// only the registers build's streamed GEMV runs them (ops.cuh's gemv and the ring paths take
// contiguous rows and a plain input), so each must pass its rule, abi/ring.h stream_misfit, with
// the build's constants as vm::kernel_defines passes them.
void stream_task_misfits(const Program& p, size_t max_task_misfits, size_t* more,
                         std::vector<BuildMisfit>* out) {
  size_t listed = 0;
  for (uint32_t t = 0; t < p.tasks.size(); ++t) {
    const ms_abi::Instr& in = p.tasks[t];
    if (in.opcode != ms_abi::kGemv) continue;
    std::string why;
    if (in.flags & ms_abi::kFlagRopePairs)
      why = stream_misfit_text(p, in, "a task of RoPE pairs", "tiling.qkv_rope_pairs");
    else if (in.flags & ms_abi::kFlagCombinePrologue)
      why = stream_misfit_text(p, in, "a GEMV with the attention combine in its input load",
                               "fusion.combine_into_o");
    else if (in.flags & ms_abi::kFlagAttentionPrologue)
      why = stream_misfit_text(p, in, "a GEMV with the attention in its input load",
                               "fusion.attention_into_o");
    else if (in.flags & (ms_abi::kFlagTagIn | ms_abi::kFlagTagOut))
      why = stream_misfit_text(p, in, "a GEMV that reads or writes tagged words",
                               "pipeline.tagged_inputs");
    if (why.empty()) continue;
    if (listed++ < max_task_misfits)
      out->push_back({std::move(why), t});
    else
      ++*more;
  }
}

}  // namespace

bool stream_takes(const Program& p, const ms_abi::Instr& in) {
  return !p.build.weight_ring() && stream_rule(p, in) == ms_abi::kStreamFits;
}

FallbackGemv fallback_gemv(const Program& p) {
  FallbackGemv out;
  if (p.build.weight_ring()) return out;
  for (const ms_abi::Instr& in : p.tasks) {
    if (in.opcode != ms_abi::kGemv || stream_takes(p, in)) continue;
    if (out.tasks++ > 0) continue;
    const std::string op =
        in.op_id < p.ops.size() ? p.ops[in.op_id].name : "#" + std::to_string(in.op_id);
    out.first = op + " " + stream_misfit_text(p, in, "a GEMV task", "");
  }
  return out;
}

GemvPath ring_path(const Program& p, const ms_abi::Instr& in) {
  if (!p.build.weight_ring() || p.launch.dynamic_queue || in.opcode != ms_abi::kGemv ||
      p.build.x_floats < 0 || p.launch.smem_page_bytes < 0)
    return GemvPath::kRegisters;
  const uint32_t wb = weight_bytes(p);
  if (!ms_abi::ring_streams(in, static_cast<uint32_t>(p.build.x_floats), wb))
    return GemvPath::kRegisters;
  return ms_abi::ring_seg_streams(in, ms_abi::ring_seg_vecs(p.model), wb,
                                  static_cast<uint32_t>(p.launch.smem_page_bytes), p.model.head_dim)
             ? GemvPath::kRingSegments
             : GemvPath::kRingPieces;
}

std::vector<BuildMisfit> build_misfits(const Program& p, size_t max_task_misfits,
                                       size_t* more_tasks) {
  std::vector<BuildMisfit> out;
  *more_tasks = 0;
  knob_misfits(p, &out);
  // The streamed GEMV's chunks held back until after the wait are some of its chunks in flight
  // (vm/device/common.cuh's static_assert; values outside the knob's choices, or a depth the
  // build does not set, knob_misfits has reported).
  const int held = p.build.knob("MS_STREAM_HELD");
  const int depth = p.build.knob("MS_STREAM_DEPTH");
  if (p.build.knobs.count("MS_STREAM_DEPTH") && held > depth)
    out.push_back({"the kernel build sets MS_STREAM_HELD=" + std::to_string(held) +
                   " with MS_STREAM_DEPTH=" + std::to_string(depth) +
                   ": the device holds back from 0 to MS_STREAM_DEPTH of the chunks in flight "
                   "(a static_assert); hint: kernel.stream_held at most kernel.stream_depth"});
  const uint32_t hd = p.model.head_dim;
  if (hd < 2 || hd > kMaxKernelHeadDim || hd % 2 != 0)
    out.push_back({"model head_dim " + std::to_string(hd) +
                   " is not an even number in [2, 256]: the kernel (MS_HEAD_DIM) sizes the "
                   "attention's shared arrays and its epilogue chunks by it and builds no other"});
  stream_task_misfits(p, max_task_misfits, more_tasks, &out);
  if (!p.build.weight_ring()) return out;
  const LaunchShape& l = p.launch;
  // ring_claim's cap on the pages in flight: vm/device/common.cuh's static_assert refuses a cap at
  // or above the ring's pages (it would cap nothing).
  const int inflight = p.build.knob("MS_RING_INFLIGHT");
  if (inflight > 0 && inflight >= l.smem_pages)
    out.push_back({"the kernel build sets MS_RING_INFLIGHT=" + std::to_string(inflight) +
                   " with a weight ring of " + std::to_string(l.smem_pages) +
                   " pages: the device compiles a cap on the pages in flight only below the "
                   "ring's pages (a static_assert); hint: smem.inflight_pages below smem.pages, "
                   "or 0"});
  bool geometry_ok = true;
  if (p.build.x_floats < 0 || p.build.x_floats % 4 != 0) {
    out.push_back({"the weight ring's x_floats " + std::to_string(p.build.x_floats) +
                   " is not a non-negative multiple of 4 (the device stages 16-byte units)"});
    geometry_ok = false;
  }
  if (l.smem_pages < 1 || l.smem_page_bytes < 16 || l.smem_page_bytes % 16 != 0 ||
      l.threads_per_block < 64 || l.threads_per_block % 32 != 0) {
    geometry_ok = false;  // the launch rule reports these
  }
  const int vector_bytes = p.build.knob("MS_VECTOR_BYTES");
  if (vector_bytes != 4 && vector_bytes != 8 && vector_bytes != 16) geometry_ok = false;
  if (geometry_ok) ring_task_misfits(p, max_task_misfits, more_tasks, &out);
  return out;
}

}  // namespace megasched::schedule
