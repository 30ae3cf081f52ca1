#include "harness/cli_util.h"

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "schedule/named_configs.h"

namespace megasched::harness {

std::optional<std::string> read_text(const std::string& path, std::string* error) {
  std::stringstream buf;
  if (path == "-") {
    buf << std::cin.rdbuf();
    return buf.str();
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (error) *error = "cannot read '" + path + "': no such file or not readable";
    return std::nullopt;
  }
  buf << in.rdbuf();
  return buf.str();
}

std::optional<schedule::ScheduleConfig> read_config_arg(const std::string& path,
                                                        std::string* error) {
  // "default" is the config `propose` prints for a fresh search: every knob at its default.
  if (path.empty() || path == "default") return schedule::ScheduleConfig{};
  if (schedule::is_config_name(path)) {
    auto named = schedule::find_named_config(path, error);
    if (!named) return std::nullopt;
    std::string why;
    auto config = schedule::parse_config(named->config, &why);
    if (!config && error) *error = "named config '" + path + "': " + why;
    return config;
  }
  auto text = read_text(path, error);
  if (!text) return std::nullopt;
  std::string why;
  auto config = schedule::parse_config_text(*text, &why);
  if (!config && error)
    *error =
        (path == "-" ? std::string("config from stdin") : "config '" + path + "'") + ": " + why;
  return config;
}

void print_json(const nlohmann::json& j) {
  std::cout << j.dump(2) << "\n";
  std::cout.flush();
}

void print_error(const std::string& command, const std::string& message) {
  std::fprintf(stderr, "megasched %s: %s\n", command.c_str(), message.c_str());
}

int finish_verb(const std::string& command, const VerbResult& result) {
  if (!result.message.empty()) print_error(command, result.message);
  if (!result.document.is_null()) print_json(result.document);
  return result.exit_code;
}

std::string shell_quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::optional<std::vector<int>> parse_int_list(const std::string& text) {
  std::vector<int> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      const int v = std::stoi(item, &used);
      if (used != item.size()) return std::nullopt;
      out.push_back(v);
    } catch (...) {
      return std::nullopt;
    }
  }
  if (out.empty()) return std::nullopt;
  return out;
}

}  // namespace megasched::harness
