// Small helpers the subcommands share: reading a config or JSON document from a file or stdin,
// printing JSON, and reporting an error line with a hint.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "harness/verbs.h"
#include "schedule/config.h"

namespace megasched::harness {

/// Reads a whole file, or stdin when path is "-". nullopt + *error when it cannot be read.
std::optional<std::string> read_text(const std::string& path, std::string* error);

/// Reads and strictly parses a ScheduleConfig from a file, "-" (stdin) or a name
/// ("best:llama-1b:h200", see schedule/named_configs.h); an empty path gives the default config.
std::optional<schedule::ScheduleConfig> read_config_arg(const std::string& path,
                                                        std::string* error);

/// Prints JSON to stdout (indented, one trailing newline).
void print_json(const nlohmann::json& j);

/// Prints "megasched <command>: <message>" to stderr.
void print_error(const std::string& command, const std::string& message);

/// Prints a verb's outcome as the CLI does (its message as print_error's line, its document as
/// print_json) and returns its exit code.
int finish_verb(const std::string& command, const VerbResult& result);

/// `text` as one word for /bin/sh (single-quoted).
std::string shell_quote(const std::string& text);

/// Splits "0,3,7" into integers; nullopt on a malformed list.
std::optional<std::vector<int>> parse_int_list(const std::string& text);

}  // namespace megasched::harness
