// Number formatting for messages, progress lines and reports: one printf-style conversion of one
// number, so every layer words its figures the same way.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace megasched::schedule {

/// `format` applied to `value`, printf-style: fmt("%.3f us", 12.5) is "12.500 us". The format
/// holds exactly one floating-point conversion; the result is cut at 63 characters.
std::string fmt(const char* format, double value);

/// Splits "0,3,7" into integers; nullopt on a malformed list.
std::optional<std::vector<int>> parse_int_list(const std::string& text);

}  // namespace megasched::schedule
