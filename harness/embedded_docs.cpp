#include "harness/embedded_docs.h"

namespace megasched::harness {

const char* embedded_doc(const std::string& path) {
  for (const EmbeddedDoc& doc : embedded_docs())
    if (path == doc.path) return doc.text;
  return nullptr;
}

}  // namespace megasched::harness
