// The megakernel's device sources, embedded into the binary at build time (see
// cmake/embed_sources.cmake). NVRTC compiles these strings; nothing is read from disk at run time,
// so a binary always builds the kernel that matches the ABI it was compiled with.
#pragma once

#include <string>
#include <vector>

namespace megasched::vm {

/// One device source file: its path relative to the repository root (the name `#include` uses)
/// and its text.
struct EmbeddedSource {
  const char* path;
  const char* text;
};

/// Every device source, sorted by path. abi/abi.h is always present.
const std::vector<EmbeddedSource>& embedded_sources();

}  // namespace megasched::vm
