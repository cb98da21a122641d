// The CUDA backend's LoRA kernels against the CPU backend: the same random checkpoint and the same
// random adapters (ranks 8 and 16, attention-only and all seven projections; GPT-2's c_attn,
// c_proj and c_fc) in the same slots, one packed batch of prefill chunks mixing the base model
// and both adapters (one adapter's sequences not next to each other), then decode steps. Every
// logits row within the dense test's tolerance (cuda_backend_test.cc: NMSE 1e-3 with bf16, 1e-4
// with f16: the kernels read the projection's 16-bit input, the CPU its f32 one), and the adapters
// must move the logits far beyond it (else the comparison would prove nothing). The adapters'
// deltas are kept near the base weights' size: an adapter that dwarfs them (rsLoRA scaling 2 on
// all seven projections) amplifies the 16-bit rounding of every input past those bounds, while
// each of its modules alone stays within them.
// Also: a slot without an adapter is refused, and an adapter's rank above max_lora_rank.

#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tests/unit/worker/engine/cuda/cuda_test_models.h"
#include "tests/unit/worker/engine/cuda/cuda_test_util.h"
#include "tests/unit/worker/engine/lora_test_adapters.h"
#include "worker/engine/cpu/cpu_backend.h"
#include "worker/engine/cuda/cuda_backend.h"
#include "worker/model/lora_adapter.h"

namespace llmserve::worker {
namespace {

using cuda::testing::LlamaConfig;
using cuda::testing::Nmse;
using cuda::testing::TestModel;

class CudaLoraVsCpuTest : public ::testing::TestWithParam<std::tuple<bool, DType>> {};

TEST_P(CudaLoraVsCpuTest, MixedAdaptersGiveTheCpuLogits) {
  LLMSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  const auto [gpt2, dtype] = GetParam();
  const double max_nmse = dtype == DType::kBF16 ? 1e-3 : 1e-4;
  const ModelConfig config = gpt2 ? cuda::testing::Gpt2TestConfig() : LlamaConfig(2, 2, 64);
  TestModel model(config, 21, "cuda_lora_test");
  const std::vector<testing::AdapterSpec> specs =
      gpt2 ? std::vector<testing::AdapterSpec>{{{"c_attn"}, 8, 16, false, 1},
                                               {{"c_attn", "c_proj", "c_fc"}, 16, 8, true, 2}}
           : std::vector<testing::AdapterSpec>{
                 {{"q_proj", "v_proj"}, 8, 16, false, 1},
                 {{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"},
                  16,
                  8,
                  false,
                  2}};
  auto cuda = CudaBackend::Create(model.Weights(DType::kF32), {.dtype = dtype,
                                                               .kv_cache_bytes = 16 << 20,
                                                               .block_size = 16,
                                                               .max_num_batched_tokens = 256,
                                                               .max_num_seqs = 8,
                                                               .max_loras = 2,
                                                               .max_lora_rank = 16});
  ASSERT_TRUE(cuda.ok()) << cuda.status();
  auto cpu = CpuBackend::Create(
      model.Weights(DType::kF32),
      {.kv_cache_bytes = 16 << 20, .block_size = 16, .max_loras = 2, .max_lora_rank = 16});
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  for (size_t i = 0; i < specs.size(); ++i) {
    const std::string dir = absl::StrCat(model.dir.path(), "/adapter", i);
    testing::WriteAdapter(model.loaded_config, specs[i], dir);
    auto adapter = LoadLoraAdapter(dir, model.loaded_config, 16);
    ASSERT_TRUE(adapter.ok()) << adapter.status();
    std::shared_ptr<const LoraAdapter> shared = *std::move(adapter);
    ASSERT_TRUE((*cuda)->SetLoraAdapter(static_cast<int32_t>(i), shared).ok());
    ASSERT_TRUE((*cpu)->SetLoraAdapter(static_cast<int32_t>(i), shared).ok());
  }

  // Sequences: base, adapter 0, adapter 1, adapter 0 again, base; prompts of 5 to 37 tokens.
  const std::vector<int32_t> slots = {-1, 0, 1, 0, -1};
  std::mt19937 rng(5);
  std::uniform_int_distribution<int32_t> token(1, static_cast<int32_t>(config.vocab_size) - 1);
  std::vector<std::vector<int32_t>> prompts;
  for (size_t s = 0; s < slots.size(); ++s) {
    prompts.emplace_back(5 + 8 * s);
    for (int32_t& id : prompts.back()) id = token(rng);
  }
  const auto blocks_of = [](size_t s) {
    return std::vector<int32_t>{static_cast<int32_t>(4 * s), static_cast<int32_t>(4 * s + 1),
                                static_cast<int32_t>(4 * s + 2), static_cast<int32_t>(4 * s + 3)};
  };
  ForwardBatch batch;
  ForwardOutput cuda_out, cpu_out, base_out;
  std::vector<int32_t> next(slots.size());
  std::vector<int32_t> length(slots.size());
  for (int step = 0; step < 4; ++step) {
    batch.Clear();
    for (size_t s = 0; s < slots.size(); ++s) {
      const std::vector<int32_t> tokens = step == 0 ? prompts[s] : std::vector<int32_t>{next[s]};
      batch.AddSequence(tokens, step == 0 ? 0 : length[s], blocks_of(s),
                        /*want_all_logits=*/step == 0, /*want_hidden_states=*/false, slots[s]);
      length[s] = (step == 0 ? 0 : length[s]) + static_cast<int32_t>(tokens.size());
    }
    ASSERT_TRUE((*cuda)->Forward(batch, &cuda_out).ok());
    ASSERT_TRUE((*cpu)->Forward(batch, &cpu_out).ok());
    ASSERT_EQ(cuda_out.row_start, cpu_out.row_start);
    for (int32_t r = 0; r < cpu_out.row_start.back(); ++r) {
      const std::vector<float> got(cuda_out.Row(r), cuda_out.Row(r) + config.vocab_size);
      const std::vector<float> want(cpu_out.Row(r), cpu_out.Row(r) + config.vocab_size);
      ASSERT_LT(Nmse(got, want), max_nmse) << "step " << step << " row " << r;
    }
    for (size_t s = 0; s < slots.size(); ++s) {
      const float* row = cpu_out.LastRow(static_cast<int32_t>(s));
      next[s] = static_cast<int32_t>(std::max_element(row, row + config.vocab_size) - row);
    }
  }
  // The adapters matter: sequence 2's first-step logits without its adapter are far off.
  batch.Clear();
  batch.AddSequence(prompts[2], 0, blocks_of(7), false, false, -1);
  ASSERT_TRUE((*cuda)->Forward(batch, &base_out).ok());
  batch.Clear();
  batch.AddSequence(prompts[2], 0, blocks_of(6), false, false, 1);
  ASSERT_TRUE((*cuda)->Forward(batch, &cuda_out).ok());
  const std::vector<float> adapted(cuda_out.Row(0), cuda_out.Row(0) + config.vocab_size);
  const std::vector<float> plain(base_out.Row(0), base_out.Row(0) + config.vocab_size);
  EXPECT_GT(Nmse(plain, adapted), 1e-2);
}

INSTANTIATE_TEST_SUITE_P(FamiliesDtypes, CudaLoraVsCpuTest,
                         ::testing::Combine(::testing::Values(false, true),
                                            ::testing::Values(DType::kBF16, DType::kF16)),
                         [](const auto& info) {
                           return absl::StrCat(
                               std::get<0>(info.param) ? "Gpt2" : "Llama",
                               std::get<1>(info.param) == DType::kBF16 ? "Bf16" : "F16");
                         });

TEST(CudaLoraTest, EmptySlotsAndRanksAboveTheLimitAreRefused) {
  LLMSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  TestModel model(LlamaConfig(2, 2, 64), 22, "cuda_lora_test");
  auto cuda = CudaBackend::Create(model.Weights(DType::kF32), {.dtype = DType::kBF16,
                                                               .kv_cache_bytes = 4 << 20,
                                                               .max_num_batched_tokens = 64,
                                                               .max_num_seqs = 4,
                                                               .max_loras = 1,
                                                               .max_lora_rank = 8});
  ASSERT_TRUE(cuda.ok()) << cuda.status();
  EXPECT_EQ((*cuda)->max_loras(), 1);
  ForwardBatch batch;
  batch.AddSequence({1, 2, 3}, 0, {0}, false, false, /*lora_slot=*/0);
  ForwardOutput out;
  EXPECT_TRUE(absl::IsInvalidArgument((*cuda)->Forward(batch, &out)));
  const std::string dir = model.dir.path() + "/rank16";
  testing::WriteAdapter(model.loaded_config, {{"q_proj"}, 16, 16, false, 3}, dir);
  auto adapter = LoadLoraAdapter(dir, model.loaded_config, 16);
  ASSERT_TRUE(adapter.ok()) << adapter.status();
  EXPECT_TRUE(absl::IsInvalidArgument((*cuda)->SetLoraAdapter(0, *std::move(adapter))));
  EXPECT_TRUE(absl::IsInvalidArgument((*cuda)->SetLoraAdapter(1, nullptr)));
}

}  // namespace
}  // namespace llmserve::worker
