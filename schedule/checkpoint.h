// Hugging Face Llama checkpoints: a directory with config.json and *.safetensors (one file, or
// several with model.safetensors.index.json), read through a memory map into the same Weights
// arena the presets use. Nothing is downloaded: models come from a local directory.
#pragma once

#include <optional>
#include <string>

#include "schedule/model.h"

namespace megasched::schedule {

/// Reads config.json into a ModelShape (named after the directory). nullopt + *error naming the
/// field when it is missing or unsupported.
std::optional<ModelShape> read_checkpoint_config(const std::string& dir, std::string* error);

/// Loads the checkpoint's weights. Any missing tensor, wrong shape, unsupported dtype or
/// architecture is a one-line error naming the tensor or field.
std::optional<Weights> load_checkpoint(const std::string& dir, std::string* error);

/// Writes config.json + model.safetensors with Hugging Face names.
bool save_checkpoint(const Weights& weights, const std::string& dir, std::string* error);

}  // namespace megasched::schedule
