// The agent contract and the JSON Schemas, embedded into the binary at build time
// (cmake/embed_docs.cmake): HARNESS.md and every file of schemas/. The MCP server serves them as
// resources and builds its tools' output schemas from them, so what it says is what it is.
#pragma once

#include <string>
#include <vector>

namespace megasched::harness {

/// One embedded file: its path relative to the repository root and its text.
struct EmbeddedDoc {
  const char* path;  // "HARNESS.md", "schemas/verdict.schema.json"
  const char* text;
};

/// Every embedded file, sorted by path.
const std::vector<EmbeddedDoc>& embedded_docs();

/// The text of the embedded file at `path`; nullptr when there is none.
const char* embedded_doc(const std::string& path);

}  // namespace megasched::harness
