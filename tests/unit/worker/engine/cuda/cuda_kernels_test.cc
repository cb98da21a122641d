// Each CUDA kernel against the CPU backend's kernels (worker/engine/cpu) by normalised mean squared
// error on random inputs, in the style of llama.cpp's test-backend-ops: norms fused with the
// residual add, bias + RoPE + the paged K/V write, the MLP activations, the embedding, and paged
// attention (decode with and without splits, prefill tiles over cached prefixes) for GQA ratios
// 1/3/4, head dims 64/128, block sizes 16/32 and odd lengths.
//
// Tolerances: inputs that the device keeps in 16-bit are rounded the same way for the CPU side,
// so the differences left are the 16-bit rounding of the kernel's own output (relative 2^-9 for
// bf16: an NMSE of about 1e-6) and f32 summation order. NMSE < 1e-5 leaves a margin of ten.
//
// Every test skips, naming why, where no CUDA device exists.

#include <algorithm>
#include <cmath>
#include <numeric>
#include <ostream>
#include <random>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/worker/engine/cuda/cuda_test_util.h"
#include "worker/engine/cpu/kernels.h"
#include "worker/engine/cpu/paged_attention.h"
#include "worker/engine/cuda/attention.h"
#include "worker/engine/cuda/kernels.h"
#include "worker/model/rope.h"

namespace llmserve::worker::cuda {

// Readable parameter names in test output.
void PrintTo(DeviceDType dtype, std::ostream* os) {
  *os << (dtype == DeviceDType::kBF16 ? "bf16" : "f16");
}

namespace {

using testing::Download;
using testing::Download16;
using testing::Nmse;
using testing::Round16;
using testing::Upload;
using testing::Upload16;

constexpr double kMaxNmse = 1e-5;

std::vector<float> RandomVector(std::mt19937& rng, size_t n, float scale = 1.0f) {
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

class AddNormTest : public ::testing::TestWithParam<std::tuple<DeviceDType, bool, int>> {};

TEST_P(AddNormTest, MatchesCpuNorm) {
  LLMSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  const auto [dtype, rms, hidden] = GetParam();
  std::mt19937 rng(hidden + rms);
  const int rows = 7;
  const std::vector<float> x = RandomVector(rng, rows * hidden, 2.0f);
  const std::vector<float> delta = RandomVector(rng, rows * hidden);
  const std::vector<float> delta_bias = RandomVector(rng, hidden, 0.1f);
  const std::vector<float> weight = RandomVector(rng, hidden);
  const std::vector<float> bias = RandomVector(rng, hidden, 0.1f);
  std::vector<float> want_residual = x;
  for (int i = 0; i < rows * hidden; ++i) want_residual[i] += delta[i] + delta_bias[i % hidden];
  std::vector<float> want(rows * hidden);
  const NormKind kind = rms ? NormKind::kRmsNorm : NormKind::kLayerNorm;
  cpu::Norm(kind, want_residual.data(), weight.data(), rms ? nullptr : bias.data(), 1e-5f, rows,
            hidden, want.data());

  DeviceBuffer d_x = Upload(x), d_delta = Upload(delta), d_delta_bias = Upload(delta_bias),
               d_weight = Upload(weight), d_bias = Upload(bias);
  DeviceBuffer d_out = Upload(std::vector<uint16_t>(rows * hidden));
  AddNormParams p = {.residual = d_x.as<float>(),
                     .delta = d_delta.as<float>(),
                     .delta_bias = d_delta_bias.as<float>(),
                     .rows = nullptr,
                     .weight = d_weight.as<float>(),
                     .bias = rms ? nullptr : d_bias.as<float>(),
                     .out = d_out.data(),
                     .num_rows = rows,
                     .hidden = hidden,
                     .eps = 1e-5f,
                     .rms_norm = rms};
  ASSERT_EQ(LaunchAddNorm(dtype, p, nullptr), cudaSuccess);
  EXPECT_LT(Nmse(Download(d_x, rows * hidden), want_residual), 1e-12);
  EXPECT_LT(Nmse(Download16(d_out, rows * hidden, dtype), want), kMaxNmse);

  // The gather form for the final norm: rows 5, 0, 3 of the (now updated) residual.
  const std::vector<int32_t> gather = {5, 0, 3};
  DeviceBuffer d_rows = Upload(gather);
  p.delta = nullptr;
  p.delta_bias = nullptr;
  p.rows = d_rows.as<int32_t>();
  p.num_rows = 3;
  ASSERT_EQ(LaunchAddNorm(dtype, p, nullptr), cudaSuccess);
  std::vector<float> want_gathered;
  for (int32_t r : gather) {
    want_gathered.insert(want_gathered.end(), want.begin() + r * hidden,
                         want.begin() + (r + 1) * hidden);
  }
  EXPECT_LT(Nmse(Download16(d_out, 3 * hidden, dtype), want_gathered), kMaxNmse);
}

INSTANTIATE_TEST_SUITE_P(Shapes, AddNormTest,
                         ::testing::Combine(::testing::Values(DeviceDType::kBF16,
                                                              DeviceDType::kF16),
                                            ::testing::Bool(), ::testing::Values(200, 4096)));

class RopeKvTest : public ::testing::TestWithParam<std::tuple<DeviceDType, int, int, bool>> {};

TEST_P(RopeKvTest, RotatesQueriesAndWritesKvSlots) {
  LLMSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  const auto [dtype, head_dim, block_size, llama3] = GetParam();
  std::mt19937 rng(head_dim * 7 + block_size + llama3);
  ModelConfig config;
  config.head_dim = head_dim;
  config.num_heads = 6;
  config.num_kv_heads = 2;
  config.rope_theta = 500000;
  if (llama3) {
    config.rope_scaling.kind = RopeScaling::Kind::kLlama3;
    config.rope_scaling.factor = 8;
    config.rope_scaling.original_max_position_embeddings = 8192;
  }
  const std::vector<double> inv_freq = RopeInverseFrequencies(config);
  const int tokens = 9, width = (6 + 2 * 2) * head_dim, q_width = 6 * head_dim;
  const int kv_width = 2 * head_dim;
  // One sequence whose tokens sit at scattered positions (up to 1e5: the double angle matters).
  std::vector<int32_t> positions(tokens);
  for (int32_t& p : positions) p = static_cast<int32_t>(rng() % 100000);
  const int32_t num_blocks = 100000 / block_size + 1;
  std::vector<int32_t> block_ids(num_blocks);
  std::iota(block_ids.begin(), block_ids.end(), 0);
  std::shuffle(block_ids.begin(), block_ids.end(), rng);
  const std::vector<float> qkv = RandomVector(rng, tokens * width);
  const std::vector<float> bias = RandomVector(rng, width, 0.1f);

  std::vector<float> want = qkv;
  for (int t = 0; t < tokens; ++t) {
    float* row = want.data() + t * width;
    cpu::AddBias(row, bias.data(), 1, width);
    cpu::ApplyRope(inv_freq, positions[t], 6 + 2, head_dim, row);
  }
  const cpu::PagedKvLayout layout{2, head_dim, block_size};
  const size_t cache_elements = size_t(num_blocks) * 2 * block_size * head_dim;
  DeviceBuffer d_qkv = Upload(qkv), d_bias = Upload(bias), d_inv_freq = Upload(inv_freq),
               d_positions = Upload(positions), d_seq = Upload(std::vector<int32_t>(tokens, 0)),
               d_start = Upload(std::vector<int32_t>{0, num_blocks}), d_blocks = Upload(block_ids),
               d_k = Upload(std::vector<uint16_t>(cache_elements)),
               d_v = Upload(std::vector<uint16_t>(cache_elements));
  ASSERT_EQ(LaunchRopeKv(dtype,
                         {.qkv = d_qkv.as<float>(),
                          .qkv_bias = d_bias.as<float>(),
                          .inv_freq = d_inv_freq.as<double>(),
                          .positions = d_positions.as<int32_t>(),
                          .token_seq = d_seq.as<int32_t>(),
                          .block_table_start = d_start.as<int32_t>(),
                          .block_ids = d_blocks.as<int32_t>(),
                          .k_cache = d_k.data(),
                          .v_cache = d_v.data(),
                          .num_tokens = tokens,
                          .num_heads = 6,
                          .num_kv_heads = 2,
                          .head_dim = head_dim,
                          .block_size = block_size},
                         nullptr),
            cudaSuccess);
  const std::vector<float> got = Download(d_qkv, tokens * width);
  const std::vector<float> k_cache = Download16(d_k, cache_elements, dtype);
  const std::vector<float> v_cache = Download16(d_v, cache_elements, dtype);
  std::vector<float> got_q, want_q, got_kv, want_kv;
  for (int t = 0; t < tokens; ++t) {
    got_q.insert(got_q.end(), got.begin() + t * width, got.begin() + t * width + q_width);
    want_q.insert(want_q.end(), want.begin() + t * width, want.begin() + t * width + q_width);
    const int32_t block = block_ids[positions[t] / block_size];
    for (int h = 0; h < 2; ++h) {
      const int64_t offset = layout.Offset(block, h, positions[t] % block_size);
      for (int i = 0; i < head_dim; ++i) {
        got_kv.push_back(k_cache[offset + i]);
        want_kv.push_back(want[t * width + q_width + h * head_dim + i]);
        got_kv.push_back(v_cache[offset + i]);
        want_kv.push_back(want[t * width + q_width + kv_width + h * head_dim + i]);
      }
    }
  }
  EXPECT_LT(Nmse(got_q, want_q), 1e-10);
  EXPECT_LT(Nmse(got_kv, want_kv), kMaxNmse);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, RopeKvTest,
    ::testing::Combine(::testing::Values(DeviceDType::kBF16, DeviceDType::kF16),
                       ::testing::Values(64, 128), ::testing::Values(16, 32), ::testing::Bool()));

TEST(ActivationTest, MatchesCpuActivations) {
  LLMSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  std::mt19937 rng(3);
  const int tokens = 5, inter = 333;
  for (const DeviceDType dtype : {DeviceDType::kBF16, DeviceDType::kF16}) {
    for (const bool gated : {true, false}) {
      for (const Activation act :
           {Activation::kSilu, Activation::kGeluTanh, Activation::kGeluErf}) {
        const int width = gated ? 2 * inter : inter;
        const std::vector<float> up = RandomVector(rng, tokens * width, 4.0f);
        const std::vector<float> bias = RandomVector(rng, width, 0.1f);
        std::vector<float> biased = up;
        cpu::AddBias(biased.data(), bias.data(), tokens, width);
        std::vector<float> want(tokens * inter);
        if (gated) {
          cpu::GatedActivate(act, biased.data(), tokens, inter, want.data());
        } else {
          cpu::Activate(act, biased.data(), tokens * inter);
          want = biased;
        }
        DeviceBuffer d_up = Upload(up), d_bias = Upload(bias),
                     d_out = Upload(std::vector<uint16_t>(tokens * inter));
        ASSERT_EQ(LaunchActivation(dtype,
                                   {.up = d_up.as<float>(),
                                    .up_bias = d_bias.as<float>(),
                                    .out = d_out.data(),
                                    .num_tokens = tokens,
                                    .intermediate = inter,
                                    .gated = gated,
                                    .activation = static_cast<DeviceActivation>(act)},
                                   nullptr),
                  cudaSuccess);
        EXPECT_LT(Nmse(Download16(d_out, tokens * inter, dtype), want), kMaxNmse)
            << "gated " << gated << " activation " << static_cast<int>(act);
      }
    }
  }
}

TEST(EmbedTest, GathersRowsAndAddsLearnedPositions) {
  LLMSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  std::mt19937 rng(4);
  const int vocab = 50, hidden = 96, max_pos = 40;
  const DeviceDType dtype = DeviceDType::kBF16;
  const std::vector<float> table = Round16(RandomVector(rng, vocab * hidden), dtype);
  const std::vector<float> positions_table = RandomVector(rng, max_pos * hidden);
  const std::vector<int32_t> ids = {3, 49, 0, 3, 17}, positions = {0, 39, 5, 6, 7};
  std::vector<float> want;
  for (size_t t = 0; t < ids.size(); ++t) {
    for (int i = 0; i < hidden; ++i) {
      want.push_back(table[ids[t] * hidden + i] + positions_table[positions[t] * hidden + i]);
    }
  }
  DeviceBuffer d_table = Upload16(table, dtype), d_pos_table = Upload(positions_table),
               d_ids = Upload(ids), d_positions = Upload(positions),
               d_out = Upload(std::vector<float>(want.size()));
  ASSERT_EQ(LaunchEmbed(dtype,
                        {.embedding = d_table.data(),
                         .position_embedding = d_pos_table.as<float>(),
                         .token_ids = d_ids.as<int32_t>(),
                         .positions = d_positions.as<int32_t>(),
                         .residual = d_out.as<float>(),
                         .num_tokens = static_cast<int32_t>(ids.size()),
                         .hidden = hidden},
                        nullptr),
            cudaSuccess);
  EXPECT_LT(Nmse(Download(d_out, want.size()), want), 1e-12);
}

// (dtype, head_dim, GQA group, block_size, decode splits)
class PagedAttentionTest
    : public ::testing::TestWithParam<std::tuple<DeviceDType, int, int, int, int>> {};

TEST_P(PagedAttentionTest, DecodeAndPrefillMatchCpuAttention) {
  LLMSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  const auto [dtype, head_dim, group, block_size, splits] = GetParam();
  std::mt19937 rng(head_dim + 10 * group + 100 * block_size + 1000 * splits);
  const int kv_heads = 2, heads = group * kv_heads;
  const int q_stride = (heads + 2 * kv_heads) * head_dim, out_width = heads * head_dim;
  // Sequences: (tokens already cached, new tokens). Decodes at lengths 1, odd and past several
  // decode chunks and splits; prefill chunks from scratch, after a cached prefix, and longer than
  // one query tile.
  const std::vector<std::pair<int, int>> shapes = {{0, 1},   {4, 1},   {700, 1},  {133, 1}, {0, 37},
                                                   {45, 70}, {300, 1}, {17, 129}, {999, 2}, {0, 1}};
  std::vector<int32_t> positions, token_seq, block_table_start = {0}, block_ids, decode, tiles;
  int32_t blocks_used = 0;
  for (size_t s = 0; s < shapes.size(); ++s) {
    const auto [cached, chunk] = shapes[s];
    const int32_t first = static_cast<int32_t>(positions.size());
    for (int i = 0; i < chunk; ++i) {
      positions.push_back(cached + i);
      token_seq.push_back(static_cast<int32_t>(s));
    }
    if (chunk == 1) {
      decode.push_back(first);
    } else {
      for (int32_t start = 0; start < chunk; start += kPrefillTileQ) {
        tiles.insert(tiles.end(), {static_cast<int32_t>(s), first + start,
                                   std::min(kPrefillTileQ, chunk - start)});
      }
    }
    const int32_t needed = (cached + chunk + block_size - 1) / block_size;
    for (int32_t b = 0; b < needed; ++b) block_ids.push_back(blocks_used++);
    block_table_start.push_back(static_cast<int32_t>(block_ids.size()));
  }
  // Scatter the block ids over a larger cache.
  const int32_t num_blocks = blocks_used + 11;
  std::vector<int32_t> permutation(num_blocks);
  std::iota(permutation.begin(), permutation.end(), 0);
  std::shuffle(permutation.begin(), permutation.end(), rng);
  for (int32_t& b : block_ids) b = permutation[b];

  const int tokens = static_cast<int>(positions.size());
  const cpu::PagedKvLayout layout{kv_heads, head_dim, block_size};
  const size_t cache_elements = size_t(num_blocks) * kv_heads * block_size * head_dim;
  const std::vector<float> k_cache = Round16(RandomVector(rng, cache_elements), dtype);
  const std::vector<float> v_cache = Round16(RandomVector(rng, cache_elements), dtype);
  const std::vector<float> q = RandomVector(rng, size_t(tokens) * q_stride);
  const float scale = static_cast<float>(1.0 / std::sqrt(double(head_dim)));

  std::vector<float> want(size_t(tokens) * out_width), scores(2048);
  for (int t = 0; t < tokens; ++t) {
    const int32_t* blocks = block_ids.data() + block_table_start[token_seq[t]];
    for (int h = 0; h < heads; ++h) {
      cpu::AttendOneHead(layout, blocks, positions[t], h / group,
                         q.data() + t * q_stride + h * head_dim, scale, k_cache.data(),
                         v_cache.data(), scores.data(), want.data() + t * out_width + h * head_dim);
    }
  }

  DeviceBuffer d_q = Upload(q), d_k = Upload16(k_cache, dtype), d_v = Upload16(v_cache, dtype),
               d_positions = Upload(positions), d_seq = Upload(token_seq),
               d_start = Upload(block_table_start), d_blocks = Upload(block_ids),
               d_decode = Upload(decode), d_tiles = Upload(tiles),
               d_out = Upload(std::vector<uint16_t>(size_t(tokens) * out_width)),
               d_partial =
                   Upload(std::vector<float>(decode.size() * heads * kMaxDecodeSplits * head_dim)),
               d_max_sum = Upload(std::vector<float>(decode.size() * heads * kMaxDecodeSplits * 2));
  const PagedAttentionCommon common = {.q = d_q.as<float>(),
                                       .q_stride = q_stride,
                                       .out = d_out.data(),
                                       .out_stride = out_width,
                                       .positions = d_positions.as<int32_t>(),
                                       .token_seq = d_seq.as<int32_t>(),
                                       .block_table_start = d_start.as<int32_t>(),
                                       .block_ids = d_blocks.as<int32_t>(),
                                       .k_cache = d_k.data(),
                                       .v_cache = d_v.data(),
                                       .num_heads = heads,
                                       .num_kv_heads = kv_heads,
                                       .block_size = block_size,
                                       .scale = scale};
  ASSERT_EQ(LaunchDecodeAttention(dtype, head_dim,
                                  {.c = common,
                                   .tokens = d_decode.as<int32_t>(),
                                   .num_tokens = static_cast<int32_t>(decode.size()),
                                   .num_splits = splits,
                                   .partial_out = d_partial.as<float>(),
                                   .partial_max_sum = d_max_sum.as<float>()},
                                  nullptr),
            cudaSuccess);
  ASSERT_EQ(LaunchPrefillAttention(dtype, head_dim,
                                   {.c = common,
                                    .tiles = d_tiles.as<int32_t>(),
                                    .num_tiles = static_cast<int32_t>(tiles.size() / 3)},
                                   nullptr),
            cudaSuccess);
  const std::vector<float> got = Download16(d_out, size_t(tokens) * out_width, dtype);
  // Per token, so that a failure names the decode or prefill path.
  for (int t = 0; t < tokens; ++t) {
    const std::vector<float> got_row(got.begin() + t * out_width,
                                     got.begin() + (t + 1) * out_width);
    const std::vector<float> want_row(want.begin() + t * out_width,
                                      want.begin() + (t + 1) * out_width);
    EXPECT_LT(Nmse(got_row, want_row), kMaxNmse)
        << "token " << t << " of sequence " << token_seq[t] << " at position " << positions[t];
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, PagedAttentionTest,
                         ::testing::Combine(::testing::Values(DeviceDType::kBF16,
                                                              DeviceDType::kF16),
                                            ::testing::Values(64, 128), ::testing::Values(1, 3, 4),
                                            ::testing::Values(16, 32), ::testing::Values(1, 5)));

TEST(AttentionDispatchTest, OnlyHeadDims64And128HaveKernels) {
  EXPECT_TRUE(IsSupportedHeadDim(64));
  EXPECT_TRUE(IsSupportedHeadDim(128));
  EXPECT_FALSE(IsSupportedHeadDim(16));
  EXPECT_FALSE(IsSupportedHeadDim(96));
}

}  // namespace
}  // namespace llmserve::worker::cuda
