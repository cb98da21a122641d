#include "worker/model/lora_adapter.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status/status_macros.h"
#include "worker/model/dtype.h"
#include "worker/model/model_files.h"
#include "worker/model/safetensors.h"

namespace llmserve::worker {
namespace {

using nlohmann::json;

constexpr size_t kMaxConfigBytes = 1 << 20;

absl::Status ConfigError(absl::string_view field, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat("adapter_config.json: ", field, " ", problem));
}

// The module names this family has (for target_modules).
std::set<std::string> KnownModules(const ModelConfig& c) {
  if (c.family == ModelFamily::kGpt2) return {"c_attn", "c_proj", "c_fc"};
  std::set<std::string> names = {"q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj"};
  if (c.gated_mlp) names.insert("gate_proj");
  return names;
}

struct ParsedConfig {
  int64_t rank = 0;
  double scaling = 1;
  std::vector<std::string> target_modules;
};

absl::StatusOr<ParsedConfig> ParseConfig(const std::string& text, const ModelConfig& base,
                                         int64_t max_rank) {
  const json config = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) {
    return absl::InvalidArgumentError("adapter_config.json: not a JSON object");
  }
  const auto get = [&config](const char* key) -> const json* {
    const auto it = config.find(key);
    return it == config.end() || it->is_null() ? nullptr : &*it;
  };
  const json* type = get("peft_type");
  if (type == nullptr || !type->is_string() || type->get<std::string>() != "LORA") {
    return ConfigError("peft_type", absl::StrCat(type == nullptr ? "is missing" : type->dump(),
                                                 ": only LORA adapters are served"));
  }
  if (const json* dora = get("use_dora"); dora != nullptr && dora->is_boolean() && *dora) {
    return ConfigError("use_dora", "is true: DoRA adapters are not supported");
  }
  if (const json* bias = get("bias");
      bias != nullptr && !(bias->is_string() && bias->get<std::string>() == "none")) {
    return ConfigError("bias", absl::StrCat(bias->dump(), ": only \"none\" is supported"));
  }
  for (const char* refused :
       {"modules_to_save", "rank_pattern", "alpha_pattern", "layers_to_transform"}) {
    const json* value = get(refused);
    if (value != nullptr && !value->empty()) {
      return ConfigError(refused,
                         "is set, which is not supported (one rank and alpha for every "
                         "module, the projections of every layer only)");
    }
  }
  ParsedConfig out;
  const json* r = get("r");
  if (r == nullptr || !r->is_number_integer() || r->get<int64_t>() < 1) {
    return ConfigError("r", "must be an integer >= 1");
  }
  out.rank = r->get<int64_t>();
  if (out.rank > max_rank) {
    return ConfigError("r", absl::StrCat("is ", out.rank, ", above --max_lora_rank ", max_rank));
  }
  const json* alpha = get("lora_alpha");
  if (alpha == nullptr || !alpha->is_number() || !std::isfinite(alpha->get<double>())) {
    return ConfigError("lora_alpha", "must be a number");
  }
  const json* rslora = get("use_rslora");
  const bool rs = rslora != nullptr && rslora->is_boolean() && rslora->get<bool>();
  out.scaling = alpha->get<double>() /
                (rs ? std::sqrt(static_cast<double>(out.rank)) : static_cast<double>(out.rank));
  const json* targets = get("target_modules");
  if (targets == nullptr) return ConfigError("target_modules", "is missing");
  const std::set<std::string> known = KnownModules(base);
  if (targets->is_string()) {
    // A string is a regular expression in PEFT; "all-linear" is every projection.
    if (targets->get<std::string>() != "all-linear" &&
        !known.contains(targets->get<std::string>())) {
      return ConfigError("target_modules", absl::StrCat(targets->dump(),
                                                        ": a regular expression is not supported; "
                                                        "list the module names"));
    }
  } else if (targets->is_array()) {
    for (const json& name : *targets) {
      if (!name.is_string() || !known.contains(name.get<std::string>())) {
        return ConfigError("target_modules",
                           absl::StrCat("names ", name.dump(), ", which this model does not have (",
                                        absl::StrJoin(known, ", "), ")"));
      }
    }
  } else {
    return ConfigError("target_modules", "must be a list of module names");
  }
  return out;
}

// "...layers.3.self_attn.q_proj.lora_A.weight" -> (3, "self_attn", "q_proj", 'A').
struct TensorName {
  int64_t layer = 0;
  std::string group, module;
  char half = 0;
};

std::optional<TensorName> ParseTensorName(absl::string_view name, const ModelConfig& c) {
  const std::vector<std::string> parts = absl::StrSplit(name, '.');
  const size_t n = parts.size();
  if (n < 6 || parts[n - 1] != "weight" || (parts[n - 2] != "lora_A" && parts[n - 2] != "lora_B")) {
    return std::nullopt;
  }
  const std::string& layers = parts[n - 6];
  if (layers != (c.family == ModelFamily::kGpt2 ? "h" : "layers")) return std::nullopt;
  TensorName out;
  if (!absl::SimpleAtoi(parts[n - 5], &out.layer)) return std::nullopt;
  out.group = parts[n - 4];
  out.module = parts[n - 3];
  out.half = parts[n - 2].back();
  return out;
}

absl::StatusOr<std::vector<float>> ToFloats(const SafetensorsTensor& tensor) {
  DType dtype = DType::kF32;
  LLMSERVE_ASSIGN_OR_RETURN(dtype, ParseSafetensorsDType(tensor.dtype));
  std::vector<float> values(tensor.NumElements());
  ConvertElements(tensor.data, dtype, values.data(), DType::kF32, values.size());
  for (float v : values) {
    if (!std::isfinite(v)) {
      return absl::InvalidArgumentError(
          absl::StrCat("adapter_model.safetensors: ", tensor.name, " holds a non-finite value"));
    }
  }
  return values;
}

}  // namespace

std::optional<LoraPlacement> PlaceLoraModule(const ModelConfig& c, const std::string& group,
                                             const std::string& module) {
  const int64_t h = c.hidden_size, q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  const int64_t inter = c.intermediate_size;
  if (c.family == ModelFamily::kGpt2) {
    if (group == "attn" && module == "c_attn")
      return LoraPlacement{LoraTarget::kQkv, 0, h, q + 2 * kv};
    if (group == "attn" && module == "c_proj") return LoraPlacement{LoraTarget::kO, 0, q, h};
    if (group == "mlp" && module == "c_fc") return LoraPlacement{LoraTarget::kUp, 0, h, inter};
    if (group == "mlp" && module == "c_proj") return LoraPlacement{LoraTarget::kDown, 0, inter, h};
    return std::nullopt;
  }
  if (group == "self_attn") {
    if (module == "q_proj") return LoraPlacement{LoraTarget::kQkv, 0, h, q};
    if (module == "k_proj") return LoraPlacement{LoraTarget::kQkv, q, h, kv};
    if (module == "v_proj") return LoraPlacement{LoraTarget::kQkv, q + kv, h, kv};
    if (module == "o_proj") return LoraPlacement{LoraTarget::kO, 0, q, h};
  }
  if (group == "mlp") {
    if (module == "gate_proj" && c.gated_mlp) return LoraPlacement{LoraTarget::kUp, 0, h, inter};
    if (module == "up_proj")
      return LoraPlacement{LoraTarget::kUp, c.gated_mlp ? inter : 0, h, inter};
    if (module == "down_proj") return LoraPlacement{LoraTarget::kDown, 0, inter, h};
  }
  return std::nullopt;
}

int64_t LoraAdapter::NumParameters() const {
  int64_t total = 0;
  for (const auto& layer : layers) {
    for (const LoraModule& module : layer) {
      total += static_cast<int64_t>(module.a.size() + module.b_t.size());
    }
  }
  return total;
}

absl::StatusOr<std::unique_ptr<LoraAdapter>> LoadLoraAdapter(const std::string& directory,
                                                             const ModelConfig& base,
                                                             int64_t max_rank) {
  std::string config_text;
  LLMSERVE_ASSIGN_OR_RETURN(config_text,
                            ReadTextFile(directory + "/adapter_config.json", kMaxConfigBytes));
  ParsedConfig parsed;
  LLMSERVE_ASSIGN_OR_RETURN(parsed, ParseConfig(config_text, base, max_rank));
  std::unique_ptr<SafetensorsFile> file;
  LLMSERVE_ASSIGN_OR_RETURN(file, SafetensorsFile::Open(directory + "/adapter_model.safetensors"));

  // Both halves of each module, by (layer, group, module).
  std::map<std::tuple<int64_t, std::string, std::string>,
           std::pair<const SafetensorsTensor*, const SafetensorsTensor*>>
      halves;
  for (const SafetensorsTensor& tensor : file->tensors()) {
    const std::optional<TensorName> name = ParseTensorName(tensor.name, base);
    if (!name.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "adapter_model.safetensors: ", tensor.name,
          " is not the lora_A or lora_B weight of a layer's projection (embedding, LM-head and "
          "DoRA adapters are not supported)"));
    }
    if (name->layer < 0 || name->layer >= base.num_layers) {
      return absl::InvalidArgumentError(absl::StrCat("adapter_model.safetensors: ", tensor.name,
                                                     " is for layer ", name->layer,
                                                     ", but the model has ", base.num_layers));
    }
    if (!PlaceLoraModule(base, name->group, name->module).has_value()) {
      return absl::InvalidArgumentError(absl::StrCat("adapter_model.safetensors: ", tensor.name,
                                                     " adapts ", name->group, ".", name->module,
                                                     ", which this model does not have"));
    }
    auto& pair = halves[{name->layer, name->group, name->module}];
    (name->half == 'A' ? pair.first : pair.second) = &tensor;
  }
  if (halves.empty()) {
    return absl::InvalidArgumentError("adapter_model.safetensors: holds no LoRA weights");
  }
  auto adapter = std::make_unique<LoraAdapter>();
  adapter->rank = parsed.rank;
  adapter->scaling = parsed.scaling;
  adapter->layers.resize(base.num_layers);
  std::set<std::string> modules;
  for (const auto& [key, pair] : halves) {
    const auto& [layer, group, module] = key;
    const std::string where = absl::StrCat("layer ", layer, " ", group, ".", module);
    if (pair.first == nullptr || pair.second == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("adapter_model.safetensors: ", where,
                                                     " has lora_", pair.first ? "A" : "B",
                                                     " but no lora_", pair.first ? "B" : "A"));
    }
    const LoraPlacement place = *PlaceLoraModule(base, group, module);
    const std::vector<int64_t> a_shape = {parsed.rank, place.in};
    const std::vector<int64_t> b_shape = {place.out, parsed.rank};
    if (pair.first->shape != a_shape || pair.second->shape != b_shape) {
      return absl::InvalidArgumentError(
          absl::StrCat("adapter_model.safetensors: ", where, ": lora_A is [",
                       absl::StrJoin(pair.first->shape, ", "), "] and lora_B [",
                       absl::StrJoin(pair.second->shape, ", "), "]; rank ", parsed.rank,
                       " on this model needs [", parsed.rank, ", ", place.in, "] and [", place.out,
                       ", ", parsed.rank, "]"));
    }
    LoraModule loaded{
        .target = place.target, .row_offset = place.row_offset, .in = place.in, .out = place.out};
    LLMSERVE_ASSIGN_OR_RETURN(loaded.a, ToFloats(*pair.first));
    std::vector<float> b;  // [out, rank] as stored
    LLMSERVE_ASSIGN_OR_RETURN(b, ToFloats(*pair.second));
    loaded.b_t.resize(b.size());
    for (int64_t o = 0; o < place.out; ++o) {
      for (int64_t r = 0; r < parsed.rank; ++r) {
        loaded.b_t[r * place.out + o] = static_cast<float>(b[o * parsed.rank + r] * parsed.scaling);
      }
    }
    adapter->layers[layer].push_back(std::move(loaded));
    modules.insert(module);
  }
  adapter->target_modules.assign(modules.begin(), modules.end());
  return adapter;
}

}  // namespace llmserve::worker
