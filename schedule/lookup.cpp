#include "schedule/lookup.h"

#include <filesystem>
#include <vector>

#include "schedule/checkpoint.h"
#include "schedule/config.h"

namespace megasched::schedule {

std::optional<ModelShape> resolve_shape(const std::string& model, std::string* error) {
  if (auto p = find_preset(model)) return p;
  if (std::filesystem::is_directory(model)) return read_checkpoint_config(model, error);
  std::vector<std::string> names;
  std::string all;
  for (const auto& p : presets()) {
    names.push_back(p.name);
    all += (all.empty() ? "" : ", ") + p.name;
  }
  const std::string near = nearest(model, names);
  if (error)
    *error = "unknown model '" + model + "'" +
             (near.empty() ? "" : " (did you mean '" + near + "'?)") + "; use a preset (" + all +
             ") or a directory with a Hugging Face checkpoint (config.json + *.safetensors)";
  return std::nullopt;
}

std::optional<Weights> load_weights(const std::string& model, uint64_t seed, std::string* error) {
  if (auto p = find_preset(model)) return generate_weights(*p, seed);
  if (!resolve_shape(model, error)) return std::nullopt;
  return load_checkpoint(model, error);
}

std::optional<GpuTarget> find_target_named(const std::string& gpu, std::string* error,
                                           bool auto_hint) {
  if (auto t = find_target(gpu)) return t;
  std::vector<std::string> names;
  std::string all;
  for (const auto& t : target_registry()) {
    names.push_back(t.name);
    all += (all.empty() ? "" : ", ") + t.name;
  }
  const std::string near = nearest(gpu, names);
  if (error)
    *error = "unknown GPU target '" + gpu + "'" +
             (near.empty() ? "" : " (did you mean '" + near + "'?)") + "; known: " + all +
             (auto_hint ? ", or auto (the live device)" : "");
  return std::nullopt;
}

}  // namespace megasched::schedule
