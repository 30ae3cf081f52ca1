// `megasched mcp`: the harness as a Model Context Protocol server over stdio (harness/mcp_server.h,
// HARNESS.md "MCP"). An agent host starts it and speaks JSON-RPC on its stdin and stdout.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>

#include "harness/cli_util.h"
#include "harness/commands.h"
#include "harness/mcp_server.h"
#include "harness/verbs.h"

namespace megasched::harness {
namespace {

/// Moves the protocol's streams to private descriptors (closed in children) and points fd 0 at
/// /dev/null and fd 1 at stderr: nothing but the server reads the client's messages, and nothing
/// printed by accident reaches the client. False when a descriptor cannot be duplicated.
bool take_protocol_streams(int* in_fd, int* out_fd) {
  std::fflush(stdout);
  *in_fd = ::fcntl(0, F_DUPFD_CLOEXEC, 3);
  *out_fd = ::fcntl(1, F_DUPFD_CLOEXEC, 3);
  const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (*in_fd < 0 || *out_fd < 0 || null_fd < 0) return false;
  ::dup2(null_fd, 0);
  ::dup2(2, 1);
  ::close(null_fd);
  return true;
}

}  // namespace

void add_mcp_command(CLI::App& app, CliContext& ctx) {
  auto opt = std::make_shared<McpOptions>();
  auto* cmd = app.add_subcommand(
      "mcp",
      "Serve the harness to an agent host as a Model Context Protocol server on stdin/stdout "
      "(JSON-RPC 2.0, one message per line; logs on stderr)");
  cmd->add_option("--results", opt->results_path, "results.tsv the loop tool writes")
      ->capture_default_str();
  cmd->add_option("--corpus", opt->corpus_path, "corpus.jsonl the loop tool writes")
      ->capture_default_str();
  cmd->add_option("--report-html", opt->report_path, "HTML page the report tool writes")
      ->capture_default_str();
  cmd->add_option("--profile-out", opt->profile_path, "JSON document the profile tool writes")
      ->capture_default_str();
  cmd->add_option("--max-message-bytes", opt->max_message_bytes,
                  "Longest message accepted (longer ones are refused, the server stays up)")
      ->check(CLI::Range(size_t{1024}, size_t{1} << 30))
      ->capture_default_str();
  cmd->callback([&ctx, opt] {
    int in_fd = -1, out_fd = -1;
    if (!take_protocol_streams(&in_fd, &out_fd)) {
      print_error("mcp", "cannot duplicate stdin / stdout");
      ctx.exit_code = kExitEnvironment;
      return;
    }
    opt->executable = this_executable();
    ctx.exit_code = serve_mcp(*opt, in_fd, out_fd);
  });
}

}  // namespace megasched::harness
