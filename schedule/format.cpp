#include "schedule/format.h"

#include <cstdio>
#include <sstream>

namespace megasched::schedule {

std::string fmt(const char* format, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, format, value);
  return buffer;
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

}  // namespace megasched::schedule
