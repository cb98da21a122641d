// LoRA adapters served unmerged by the CPU backend, against the double-precision reference model
// run on a copy of the checkpoint with each adapter merged into its weights (W + scaling * B A,
// computed here from the adapter files): one forward pass mixing the base model and two adapters
// (ranks 8 and 64, lora_alpha / r and rsLoRA scaling, different target modules) gives every
// sequence its own model's logits, for a Llama-family model (fused q/k/v and gate/up) and GPT-2
// (Conv1D weights, fused c_attn). And the adapters the loader refuses, by name.

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tests/unit/worker/engine/lora_test_adapters.h"
#include "tests/unit/worker/engine/reference_model.h"
#include "worker/engine/cpu/cpu_backend.h"
#include "worker/model/dtype.h"
#include "worker/model/lora_adapter.h"
#include "worker/model/model_files.h"
#include "worker/model/model_weights.h"
#include "worker/model/model_writer.h"
#include "worker/model/safetensors_writer.h"

namespace llmserve::worker {
namespace {

using testing::AdapterSpec;
using testing::Bytes;
using testing::ModulesOf;
using testing::WriteAdapter;
using testing::WriteMerged;

class LoraBackendTest : public ::testing::TestWithParam<bool> {};

TEST_P(LoraBackendTest, ABatchMixingTheBaseAndTwoAdaptersGivesEachItsMergedModel) {
  const bool gpt2 = GetParam();
  const ModelConfig config = gpt2 ? testing::SmallGpt2() : testing::SmallLlama();
  const ::llmserve::testing::ScopedTempDir temp("lora_backend_test");
  const std::string base = temp.path() + "/base";
  ASSERT_TRUE(WriteRandomModel(config, {.seed = 4, .scale = 0.3f}, base).ok());
  auto files = ModelFiles::Open(base);
  ASSERT_TRUE(files.ok()) << files.status();
  const std::vector<AdapterSpec> specs =
      gpt2 ? std::vector<AdapterSpec>{{{"c_attn", "c_proj"}, 8, 16, false, 1},
                                      {{"c_attn", "c_proj", "c_fc"}, 64, 8, true, 2}}
           : std::vector<AdapterSpec>{
                 {{"q_proj", "v_proj"}, 8, 16, false, 1},
                 {{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"},
                  64,
                  8,
                  true,
                  2}};
  auto weights = LoadModelWeights(**files, config, DType::kF32);
  ASSERT_TRUE(weights.ok()) << weights.status();
  auto backend = CpuBackend::Create(*std::move(weights), {.kv_cache_bytes = 4 << 20,
                                                          .block_size = 4,
                                                          .num_threads = 2,
                                                          .max_loras = 3,
                                                          .max_lora_rank = 64});
  ASSERT_TRUE(backend.ok()) << backend.status();
  std::vector<std::unique_ptr<ModelFiles>> merged_files;
  for (size_t i = 0; i < specs.size(); ++i) {
    const std::string adapter_dir = absl::StrCat(temp.path(), "/adapter", i);
    const auto deltas = WriteAdapter(config, specs[i], adapter_dir);
    auto adapter = LoadLoraAdapter(adapter_dir, config, 64);
    ASSERT_TRUE(adapter.ok()) << adapter.status();
    EXPECT_EQ((*adapter)->rank, specs[i].rank);
    // Slots 2 and 0: the slot number is only a name.
    ASSERT_TRUE((*backend)->SetLoraAdapter(i == 0 ? 2 : 0, *std::move(adapter)).ok());
    const std::string merged = absl::StrCat(temp.path(), "/merged", i);
    WriteMerged(**files, deltas, ModulesOf(config, specs[i].targets), merged);
    auto opened = ModelFiles::Open(merged);
    ASSERT_TRUE(opened.ok()) << opened.status();
    merged_files.push_back(*std::move(opened));
  }

  // Four sequences in one pass: the base model, adapter 0 (slot 2), adapter 1 (slot 0), adapter 0
  // again (its tokens grouped with the second sequence's, not next to them); every new token's
  // logits.
  std::mt19937 rng(9);
  std::uniform_int_distribution<int32_t> token(1, static_cast<int32_t>(config.vocab_size) - 1);
  std::vector<std::vector<int32_t>> prompts(4);
  for (auto& prompt : prompts) {
    prompt.resize(11);
    for (int32_t& id : prompt) id = token(rng);
  }
  ForwardBatch batch;
  batch.Clear();
  const std::vector<int32_t> slots = {-1, 2, 0, 2};
  const std::vector<int> adapter_of = {-1, 0, 1, 0};
  for (int s = 0; s < 4; ++s) {
    batch.AddSequence(prompts[s], 0, {3 * s, 3 * s + 1, 3 * s + 2}, /*want_all_logits=*/true,
                      /*want_hidden_states=*/false, slots[s]);
  }
  ForwardOutput output;
  ASSERT_TRUE((*backend)->Forward(batch, &output).ok());
  for (int s = 0; s < 4; ++s) {
    const ModelFiles& reference_files = s == 0 ? **files : *merged_files[adapter_of[s]];
    const auto want = testing::ReferenceModel(reference_files, config).Logits(prompts[s]);
    for (int32_t p = 0; p < 11; ++p) {
      const float* row = output.Row(output.row_start[s] + p);
      double largest = 0;
      for (double v : want[p]) largest = std::max(largest, std::abs(v));
      for (int64_t v = 0; v < config.vocab_size; ++v) {
        ASSERT_NEAR(row[v], want[p][v], 1e-4 * largest)
            << "sequence " << s << " position " << p << " token " << v;
      }
    }
  }
  // The adapters change the logits (else the test would prove nothing).
  const auto base_logits = testing::ReferenceModel(**files, config).Logits(prompts[1]);
  const auto merged_logits = testing::ReferenceModel(*merged_files[0], config).Logits(prompts[1]);
  double difference = 0;
  for (int64_t v = 0; v < config.vocab_size; ++v) {
    difference = std::max(difference, std::abs(base_logits[10][v] - merged_logits[10][v]));
  }
  EXPECT_GT(difference, 1e-2);
}

INSTANTIATE_TEST_SUITE_P(Families, LoraBackendTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Gpt2" : "Llama"; });

TEST(LoraBackendTest, ASlotWithoutAnAdapterIsRefused) {
  const ModelConfig config = testing::SmallLlama();
  const ::llmserve::testing::ScopedTempDir temp("lora_backend_test");
  ASSERT_TRUE(WriteRandomModel(config, {.seed = 4}, temp.path()).ok());
  auto files = ModelFiles::Open(temp.path());
  ASSERT_TRUE(files.ok());
  auto backend = CpuBackend::Create(*LoadModelWeights(**files, config, DType::kF32),
                                    {.kv_cache_bytes = 1 << 20, .block_size = 4, .max_loras = 2});
  ASSERT_TRUE(backend.ok());
  ForwardBatch batch;
  batch.Clear();
  batch.AddSequence({1, 2, 3}, 0, {0}, false, false, /*lora_slot=*/1);
  ForwardOutput output;
  const absl::Status forward = (*backend)->Forward(batch, &output);
  EXPECT_TRUE(absl::IsInvalidArgument(forward)) << forward;
  EXPECT_TRUE(absl::IsInvalidArgument((*backend)->SetLoraAdapter(2, nullptr)));
}

class LoraAdapterLoadTest : public ::testing::Test {
 protected:
  void SetUp() override { WriteAdapter(config_, {{"q_proj", "v_proj"}, 8, 16, false, 1}, dir_); }
  void Rewrite(const std::string& config_json) {
    std::ofstream(dir_ + "/adapter_config.json") << config_json;
  }
  void ExpectRefused(const std::string& fragment, int64_t max_rank = 64) {
    const auto loaded = LoadLoraAdapter(dir_, config_, max_rank);
    ASSERT_FALSE(loaded.ok()) << fragment;
    EXPECT_TRUE(absl::StrContains(loaded.status().message(), fragment)) << fragment << "\n"
                                                                        << loaded.status();
  }
  const ModelConfig config_ = testing::SmallLlama();
  const ::llmserve::testing::ScopedTempDir temp_{"lora_adapter_load_test"};
  const std::string dir_ = temp_.path() + "/adapter";
};

TEST_F(LoraAdapterLoadTest, ReadsRankScalingAndModules) {
  const auto loaded = LoadLoraAdapter(dir_, config_, 64);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->rank, 8);
  EXPECT_DOUBLE_EQ((*loaded)->scaling, 2.0);
  EXPECT_EQ((*loaded)->target_modules, (std::vector<std::string>{"q_proj", "v_proj"}));
  ASSERT_EQ((*loaded)->layers.size(), 2u);
  ASSERT_EQ((*loaded)->layers[0].size(), 2u);
}

TEST_F(LoraAdapterLoadTest, RefusesWhatItCannotServeByName) {
  ExpectRefused("r is 8, above --max_lora_rank 4", 4);
  const std::string good =
      R"("peft_type": "LORA", "r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"])";
  Rewrite("{" + good + R"(, "use_dora": true})");
  ExpectRefused("use_dora is true");
  Rewrite("{" + good + R"(, "bias": "all"})");
  ExpectRefused("bias \"all\"");
  Rewrite("{" + good + R"(, "modules_to_save": ["lm_head"]})");
  ExpectRefused("modules_to_save is set");
  Rewrite(R"({"peft_type": "LORA", "r": 8, "lora_alpha": 16, "target_modules": ["w_pack"]})");
  ExpectRefused("names \"w_pack\", which this model does not have");
  Rewrite(R"({"peft_type": "PREFIX_TUNING", "r": 8})");
  ExpectRefused("only LORA adapters");
  Rewrite("{" + good + "}");
  ASSERT_TRUE(LoadLoraAdapter(dir_, config_, 64).ok());
  // Tensors: a missing half, a wrong shape, an embedding adapter, a layer the model lacks.
  const auto write_tensors =
      [this](const std::vector<std::pair<std::string, std::vector<int64_t>>>& tensors) {
        SafetensorsWriter writer;
        for (const auto& [name, shape] : tensors) {
          int64_t n = 1;
          for (int64_t d : shape) n *= d;
          writer.Add(name, "F32", shape, Bytes(std::vector<float>(n, 0.1f)));
        }
        ASSERT_TRUE(writer.WriteFile(dir_ + "/adapter_model.safetensors").ok());
      };
  const std::string q = "base_model.model.model.layers.0.self_attn.q_proj.";
  write_tensors({{q + "lora_A.weight", {8, 40}}});
  ExpectRefused("has lora_A but no lora_B");
  write_tensors({{q + "lora_A.weight", {8, 40}}, {q + "lora_B.weight", {33, 8}}});
  ExpectRefused("lora_B [33, 8]");
  write_tensors({{"base_model.model.model.embed_tokens.lora_embedding_A", {8, 101}}});
  ExpectRefused("is not the lora_A or lora_B weight of a layer's projection");
  write_tensors({{"base_model.model.model.layers.7.self_attn.q_proj.lora_A.weight", {8, 40}}});
  ExpectRefused("is for layer 7, but the model has 2");
  std::filesystem::remove(dir_ + "/adapter_model.safetensors");
  const auto missing = LoadLoraAdapter(dir_, config_, 64);
  EXPECT_TRUE(absl::IsNotFound(missing.status())) << missing.status();
}

}  // namespace
}  // namespace llmserve::worker
