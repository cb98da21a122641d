#include "tools/bench_engine/random_lora.h"

#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker/model/safetensors_writer.h"

namespace llmserve::tools {
namespace {

// The module's weight name under a layer ("self_attn.q_proj"), and its [in, out].
struct ModuleShape {
  std::string path;
  int64_t in = 0;
  int64_t out = 0;
};

absl::StatusOr<ModuleShape> ShapeOf(const worker::ModelConfig& c, const std::string& module) {
  const bool mlp = module == "gate_proj" || module == "up_proj" || module == "down_proj";
  const std::string group = mlp ? "mlp" : "self_attn";
  const std::optional<worker::LoraPlacement> place = worker::PlaceLoraModule(c, group, module);
  if (!place.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat("--lora_targets: no module '", module, "'"));
  }
  return ModuleShape{absl::StrCat(group, ".", module), place->in, place->out};
}

std::string FloatBytes(const std::vector<float>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
}

}  // namespace

absl::StatusOr<std::unique_ptr<worker::LoraAdapter>> MakeRandomLoraAdapter(
    const worker::ModelConfig& config, int64_t rank, const std::vector<std::string>& targets,
    uint32_t seed, const std::string& dir) {
  if (config.family == worker::ModelFamily::kGpt2) {
    return absl::InvalidArgumentError("the LoRA benchmark runs Llama-family models only");
  }
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", error.message()));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(-0.05f, 0.05f);
  worker::SafetensorsWriter writer;
  for (int64_t layer = 0; layer < config.num_layers; ++layer) {
    for (const std::string& target : targets) {
      absl::StatusOr<ModuleShape> shape = ShapeOf(config, target);
      if (!shape.ok()) return shape.status();
      std::vector<float> a(rank * shape->in), b(shape->out * rank);
      for (float& v : a) v = value(rng);
      for (float& v : b) v = value(rng);
      const std::string stem =
          absl::StrCat("base_model.model.model.layers.", layer, ".", shape->path);
      writer.Add(stem + ".lora_A.weight", "F32", {rank, shape->in}, FloatBytes(a));
      writer.Add(stem + ".lora_B.weight", "F32", {shape->out, rank}, FloatBytes(b));
    }
  }
  if (absl::Status written = writer.WriteFile(dir + "/adapter_model.safetensors"); !written.ok()) {
    return written;
  }
  std::vector<std::string> quoted;
  for (const std::string& target : targets) quoted.push_back(absl::StrCat("\"", target, "\""));
  std::ofstream(dir + "/adapter_config.json")
      << R"({"peft_type": "LORA", "r": )" << rank << R"(, "lora_alpha": )" << 2 * rank
      << R"(, "target_modules": [)" << absl::StrJoin(quoted, ", ") << R"(], "bias": "none"})";
  return worker::LoadLoraAdapter(dir, config, rank);
}

}  // namespace llmserve::tools
