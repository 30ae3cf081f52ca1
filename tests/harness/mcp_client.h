// An MCP client for tests: the server (serve_mcp) on a thread of the test process, driven through
// two pipes as an agent host drives `megasched mcp` through its stdin and stdout.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "harness/mcp_server.h"

namespace megasched::test {

class McpPipeClient {
 public:
  explicit McpPipeClient(harness::McpOptions options) {
    int in[2], out[2];  // close-on-exec: a worker the server starts must not hold them open
    EXPECT_EQ(::pipe2(in, O_CLOEXEC), 0);
    EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
    to_server_ = in[1];
    from_server_ = out[0];
    server_ = std::thread([this, options, in_fd = in[0], out_fd = out[1]] {
      exit_code_ = harness::serve_mcp(options, in_fd, out_fd);
      ::close(in_fd);
      ::close(out_fd);
    });
  }
  ~McpPipeClient() {
    close_input();
    if (from_server_ >= 0) ::close(from_server_);
  }

  void send_line(const std::string& line) {
    const std::string bytes = line + "\n";
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::write(to_server_, bytes.data() + done, bytes.size() - done);
      ASSERT_GT(n, 0);
      done += static_cast<size_t>(n);
    }
  }
  void send(const nlohmann::json& message) { send_line(message.dump()); }

  /// The next message the server writes; null when none comes within timeout_s.
  nlohmann::json next(double timeout_s = 60) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    for (;;) {
      const size_t newline = buffer_.find('\n');
      if (newline != std::string::npos) {
        const std::string line = buffer_.substr(0, newline);
        buffer_.erase(0, newline + 1);
        return nlohmann::json::parse(line);  // a line that is not JSON fails the test loudly
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                            deadline - std::chrono::steady_clock::now())
                            .count();
      if (left <= 0) return nullptr;
      pollfd fd{from_server_, POLLIN, 0};
      if (::poll(&fd, 1, static_cast<int>(left)) <= 0) continue;
      char chunk[65536];
      const ssize_t n = ::read(from_server_, chunk, sizeof chunk);
      if (n <= 0) return nullptr;
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }

  /// Sends a request and waits for its response; messages seen on the way are kept.
  nlohmann::json request(const std::string& method,
                         nlohmann::json params = nlohmann::json::object(),
                         nlohmann::json id = nullptr, double timeout_s = 120) {
    if (id.is_null()) id = next_id_++;
    send({{"jsonrpc", "2.0"}, {"id", id}, {"method", method}, {"params", params}});
    return response_to(id, timeout_s);
  }
  nlohmann::json response_to(const nlohmann::json& id, double timeout_s = 120) {
    for (;;) {
      nlohmann::json m = next(timeout_s);
      if (m.is_null()) return m;
      if (m.contains("id") && m["id"] == id && !m.contains("method")) return m;
      if (m.contains("method"))
        notifications.push_back(m);
      else
        others.push_back(m);
    }
  }
  /// tools/call; the result (or the error response when there is no result).
  nlohmann::json call(const std::string& tool, nlohmann::json arguments,
                      nlohmann::json progress_token = nullptr, nlohmann::json id = nullptr) {
    nlohmann::json params = {{"name", tool}, {"arguments", std::move(arguments)}};
    if (!progress_token.is_null()) params["_meta"] = {{"progressToken", progress_token}};
    nlohmann::json r = request("tools/call", params, std::move(id));
    return r.contains("result") ? r["result"] : r;
  }
  nlohmann::json initialize(const std::string& version = "2025-06-18") {
    nlohmann::json r =
        request("initialize", {{"protocolVersion", version},
                               {"capabilities", nlohmann::json::object()},
                               {"clientInfo", {{"name", "gtest"}, {"version", "1"}}}});
    send({{"jsonrpc", "2.0"}, {"method", "notifications/initialized"}});
    return r;
  }
  /// Closes the server's input and waits for serve_mcp to return; its return value.
  int close_input() {
    if (to_server_ >= 0) ::close(to_server_);
    to_server_ = -1;
    if (server_.joinable()) server_.join();
    return exit_code_;
  }

  std::vector<nlohmann::json> notifications;  // seen while waiting for a response
  std::vector<nlohmann::json> others;         // responses to other requests seen meanwhile

 private:
  int to_server_ = -1;
  int from_server_ = -1;
  std::string buffer_;
  std::thread server_;
  int exit_code_ = -1;
  int next_id_ = 1;
};

}  // namespace megasched::test
