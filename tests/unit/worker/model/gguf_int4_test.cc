// GGUF files whose projections are Q4_0, Q4_1 or Q4_K ($LLMSERVE_TESTDATA/models/gguf-quant-zoo,
// made by llama.cpp's llama-quantize) load with those projections kept in 4 bits:
// - a projection is an Int4Matrix exactly when every GGUF tensor fused into it (q/k/v, gate/up)
//   holds 4-bit groups: all of them in the Q4_0/Q4_1 files; none of q/k/v in Q4_K_S (its attn_v
//   is Q5_K); in Q4_K_M layer 0 entirely, layer 1 all but q/k/v and down (Q6_K there);
// - every element of every 4-bit projection, Int4Matrix::Dequantized (one fma: what the kernels
//   compute), is bit for bit the f32 value of the GGUF tensor's own dequantization at the same
//   place (llama's Q/K rows unpermuted), and the projections not in 4 bits are those values too;
// - the config says so (quantization "gguf", group 32, from LoadModelConfig as from the weights;
//   none for a file with no Q4 projection), and GgufRuntimeWeightBytes is what is allocated;
// - the direct decoder refuses other types and rows outside the tensor.
// Skips with a message when LLMSERVE_TESTDATA is unset or lacks the models.

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/testdata_models.h"
#include "worker/model/gguf/gguf_dequantize.h"
#include "worker/model/gguf/gguf_file.h"
#include "worker/model/gguf_weights.h"
#include "worker/model/model_loader.h"

namespace llmserve::worker {
namespace {

using ::llmserve::testing::ModelsDir;

struct Part {
  std::string name;
  int64_t rope_heads = 0;  // llama's Q and K: rows stored in pair order per head
};

// The GGUF tensors of layer i's projections, in LayerWeights' fused order.
std::vector<std::vector<Part>> Projections(const ModelConfig& c, int i) {
  const std::string p = "blk." + std::to_string(i) + ".";
  return {{{p + "attn_q.weight", c.num_heads},
           {p + "attn_k.weight", c.num_kv_heads},
           {p + "attn_v.weight"}},
          {{p + "attn_output.weight"}},
          {{p + "ffn_gate.weight"}, {p + "ffn_up.weight"}},
          {{p + "ffn_down.weight"}}};
}

// GGUF row `row` of a tensor with `heads` heads in pair order: its row in half order.
int64_t UnpermutedRow(int64_t row, int64_t rows, int64_t heads) {
  if (heads == 0) return row;
  const int64_t head_rows = rows / heads, within = row % head_rows;
  return row / head_rows * head_rows + (within % 2) * (head_rows / 2) + within / 2;
}

struct Expectation {
  const char* file;
  // [layer][projection]: kept in 4 bits?
  bool in_4_bits[2][4];
};

TEST(GgufInt4Test, Q4ProjectionsStayIn4BitsAndDequantizeBitForBitAsTheFile) {
  std::string why;
  const std::string dir = ModelsDir("gguf-quant-zoo", &why);
  if (dir.empty()) GTEST_SKIP() << why;
  const Expectation expectations[] = {
      {"zoo-Q4_0.gguf", {{true, true, true, true}, {true, true, true, true}}},
      {"zoo-Q4_1.gguf", {{true, true, true, true}, {true, true, true, true}}},
      {"zoo-Q4_K_S.gguf", {{false, true, true, true}, {false, true, true, true}}},
      {"zoo-Q4_K_M.gguf", {{true, true, true, true}, {false, true, true, false}}},
  };
  for (const Expectation& e : expectations) {
    SCOPED_TRACE(e.file);
    const std::string path = dir + "/" + e.file;
    absl::StatusOr<std::unique_ptr<gguf::GgufFile>> file = gguf::GgufFile::Open(path);
    ASSERT_TRUE(file.ok()) << file.status();
    absl::StatusOr<ModelConfig> config = LoadModelConfig(path, 0);
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_EQ(config->quantization.method, CheckpointQuantization::Method::kGguf);
    EXPECT_EQ(config->quantization.group_size, 32);
    absl::StatusOr<std::unique_ptr<ModelWeights>> weights = LoadModel(path, 0, DType::kF32);
    ASSERT_TRUE(weights.ok()) << weights.status();
    const ModelWeights& w = **weights;
    EXPECT_EQ(w.config.quantization.method, CheckpointQuantization::Method::kGguf);
    EXPECT_EQ(static_cast<int64_t>(w.SizeBytes()),
              GgufRuntimeWeightBytes(**file, *config, DType::kF32));
    ASSERT_EQ(w.config.num_layers, 2);
    for (int layer = 0; layer < 2; ++layer) {
      const LayerWeights& l = w.layers[layer];
      const std::pair<const Int4Matrix*, const Tensor*> loaded[] = {{&l.qkv_int4, &l.qkv_weight},
                                                                    {&l.o_int4, &l.o_weight},
                                                                    {&l.up_int4, &l.up_weight},
                                                                    {&l.down_int4, &l.down_weight}};
      const std::vector<std::vector<Part>> projections = Projections(w.config, layer);
      for (int p = 0; p < 4; ++p) {
        const auto [int4, dense] = loaded[p];
        SCOPED_TRACE(projections[p][0].name);
        ASSERT_EQ(!int4->empty(), e.in_4_bits[layer][p]);
        ASSERT_EQ(dense->empty(), e.in_4_bits[layer][p]);
        if (!int4->empty()) {
          EXPECT_EQ(int4->group_size, 32);
          EXPECT_TRUE(int4->zeros.empty());
          ASSERT_EQ(int4->offsets.size(), int4->scales.size());
        }
        int64_t first_row = 0;
        for (const Part& part : projections[p]) {
          const gguf::GgufTensor* tensor = (*file)->FindTensor(part.name);
          ASSERT_NE(tensor, nullptr);
          absl::StatusOr<std::vector<float>> values = gguf::DequantizeTensor(*tensor);
          ASSERT_TRUE(values.ok()) << values.status();
          const int64_t rows = tensor->num_rows(), cols = tensor->row_length();
          for (int64_t row = 0; row < rows; ++row) {
            const int64_t to = first_row + UnpermutedRow(row, rows, part.rope_heads);
            for (int64_t c = 0; c < cols; ++c) {
              const float want = (*values)[row * cols + c];
              const float got =
                  int4->empty() ? dense->data_as<float>()[to * cols + c] : int4->Dequantized(to, c);
              ASSERT_EQ(got, want) << part.name << " row " << row << " column " << c;
            }
          }
          first_row += rows;
        }
      }
    }
  }
}

TEST(GgufInt4Test, AFileWithoutQ4ProjectionsIsNotQuantized) {
  std::string why;
  const std::string dir = ModelsDir("gguf-quant-zoo", &why);
  if (dir.empty()) GTEST_SKIP() << why;
  for (const char* name : {"zoo-Q8_0.gguf", "zoo-Q5_K_S.gguf", "zoo-f32.gguf"}) {
    absl::StatusOr<std::unique_ptr<ModelWeights>> weights =
        LoadModel(dir + "/" + name, 0, DType::kF32);
    ASSERT_TRUE(weights.ok()) << weights.status();
    EXPECT_FALSE((*weights)->config.quantization.quantized()) << name;
    for (const LayerWeights& l : (*weights)->layers) {
      EXPECT_TRUE(l.qkv_int4.empty() && l.o_int4.empty() && l.up_int4.empty() &&
                  l.down_int4.empty())
          << name;
    }
  }
}

TEST(GgufInt4Test, TheDecoderRefusesOtherTypesAndRowsOutsideTheTensor) {
  std::string why;
  const std::string dir = ModelsDir("gguf-quant-zoo", &why);
  if (dir.empty()) GTEST_SKIP() << why;
  absl::StatusOr<std::unique_ptr<gguf::GgufFile>> file =
      gguf::GgufFile::Open(dir + "/zoo-Q4_K_M.gguf");
  ASSERT_TRUE(file.ok()) << file.status();
  const gguf::GgufTensor* q6 = (*file)->FindTensor("output.weight");  // Q6_K
  const gguf::GgufTensor* q4 = (*file)->FindTensor("blk.0.attn_q.weight");
  ASSERT_NE(q6, nullptr);
  ASSERT_NE(q4, nullptr);
  std::vector<uint8_t> packed(q4->row_length() / 2);
  std::vector<float> scales(q4->row_length() / 32), offsets(q4->row_length() / 32);
  absl::Status status = gguf::Int4GroupsOfRow(*q6, 0, packed.data(), scales.data(), offsets.data());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("is Q6_K, not a type of 4-bit groups"), std::string::npos)
      << status;
  status = gguf::Int4GroupsOfRow(*q4, q4->num_rows(), packed.data(), scales.data(), offsets.data());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      gguf::Int4GroupsOfRow(*q4, q4->num_rows() - 1, packed.data(), scales.data(), offsets.data())
          .ok());
}

}  // namespace
}  // namespace llmserve::worker
