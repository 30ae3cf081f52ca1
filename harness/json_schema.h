// A JSON Schema checker for the subset of draft 2020-12 that megasched's schemas use, so the MCP
// server (harness/mcp_server.h) can refuse tool arguments with the path that fails, and check its
// own results against the tools' output schemas, without a new dependency.
//
// Checked: type (one name or a list), enum, const, properties, required, additionalProperties
// (false or a schema), items, minItems, maxItems, minimum, maximum, exclusiveMinimum, minLength,
// pattern (ECMAScript), anyOf. Annotations are ignored: $schema, $id, title, description, default,
// examples, and extensions named x-*. Any other keyword is one this checker would silently skip, so
// unsupported_keywords lists it and a test holds every schema the server uses to the subset.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace megasched::harness {

/// One failed check: where (a JSON Pointer into the value, "" for the value itself) and why.
struct SchemaError {
  std::string path;     // "/config/kernel/unroll"
  std::string message;  // "3 is not one of [1, 2, 4, 8]"
};

/// The checks `value` fails against `schema`, in document order, at most `max_errors` of them.
std::vector<SchemaError> check_against_schema(const nlohmann::json& schema,
                                              const nlohmann::json& value, size_t max_errors = 8);

/// "/config/kernel/unroll: 3 is not one of [1, 2, 4, 8]" ("(root)" for the value itself).
std::string describe(const SchemaError& error);

/// The keywords of `schema` (and its subschemas) this checker does not implement, each as a JSON
/// Pointer into the schema ("/properties/x/oneOf"); empty when the schema is within the subset.
std::vector<std::string> unsupported_keywords(const nlohmann::json& schema);

/// `schema` without the keywords that name a document ($schema, $id): a copy to embed in another
/// document (a tool's inputSchema) without two schemas claiming one $id.
nlohmann::json embeddable_schema(nlohmann::json schema);

}  // namespace megasched::harness
