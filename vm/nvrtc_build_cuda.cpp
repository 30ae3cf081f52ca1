// NVRTC build of the device sources with an on-disk cubin cache (see vm/nvrtc_build.h).
#include "vm/nvrtc_build.h"

#include <nvrtc.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "schedule/config.h"
#include "vm/embedded_sources.h"

namespace megasched::vm {
namespace {

bool read_file(const std::filesystem::path& p, std::string* out) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

void write_file_atomic(const std::filesystem::path& p, const std::string& bytes) {
  std::error_code ec;
  std::filesystem::create_directories(p.parent_path(), ec);
  // Unique per process and thread: two threads of one process may write the same key.
  static std::atomic<uint64_t> serial{0};
  const std::filesystem::path tmp =
      p.string() + ".tmp" + std::to_string(::getpid()) + "." + std::to_string(serial.fetch_add(1));
  {
    std::ofstream out(tmp, std::ios::binary);
    if (!out) return;
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  std::filesystem::rename(tmp, p, ec);
  if (ec) std::filesystem::remove(tmp, ec);
}

/// An exclusive lock on one key of the cache folder (flock on "<key>.lock"), held while the key
/// is compiled: a second builder of the key, a thread or another process, waits, then finds the
/// cubin. No lock when the file cannot be opened (the build goes on unlocked).
class KeyLock {
 public:
  explicit KeyLock(const std::filesystem::path& path) {
    std::error_code ec;
    std::filesystem::create_directories(path.parent_path(), ec);
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ >= 0)
      while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
      }
  }
  ~KeyLock() {
    if (fd_ >= 0) ::close(fd_);  // releases the lock
  }
  KeyLock(const KeyLock&) = delete;
  KeyLock& operator=(const KeyLock&) = delete;

 private:
  int fd_ = -1;
};

nlohmann::json resources_json(const std::vector<KernelResources>& ks) {
  nlohmann::json arr = nlohmann::json::array();
  for (const KernelResources& k : ks) {
    arr.push_back({{"name", k.name},
                   {"registers", k.registers},
                   {"spill_store_bytes", k.spill_store_bytes},
                   {"spill_load_bytes", k.spill_load_bytes},
                   {"stack_bytes", k.stack_bytes},
                   {"smem_static_bytes", k.smem_static_bytes}});
  }
  return arr;
}

std::vector<KernelResources> resources_from_json(const nlohmann::json& arr) {
  std::vector<KernelResources> ks;
  for (const auto& j : arr) {
    KernelResources k;
    k.name = j.value("name", "");
    k.registers = j.value("registers", -1);
    k.spill_store_bytes = j.value("spill_store_bytes", -1);
    k.spill_load_bytes = j.value("spill_load_bytes", -1);
    k.stack_bytes = j.value("stack_bytes", -1);
    k.smem_static_bytes = j.value("smem_static_bytes", -1);
    ks.push_back(k);
  }
  return ks;
}

}  // namespace

std::string nvrtc_version() {
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return "unknown";
  return std::to_string(major) + "." + std::to_string(minor);
}

namespace {

/// The cached cubin of `cubin_path` (and the log and resources stored beside it) into `result`;
/// false when there is none.
bool read_cached(const std::filesystem::path& cubin_path, BuildResult* result) {
  std::string bytes, meta;
  if (!read_file(cubin_path, &bytes) || bytes.empty()) return false;
  result->cubin.assign(bytes.begin(), bytes.end());
  result->ok = true;
  result->cache_hit = true;
  if (read_file(cubin_path.string() + ".json", &meta)) {
    const nlohmann::json j = nlohmann::json::parse(meta, nullptr, false);
    if (j.is_object()) {
      result->log = j.value("log", "");
      result->kernels = resources_from_json(j.value("kernels", nlohmann::json::array()));
    }
  }
  return true;
}

/// One NVRTC compile of `request` into `result` (cubin, log, resources, compile_ms, or error).
void compile(const BuildRequest& request, BuildResult* result) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<const char*> header_names, header_texts;
  for (const EmbeddedSource& s : embedded_sources()) {
    header_names.push_back(s.path);
    header_texts.push_back(s.text);
  }
  const std::string src = entry_source(request);
  nvrtcProgram prog = nullptr;
  nvrtcResult rc = nvrtcCreateProgram(&prog, src.c_str(), "megasched_device.cu",
                                      static_cast<int>(header_names.size()), header_texts.data(),
                                      header_names.data());
  if (rc != NVRTC_SUCCESS) {
    result->error = std::string("nvrtcCreateProgram failed: ") + nvrtcGetErrorString(rc);
    return;
  }
  const std::vector<std::string> opts = compile_options(request);
  std::vector<const char*> copts;
  for (const std::string& o : opts) copts.push_back(o.c_str());
  rc = nvrtcCompileProgram(prog, static_cast<int>(copts.size()), copts.data());
  size_t log_size = 0;
  nvrtcGetProgramLogSize(prog, &log_size);
  std::string log(log_size, '\0');
  if (log_size > 0) nvrtcGetProgramLog(prog, log.data());
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  result->log = log;
  if (rc != NVRTC_SUCCESS) {
    std::string opt_line;
    for (const std::string& o : opts) opt_line += " " + o;
    result->error = std::string("NVRTC failed to compile ") + request.entry + " for " +
                    arch_name(request.sm_arch) + " (" + nvrtcGetErrorString(rc) +
                    "; options:" + opt_line + ")\n" + log;
    nvrtcDestroyProgram(&prog);
    return;
  }
  size_t cubin_size = 0;
  rc = nvrtcGetCUBINSize(prog, &cubin_size);
  if (rc != NVRTC_SUCCESS || cubin_size == 0) {
    result->error =
        std::string("nvrtcGetCUBINSize failed: ") + nvrtcGetErrorString(rc) + "\n" + log;
    nvrtcDestroyProgram(&prog);
    return;
  }
  if (const std::string refusal = ptxas_refusal(log); !refusal.empty()) {
    result->error = "NVRTC built " + request.entry + " for " + arch_name(request.sm_arch) +
                    " but " + refusal + "\n" + log;
    nvrtcDestroyProgram(&prog);
    return;
  }
  result->cubin.resize(cubin_size);
  nvrtcGetCUBIN(prog, result->cubin.data());
  nvrtcDestroyProgram(&prog);
  result->compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  result->kernels = parse_ptxas_log(log);
  result->ok = true;
}

}  // namespace

BuildResult build_cubin(const BuildRequest& request) {
  BuildResult result;
  result.key = build_key(request);
  if (request.cache_dir.empty()) {
    record_cubin_lookup(false);
    compile(request, &result);
    return result;
  }
  const std::filesystem::path cubin_path =
      std::filesystem::path(request.cache_dir) / (result.key + ".cubin");
  if (read_cached(cubin_path, &result)) {
    record_cubin_lookup(true);
    return result;
  }
  // One compile per key: whoever holds the key's lock compiles, the others then find its cubin.
  const KeyLock lock(std::filesystem::path(request.cache_dir) / (result.key + ".lock"));
  if (read_cached(cubin_path, &result)) {
    record_cubin_lookup(true);
    return result;
  }
  record_cubin_lookup(false);
  compile(request, &result);
  if (!result.ok) return result;
  // The metadata first: a reader that finds the cubin finds its log and resources too.
  const nlohmann::json meta = {
      {"entry", request.entry},     {"defines", request.defines},
      {"sm_arch", request.sm_arch}, {"nvrtc", nvrtc_version()},
      {"log", result.log},          {"kernels", resources_json(result.kernels)}};
  write_file_atomic(cubin_path.string() + ".json", meta.dump(2));
  write_file_atomic(cubin_path, std::string(result.cubin.begin(), result.cubin.end()));
  return result;
}

bool nvrtc_available() { return true; }

}  // namespace megasched::vm
