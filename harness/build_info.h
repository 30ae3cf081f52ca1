// What this megasched binary was built from, for the records it writes (a registry entry's
// commit): generated at build time by cmake/build_commit.cmake.
#pragma once

namespace megasched::harness {

/// The git commit of the source tree this binary was built from (12 hex digits, "+modified" when
/// tracked files differed from it at build time), or "unknown" when built outside a git checkout.
const char* build_commit();

}  // namespace megasched::harness
