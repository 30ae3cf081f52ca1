// JSON-RPC 2.0 framing of the MCP stdio transport: bounded lines, UTF-8, the shape of a message
// and the error that answers a bad one.
#include "harness/json_rpc.h"

#include <unistd.h>

#include <thread>

#include <gtest/gtest.h>

namespace megasched::harness {
namespace {

using nlohmann::json;

// Reads everything `text` holds through a LineReader with the given limit.
std::vector<std::pair<LineReader::Status, std::string>> read_all(const std::string& text,
                                                                 size_t limit) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  std::thread writer([&] {  // a pipe holds 64 KiB: write while the reader reads
    size_t done = 0;
    while (done < text.size()) {
      const ssize_t n = ::write(fds[1], text.data() + done, text.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    ::close(fds[1]);
  });
  LineReader reader(fds[0], limit);
  std::vector<std::pair<LineReader::Status, std::string>> out;
  std::string line;
  size_t bytes = 0;
  for (;;) {
    const LineReader::Status s = reader.next(&line, &bytes);
    if (s == LineReader::Status::kEnd) break;
    out.emplace_back(s, s == LineReader::Status::kLine ? line : std::to_string(bytes));
  }
  writer.join();
  ::close(fds[0]);
  return out;
}

TEST(JsonRpc, LineReaderSplitsLinesDropsOversizeOnesWholeAndKeepsALastUnterminatedLine) {
  using S = LineReader::Status;
  const std::string big(100, 'x');
  const auto lines = read_all("a\r\nbb\n" + big + "\nccc\n" + big + big + "\nlast", 16);
  const std::vector<std::pair<S, std::string>> expected = {
      {S::kLine, "a"},   {S::kLine, "bb"},      {S::kOversize, "100"},
      {S::kLine, "ccc"}, {S::kOversize, "200"}, {S::kLine, "last"}};
  EXPECT_EQ(lines, expected);
}

TEST(JsonRpc, LineReaderHandlesLinesLongerThanOneRead) {
  const std::string long_line(200000, 'y');
  const auto lines = read_all(long_line + "\nok\n", 1 << 20);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].second.size(), long_line.size());
  EXPECT_EQ(lines[1].second, "ok");
}

TEST(JsonRpc, Utf8CheckRejectsBadBytesOverlongsAndSurrogates) {
  size_t at = 0;
  EXPECT_TRUE(valid_utf8("plain \xc3\xa9t\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", &at));
  EXPECT_FALSE(valid_utf8("ab\xff", &at));
  EXPECT_EQ(at, 2u);
  EXPECT_FALSE(valid_utf8("\xc0\xaf", &at));          // overlong '/'
  EXPECT_FALSE(valid_utf8("\xed\xa0\x80", &at));      // a UTF-16 surrogate
  EXPECT_FALSE(valid_utf8("\xf4\x90\x80\x80", &at));  // past U+10FFFF
  EXPECT_FALSE(valid_utf8("x\xe2\x82", &at));         // cut short
  EXPECT_EQ(at, 1u);
}

TEST(JsonRpc, ParsesRequestsNotificationsAndResponses) {
  JsonRpcError error;
  auto m = parse_message(R"({"jsonrpc":"2.0","id":7,"method":"tools/list"})", &error);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->kind, JsonRpcMessage::Kind::kRequest);
  EXPECT_EQ(m->id, 7);
  EXPECT_EQ(m->params, json::object());
  m = parse_message(
      R"({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"a"}})", &error);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->kind, JsonRpcMessage::Kind::kNotification);
  EXPECT_EQ(m->params["requestId"], "a");
  m = parse_message(R"({"jsonrpc":"2.0","id":"x","result":{}})", &error);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->kind, JsonRpcMessage::Kind::kResponse);
}

TEST(JsonRpc, BadMessagesGetTheirErrorCodeAndTheIdWhenItCanBeRead) {
  struct Case {
    std::string line;
    int code;
    json id;
  };
  const std::vector<Case> cases = {
      {"{not json", kParseError, nullptr},
      {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"x\":\"\xff\"}", kParseError, nullptr},
      {"[]", kInvalidRequest, nullptr},
      {R"([{"jsonrpc":"2.0","id":1,"method":"ping"}])", kInvalidRequest, nullptr},
      {"42", kInvalidRequest, nullptr},
      {R"({"jsonrpc":"1.0","id":3,"method":"ping"})", kInvalidRequest, 3},
      {R"({"id":3,"method":"ping"})", kInvalidRequest, 3},
      {R"({"jsonrpc":"2.0","id":null,"method":"ping"})", kInvalidRequest, nullptr},
      {R"({"jsonrpc":"2.0","id":1.5,"method":"ping"})", kInvalidRequest, nullptr},
      {R"({"jsonrpc":"2.0","id":4,"method":5})", kInvalidRequest, 4},
      {R"({"jsonrpc":"2.0","id":"r","method":"ping","params":[1]})", kInvalidParams, "r"},
      {R"({"jsonrpc":"2.0","id":5})", kInvalidRequest, 5},
      {std::string(100, '[') + std::string(100, ']'), kInvalidRequest, nullptr},
  };
  for (const Case& c : cases) {
    JsonRpcError error;
    EXPECT_FALSE(parse_message(c.line, &error)) << c.line;
    EXPECT_EQ(error.code, c.code) << c.line << ": " << error.message;
    EXPECT_EQ(error.id, c.id) << c.line;
    EXPECT_FALSE(error.notification) << c.line;
  }
  JsonRpcError error;
  EXPECT_FALSE(parse_message(R"({"jsonrpc":"2.0","method":"x","params":3})", &error));
  EXPECT_TRUE(error.notification);  // a notification gets no answer, even an error
}

TEST(JsonRpc, MessagesSerializeAsOneLineEvenWithBytesThatAreNotUtf8) {
  const std::string line = serialize_line(result_message(1, {{"text", "a\nb \xff"}}));
  EXPECT_EQ(line.find('\n'), line.size() - 1);
  EXPECT_EQ(json::parse(line)["result"]["text"], "a\nb \xef\xbf\xbd");
  JsonRpcError error;
  error.code = kInvalidParams;
  error.message = "bad";
  error.id = "q";
  error.data = {{"path", "/x"}};
  EXPECT_EQ(error_message(error),
            json::parse(R"({"jsonrpc":"2.0","id":"q","error":{"code":-32602,"message":"bad",
                             "data":{"path":"/x"}}})"));
  EXPECT_EQ(notification_message("notifications/progress", {{"progress", 1}})["method"],
            "notifications/progress");
}

}  // namespace
}  // namespace megasched::harness
