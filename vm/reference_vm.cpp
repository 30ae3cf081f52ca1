// ReferenceVm: the CPU twin of the megakernel's task loop (queues, counters, the step cell, the run
// orders), over the machine of vm/reference_machine.h, which holds one function per opcode.
#include "vm/reference_vm.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "vm/reference_machine.h"

namespace megasched::vm {

using ms_abi::Instr;
using reference_machine::FnRecord;
using reference_machine::Machine;
using reference_machine::NoRecord;

ReferenceVm::ReferenceVm(const schedule::Program& program, const schedule::Weights& weights)
    : program_(program), weights_(weights) {
  act_.assign(program.buffer_elements[ms_abi::kBufActivations], 0.0f);
  const uint64_t kv_elements = program.buffer_elements[ms_abi::kBufKv];
  if (program.model.kv_dtype == ms_abi::kDTypeBF16)
    kv_bf16_.assign(kv_elements, 0);
  else
    kv_f32_.assign(kv_elements, 0.0f);
  counters_.assign(program.num_counters(), 0);
  const std::vector<float> inv_freq = schedule::rope_inv_freq(weights.shape);
  MS_VM_ASSERT(program.model.rope_table + inv_freq.size() <= act_.size(),
               "rope table outside the activation arena");
  std::copy(inv_freq.begin(), inv_freq.end(), act_.begin() + program.model.rope_table);
  if (const schedule::Region* logits = program.find_region("logits")) {
    logits_begin_ = logits->begin;
    logits_end_ = logits->end;
  }
  cell_.argmax = -1;
}

void ReferenceVm::set_step(int32_t token, int32_t position) {
  cell_.token = token;
  cell_.position = position;
}

void ReferenceVm::execute(uint32_t task, const std::function<void(const ElementAccess&)>* record) {
  execute_with(task, scratch_, record);
}

void ReferenceVm::set_threads(int threads) { threads_ = std::clamp(threads, 1, 256); }

void ReferenceVm::execute_with(uint32_t task, std::vector<float>& scratch,
                               const std::function<void(const ElementAccess&)>* record) {
  const Instr& t = program_.tasks[task];
  float* kv_f32 = kv_f32_.empty() ? nullptr : kv_f32_.data();
  uint16_t* kv_bf16 = kv_bf16_.empty() ? nullptr : kv_bf16_.data();
  const auto run = [&](const auto* weights) {
    using W = std::remove_cv_t<std::remove_pointer_t<decltype(weights)>>;
    Machine<W> machine{
        {{program_, program_.model, weights, act_.data(), kv_f32, kv_bf16, cell_, scratch}}};
    if (record != nullptr)
      machine.execute(t, FnRecord{*record});
    else
      machine.execute(t, NoRecord{});
  };
  if (weights_.shape.dtype == schedule::DType::kBF16)
    run(weights_.bf16.data());
  else
    run(weights_.f32.data());
}

uint32_t ReferenceVm::wait_target(const ms_abi::Wait& w) const {
  return ms_abi::wait_target(static_cast<uint32_t>(cell_.epoch), program_.counter_totals[w.counter],
                             w.threshold);
}

bool ReferenceVm::ready(uint32_t task) const {
  const Instr& t = program_.tasks[task];
  for (uint32_t i = 0; i < t.wait_count; ++i) {
    const ms_abi::Wait& w = program_.waits[t.wait_begin + i];
    if (!ms_abi::counter_reached(counters_[w.counter], wait_target(w))) return false;
  }
  return true;
}

void ReferenceVm::resume_at_epoch(uint32_t epoch) {
  cell_.epoch = static_cast<int32_t>(epoch);
  for (size_t c = 0; c < counters_.size(); ++c)
    counters_[c] = ms_abi::wait_target(epoch, program_.counter_totals[c], 0);
}

std::optional<uint32_t> ReferenceVm::signal(uint32_t task) {
  const Instr& t = program_.tasks[task];
  if (t.signal_increment == 0) return std::nullopt;
  const uint32_t before = counters_[t.signal_counter];
  counters_[t.signal_counter] += t.signal_increment;
  // A last arriver (abi/abi.h): the signal that takes the counter to the chained task's wait
  // target runs that task, as the kernel runs it on the arriving block.
  if (t.chain == 0 || t.chain > program_.tasks.size()) return std::nullopt;
  const Instr& k = program_.tasks[t.chain - 1];
  if (k.wait_count != 1 || k.wait_begin >= program_.waits.size()) return std::nullopt;
  const ms_abi::Wait& w = program_.waits[k.wait_begin];
  if (w.counter != t.signal_counter) return std::nullopt;
  if (!ms_abi::arrival_completes(before, t.signal_increment, wait_target(w))) return std::nullopt;
  return t.chain - 1;
}

void ReferenceVm::signal_chained(uint32_t task) {
  const Instr& k = program_.tasks[task];
  if (k.signal_increment != 0) counters_[k.signal_counter] += k.signal_increment;
}

uint32_t ReferenceVm::run_task(uint32_t task) {
  execute(task);
  const std::optional<uint32_t> chained = signal(task);
  if (!chained) return 1;
  execute(*chained);  // one level only: a chained task's own signal chains nothing
  signal_chained(*chained);
  return 2;
}

std::string ReferenceVm::describe_wait(uint32_t task) const {
  const Instr& t = program_.tasks[task];
  std::string s = program_.task_label(task) + " waits";
  for (uint32_t i = 0; i < t.wait_count; ++i) {
    const ms_abi::Wait& w = program_.waits[t.wait_begin + i];
    const uint32_t need = wait_target(w);
    if (ms_abi::counter_reached(counters_[w.counter], need)) continue;
    s += ' ';
    if (w.counter < program_.counter_names.size())
      s += program_.counter_names[w.counter];
    else
      s.append("c").append(std::to_string(w.counter));
    s.append(" >= ").append(std::to_string(need));
    s.append(" (has ").append(std::to_string(counters_[w.counter])).append(")");
  }
  return s;
}

namespace {

std::string join_stuck(const std::vector<std::string>& items) {
  constexpr size_t kShown = 8;
  std::string s;
  for (size_t i = 0; i < items.size() && i < kShown; ++i) {
    if (i > 0) s += "; ";
    s += items[i];
  }
  if (items.size() > kShown) s += "; ... and " + std::to_string(items.size() - kShown) + " more";
  return s;
}

}  // namespace

/// The threads of one kWaves step: run(n, fn) calls fn(i, worker) for every i in [0, n), spread
/// over the pool's threads and the caller (worker 0), and returns when every call has returned.
class WavePool {
 public:
  explicit WavePool(int threads) {
    for (int w = 1; w < threads; ++w) threads_.emplace_back([this, w] { serve(w); });
  }
  ~WavePool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  WavePool(const WavePool&) = delete;
  WavePool& operator=(const WavePool&) = delete;

  void run(size_t n, const std::function<void(size_t, int)>& fn) {
    if (threads_.empty() || n <= 1) {
      for (size_t i = 0; i < n; ++i) fn(i, 0);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      fn_ = &fn;
      n_ = n;
      next_.store(0);
      busy_ = static_cast<int>(threads_.size());
      ++generation_;
    }
    wake_.notify_all();
    work(0);
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [this] { return busy_ == 0; });
    fn_ = nullptr;
  }

 private:
  void work(int worker) {
    for (size_t i = next_.fetch_add(1); i < n_; i = next_.fetch_add(1)) (*fn_)(i, worker);
  }
  void serve(int worker) {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
      }
      work(worker);
      std::lock_guard<std::mutex> lock(mu_);
      if (--busy_ == 0) done_.notify_one();
    }
  }

  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable wake_, done_;
  const std::function<void(size_t, int)>* fn_ = nullptr;
  size_t n_ = 0;
  std::atomic<size_t> next_{0};
  int busy_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

uint64_t ReferenceVm::run_wave(const std::vector<uint32_t>& wave) {
  // No task of a wave waits on another's signal (each was ready before any ran), and a race-free
  // program's unordered tasks touch disjoint elements where one writes, so running them at once
  // computes what any serial order of them computes.
  WavePool* pool = wave_pool_;
  const auto run_all = [&](const std::vector<uint32_t>& tasks) {
    const std::function<void(size_t, int)> fn = [&](size_t i, int worker) {
      execute_with(tasks[i], wave_scratch_[static_cast<size_t>(worker)], nullptr);
    };
    pool->run(tasks.size(), fn);
  };
  run_all(wave);
  // The signals in wave order, as run_task gives them; the chained tasks they complete run
  // together after them (one level, as run_task).
  std::vector<uint32_t> chained;
  for (const uint32_t task : wave)
    if (const std::optional<uint32_t> k = signal(task)) chained.push_back(*k);
  run_all(chained);
  for (const uint32_t task : chained) signal_chained(task);
  return wave.size() + chained.size();
}

bool ReferenceVm::run_static(RunOrder order, uint64_t seed, uint64_t* tasks_run,
                             std::string* stuck) {
  const auto& queues = program_.queues;
  std::vector<size_t> head(queues.size(), 0);
  if (order == RunOrder::kWaves) {
    std::vector<uint32_t> wave;
    std::vector<size_t> blocks;
    for (;;) {
      wave.clear();
      blocks.clear();
      for (size_t b = 0; b < queues.size(); ++b)
        if (head[b] < queues[b].size() && ready(queues[b][head[b]])) {
          wave.push_back(queues[b][head[b]]);
          blocks.push_back(b);
        }
      if (wave.empty()) break;
      *tasks_run += run_wave(wave);
      for (const size_t b : blocks) ++head[b];
    }
  } else if (order == RunOrder::kQueueOrder) {
    bool progress = true;
    while (progress) {
      progress = false;
      for (size_t b = 0; b < queues.size(); ++b) {
        while (head[b] < queues[b].size() && ready(queues[b][head[b]])) {
          *tasks_run += run_task(queues[b][head[b]++]);
          progress = true;
        }
      }
    }
  } else {
    std::mt19937_64 rng(seed);
    std::vector<size_t> candidates;
    for (;;) {
      candidates.clear();
      for (size_t b = 0; b < queues.size(); ++b)
        if (head[b] < queues[b].size() && ready(queues[b][head[b]])) candidates.push_back(b);
      if (candidates.empty()) break;
      const size_t b =
          candidates[std::uniform_int_distribution<size_t>(0, candidates.size() - 1)(rng)];
      *tasks_run += run_task(queues[b][head[b]++]);
    }
  }
  std::vector<std::string> blocked;
  for (size_t b = 0; b < queues.size(); ++b)
    if (head[b] < queues[b].size())
      blocked.push_back("block " + std::to_string(b) + ": " + describe_wait(queues[b][head[b]]));
  *stuck = join_stuck(blocked);
  return blocked.empty();
}

bool ReferenceVm::run_dynamic(RunOrder order, uint64_t seed, uint64_t* tasks_run,
                              std::string* stuck) {
  const std::vector<uint32_t>& queue =
      program_.queues.empty() ? std::vector<uint32_t>{} : program_.queues[0];
  const size_t workers = static_cast<size_t>(std::max(1, program_.launch.grid_blocks));
  std::vector<size_t> claimed;  // tickets held by workers, ascending
  size_t next_ticket = 0;
  std::mt19937_64 rng(seed);
  std::vector<size_t> candidates;
  std::vector<uint32_t> wave;
  for (;;) {
    while (claimed.size() < workers && next_ticket < queue.size()) claimed.push_back(next_ticket++);
    if (order == RunOrder::kWaves) {
      // Every ready claimed task at once; their workers then claim the next tickets.
      wave.clear();
      std::vector<size_t> still;
      for (const size_t ticket : claimed) {
        if (ready(queue[ticket]))
          wave.push_back(queue[ticket]);
        else
          still.push_back(ticket);
      }
      if (wave.empty()) break;
      *tasks_run += run_wave(wave);
      claimed = std::move(still);
      continue;
    }
    candidates.clear();
    for (size_t i = 0; i < claimed.size(); ++i) {
      if (ready(queue[claimed[i]])) {
        candidates.push_back(i);
        if (order == RunOrder::kQueueOrder) break;  // the lowest ready ticket
      }
    }
    if (candidates.empty()) break;
    const size_t pick =
        order == RunOrder::kQueueOrder
            ? candidates[0]
            : candidates[std::uniform_int_distribution<size_t>(0, candidates.size() - 1)(rng)];
    *tasks_run += run_task(queue[claimed[pick]]);
    claimed.erase(claimed.begin() + static_cast<std::ptrdiff_t>(pick));
  }
  std::vector<std::string> blocked;
  for (size_t ticket : claimed) blocked.push_back(describe_wait(queue[ticket]));
  if (next_ticket < queue.size())
    blocked.push_back(std::to_string(queue.size() - next_ticket) + " unclaimed tasks");
  *stuck = join_stuck(blocked);
  return claimed.empty() && next_ticket == queue.size();
}

ReferenceVm::StepResult ReferenceVm::step(int32_t token, int32_t position, RunOrder order,
                                          uint64_t seed) {
  StepResult result;
  MS_VM_ASSERT(token >= 0 && static_cast<uint32_t>(token) < program_.model.vocab,
               "token outside the vocabulary");
  MS_VM_ASSERT(position >= 0 && static_cast<uint32_t>(position) < program_.model.max_seq,
               "position outside the KV cache");
  cell_.token = token;
  cell_.position = position;
  cell_.argmax = -1;
  std::optional<WavePool> pool;
  if (order == RunOrder::kWaves) {
    pool.emplace(threads_);
    wave_pool_ = &*pool;
    wave_scratch_.resize(static_cast<size_t>(threads_));
  }
  result.completed = program_.launch.dynamic_queue
                         ? run_dynamic(order, seed, &result.tasks_run, &result.stuck)
                         : run_static(order, seed, &result.tasks_run, &result.stuck);
  wave_pool_ = nullptr;
  if (result.completed && result.tasks_run < program_.tasks.size()) {
    // The queues drained but a chained task never ran: no chainer's signal crossed its wait.
    result.completed = false;
    result.stuck = std::to_string(program_.tasks.size() - result.tasks_run) +
                   " chained tasks never ran (no chainer's signal reached their wait)";
  }
  result.logits.assign(act_.begin() + static_cast<std::ptrdiff_t>(logits_begin_),
                       act_.begin() + static_cast<std::ptrdiff_t>(logits_end_));
  result.argmax = cell_.argmax;
  // The epoch wraps like the device's 32-bit one (counter_reached is exact across the wrap).
  if (result.completed) cell_.epoch = static_cast<int32_t>(static_cast<uint32_t>(cell_.epoch) + 1u);
  return result;
}

}  // namespace megasched::vm

namespace megasched::vm {

bool ReferenceVm::load_kv(const KvSnapshot& kv) {
  const ms_abi::ModelParams& m = program_.model;
  const bool bf16 = m.kv_dtype == ms_abi::kDTypeBF16;
  if (kv.layers != static_cast<int>(m.layers) || kv.kv_heads != static_cast<int>(m.kv_heads) ||
      kv.head_dim != static_cast<int>(m.head_dim) || kv.positions < 0 ||
      kv.positions > static_cast<int>(m.max_seq) || (kv.dtype == schedule::DType::kBF16) != bf16 ||
      kv.bytes.size() != kv.elements() * static_cast<size_t>(schedule::dtype_bytes(kv.dtype)))
    return false;
  const size_t row_bytes = static_cast<size_t>(kv.positions) * kv.head_dim * (bf16 ? 2 : 4);
  for (int l = 0; l < kv.layers; ++l)
    for (int k = 0; k < 2; ++k)
      for (int g = 0; g < kv.kv_heads; ++g) {
        const uint64_t dst = ms_abi::kv_offset(m, static_cast<uint32_t>(l),
                                               static_cast<uint32_t>(k), static_cast<uint32_t>(g));
        const uint8_t* src = kv.bytes.data() + kv.index(l, k, g, 0, 0) * (bf16 ? 2 : 4);
        void* to = bf16 ? static_cast<void*>(kv_bf16_.data() + dst)
                        : static_cast<void*>(kv_f32_.data() + dst);
        std::memcpy(to, src, row_bytes);
      }
  return true;
}

KvSnapshot ReferenceVm::kv_snapshot(int positions) const {
  const ms_abi::ModelParams& m = program_.model;
  const bool bf16 = m.kv_dtype == ms_abi::kDTypeBF16;
  KvSnapshot kv;
  kv.layers = static_cast<int>(m.layers);
  kv.kv_heads = static_cast<int>(m.kv_heads);
  kv.head_dim = static_cast<int>(m.head_dim);
  kv.positions = std::clamp(positions, 0, static_cast<int>(m.max_seq));
  kv.dtype = bf16 ? schedule::DType::kBF16 : schedule::DType::kF32;
  const size_t element_bytes = bf16 ? 2 : 4;
  kv.bytes.assign(kv.elements() * element_bytes, 0);
  const size_t row_bytes = static_cast<size_t>(kv.positions) * kv.head_dim * element_bytes;
  for (int l = 0; l < kv.layers; ++l)
    for (int k = 0; k < 2; ++k)
      for (int g = 0; g < kv.kv_heads; ++g) {
        const uint64_t src = ms_abi::kv_offset(m, static_cast<uint32_t>(l),
                                               static_cast<uint32_t>(k), static_cast<uint32_t>(g));
        const void* from = bf16 ? static_cast<const void*>(kv_bf16_.data() + src)
                                : static_cast<const void*>(kv_f32_.data() + src);
        std::memcpy(kv.bytes.data() + kv.index(l, k, g, 0, 0) * element_bytes, from, row_bytes);
      }
  return kv;
}

}  // namespace megasched::vm
