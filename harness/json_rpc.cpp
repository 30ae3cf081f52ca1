#include "harness/json_rpc.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace megasched::harness {

using nlohmann::json;

LineReader::Status LineReader::next(std::string* line, size_t* bytes) {
  for (;;) {
    const size_t newline = buffer_.find('\n');
    if (newline != std::string::npos) {
      if (dropped_ > 0) {
        *bytes = dropped_ + newline;
        dropped_ = 0;
        buffer_.erase(0, newline + 1);
        return Status::kOversize;
      }
      if (newline > max_line_bytes_) {
        *bytes = newline;
        buffer_.erase(0, newline + 1);
        return Status::kOversize;
      }
      *line = buffer_.substr(0, newline);
      buffer_.erase(0, newline + 1);
      if (!line->empty() && line->back() == '\r') line->pop_back();
      *bytes = line->size();
      return Status::kLine;
    }
    if (buffer_.size() > max_line_bytes_) {
      dropped_ += buffer_.size();
      buffer_.clear();
    }
    if (end_) {
      if (dropped_ > 0) {
        *bytes = dropped_ + buffer_.size();
        dropped_ = 0;
        buffer_.clear();
        return Status::kOversize;
      }
      if (buffer_.empty()) return Status::kEnd;
      *line = std::move(buffer_);
      buffer_.clear();
      *bytes = line->size();
      return Status::kLine;
    }
    char chunk[65536];
    const ssize_t n = ::read(fd_, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      end_ = true;
      continue;
    }
    buffer_.append(chunk, static_cast<size_t>(n));
  }
}

bool valid_utf8(const std::string& text, size_t* offset) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    size_t length = 0;
    unsigned min = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      length = 2, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      length = 3, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      length = 4, min = 0x10000;
    } else {
      if (offset) *offset = i;
      return false;
    }
    if (i + length > n) {
      if (offset) *offset = i;
      return false;
    }
    unsigned code = c & (0xFF >> (length + 1));
    for (size_t k = 1; k < length; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) {
        if (offset) *offset = i;
        return false;
      }
      code = (code << 6) | (s[i + k] & 0x3F);
    }
    if (code < min || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) {
      if (offset) *offset = i;
      return false;
    }
    i += length;
  }
  return true;
}

namespace {

bool valid_id(const json& id) { return id.is_string() || id.is_number_integer(); }

// The deepest nesting of arrays and objects in JSON text (brackets inside strings not counted),
// so a message nested a million levels deep is refused before anything recurses into it.
size_t nesting_depth(const std::string& text) {
  size_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

std::optional<JsonRpcMessage> refuse(JsonRpcError* error, int code, const std::string& message,
                                     json id = nullptr, bool notification = false) {
  error->code = code;
  error->message = message;
  error->id = std::move(id);
  error->notification = notification;
  return std::nullopt;
}

}  // namespace

std::optional<JsonRpcMessage> parse_message(const std::string& line, JsonRpcError* error) {
  size_t bad = 0;
  if (!valid_utf8(line, &bad))
    return refuse(error, kParseError,
                  "Parse error: the message is not valid UTF-8 (byte " + std::to_string(bad) + ")");
  if (nesting_depth(line) > kMaxNesting)
    return refuse(error, kInvalidRequest,
                  "Invalid Request: nested deeper than " + std::to_string(kMaxNesting) + " levels");
  json j;
  try {
    j = json::parse(line);
  } catch (const json::parse_error& e) {
    return refuse(error, kParseError, std::string("Parse error: ") + e.what());
  }
  if (j.is_array())
    return refuse(error, kInvalidRequest,
                  "Invalid Request: batches are not supported; send one message per line");
  if (!j.is_object())
    return refuse(error, kInvalidRequest, "Invalid Request: a message is a JSON object");
  const json id = j.contains("id") && valid_id(j["id"]) ? j["id"] : json(nullptr);
  if (j.value("jsonrpc", json()) != "2.0")
    return refuse(error, kInvalidRequest, "Invalid Request: \"jsonrpc\" must be \"2.0\"", id);
  JsonRpcMessage m;
  if (!j.contains("method")) {
    if (j.contains("id") && (j.contains("result") || j.contains("error"))) {
      m.kind = JsonRpcMessage::Kind::kResponse;
      m.id = j["id"];
      return m;
    }
    return refuse(error, kInvalidRequest,
                  "Invalid Request: a message has a \"method\" (or is a response)", id);
  }
  const bool notification = !j.contains("id");
  if (!j["method"].is_string())
    return refuse(error, kInvalidRequest, "Invalid Request: \"method\" must be a string", id,
                  notification);
  if (!notification && !valid_id(j["id"]))
    return refuse(error, kInvalidRequest,
                  "Invalid Request: \"id\" must be a string or an integer (MCP: not null)");
  m.kind = notification ? JsonRpcMessage::Kind::kNotification : JsonRpcMessage::Kind::kRequest;
  m.id = notification ? json(nullptr) : j["id"];
  m.method = j["method"].get<std::string>();
  if (j.contains("params")) {
    if (!j["params"].is_object())
      return refuse(error, kInvalidParams, "Invalid params: \"params\" must be an object", m.id,
                    notification);
    m.params = j["params"];
  }
  return m;
}

json result_message(const json& id, json result) {
  return {{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(result)}};
}

json error_message(const JsonRpcError& error) {
  json body = {{"code", error.code}, {"message", error.message}};
  if (!error.data.is_null()) body["data"] = error.data;
  return {{"jsonrpc", "2.0"}, {"id", error.id}, {"error", body}};
}

json notification_message(const std::string& method, json params) {
  return {{"jsonrpc", "2.0"}, {"method", method}, {"params", std::move(params)}};
}

std::string serialize_line(const json& message) {
  return message.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

}  // namespace megasched::harness
