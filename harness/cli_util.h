// Small helpers the subcommands share: reading a config or JSON document from a file or stdin,
// printing JSON, and reporting an error line with a hint.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "flywheel/locked_file.h"
#include "harness/verbs.h"
#include "schedule/config.h"
#include "schedule/format.h"
#include "schedule/plan.h"
#include "schedule/program.h"
#include "search/child_process.h"

namespace megasched::harness {

/// Reads a whole file, or stdin when path is "-". nullopt + *error when it cannot be read: missing,
/// unreadable, or not a regular file or pipe (a directory, /dev/zero).
std::optional<std::string> read_text(const std::string& path, std::string* error);

/// Reads and strictly parses a plan (schedule/plan.h) from a file, "-" (stdin) or a name
/// ("best:llama-1b:h200", see schedule/named_configs.h and flywheel/registry.h): a plan document or
/// a plain config (its one-bucket plan); an empty path or "default" gives the default config.
/// *exit_code (when given) says which failure it was: kExitEnvironment (3) for a file that cannot
/// be read, kExitUsage (2) for a bad config or plan or an unknown name. The buckets are checked
/// among themselves (no gap, no overlap); against a model's max_seq by check_plan_covers.
std::optional<schedule::Plan> read_plan_arg(const std::string& path, std::string* error,
                                            int* exit_code = nullptr);

/// The config of read_plan_arg's plan: a plain config, a one-bucket plan, or with `position` >= 0
/// the config of the bucket that holds it. A plan of several buckets without a position (or one
/// whose buckets end before it) is a usage error naming the buckets and the verbs that take plans.
std::optional<schedule::ScheduleConfig> read_config_arg(const std::string& path, std::string* error,
                                                        int* exit_code = nullptr,
                                                        int position = -1);

/// Reads and parses a program JSON file (schedule::program_from_json, keys unique); nullopt with
/// *error and *exit_code (3: cannot be read, 2: not a program).
std::optional<schedule::Program> read_program_arg(const std::string& path, std::string* error,
                                                  int* exit_code);

/// Prints JSON to stdout (indented, one trailing newline).
void print_json(const nlohmann::json& j);

/// Prints "megasched <command>: <message>" to stderr.
void print_error(const std::string& command, const std::string& message);

/// A progress sink for long steps (eval::EvaluatorOptions::progress): "megasched <command>: <line>"
/// on stderr, where the verb's other messages go.
std::function<void(const std::string&)> progress_on_stderr(const std::string& command);

/// Prints a verb's outcome as the CLI does (its message as print_error's line, its document as
/// print_json) and returns its exit code.
int finish_verb(const std::string& command, const VerbResult& result);

/// The largest value of an int flag.
constexpr int64_t kMaxInt = std::numeric_limits<int>::max();

// Checks of a numeric flag's text, the same on every CLI11 version: CLI11 2.1 reads "-1" into an
// unsigned flag as 2^64 - 1, and its Range and PositiveNumber let NaN through. A failed check is
// a usage error (exit 2) naming the flag, the rule and the value.

/// A decimal integer in [min, max] (no sign on an unsigned flag, no "0x10", no "1e3").
CLI::Validator integer_in(int64_t min, int64_t max = std::numeric_limits<int64_t>::max());
/// A decimal integer in [0, 2^64 - 1] (seeds).
CLI::Validator unsigned_integer();
/// A finite number in [min, max]; with min_exclusive, in (min, max].
CLI::Validator finite_number_in(double min, double max = std::numeric_limits<double>::max(),
                                bool min_exclusive = false);

/// Writes `text` to `path` (truncating it) and reports a failed open, write or close: false and
/// *error ("cannot write 'PATH': No space left on device").
bool write_text_file(const std::string& path, const std::string& text, std::string* error);

/// The short commit of the working directory's git checkout, with "+modified" when tracked files
/// differ from it (a copied tree can carry an older checkout's .git), or "unknown".
std::string working_commit();

/// --bandit-window, --bandit-c, --bandit-techniques: the bandit strategy's options (loop and
/// search-bench; search/bandit_strategy.h).
void add_bandit_flags(CLI::App* cmd, search::StrategyOptions* strategy);

}  // namespace megasched::harness
