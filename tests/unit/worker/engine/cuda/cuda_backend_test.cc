// The CUDA backend as a whole against the CPU backend (the reference, f32 weights) on the same
// random checkpoints and the same packed batches: Llama-family models with GQA ratios 1/3/4 and
// head dims 64/128 (llama3 rope scaling, Qwen2 qkv bias, tied and untied embeddings) and a GPT-2
// (learned positions, LayerNorm, GELU, biases); batches mixing prefill chunks, decodes, prompt
// logprob rows and prefix blocks shared between sequences.
//
// Tolerance, per logits row, NMSE against the CPU: 1e-3 with bf16, 1e-4 with f16. Why: the CUDA
// backend rounds weights, GEMM inputs and the KV cache to 16 bits (relative error up to 2^-9 for
// bf16, RMS about 1.1e-3, so an NMSE of about 1.3e-6 per rounded operand of a dot product). A
// layer has about ten such roundings; a few layers and the LM head give about 1e-4, and random
// weights amplify somewhat: 1e-3 leaves a margin of ten without hiding a wrong index or mask
// (those give NMSE near 1). f16 has 4 more mantissa bits: 16x smaller, 1e-4 keeps the margin.
// Greedy decoding must pick the CPU's tokens as long as the CPU's best two logits are apart by
// more than the error bf16 allows (2% of the row's range); after a near tie the runs may diverge
// and the test stops comparing.
//
// Tests that need a device skip, naming why, where there is none; the Create error tests run
// everywhere.

#include "worker/engine/cuda/cuda_backend.h"

#include <algorithm>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tests/unit/worker/engine/cuda/cuda_test_models.h"
#include "tests/unit/worker/engine/cuda/cuda_test_util.h"
#include "tests/unit/worker/engine/cuda/greedy_margin.h"
#include "tests/unit/worker/engine/random_request_mix.h"
#include "worker/engine/cpu/cpu_backend.h"
#include "worker/engine/cuda/cuda_engine_builder.h"
#include "worker/model/model_files.h"
#include "worker/model/model_weights.h"
#include "worker/model/model_writer.h"

namespace llmserve::worker {

// Readable parameter names in test output.
void PrintTo(DType dtype, std::ostream* os) { *os << DTypeName(dtype); }

namespace {

using cuda::testing::LlamaConfig;
using cuda::testing::TestModel;

using cuda::testing::Nmse;

ModelConfig Qwen2Config() {
  ModelConfig c = LlamaConfig(1, 4, 128);
  c.architecture = "Qwen2ForCausalLM";
  c.qkv_bias = true;
  c.tied_embeddings = true;
  c.rope_scaling = {};
  return c;
}

CudaBackendOptions SmallOptions(DType dtype, int32_t block_size) {
  return {.dtype = dtype,
          .kv_cache_bytes = 16 << 20,
          .block_size = block_size,
          .max_num_batched_tokens = 512,
          .max_num_seqs = 16};
}

TEST(CudaBackendCreateTest, FailsClearlyWithoutADeviceOrWithABadIndex) {
  TestModel model(LlamaConfig(2, 1, 64), 1, "cuda_backend_test");
  const std::string no_device = cuda::testing::NoCudaDeviceReason();
  CudaBackendOptions options = SmallOptions(DType::kBF16, 16);
  if (!no_device.empty()) {
    auto backend = CudaBackend::Create(model.Weights(DType::kF32), options);
    ASSERT_FALSE(backend.ok());
    EXPECT_EQ(backend.status().code(), absl::StatusCode::kFailedPrecondition) << backend.status();
    EXPECT_NE(backend.status().message().find("no CUDA device: cudaGetDeviceCount returned"),
              absl::string_view::npos)
        << backend.status();
    return;
  }
  options.device = 1000;
  auto backend = CudaBackend::Create(model.Weights(DType::kF32), options);
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kInvalidArgument) << backend.status();
  EXPECT_NE(backend.status().message().find("CUDA device 1000 does not exist"),
            absl::string_view::npos)
      << backend.status();
}

TEST(CudaBackendCreateTest, RejectsShapesAndOptionsWithoutKernels) {
  ModelConfig config = LlamaConfig(2, 2, 64);
  config.head_dim = 32;
  TestModel model(config, 2, "cuda_backend_test");
  auto backend = CudaBackend::Create(model.Weights(DType::kF32), SmallOptions(DType::kBF16, 16));
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kUnimplemented) << backend.status();
  EXPECT_NE(backend.status().message().find("head_dim 64 and 128, not 32"), absl::string_view::npos)
      << backend.status();

  backend = CudaBackend::Create(model.Weights(DType::kF32), SmallOptions(DType::kF32, 16));
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kInvalidArgument) << backend.status();
}

TEST(CudaEngineBuilderTest, ChecksDtypeAndDeviceBeforeLoading) {
  TestModel model(LlamaConfig(2, 1, 64), 3, "cuda_backend_test");
  auto engine = BuildCudaEngine({.model_dir = model.dir.path(), .dtype = DType::kF32});
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kInvalidArgument) << engine.status();
  EXPECT_NE(engine.status().message().find("--dtype=bf16"), absl::string_view::npos);
  if (cuda::testing::NoCudaDeviceReason().empty()) return;
  engine = BuildCudaEngine({.model_dir = "/nonexistent", .dtype = DType::kBF16});
  ASSERT_FALSE(engine.ok());
  // The device is checked first: no weights are read on a machine that cannot run them.
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kFailedPrecondition) << engine.status();
  EXPECT_NE(engine.status().message().find("no CUDA device"), absl::string_view::npos);
}

// (model, device dtype, block size)
class CudaVsCpuTest : public ::testing::TestWithParam<std::tuple<int, DType, int32_t>> {};

ModelConfig ConfigForIndex(int index) {
  switch (index) {
    case 0:
      return LlamaConfig(2, 1, 64);
    case 1:
      return LlamaConfig(2, 3, 64);
    case 2:
      return Qwen2Config();
    case 3:
      return LlamaConfig(2, 4, 128);
    default:
      return cuda::testing::Gpt2TestConfig();
  }
}

TEST_P(CudaVsCpuTest, RandomPackedBatchesGiveTheCpuLogits) {
  LLMSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  const auto [model_index, dtype, block_size] = GetParam();
  const double max_nmse = dtype == DType::kBF16 ? 1e-3 : 1e-4;
  const ModelConfig config = ConfigForIndex(model_index);
  TestModel model(config, 10 + model_index, "cuda_backend_test");
  auto cuda = CudaBackend::Create(model.Weights(DType::kF32), SmallOptions(dtype, block_size));
  ASSERT_TRUE(cuda.ok()) << cuda.status();
  auto cpu = CpuBackend::Create(model.Weights(DType::kF32),
                                {.kv_cache_bytes = 32 << 20, .block_size = block_size});
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  const int32_t num_blocks = std::min((*cuda)->num_kv_blocks(), (*cpu)->num_kv_blocks());

  std::mt19937 rng(model_index * 100 + block_size);
  // Prompt chunks of at most 80 tokens keep a step within the backend's 512-token workspace.
  testing::RandomRequestMix mix(rng, {.num_sequences = 6,
                                      .max_tokens = 300,
                                      .vocab_size = static_cast<int32_t>(config.vocab_size),
                                      .block_size = block_size,
                                      .num_blocks = num_blocks,
                                      .max_chunk = 80});
  ForwardBatch batch;
  ForwardOutput cuda_out, cpu_out;
  std::vector<int> in_batch;
  for (int step = 0; step < 2000 && !mix.Done(); ++step) {
    ASSERT_TRUE(mix.NextBatch(&batch, &in_batch)) << "out of KV blocks";
    if (in_batch.empty()) continue;
    ASSERT_LE(batch.num_tokens(), 512);
    const absl::Status cuda_status = (*cuda)->Forward(batch, &cuda_out);
    ASSERT_TRUE(cuda_status.ok()) << cuda_status;
    ASSERT_TRUE((*cpu)->Forward(batch, &cpu_out).ok());
    ASSERT_EQ(cuda_out.row_start, cpu_out.row_start);
    ASSERT_EQ(cuda_out.vocab_size, cpu_out.vocab_size);
    for (int32_t r = 0; r < cpu_out.row_start.back(); ++r) {
      const std::vector<float> got(cuda_out.Row(r), cuda_out.Row(r) + config.vocab_size);
      const std::vector<float> want(cpu_out.Row(r), cpu_out.Row(r) + config.vocab_size);
      ASSERT_LT(Nmse(got, want), max_nmse) << "step " << step << " row " << r;
    }
    mix.Advance(batch, in_batch);
  }
  EXPECT_TRUE(mix.Done());
}

INSTANTIATE_TEST_SUITE_P(ModelsDtypesBlocks, CudaVsCpuTest,
                         ::testing::Combine(::testing::Range(0, 5),
                                            ::testing::Values(DType::kBF16, DType::kF16),
                                            ::testing::Values(16, 32)));

int32_t Argmax(const float* row, int64_t n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);
}

TEST(CudaBackendGreedyTest, PicksTheCpuTokensUntilANearTie) {
  LLMSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  const ModelConfig config = LlamaConfig(2, 4, 128);
  TestModel model(config, 77, "cuda_backend_test");
  auto cuda = CudaBackend::Create(model.Weights(DType::kF32), SmallOptions(DType::kBF16, 16));
  ASSERT_TRUE(cuda.ok()) << cuda.status();
  auto cpu = CpuBackend::Create(model.Weights(DType::kF32), {.kv_cache_bytes = 32 << 20});
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  std::mt19937 rng(5);
  std::vector<int32_t> prompt(23);
  for (int32_t& t : prompt) t = rng() % config.vocab_size;
  const std::vector<int32_t> blocks = {9, 3, 14, 0, 7, 1, 2, 4};  // 128 slots
  ForwardBatch batch;
  ForwardOutput cuda_out, cpu_out;
  std::vector<int32_t> next = prompt;
  int32_t computed = 0;
  int compared = 0;
  for (int step = 0; step < 32; ++step) {
    batch.Clear();
    batch.AddSequence(next, computed, blocks);
    ASSERT_TRUE((*cuda)->Forward(batch, &cuda_out).ok());
    ASSERT_TRUE((*cpu)->Forward(batch, &cpu_out).ok());
    const float* want = cpu_out.LastRow(0);
    const int32_t cpu_token = Argmax(want, config.vocab_size);
    const int32_t cuda_token = Argmax(cuda_out.LastRow(0), config.vocab_size);
    // After a near tie the runs may diverge.
    if (!cuda::testing::GreedyTokenIsDecided(want, config.vocab_size)) break;
    ASSERT_EQ(cuda_token, cpu_token) << "step " << step;
    ++compared;
    computed += static_cast<int32_t>(next.size());
    next = {cpu_token};
  }
  EXPECT_GE(compared, 1);
}

}  // namespace
}  // namespace llmserve::worker
