// `megasched mcp`: the harness as a Model Context Protocol server over stdio (HARNESS.md, "MCP").
// JSON-RPC 2.0, one message per line (harness/json_rpc.h); protocol 2025-06-18, and 2025-03-26 or
// 2024-11-05 when a client asks for them. The tools are harness/mcp_tools.h, the resources
// harness/mcp_resources.h.
//
// Threads: the caller's thread reads the input and answers at once what is quick (initialize,
// ping, tools/list, resources/*, argument errors, notifications/cancelled); each tools/call runs
// on a thread of its own, so the server keeps reading while a loop runs, and a cancellation
// reaches the call in flight. Writes are serialized: one whole message per line, and nothing but
// protocol messages goes to the output (logs go to stderr). A cancelled call is stopped (its
// worker killed, the trial in flight unlogged) and gets no response, as the protocol asks. At end
// of input, calls still running after kEndOfInputGrace_s are cancelled, and serve_mcp returns.
#pragma once

#include <string>
#include <vector>

#include "harness/mcp_tools.h"

namespace megasched::harness {

/// The protocol versions this server speaks, newest first. initialize answers with the client's
/// version when it is one of these, else with the first.
const std::vector<std::string>& mcp_protocol_versions();

/// Seconds calls in flight at end of input get to finish before they are cancelled.
constexpr double kEndOfInputGrace_s = 1.0;

/// Serves one client: reads messages from in_fd, writes to out_fd, until end of input. Returns
/// the process exit code (0).
int serve_mcp(const McpOptions& options, int in_fd, int out_fd);

}  // namespace megasched::harness
