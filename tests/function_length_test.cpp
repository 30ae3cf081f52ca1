// No function of the project is longer than kMaxFunctionLines and no class longer than
// kMaxClassLines (ARCHITECTURE.md, "Rules"): a long function is several steps that want names, a
// long class several concerns that want walls. Tests and generated files are exempt. A class's
// length is its body's lines plus those of every member function defined outside it
// (`Checker::check_race(...) {...}`, in any file), so moving methods out of the body does not
// hide its size.
//
// The scan is lexical, not a parse: comments, string and character literals (raw strings too) and
// preprocessor lines are blanked, then every brace block that opens at namespace or class scope
// after a closing parenthesis (a parameter list, possibly followed by const / override / noexcept
// or a constructor's initializer list) is a function body, measured from the line of its `{` to
// the line of its `}`. Blocks after `namespace`, `class`, `struct`, `union`, `enum` or `extern`
// are scopes and are entered; any other block at scope level (an initializer) is skipped whole.
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

constexpr int kMaxFunctionLines = 150;
constexpr int kMaxClassLines = 400;

/// The folders of the project's own code (every layer, and the benchmarks).
const char* const kCodeFolders[] = {"abi",      "schedule", "vm",      "groundtruth", "eval",
                                    "flywheel", "search",   "harness", "bench"};

struct FunctionSpan {
  std::string name;
  int first_line = 0;
  int last_line = 0;
  int lines() const { return last_line - first_line + 1; }
};

/// `text` with comments, literals and preprocessor lines replaced by spaces (newlines kept).
std::string blank_non_code(const std::string& text) {
  std::string out = text;
  size_t i = 0;
  const size_t n = text.size();
  auto blank = [&](size_t from, size_t to) {
    for (size_t k = from; k < to && k < n; ++k)
      if (out[k] != '\n') out[k] = ' ';
  };
  bool line_start = true;
  while (i < n) {
    const char c = text[i];
    if (line_start && c == '#') {  // a preprocessor line, with its continuations
      size_t j = i;
      while (j < n && !(text[j] == '\n' && (j == 0 || text[j - 1] != '\\'))) ++j;
      blank(i, j);
      i = j;
      continue;
    }
    if (c == '\n') {
      line_start = true;
      ++i;
      continue;
    }
    if (!std::isspace(static_cast<unsigned char>(c))) line_start = false;
    if (c == '/' && i + 1 < n && text[i + 1] == '/') {
      size_t j = text.find('\n', i);
      if (j == std::string::npos) j = n;
      blank(i, j);
      i = j;
    } else if (c == '/' && i + 1 < n && text[i + 1] == '*') {
      size_t j = text.find("*/", i + 2);
      j = j == std::string::npos ? n : j + 2;
      blank(i, j);
      i = j;
    } else if (c == 'R' && i + 1 < n && text[i + 1] == '"' &&
               (i == 0 || !std::isalnum(static_cast<unsigned char>(text[i - 1])))) {
      const size_t open = text.find('(', i + 2);
      const std::string delim = ")" + text.substr(i + 2, open - i - 2) + "\"";
      size_t j = text.find(delim, open);
      j = j == std::string::npos ? n : j + delim.size();
      blank(i, j);
      i = j;
    } else if (c == '"' || c == '\'') {
      if (c == '\'' && i > 0 && std::isxdigit(static_cast<unsigned char>(text[i - 1])) &&
          i + 1 < n && std::isxdigit(static_cast<unsigned char>(text[i + 1]))) {
        ++i;  // a digit separator (1'000'000)
        continue;
      }
      size_t j = i + 1;
      while (j < n && text[j] != c) j += text[j] == '\\' ? 2 : 1;
      blank(i, j + 1);
      i = j + 1;
    } else {
      ++i;
    }
  }
  return out;
}

std::string trim(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return s.substr(a, b - a);
}

bool has_word(const std::string& text, const std::string& word) {
  for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) {
    const bool left =
        at == 0 || !(std::isalnum(static_cast<unsigned char>(text[at - 1])) || text[at - 1] == '_');
    const size_t end = at + word.size();
    const bool right = end >= text.size() ||
                       !(std::isalnum(static_cast<unsigned char>(text[end])) || text[end] == '_');
    if (left && right) return true;
  }
  return false;
}

/// Whether a head holds a constructor's initializer list: a lone `:` after its parameter list.
bool has_initializer_list(const std::string& head) {
  int depth = 0;
  bool closed = false;
  for (size_t k = 0; k < head.size(); ++k) {
    if (head[k] == '(') ++depth;
    if (head[k] == ')' && --depth == 0) closed = true;
    const bool lone_colon = head[k] == ':' && (k == 0 || head[k - 1] != ':') &&
                            (k + 1 == head.size() || head[k + 1] != ':');
    if (lone_colon && depth == 0 && closed) return true;
  }
  return false;
}

/// The statement text before a `{` ends a function head: `)`, optionally followed by qualifiers,
/// or a constructor's initializer list (whose members may be brace-initialised).
bool is_function_head(std::string head) {
  head = trim(head);
  if (has_initializer_list(head))
    return !head.empty() && (head.back() == ')' || head.back() == '}');
  for (const char* q : {"const", "override", "noexcept", "final", "mutable"}) {
    const std::string word(q);
    while (head.size() >= word.size() &&
           head.compare(head.size() - word.size(), word.size(), word) == 0) {
      head = trim(head.substr(0, head.size() - word.size()));
    }
  }
  if (head.empty() || head.back() != ')') return false;
  // An `=` outside the parentheses makes it an initializer (`auto f = g(x) {` is not a head).
  int depth = 0;
  for (const char c : head) {
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (c == '=' && depth == 0) return false;
  }
  return true;
}

/// The name before the parameter list of a function head, for messages.
std::string function_name(const std::string& head) {
  size_t depth = 0, open = std::string::npos;
  for (size_t k = 0; k < head.size(); ++k) {
    if (head[k] == '(' && depth++ == 0 && open == std::string::npos) open = k;
    if (head[k] == ')' && depth > 0) --depth;
  }
  if (open == std::string::npos) return trim(head);
  size_t b = open;
  while (b > 0 && std::isspace(static_cast<unsigned char>(head[b - 1]))) --b;
  size_t a = b;
  while (a > 0 && (std::isalnum(static_cast<unsigned char>(head[a - 1])) || head[a - 1] == '_' ||
                   head[a - 1] == ':' || head[a - 1] == '~'))
    --a;
  return head.substr(a, b - a);
}

/// The class a class head names (`struct GraphPdlBaseline::Impl final : Base` gives
/// "GraphPdlBaseline::Impl"); empty for a namespace, enum or union head.
std::string class_name(const std::string& head) {
  if (has_word(head, "enum") || has_word(head, "namespace") || has_word(head, "union")) return "";
  size_t keyword = std::string::npos;
  for (const char* k : {"class", "struct"}) {
    const std::string word(k);
    for (size_t at = head.find(word); at != std::string::npos; at = head.find(word, at + 1)) {
      const bool left = at == 0 || std::isspace(static_cast<unsigned char>(head[at - 1]));
      const size_t end = at + word.size();
      const bool right = end < head.size() && std::isspace(static_cast<unsigned char>(head[end]));
      if (left && right && (keyword == std::string::npos || end > keyword)) keyword = end;
    }
  }
  if (keyword == std::string::npos) return "";
  size_t a = keyword;
  while (a < head.size() && std::isspace(static_cast<unsigned char>(head[a]))) ++a;
  size_t b = a;
  while (b < head.size() && (std::isalnum(static_cast<unsigned char>(head[b])) || head[b] == '_' ||
                             (head[b] == ':' && b + 1 < head.size() && head[b + 1] == ':') ||
                             (head[b] == ':' && b > 0 && head[b - 1] == ':')))
    ++b;
  return head.substr(a, b - a);
}

/// A class's key: its qualified name without the namespaces before it (lower-case segments).
std::string class_key(std::string name) {
  for (size_t at = name.find("::"); at != std::string::npos; at = name.find("::")) {
    const std::string first = name.substr(0, at);
    bool lower = true;
    for (const char c : first) lower = lower && !std::isupper(static_cast<unsigned char>(c));
    if (!lower) break;
    name = name.substr(at + 2);
  }
  return name;
}

/// Every function body at namespace or class scope of a source text, and (when `classes` is
/// given) every class body with its span.
std::vector<FunctionSpan> function_spans(const std::string& source,
                                         std::vector<FunctionSpan>* classes = nullptr) {
  const std::string code = blank_non_code(source);
  std::vector<FunctionSpan> spans;
  std::vector<std::pair<int, size_t>> open;  // (class index, brace depth at its opening)
  size_t statement_start = 0;
  size_t depth_now = 0;
  int line = 1;
  for (size_t i = 0; i < code.size(); ++i) {
    const char c = code[i];
    if (c == '\n') ++line;
    if (c == '}') {
      if (depth_now > 0) --depth_now;
      if (!open.empty() && open.back().second == depth_now) {
        if (classes) (*classes)[static_cast<size_t>(open.back().first)].last_line = line;
        open.pop_back();
      }
    }
    if (c == ';' || c == '}') statement_start = i + 1;
    if (c != '{') continue;
    const std::string head = code.substr(statement_start, i - statement_start);
    const bool scope = has_word(head, "namespace") || has_word(head, "class") ||
                       has_word(head, "struct") || has_word(head, "union") ||
                       has_word(head, "enum") || has_word(head, "extern");
    if (scope && head.find('(') == std::string::npos) {
      const std::string name = class_name(head);
      if (classes && !name.empty()) {
        open.emplace_back(static_cast<int>(classes->size()), depth_now);
        classes->push_back({class_key(trim(name)), line, line});
      }
      ++depth_now;
      statement_start = i + 1;
      continue;  // enter the scope
    }
    // A function body or an initializer: skip to the matching brace.
    const int first_line = line;
    int depth = 0;
    size_t j = i;
    for (; j < code.size(); ++j) {
      if (code[j] == '\n') ++line;
      if (code[j] == '{') ++depth;
      if (code[j] == '}' && --depth == 0) break;
    }
    i = j;
    if (is_function_head(head)) {
      spans.push_back({function_name(head), first_line, line});
      statement_start = j + 1;
    } else if (!has_initializer_list(head)) {
      statement_start = j + 1;
    }  // else a member's brace initializer: the constructor's head goes on
  }
  return spans;
}

TEST(FunctionLength, TheScanFindsFunctionsAndSkipsLiteralsAndInitializers) {
  const std::string source =
      "namespace a {\n"
      "// f() { in a comment }\n"
      "const char* s = \"{ not code\";\n"
      "int table[] = {1, 2,\n 3};\n"
      "struct S {\n"
      "  int g() const {\n"
      "    return 1;\n"
      "  }\n"
      "};\n"
      "S::S(int x) : x_(x), y_{2} {\n"
      "  auto l = [] { return R\"x({)x\"; };\n"
      "}\n"
      "}  // namespace a\n";
  const std::vector<FunctionSpan> spans = function_spans(source);
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans[0].name, "g");
  EXPECT_EQ(spans[0].lines(), 3);
  EXPECT_EQ(spans[1].name, "S::S");
  EXPECT_EQ(spans[1].lines(), 3);
}

TEST(FunctionLength, NoProjectFunctionIsLongerThanTheLimit) {
  namespace fs = std::filesystem;
  const fs::path root(MS_SOURCE_DIR);
  int files = 0;
  std::vector<std::string> too_long;
  for (const char* folder : kCodeFolders) {
    for (const auto& entry : fs::recursive_directory_iterator(root / folder)) {
      const std::string ext = entry.path().extension().string();
      if (ext != ".h" && ext != ".cpp" && ext != ".cuh") continue;
      std::ifstream in(entry.path());
      std::stringstream text;
      text << in.rdbuf();
      ++files;
      for (const FunctionSpan& f : function_spans(text.str()))
        if (f.lines() > kMaxFunctionLines)
          too_long.push_back(fs::relative(entry.path(), root).string() + ":" +
                             std::to_string(f.first_line) + " " + f.name + " (" +
                             std::to_string(f.lines()) + " lines)");
    }
  }
  EXPECT_GT(files, 50);
  EXPECT_TRUE(too_long.empty()) << "functions over " << kMaxFunctionLines
                                << " lines (split them into named steps):\n"
                                << [&] {
                                     std::string s;
                                     for (const std::string& t : too_long) s += "  " + t + "\n";
                                     return s;
                                   }();
}

TEST(ClassLength, TheScanMeasuresClassBodiesAndTheirOutOfLineMembers) {
  const std::string source =
      "namespace a {\n"
      "class Checker final : public Base {\n"
      " public:\n"
      "  int g() const { return 1; }\n"
      "  struct Inner {\n"
      "    int x;\n"
      "  };\n"
      "};\n"
      "enum class E { kA };\n"
      "int Checker::f(int x) {\n"
      "  return x;\n"
      "}\n"
      "}  // namespace a\n";
  std::vector<FunctionSpan> classes;
  const std::vector<FunctionSpan> spans = function_spans(source, &classes);
  ASSERT_EQ(classes.size(), 2u);
  EXPECT_EQ(classes[0].name, "Checker");
  EXPECT_EQ(classes[0].lines(), 7);
  EXPECT_EQ(classes[1].name, "Inner");
  EXPECT_EQ(classes[1].lines(), 3);
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans[1].name, "Checker::f");
  EXPECT_EQ(class_key("megasched::schedule::Checker"), "Checker");
  EXPECT_EQ(class_key("GraphPdlBaseline::Impl"), "GraphPdlBaseline::Impl");
}

TEST(ClassLength, NoProjectClassIsLongerThanTheLimit) {
  namespace fs = std::filesystem;
  const fs::path root(MS_SOURCE_DIR);
  std::map<std::string, int> lines;                    // class -> body + out-of-line members
  std::map<std::string, std::set<std::string>> where;  // class -> files
  std::vector<std::pair<std::string, int>> members;    // qualifier of Class::f -> its lines
  for (const char* folder : kCodeFolders) {
    for (const auto& entry : fs::recursive_directory_iterator(root / folder)) {
      const std::string ext = entry.path().extension().string();
      if (ext != ".h" && ext != ".cpp" && ext != ".cuh") continue;
      std::ifstream in(entry.path());
      std::stringstream text;
      text << in.rdbuf();
      std::vector<FunctionSpan> classes;
      const std::string file = fs::relative(entry.path(), root).string();
      for (const FunctionSpan& f : function_spans(text.str(), &classes)) {
        const size_t q = f.name.rfind("::");
        if (q != std::string::npos) members.emplace_back(class_key(f.name.substr(0, q)), f.lines());
      }
      for (const FunctionSpan& c : classes) {
        lines[c.name] += c.lines();
        where[c.name].insert(file);
      }
    }
  }
  for (const auto& [owner, count] : members)
    if (lines.count(owner)) lines[owner] += count;
  std::string too_long;
  for (const auto& [name, count] : lines)
    if (count > kMaxClassLines) {
      too_long += "  " + name + " (" + std::to_string(count) + " lines, in";
      for (const std::string& f : where[name]) too_long += " " + f;
      too_long += ")\n";
    }
  EXPECT_GT(lines.size(), 50u);
  EXPECT_TRUE(too_long.empty()) << "classes over " << kMaxClassLines
                                << " lines with their out-of-line members (split them along "
                                   "their concerns):\n"
                                << too_long;
}

}  // namespace
