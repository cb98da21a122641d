// Random LoRA adapters for tests: small Llama and GPT-2 shapes, a PEFT adapter written with
// random A and B, and a copy of a checkpoint with an adapter merged into its weights
// (W + scaling * B A, computed here from the same values), which the reference model or a plain
// engine can run. Header-only, for gtest tests.

#ifndef LLMSERVE_TESTS_UNIT_ENGINE_LORA_TEST_ADAPTERS_H_
#define LLMSERVE_TESTS_UNIT_ENGINE_LORA_TEST_ADAPTERS_H_

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "tests/unit/worker/engine/small_model_configs.h"
#include "worker/model/dtype.h"
#include "worker/model/model_config.h"
#include "worker/model/model_files.h"
#include "worker/model/safetensors.h"
#include "worker/model/safetensors_writer.h"

namespace llmserve::worker::testing {

// A module an adapter adapts: its checkpoint weight name, PEFT's module name, and its shape.
struct Module {
  std::string weight;  // "model.layers.0.self_attn.q_proj.weight"
  std::string name;    // "q_proj"
  int64_t in, out;
  bool conv1d;  // stored [in, out] (GPT-2)
};

inline std::vector<Module> ModulesOf(const ModelConfig& c, const std::vector<std::string>& names) {
  const int64_t h = c.hidden_size, q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  const int64_t inter = c.intermediate_size;
  std::vector<Module> out;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    for (const std::string& name : names) {
      if (c.family == ModelFamily::kGpt2) {
        const std::string p = absl::StrCat("h.", l, ".");
        if (name == "c_attn") out.push_back({p + "attn.c_attn.weight", name, h, q + 2 * kv, true});
        if (name == "c_proj") {
          out.push_back({p + "attn.c_proj.weight", name, q, h, true});
          out.push_back({p + "mlp.c_proj.weight", name, inter, h, true});
        }
        if (name == "c_fc") out.push_back({p + "mlp.c_fc.weight", name, h, inter, true});
        continue;
      }
      const std::string p = absl::StrCat("model.layers.", l, ".");
      const std::map<std::string, std::pair<std::string, std::pair<int64_t, int64_t>>> llama = {
          {"q_proj", {"self_attn.q_proj", {h, q}}},     {"k_proj", {"self_attn.k_proj", {h, kv}}},
          {"v_proj", {"self_attn.v_proj", {h, kv}}},    {"o_proj", {"self_attn.o_proj", {q, h}}},
          {"gate_proj", {"mlp.gate_proj", {h, inter}}}, {"up_proj", {"mlp.up_proj", {h, inter}}},
          {"down_proj", {"mlp.down_proj", {inter, h}}}};
      const auto& [path, shape] = llama.at(name);
      out.push_back({p + path + ".weight", name, shape.first, shape.second, false});
    }
  }
  return out;
}

inline std::string Bytes(const std::vector<float>& values) {
  std::string bytes(values.size() * sizeof(float), '\0');
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

struct AdapterSpec {
  std::vector<std::string> targets;
  int64_t rank;
  double alpha;
  bool rslora;
  uint64_t seed;
};

// Writes a PEFT adapter for `c` into `dir` and returns, per adapted weight, the merged delta
// scaling * B A as [out, in].
inline std::map<std::string, std::vector<double>> WriteAdapter(const ModelConfig& c,
                                                               const AdapterSpec& spec,
                                                               const std::string& dir) {
  std::filesystem::create_directories(dir);
  std::mt19937 rng(spec.seed);
  std::uniform_real_distribution<float> value(-0.3f, 0.3f);
  const double scaling =
      spec.alpha / (spec.rslora ? std::sqrt(static_cast<double>(spec.rank)) : spec.rank);
  SafetensorsWriter writer;
  std::map<std::string, std::vector<double>> deltas;
  for (const Module& m : ModulesOf(c, spec.targets)) {
    std::vector<float> a(spec.rank * m.in), b(m.out * spec.rank);
    for (float& v : a) v = value(rng);
    for (float& v : b) v = value(rng);
    const std::string stem = "base_model.model." + m.weight.substr(0, m.weight.size() - 7);
    writer.Add(stem + ".lora_A.weight", "F32", {spec.rank, m.in}, Bytes(a));
    writer.Add(stem + ".lora_B.weight", "F32", {m.out, spec.rank}, Bytes(b));
    std::vector<double>& delta = deltas[m.weight];
    delta.assign(m.out * m.in, 0.0);
    for (int64_t o = 0; o < m.out; ++o) {
      for (int64_t i = 0; i < m.in; ++i) {
        double sum = 0;
        for (int64_t r = 0; r < spec.rank; ++r)
          sum += double{b[o * spec.rank + r]} * a[r * m.in + i];
        delta[o * m.in + i] = scaling * sum;
      }
    }
  }
  EXPECT_TRUE(writer.WriteFile(dir + "/adapter_model.safetensors").ok());
  std::vector<std::string> quoted;
  for (const std::string& t : spec.targets) quoted.push_back("\"" + t + "\"");
  std::ofstream(dir + "/adapter_config.json")
      << R"({"peft_type": "LORA", "r": )" << spec.rank << R"(, "lora_alpha": )" << spec.alpha
      << R"(, "use_rslora": )" << (spec.rslora ? "true" : "false") << R"(, "target_modules": [)"
      << absl::StrJoin(quoted, ", ") << R"(], "bias": "none", "use_dora": false,
         "modules_to_save": null, "fan_in_fan_out": )"
      << (c.family == ModelFamily::kGpt2 ? "true" : "false") << "}";
  return deltas;
}

// Copies the checkpoint in `files` to `dir` in f32 with `deltas` added to their weights.
inline void WriteMerged(const ModelFiles& files,
                        const std::map<std::string, std::vector<double>>& deltas,
                        const std::vector<Module>& modules, const std::string& dir) {
  std::filesystem::create_directories(dir);
  SafetensorsWriter writer;
  for (const SafetensorsTensor* t : files.AllTensors()) {
    std::vector<float> values(t->NumElements());
    ConvertElements(t->data, *ParseSafetensorsDType(t->dtype), values.data(), DType::kF32,
                    values.size());
    if (const auto it = deltas.find(t->name); it != deltas.end()) {
      const Module& m = *std::find_if(modules.begin(), modules.end(),
                                      [&](const Module& mm) { return mm.weight == t->name; });
      for (int64_t o = 0; o < m.out; ++o) {
        for (int64_t i = 0; i < m.in; ++i) {
          // Conv1D keeps [in, out].
          (m.conv1d ? values[i * m.out + o] : values[o * m.in + i]) +=
              static_cast<float>(it->second[o * m.in + i]);
        }
      }
    }
    writer.Add(t->name, "F32", t->shape, Bytes(values));
  }
  std::ofstream(dir + "/config.json") << files.config_json();
  ASSERT_TRUE(writer.WriteFile(dir + "/model.safetensors").ok());
}

}  // namespace llmserve::worker::testing

#endif  // LLMSERVE_TESTS_UNIT_ENGINE_LORA_TEST_ADAPTERS_H_
