#include "harness/json_schema.h"

#include <cmath>
#include <regex>
#include <set>

#include "schedule/config.h"

namespace megasched::harness {
namespace {

using nlohmann::json;

const std::set<std::string> kAnnotations = {"$schema",     "$id",     "title",
                                            "description", "default", "examples"};
const std::set<std::string> kChecks = {
    "type",      "enum",     "const",    "properties", "required", "additionalProperties",
    "items",     "minItems", "maxItems", "minimum",    "maximum",  "exclusiveMinimum",
    "minLength", "pattern",  "anyOf"};

std::string pointer_token(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~')
      out += "~0";
    else if (c == '/')
      out += "~1";
    else
      out += c;
  }
  return out;
}

std::string shown(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  return text.size() > 60 ? text.substr(0, 57) + "..." : text;
}

bool is_integer(const json& value) {
  if (value.is_number_integer()) return true;
  if (!value.is_number_float()) return false;
  const double d = value.get<double>();
  return std::isfinite(d) && std::floor(d) == d;
}

bool has_type(const json& value, const std::string& type) {
  if (type == "object") return value.is_object();
  if (type == "array") return value.is_array();
  if (type == "string") return value.is_string();
  if (type == "boolean") return value.is_boolean();
  if (type == "null") return value.is_null();
  if (type == "number") return value.is_number();
  if (type == "integer") return is_integer(value);
  return false;
}

std::string type_name(const json& value) {
  if (is_integer(value)) return "integer";
  if (value.is_number()) return "number";
  return value.type_name();
}

// Whether `schema`'s own "type" admits the value (a schema without "type" admits anything).
bool admits_type(const json& schema, const json& value) {
  if (!schema.is_object() || !schema.contains("type")) return true;
  const json& type = schema["type"];
  if (type.is_string()) return has_type(value, type.get<std::string>());
  for (const json& t : type)
    if (t.is_string() && has_type(value, t.get<std::string>())) return true;
  return false;
}

std::string expected_types(const json& schema) {
  if (!schema.contains("type")) return "anything";
  if (schema["type"].is_string()) return schema["type"].get<std::string>();
  std::string out;
  for (const json& t : schema["type"]) out += (out.empty() ? "" : " or ") + t.get<std::string>();
  return out;
}

bool equal_json(const json& a, const json& b) {
  if (a.is_number() && b.is_number()) return a.get<double>() == b.get<double>();
  return a == b;
}

class Checker {
 public:
  explicit Checker(size_t max_errors) : max_errors_(max_errors) {}

  void check(const json& schema, const json& value, const std::string& path) {
    if (full() || !schema.is_object()) return;
    if (!admits_type(schema, value))
      return fail(path, "expected " + expected_types(schema) + ", got " + type_name(value) + " " +
                            shown(value));
    if (schema.contains("enum")) check_enum(schema["enum"], value, path);
    if (schema.contains("const") && !equal_json(schema["const"], value))
      fail(path, shown(value) + " is not " + shown(schema["const"]));
    if (value.is_number()) check_number(schema, value, path);
    if (value.is_string()) check_string(schema, value.get<std::string>(), path);
    if (value.is_array()) check_array(schema, value, path);
    if (value.is_object()) check_object(schema, value, path);
    if (schema.contains("anyOf")) check_any_of(schema["anyOf"], value, path);
  }

  std::vector<SchemaError> errors;

 private:
  bool full() const { return errors.size() >= max_errors_; }
  void fail(const std::string& path, const std::string& message) {
    if (!full()) errors.push_back({path, message});
  }

  void check_enum(const json& choices, const json& value, const std::string& path) {
    for (const json& c : choices)
      if (equal_json(c, value)) return;
    std::string list;
    for (const json& c : choices) list += (list.empty() ? "" : ", ") + shown(c);
    fail(path, shown(value) + " is not one of [" + list + "]");
  }

  void check_number(const json& schema, const json& value, const std::string& path) {
    const double v = value.get<double>();
    if (schema.contains("minimum") && v < schema["minimum"].get<double>())
      fail(path, shown(value) + " is less than the minimum " + shown(schema["minimum"]));
    if (schema.contains("maximum") && v > schema["maximum"].get<double>())
      fail(path, shown(value) + " is more than the maximum " + shown(schema["maximum"]));
    if (schema.contains("exclusiveMinimum") && v <= schema["exclusiveMinimum"].get<double>())
      fail(path, shown(value) + " must be more than " + shown(schema["exclusiveMinimum"]));
  }

  void check_string(const json& schema, const std::string& text, const std::string& path) {
    if (schema.contains("minLength") &&
        text.size() < schema["minLength"].get<size_t>())  // bytes: enough for minLength 1
      fail(path, "shorter than " + shown(schema["minLength"]) + " characters");
    if (schema.contains("pattern")) {
      const std::string pattern = schema["pattern"].get<std::string>();
      if (!std::regex_search(text, std::regex(pattern, std::regex::ECMAScript)))
        fail(path, shown(json(text)) + " does not match " + pattern);
    }
  }

  void check_array(const json& schema, const json& value, const std::string& path) {
    if (schema.contains("minItems") && value.size() < schema["minItems"].get<size_t>())
      fail(path, "has " + std::to_string(value.size()) + " items, fewer than " +
                     shown(schema["minItems"]));
    if (schema.contains("maxItems") && value.size() > schema["maxItems"].get<size_t>())
      fail(path, "has " + std::to_string(value.size()) + " items, more than " +
                     shown(schema["maxItems"]));
    if (!schema.contains("items")) return;
    for (size_t i = 0; i < value.size(); ++i)
      check(schema["items"], value[i], path + "/" + std::to_string(i));
  }

  void check_object(const json& schema, const json& value, const std::string& path) {
    const json properties = schema.value("properties", json::object());
    for (const json& key : schema.value("required", json::array()))
      if (!value.contains(key.get<std::string>()))
        fail(path + "/" + pointer_token(key.get<std::string>()), "is required");
    std::vector<std::string> names;
    for (const auto& [name, sub] : properties.items()) names.push_back(name);
    for (const auto& [name, sub] : value.items()) {
      const std::string where = path + "/" + pointer_token(name);
      if (properties.contains(name)) {
        check(properties[name], sub, where);
      } else if (schema.contains("additionalProperties")) {
        const json& extra = schema["additionalProperties"];
        if (extra.is_boolean() && !extra.get<bool>()) {
          const std::string near = schedule::nearest(name, names);
          std::string known;
          for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
          fail(where, "unknown property" + (near.empty() ? "" : " (did you mean '" + near + "'?)") +
                          "; allowed: " + known);
        } else if (extra.is_object()) {
          check(extra, sub, where);
        }
      }
    }
  }

  // The branch whose type admits the value explains the failure; with none or several, the
  // message lists the branches' types.
  void check_any_of(const json& branches, const json& value, const std::string& path) {
    std::vector<const json*> typed;
    for (const json& b : branches) {
      Checker probe(1);
      probe.check(b, value, path);
      if (probe.errors.empty()) return;
      if (admits_type(b, value)) typed.push_back(&b);
    }
    if (typed.size() == 1) return check(*typed.front(), value, path);
    std::string kinds;
    for (const json& b : branches) kinds += (kinds.empty() ? "" : ", ") + expected_types(b);
    fail(path, shown(value) + " matches none of: " + kinds);
  }

  size_t max_errors_;
};

void collect_unsupported(const json& schema, const std::string& path,
                         std::vector<std::string>* out) {
  if (!schema.is_object()) return;
  for (const auto& [key, sub] : schema.items()) {
    const std::string where = path + "/" + pointer_token(key);
    if (key == "properties") {
      for (const auto& [name, prop] : sub.items())
        collect_unsupported(prop, where + "/" + pointer_token(name), out);
    } else if (key == "items" || (key == "additionalProperties" && sub.is_object())) {
      collect_unsupported(sub, where, out);
    } else if (key == "anyOf") {
      for (size_t i = 0; i < sub.size(); ++i)
        collect_unsupported(sub[i], where + "/" + std::to_string(i), out);
    } else if (!kAnnotations.count(key) && !kChecks.count(key) && key.rfind("x-", 0) != 0) {
      out->push_back(where);
    }
  }
}

}  // namespace

std::vector<SchemaError> check_against_schema(const json& schema, const json& value,
                                              size_t max_errors) {
  Checker checker(max_errors);
  checker.check(schema, value, "");
  return checker.errors;
}

std::string describe(const SchemaError& error) {
  return (error.path.empty() ? std::string("(root)") : error.path) + ": " + error.message;
}

std::vector<std::string> unsupported_keywords(const json& schema) {
  std::vector<std::string> out;
  collect_unsupported(schema, "", &out);
  return out;
}

json embeddable_schema(json schema) {
  if (schema.is_object()) {
    schema.erase("$schema");
    schema.erase("$id");
  }
  return schema;
}

}  // namespace megasched::harness
