#include "harness/cli_util.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <sys/stat.h>

#include "flywheel/registry.h"
#include "harness/commands.h"
#include "schedule/named_configs.h"

namespace megasched::harness {

std::optional<std::string> read_text(const std::string& path, std::string* error) {
  std::stringstream buf;
  if (path == "-") {
    buf << std::cin.rdbuf();
    return buf.str();
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (error) *error = "cannot read '" + path + "': " + std::strerror(errno);
    return std::nullopt;
  }
  if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode)) {
    if (error)
      *error = "cannot read '" + path +
               "': " + (S_ISDIR(st.st_mode) ? "a directory" : "not a regular file") +
               ", expected a file";
    return std::nullopt;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (error) *error = "cannot read '" + path + "': " + std::strerror(errno);
    return std::nullopt;
  }
  buf << in.rdbuf();
  return buf.str();
}

std::optional<schedule::Plan> read_plan_arg(const std::string& path, std::string* error,
                                            int* exit_code) {
  if (exit_code) *exit_code = kExitUsage;
  // "default" is the config `propose` prints for a fresh search: every knob at its default.
  if (path.empty() || path == "default") return schedule::single_config_plan({});
  if (schedule::is_config_name(path)) {
    // The newest verified registry entry first, then the built-in preset (flywheel/registry.h).
    auto named = flywheel::resolve_best_name(path, flywheel::default_registry_path(), error);
    if (!named) return std::nullopt;
    std::string why;
    auto plan = schedule::parse_plan(named->config, &why);
    if (!plan && error)
      *error = "named config '" + path + "' (" + named->source + " " + named->detail + "): " + why;
    return plan;
  }
  auto text = read_text(path, error);
  if (!text) {
    if (exit_code) *exit_code = kExitEnvironment;
    return std::nullopt;
  }
  std::string why;
  auto plan = schedule::parse_plan_text(*text, &why);
  if (!plan && error)
    *error =
        (path == "-" ? std::string("config from stdin") : "config '" + path + "'") + ": " + why;
  return plan;
}

std::optional<schedule::ScheduleConfig> read_config_arg(const std::string& path, std::string* error,
                                                        int* exit_code, int position) {
  auto plan = read_plan_arg(path, error, exit_code);
  if (!plan) return std::nullopt;
  if (plan->buckets.size() == 1) return plan->buckets[0].config;
  const schedule::PlanBucket& last = plan->buckets.back();
  if (position >= 0 && (last.end == schedule::kPlanEndOfModel || position < last.end))
    return schedule::plan_config_for(*plan, position);
  std::string buckets;
  for (const schedule::PlanBucket& b : plan->buckets)
    buckets += (buckets.empty() ? "" : " ") + schedule::bucket_label(b);
  if (exit_code) *exit_code = kExitUsage;
  if (error)
    *error =
        "'" + path + "' is a plan of " + std::to_string(plan->buckets.size()) + " buckets (" +
        buckets + ") and this command runs one config" +
        (position >= 0 ? " at position " + std::to_string(position) + ", which no bucket holds"
                       : std::string()) +
        " (hint: validate, evaluate, generate, bench, bench --generate, promote and loop --plan "
        "take plans; else pass one bucket's config, HARNESS.md section \"Plans\")";
  return std::nullopt;
}

std::optional<schedule::Program> read_program_arg(const std::string& path, std::string* error,
                                                  int* exit_code) {
  *exit_code = kExitEnvironment;
  std::string why;
  const std::optional<std::string> text = read_text(path, &why);
  if (!text) {
    if (error) *error = why;
    return std::nullopt;
  }
  *exit_code = kExitUsage;
  const std::optional<nlohmann::json> j = schedule::parse_json_text(*text, &why);
  if (!j) {
    if (error)
      *error = "program '" + path + "' is not valid JSON: " + why +
               " (hint: write one with `megasched evaluate --save-program`)";
    return std::nullopt;
  }
  std::optional<schedule::Program> program = schedule::program_from_json(*j, &why);
  if (!program && error) *error = "program '" + path + "': " + why;
  return program;
}

void print_json(const nlohmann::json& j) {
  std::cout << j.dump(2) << "\n";
  std::cout.flush();
}

void print_error(const std::string& command, const std::string& message) {
  std::fprintf(stderr, "megasched %s: %s\n", command.c_str(), message.c_str());
}

std::function<void(const std::string&)> progress_on_stderr(const std::string& command) {
  return [command](const std::string& line) { print_error(command, line); };
}

int finish_verb(const std::string& command, const VerbResult& result) {
  if (!result.message.empty()) print_error(command, result.message);
  if (!result.document.is_null()) print_json(result.document);
  return result.exit_code;
}

namespace {

// "12", "-3": optional minus, then digits only.
bool plain_integer_text(const std::string& text, bool allow_minus) {
  size_t i = allow_minus && !text.empty() && text[0] == '-' ? 1 : 0;
  if (i == text.size()) return false;
  for (; i < text.size(); ++i)
    if (text[i] < '0' || text[i] > '9') return false;
  return true;
}

std::string number_text(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%g", value);
  return buffer;
}

}  // namespace

CLI::Validator integer_in(int64_t min, int64_t max) {
  std::string rule = "an integer";
  if (max == std::numeric_limits<int64_t>::max())
    rule += " >= " + std::to_string(min);
  else
    rule += " in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
  return CLI::Validator(
      [min, max, rule](std::string& text) -> std::string {
        int64_t value = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
        if (!plain_integer_text(text, true) || ec != std::errc() ||
            end != text.data() + text.size() || value < min || value > max)
          return "must be " + rule + ", not '" + text + "'";
        return {};
      },
      rule.substr(3));
}

CLI::Validator unsigned_integer() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        uint64_t value = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
        if (!plain_integer_text(text, false) || ec != std::errc() ||
            end != text.data() + text.size())
          return "must be an integer in [0, 2^64 - 1], not '" + text + "'";
        return {};
      },
      "integer >= 0");
}

CLI::Validator finite_number_in(double min, double max, bool min_exclusive) {
  std::string rule = "a finite number";
  if (max == std::numeric_limits<double>::max())
    rule += (min_exclusive ? " > " : " >= ") + number_text(min);
  else
    rule += std::string(" in ") + (min_exclusive ? "(" : "[") + number_text(min) + ", " +
            number_text(max) + "]";
  return CLI::Validator(
      [min, max, min_exclusive, rule](std::string& text) -> std::string {
        double value = 0.0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
        const bool parsed = !text.empty() && ec == std::errc() && end == text.data() + text.size();
        if (!parsed || !std::isfinite(value) || value < min || value > max ||
            (min_exclusive && value == min))
          return "must be " + rule + ", not '" + text + "'";
        return {};
      },
      rule.substr(2));
}

bool write_text_file(const std::string& path, const std::string& text, std::string* error) {
  auto fail = [&](int code) {
    if (error) *error = "cannot write '" + path + "': " + std::strerror(code);
    return false;
  };
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) return fail(errno);
  const bool written = std::fwrite(text.data(), 1, text.size(), file) == text.size();
  const int write_errno = errno;
  if (std::fclose(file) != 0) return fail(errno);
  if (!written) return fail(write_errno);
  return true;
}

// The first line a shell command prints, without its line end ("" when it prints nothing).
static std::string first_line_of(const char* command) {
  FILE* pipe = popen(command, "r");
  if (!pipe) return "";
  char buffer[256] = {0};
  const bool got = std::fgets(buffer, sizeof buffer, pipe) != nullptr;
  pclose(pipe);
  std::string line = got ? buffer : "";
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
  return line;
}

std::string working_commit() {
  const std::string commit = first_line_of("git rev-parse --short=12 HEAD 2>/dev/null");
  if (commit.empty()) return "unknown";
  const bool modified =
      !first_line_of("git status --porcelain --untracked-files=no 2>/dev/null").empty();
  return modified ? commit + "+modified" : commit;
}

void add_bandit_flags(CLI::App* cmd, search::StrategyOptions* strategy) {
  cmd->add_option("--bandit-window", strategy->bandit_window,
                  "bandit: a technique's credit is over its last this many uses")
      ->check(integer_in(1, 100000))
      ->capture_default_str();
  cmd->add_option("--bandit-c", strategy->bandit_c,
                  "bandit: exploration constant of the upper-confidence pick")
      ->check(finite_number_in(0.0, 1000.0))
      ->capture_default_str();
  std::vector<std::string> techniques;
  for (const std::string& name : search::strategy_names())
    if (name != "bandit" && name != "proposer") techniques.push_back(name);
  cmd->add_option("--bandit-techniques", strategy->bandit_techniques,
                  "bandit: the strategies it picks from, comma-separated")
      ->delimiter(',')
      ->check(CLI::IsMember(techniques))
      ->capture_default_str();
}

}  // namespace megasched::harness
