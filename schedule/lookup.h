// Model and GPU target names as a user writes them on the command line: a preset, a checkpoint
// directory, a target of the registry; unknown names get the nearest known one as a hint. The live
// device ("--gpu auto") is eval's (eval::resolve_target), since reading it needs the CUDA runtime.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "schedule/model.h"
#include "schedule/target.h"

namespace megasched::schedule {

/// Resolves a model name: a preset, or a directory holding a Hugging Face checkpoint.
std::optional<ModelShape> resolve_shape(const std::string& model, std::string* error);

/// Loads (or, for a preset, generates from `seed`) the weights of `model`.
std::optional<Weights> load_weights(const std::string& model, uint64_t seed, std::string* error);

/// A target of the registry by name; nullopt + *error naming the nearest name and every known one
/// (`auto_hint`: the error also offers "auto", the live device, where the caller can read it).
std::optional<GpuTarget> find_target_named(const std::string& gpu, std::string* error,
                                           bool auto_hint = true);

}  // namespace megasched::schedule
