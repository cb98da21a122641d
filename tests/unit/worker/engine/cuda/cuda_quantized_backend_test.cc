// The CUDA backend with quantized projections against the CPU backend with the same ones, on
// random checkpoints and random packed batches (prefill chunks, decodes, prompt logprob rows,
// shared prefix blocks): AWQ and GPTQ checkpoints (group sizes 8, 16, 32 and whole rows,
// symmetric and not, tied and untied heads, Qwen2 qkv bias), whose 4-bit projections stay 4-bit on
// the device, and int8 quantized at load (Llama, Qwen2, GPT-2); bf16 and f16.
//
// Tolerance, per logits row: NMSE 1e-3 with bf16, 1e-4 with f16, as cuda_backend_test's dense
// models, and for the same reason. The CPU backend computes exactly the model whose projections
// are the dequantized weights, in f32 (int4_model_test, int8_model_test). The CUDA backend
// computes the same dequantized weights: exactly in f32 on the GEMV path (steps of at most 8
// tokens), rounded once to 16 bits on the prefill path, where a dense model's weights are rounded
// to 16 bits too. Everything else (16-bit GEMM inputs and KV cache) is the dense backend's, so
// the dense argument (about ten 16-bit roundings per layer, NMSE about 1e-4, a margin of ten)
// carries over unchanged. A wrong nibble order, group, zero or scale gives NMSE far above it.
//
// Tests that need a device skip, naming why; the option checks run everywhere (they come before
// the device check).

#include <algorithm>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tests/testing/testdata_models.h"
#include "tests/unit/worker/engine/cuda/cuda_test_models.h"
#include "tests/unit/worker/engine/cuda/cuda_test_util.h"
#include "tests/unit/worker/engine/random_request_mix.h"
#include "worker/engine/cpu/cpu_backend.h"
#include "worker/engine/cuda/cuda_backend.h"
#include "worker/engine/cuda/projection_image.h"
#include "worker/engine/cuda/quantized_kernels.h"
#include "worker/model/model_files.h"
#include "worker/model/model_loader.h"
#include "worker/model/model_weights.h"
#include "worker/model/model_writer.h"

namespace llmserve::worker {
namespace {

using cuda::testing::TestModel;

using cuda::testing::Nmse;
using Method = CheckpointQuantization::Method;

// cuda_test_models.h's Llama without RoPE scaling (hidden 160 and intermediate 224: group sizes
// 8, 16 and 32 divide both); with `qwen`, a Qwen2 (q/k/v biases, a tied head).
ModelConfig LlamaConfig(int64_t kv_heads, int64_t group, int64_t head_dim, bool qwen) {
  ModelConfig c = cuda::testing::LlamaConfig(kv_heads, group, head_dim);
  c.rope_scaling = {};
  c.architecture = qwen ? "Qwen2ForCausalLM" : "LlamaForCausalLM";
  c.qkv_bias = qwen;
  c.tied_embeddings = qwen;
  return c;
}

struct Case {
  std::string name;
  ModelConfig config;
  CheckpointQuantization checkpoint;        // AWQ/GPTQ; none for int8
  Quantization load = Quantization::kNone;  // kInt8: quantized at load
};

std::vector<Case> Cases() {
  return {
      {"awq g32 llama", LlamaConfig(2, 1, 64, false), {.method = Method::kAwq, .group_size = 32}},
      {"gptq sym rows qwen2",
       LlamaConfig(1, 4, 128, true),
       {.method = Method::kGptq, .group_size = -1, .symmetric = true}},
      {"gptq asym g16 llama gqa3",
       LlamaConfig(2, 3, 64, false),
       {.method = Method::kGptq, .group_size = 16}},
      {"awq g8 llama d128",
       LlamaConfig(2, 4, 128, false),
       {.method = Method::kAwq, .group_size = 8}},
      {"int8 llama", LlamaConfig(2, 1, 64, false), {}, Quantization::kInt8},
      {"int8 qwen2", LlamaConfig(1, 4, 128, true), {}, Quantization::kInt8},
      {"int8 gpt2", cuda::testing::Gpt2TestConfig(), {}, Quantization::kInt8},
  };
}

// A random checkpoint of the case (f32 for everything not quantized), loaded back.
TestModel Model(const Case& c, uint64_t seed) {
  return TestModel(c.config, seed, "cuda_quantized_backend_test", c.checkpoint);
}

CudaBackendOptions Options(DType dtype, Quantization quantization) {
  return {.dtype = dtype,
          .quantization = quantization,
          .kv_cache_bytes = 16 << 20,
          .block_size = 16,
          .max_num_batched_tokens = 512,
          .max_num_seqs = 16};
}

// Runs on every machine: these are refused before the device is looked at.
TEST(CudaQuantizedCreateTest, RefusesQuantizationOptionsItCannotRun) {
  const std::vector<Case> cases = Cases();
  const TestModel awq = Model(cases[0], 1);
  auto backend = CudaBackend::Create(awq.Weights(), Options(DType::kBF16, Quantization::kInt8));
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kInvalidArgument) << backend.status();
  EXPECT_NE(backend.status().message().find("already awq"), std::string::npos) << backend.status();

  const TestModel dense = Model(cases[4], 2);
  backend = CudaBackend::Create(dense.Weights(), Options(DType::kBF16, Quantization::kAwq));
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kInvalidArgument) << backend.status();
  EXPECT_NE(backend.status().message().find("none or int8, not awq"), std::string::npos)
      << backend.status();
}

// Random packed batches (prefill chunks, decodes, prompt logprob rows, shared prefix blocks)
// through both backends: every logits row within `max_nmse`, and both CUDA paths taken.
void ExpectTheCpuLogits(Backend& cuda, Backend& cpu, int64_t vocab_size, uint32_t seed,
                        double max_nmse, const std::string& name, int32_t num_sequences = 6,
                        int32_t max_tokens = 300) {
  const int32_t num_blocks = std::min(cuda.num_kv_blocks(), cpu.num_kv_blocks());
  std::mt19937 rng(seed);
  // Decode-only steps (<= 6 tokens) take the GEMV kernel, the others dequantize + cuBLAS.
  testing::RandomRequestMix mix(rng, {.num_sequences = num_sequences,
                                      .max_tokens = max_tokens,
                                      .vocab_size = static_cast<int32_t>(vocab_size),
                                      .block_size = 16,
                                      .num_blocks = num_blocks,
                                      .max_chunk = 80});
  ForwardBatch batch;
  ForwardOutput cuda_out, cpu_out;
  std::vector<int> in_batch;
  int small_steps = 0, large_steps = 0;
  for (int step = 0; step < 2000 && !mix.Done(); ++step) {
    ASSERT_TRUE(mix.NextBatch(&batch, &in_batch)) << "out of KV blocks";
    if (in_batch.empty()) continue;
    (batch.num_tokens() <= cuda::kMaxGemvBatch ? small_steps : large_steps) += 1;
    const absl::Status cuda_status = cuda.Forward(batch, &cuda_out);
    ASSERT_TRUE(cuda_status.ok()) << cuda_status;
    ASSERT_TRUE(cpu.Forward(batch, &cpu_out).ok());
    ASSERT_EQ(cuda_out.row_start, cpu_out.row_start);
    for (int32_t r = 0; r < cpu_out.row_start.back(); ++r) {
      const std::vector<float> got(cuda_out.Row(r), cuda_out.Row(r) + vocab_size);
      const std::vector<float> want(cpu_out.Row(r), cpu_out.Row(r) + vocab_size);
      ASSERT_LT(Nmse(got, want), max_nmse) << name << " step " << step << " row " << r;
    }
    mix.Advance(batch, in_batch);
  }
  EXPECT_TRUE(mix.Done());
  EXPECT_GT(small_steps, 0) << "no step took the GEMV kernel";
  EXPECT_GT(large_steps, 0) << "no step took the dequantize + cuBLAS path";
}

class CudaQuantizedVsCpuTest : public ::testing::TestWithParam<std::tuple<int, DType>> {};

TEST_P(CudaQuantizedVsCpuTest, RandomPackedBatchesGiveTheCpuLogits) {
  LLMSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  const auto [index, dtype] = GetParam();
  const Case c = Cases()[index];
  const double max_nmse = dtype == DType::kBF16 ? 1e-3 : 1e-4;
  const TestModel model = Model(c, 20 + index);
  auto cuda = CudaBackend::Create(model.Weights(), Options(dtype, c.load));
  ASSERT_TRUE(cuda.ok()) << cuda.status();
  const Quantization expected = c.load == Quantization::kInt8         ? Quantization::kInt8
                                : c.checkpoint.method == Method::kAwq ? Quantization::kAwq
                                                                      : Quantization::kGptq;
  EXPECT_EQ((*cuda)->quantization(), expected);
  EXPECT_EQ((*cuda)->weight_bytes(),
            *cuda::DeviceWeightBytes(*model.Weights(), dtype, c.load == Quantization::kInt8));
  // The CUDA backend keeps the LM head in its dtype: so does the CPU one here.
  auto cpu = CpuBackend::Create(model.Weights(), {.kv_cache_bytes = 32 << 20,
                                                  .block_size = 16,
                                                  .quantization = c.load,
                                                  .quantize_lm_head = false});
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  ExpectTheCpuLogits(**cuda, **cpu, c.config.vocab_size, index * 100 + (dtype == DType::kBF16),
                     max_nmse, c.name);
}

INSTANTIATE_TEST_SUITE_P(Models, CudaQuantizedVsCpuTest,
                         ::testing::Combine(::testing::Range(0, 7),
                                            ::testing::Values(DType::kBF16, DType::kF16)));

// A real GGUF file made by llama.cpp with a mix of 4-bit and dense projections (the zoo's Q4_K_M:
// layer 0 all Q4_K, layer 1's q/k/v and down dequantized from Q6_K), its Q4_K offsets on the
// device, with and without int8 for the dense ones. Skips without $LLMSERVE_TESTDATA.
TEST(CudaGgufVsCpuTest, AMixedQ4KMFileGivesTheCpuLogits) {
  LLMSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  std::string why;
  const std::string dir = ::llmserve::testing::ModelsDir("gguf-quant-zoo", &why);
  if (dir.empty()) GTEST_SKIP() << why;
  for (const Quantization quantization : {Quantization::kNone, Quantization::kInt8}) {
    absl::StatusOr<std::unique_ptr<ModelWeights>> for_cuda =
        LoadModel(dir + "/zoo-Q4_K_M.gguf", 0, DType::kF32);
    absl::StatusOr<std::unique_ptr<ModelWeights>> for_cpu =
        LoadModel(dir + "/zoo-Q4_K_M.gguf", 0, DType::kF32);
    ASSERT_TRUE(for_cuda.ok() && for_cpu.ok()) << for_cuda.status() << for_cpu.status();
    ASSERT_FALSE((*for_cuda)->layers[0].qkv_int4.empty());
    ASSERT_TRUE((*for_cuda)->layers[1].qkv_int4.empty());
    const int64_t vocab = (*for_cuda)->config.vocab_size;
    auto cuda = CudaBackend::Create(*std::move(for_cuda), Options(DType::kBF16, quantization));
    ASSERT_TRUE(cuda.ok()) << cuda.status();
    auto cpu = CpuBackend::Create(*std::move(for_cpu), {.kv_cache_bytes = 32 << 20,
                                                        .block_size = 16,
                                                        .quantization = quantization,
                                                        .quantize_lm_head = false});
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    // Fewer and shorter requests than above: the emulator runs this model's kernels slowly.
    ExpectTheCpuLogits(**cuda, **cpu, vocab, 7, 1e-3,
                       std::string("zoo-Q4_K_M ") + std::string(QuantizationName(quantization)),
                       /*num_sequences=*/4, /*max_tokens=*/100);
  }
}

}  // namespace
}  // namespace llmserve::worker
