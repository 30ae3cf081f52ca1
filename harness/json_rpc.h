// JSON-RPC 2.0 over a byte stream of newline-delimited messages, the framing of the MCP stdio
// transport: a line reader with a size limit, a UTF-8 check, the shape checks that turn one line
// into a request, a notification or a response (or into the error object that answers it), and
// the objects the server writes. Batches (a JSON array of messages) are refused: MCP 2025-06-18
// removed them.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace megasched::harness {

// The JSON-RPC 2.0 error codes, and the one MCP 2025-06-18 adds.
constexpr int kParseError = -32700;        // not JSON (or not UTF-8)
constexpr int kInvalidRequest = -32600;    // JSON, but not a request (or too large, or too early)
constexpr int kMethodNotFound = -32601;    // no such method
constexpr int kInvalidParams = -32602;     // params (or a tool's arguments) do not fit
constexpr int kInternalError = -32603;     // a bug on the server's side
constexpr int kResourceNotFound = -32002;  // resources/read of a URI the server does not have

/// Reads newline-terminated lines from a file descriptor, each at most `max_line_bytes` long.
class LineReader {
 public:
  LineReader(int fd, size_t max_line_bytes) : fd_(fd), max_line_bytes_(max_line_bytes) {}

  enum class Status { kLine, kOversize, kEnd };
  /// Blocks for the next line, without its "\n" (or "\r\n"). kOversize: a longer line was read
  /// and dropped whole, *bytes says how long it was. kEnd: end of input (a last line without a
  /// newline is returned first).
  Status next(std::string* line, size_t* bytes);

 private:
  int fd_;
  size_t max_line_bytes_;
  std::string buffer_;
  size_t dropped_ = 0;  // bytes of an oversize line dropped so far
  bool end_ = false;
};

/// Whether `text` is well-formed UTF-8 (no overlong forms, no surrogates, nothing past
/// U+10FFFF); when it is not, *offset is the first byte that is wrong.
bool valid_utf8(const std::string& text, size_t* offset);

/// One message a client sent.
struct JsonRpcMessage {
  enum class Kind { kRequest, kNotification, kResponse };
  Kind kind = Kind::kRequest;
  nlohmann::json id;                                 // requests and responses
  std::string method;                                // requests and notifications
  nlohmann::json params = nlohmann::json::object();  // an absent params is {}
};

/// Why a line is not a message: the error object that answers it.
struct JsonRpcError {
  int code = kInvalidRequest;
  std::string message;
  nlohmann::json id = nullptr;    // the request's id when it could be read
  nlohmann::json data = nullptr;  // details (a schema error's path, a resource's URI)
  bool notification = false;      // the line was a notification: it gets no answer
};

/// Deepest nesting of arrays and objects a message may have.
constexpr size_t kMaxNesting = 64;

/// Reads one line as a message; nullopt with *error when it is not JSON-RPC 2.0 (or is nested
/// deeper than kMaxNesting).
std::optional<JsonRpcMessage> parse_message(const std::string& line, JsonRpcError* error);

/// {"jsonrpc": "2.0", "id": id, "result": result}
nlohmann::json result_message(const nlohmann::json& id, nlohmann::json result);
/// {"jsonrpc": "2.0", "id": error.id, "error": {"code", "message", "data"?}}
nlohmann::json error_message(const JsonRpcError& error);
/// {"jsonrpc": "2.0", "method": method, "params": params}
nlohmann::json notification_message(const std::string& method, nlohmann::json params);

/// One message as one line of text, newline included; bytes that are not UTF-8 (a child's stderr,
/// a file's text) become U+FFFD instead of failing the write.
std::string serialize_line(const nlohmann::json& message);

}  // namespace megasched::harness
