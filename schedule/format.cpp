#include "schedule/format.h"

#include <cstdio>

namespace megasched::schedule {

std::string fmt(const char* format, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, format, value);
  return buffer;
}

}  // namespace megasched::schedule
