// Runs the megasched binary (MS_BINARY_PATH) as an agent does, for the harness's end-to-end tests.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace megasched::test {

struct RunResult {
  int exit_code = -1;
  std::string out;  // stdout, and stderr when merged
};

/// Runs a shell command line and collects its stdout.
inline RunResult run_shell(const std::string& command) {
  RunResult r;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

/// `megasched <args>`, stderr merged into the output or dropped.
inline RunResult run_megasched(const std::string& args, bool merge_stderr) {
  return run_shell(std::string(MS_BINARY_PATH) + " " + args +
                   (merge_stderr ? " 2>&1" : " 2>/dev/null"));
}

}  // namespace megasched::test
