// ModelConfigFromLlama2c / LoadLlama2cWeights on tiny checkpoints written here in run.c's layout:
// every array lands in its runtime tensor (wq/wk rows permuted from pairs to halves, w1/w3 fused
// as gate/up, an unshared classifier read past the RoPE tables), and hostile headers (absurd,
// negative or inconsistent dimensions, a size other than the header's, a newer export's magic)
// are errors naming the field, before anything large is allocated.

#include "worker/model/llama2c_checkpoint.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/scoped_temp_dir.h"
#include "worker/model/auto_dtype.h"
#include "worker/model/model_loader.h"

namespace llmserve::worker {
namespace {

struct TinyHeader {
  int32_t dim = 8, hidden_dim = 12, n_layers = 2, n_heads = 2, n_kv_heads = 1, vocab_size = 16,
          seq_len = 4;
};

class Llama2cCheckpointTest : public ::testing::Test {
 protected:
  // Writes a checkpoint for `h` (with the RoPE tables when `tables` and, when vocab_size < 0, the
  // classifier), minus `cut` bytes at the end. Element i of array a (in run.c's order) is
  // a * 1000 + i, so that a test can tell where each element came from.
  std::string Write(const TinyHeader& h, bool tables = true, int64_t cut = 0,
                    const std::string& name = "model.bin") {
    const int64_t dim = h.dim, hd = h.dim / h.n_heads, layers = h.n_layers, hidden = h.hidden_dim;
    const int64_t q = h.n_heads * hd, kv = h.n_kv_heads * hd, vocab = std::abs(h.vocab_size);
    std::vector<int64_t> sizes = {vocab * dim,
                                  layers * dim,
                                  layers * q * dim,
                                  layers * kv * dim,
                                  layers * kv * dim,
                                  layers * dim * q,
                                  layers * dim,
                                  layers * hidden * dim,
                                  layers * dim * hidden,
                                  layers * hidden * dim,
                                  dim};
    if (tables) sizes.insert(sizes.end(), {h.seq_len * hd / 2, h.seq_len * hd / 2});
    if (h.vocab_size < 0) sizes.push_back(vocab * dim);
    std::string bytes(sizeof(TinyHeader), '\0');
    std::memcpy(bytes.data(), &h, sizeof(TinyHeader));
    for (size_t a = 0; a < sizes.size(); ++a) {
      for (int64_t i = 0; i < sizes[a]; ++i) {
        const float value = static_cast<float>(a * 1000 + i);
        char raw[4];
        std::memcpy(raw, &value, 4);
        bytes.append(raw, 4);
      }
    }
    bytes.resize(bytes.size() - cut);
    return WriteBytes(bytes, name);
  }

  std::string WriteBytes(const std::string& bytes, const std::string& name = "model.bin") {
    const std::string path = temp_.File(name);
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }

  // The message of ModelConfigFromLlama2c's error, or "ok".
  std::string ConfigError(const std::string& path) {
    absl::StatusOr<ModelConfig> config = ModelConfigFromLlama2c(path);
    return config.ok() ? "ok" : std::string(config.status().message());
  }

  ::llmserve::testing::ScopedTempDir temp_{"llama2c"};
};

float At(const Tensor& t, int64_t row, int64_t col) {
  return t.data_as<float>()[row * t.shape().back() + col];
}

TEST_F(Llama2cCheckpointTest, EveryArrayLandsInItsTensorWithQkRowsAsHalves) {
  const std::string path = Write(TinyHeader{});
  absl::StatusOr<ModelConfig> config = ModelConfigFromLlama2c(path);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->head_dim, 4);
  EXPECT_TRUE(config->tied_embeddings);
  absl::StatusOr<std::unique_ptr<ModelWeights>> w = LoadLlama2cWeights(path, *config, {});
  ASSERT_TRUE(w.ok()) << w.status();
  const LayerWeights& l1 = (*w)->layers[1];
  EXPECT_EQ(At((*w)->token_embedding, 3, 2), 0 * 1000 + 3 * 8 + 2);
  EXPECT_EQ(At(l1.attn_norm_weight, 0, 5), 1000 + 8 + 5);
  // wq of layer 1, head 1: runtime row 4 + j * 2 + i holds llama2.c row 4 + 2i + j.
  const int64_t wq = 2000 + 8 * 8;                               // layer 1 starts after 8 rows of 8
  EXPECT_EQ(At(l1.qkv_weight, 4 + 0, 3), wq + (4 + 0) * 8 + 3);  // i 0, j 0
  EXPECT_EQ(At(l1.qkv_weight, 4 + 1, 3), wq + (4 + 2) * 8 + 3);  // i 1, j 0
  EXPECT_EQ(At(l1.qkv_weight, 4 + 2, 3), wq + (4 + 1) * 8 + 3);  // i 0, j 1
  EXPECT_EQ(At(l1.qkv_weight, 4 + 3, 3), wq + (4 + 3) * 8 + 3);  // i 1, j 1
  const int64_t wk = 3000 + 4 * 8;
  EXPECT_EQ(At(l1.qkv_weight, 8 + 1, 0), wk + 2 * 8);  // k rows follow q's, permuted too
  const int64_t wv = 4000 + 4 * 8;
  EXPECT_EQ(At(l1.qkv_weight, 12 + 1, 0), wv + 1 * 8);  // v rows are not permuted
  EXPECT_EQ(At(l1.o_weight, 2, 7), 5000 + 64 + 2 * 8 + 7);
  EXPECT_EQ(At(l1.mlp_norm_weight, 0, 1), 6000 + 8 + 1);
  EXPECT_EQ(At(l1.up_weight, 1, 0), 7000 + 96 + 8);         // w1 (gate) rows first
  EXPECT_EQ(At(l1.up_weight, 12 + 1, 0), 9000 + 96 + 8);    // then w3 (up)
  EXPECT_EQ(At(l1.down_weight, 1, 2), 8000 + 96 + 12 + 2);  // w2 [dim, hidden]
  EXPECT_EQ(At((*w)->final_norm_weight, 0, 7), 10000 + 7);
  EXPECT_TRUE((*w)->lm_head.empty());
}

TEST_F(Llama2cCheckpointTest, AnUnsharedClassifierIsReadPastTheRopeTablesOrWithoutThem) {
  TinyHeader h;
  h.vocab_size = -16;
  for (const bool tables : {true, false}) {
    const std::string path = Write(h, tables);
    absl::StatusOr<ModelConfig> config = ModelConfigFromLlama2c(path);
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_FALSE(config->tied_embeddings);
    EXPECT_EQ(config->vocab_size, 16);
    absl::StatusOr<std::unique_ptr<ModelWeights>> w = LoadLlama2cWeights(path, *config, {});
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_EQ(At((*w)->lm_head, 1, 1), (tables ? 13000 : 11000) + 9) << tables;
  }
}

TEST_F(Llama2cCheckpointTest, ASizeOtherThanTheHeadersIsRefused) {
  EXPECT_NE(ConfigError(Write(TinyHeader{}, true, 4)).find("describes a file of"),
            std::string::npos);
  EXPECT_NE(ConfigError(Write(TinyHeader{}, true, -4)).find("describes a file of"),
            std::string::npos);
  EXPECT_NE(ConfigError(WriteBytes("abc")).find("shorter than a llama2.c header"),
            std::string::npos);
  TinyHeader h;
  h.n_layers = 3;  // the file holds two layers
  EXPECT_NE(ConfigError(WriteBytes(std::string(reinterpret_cast<const char*>(&h), sizeof(h)) +
                                   std::string(4000, '\0')))
                .find("n_layers 3"),
            std::string::npos);
}

TEST_F(Llama2cCheckpointTest, AbsurdNegativeOrInconsistentHeaderValuesNameTheField) {
  auto error = [&](void (*edit)(TinyHeader*)) {
    TinyHeader h;
    edit(&h);
    std::string bytes(sizeof(h), '\0');
    std::memcpy(bytes.data(), &h, sizeof(h));
    return ConfigError(WriteBytes(bytes + std::string(64, '\0')));
  };
  EXPECT_NE(error([](TinyHeader* h) { h->dim = 1 << 30; }).find("dim = 1073741824"),
            std::string::npos);
  EXPECT_NE(error([](TinyHeader* h) { h->n_layers = -1; }).find("n_layers = -1"),
            std::string::npos);
  EXPECT_NE(error([](TinyHeader* h) { h->hidden_dim = 0; }).find("hidden_dim = 0"),
            std::string::npos);
  EXPECT_NE(error([](TinyHeader* h) { h->n_kv_heads = 3; }).find("n_kv_heads = 3"),
            std::string::npos);
  EXPECT_NE(error([](TinyHeader* h) { h->vocab_size = 0; }).find("vocab_size = 0"),
            std::string::npos);
  EXPECT_NE(error([](TinyHeader* h) { h->vocab_size = INT32_MIN; }).find("vocab_size"),
            std::string::npos);
  EXPECT_NE(error([](TinyHeader* h) { h->seq_len = INT32_MAX; }).find("seq_len"),
            std::string::npos);
  EXPECT_NE(error([](TinyHeader* h) { h->n_heads = 3; }).find("dim = 8 is not n_heads = 3"),
            std::string::npos);
  EXPECT_NE(error([](TinyHeader* h) {
              h->n_heads = 4, h->n_kv_heads = 3;
            }).find("not a multiple of n_kv_heads"),
            std::string::npos);
  EXPECT_NE(error([](TinyHeader* h) { h->dim = 6, h->n_heads = 2; }).find("even size"),
            std::string::npos);
  // The largest values the bounds allow still describe a size that int64 holds.
  EXPECT_NE(error([](TinyHeader* h) {
              h->dim = 1 << 20, h->hidden_dim = 1 << 22, h->n_layers = 1024, h->n_heads = 1024,
              h->n_kv_heads = 1024, h->vocab_size = -(1 << 24), h->seq_len = 1 << 20;
            }).find("describes a file of"),
            std::string::npos);
}

TEST_F(Llama2cCheckpointTest, NewerExportsAreRefusedByVersion) {
  const int32_t header[7] = {0x616b3432, 2, 0, 0, 0, 0, 0};
  absl::StatusOr<ModelConfig> config =
      ModelConfigFromLlama2c(WriteBytes(std::string(reinterpret_cast<const char*>(header), 28)));
  EXPECT_EQ(config.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(config.status().message().find("export version 2"), std::string::npos);
}

TEST_F(Llama2cCheckpointTest, PyTorchBinFilesAreRefusedAsWhatTheyAre) {
  // A zip archive (torch.save since 1.6) and a protocol-2 pickle (before it), padded past a header.
  for (const std::string& start : {std::string("PK\x03\x04", 4), std::string("\x80\x02", 2)}) {
    const std::string message = ConfigError(WriteBytes(start + std::string(64, '\0'), "torch.bin"));
    EXPECT_NE(message.find("a PyTorch checkpoint"), std::string::npos) << message;
    EXPECT_NE(message.find("safetensors"), std::string::npos) << message;
  }
}

TEST_F(Llama2cCheckpointTest, WeightsThatDoNotFitInMemoryAreRefusedBeforeLoading) {
  const std::string path = Write(TinyHeader{});
  absl::StatusOr<ModelConfig> config = ModelConfigFromLlama2c(path);
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<std::unique_ptr<ModelWeights>> w =
      LoadLlama2cWeights(path, *config, {.memory_limit_bytes = 1000});
  EXPECT_EQ(w.status().code(), absl::StatusCode::kResourceExhausted) << w.status();
}

TEST_F(Llama2cCheckpointTest, DetectModelFormatAndLoadModelTakeABinFile) {
  const std::string path = Write(TinyHeader{});
  EXPECT_EQ(*DetectModelFormat(path), ModelFormat::kLlama2c);
  absl::StatusOr<std::unique_ptr<ModelWeights>> w = LoadModel(path, 0, DType::kF16);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ((*w)->dtype, DType::kF16);
  EXPECT_EQ((*w)->config.max_model_len, 4);
  EXPECT_FALSE(LoadModel(path, 5, DType::kF32).ok());  // past seq_len
  // --dtype auto: the checkpoint's f32 (f16 on CUDA, as for any f32 checkpoint).
  EXPECT_EQ(*ResolveDTypeFlag("auto", path, "cpu"), DType::kF32);
  EXPECT_EQ(*ResolveDTypeFlag("auto", path, "cuda"), DType::kF16);
}

TEST_F(Llama2cCheckpointTest, TheTokenizerIsTheModelFileNextToIt) {
  const std::string path = Write(TinyHeader{}, true, 0, "stories.bin");
  std::string why;
  EXPECT_EQ(FindLlama2cTokenizer(path, &why), "");
  EXPECT_NE(why.find("no SentencePiece .model"), std::string::npos);
  WriteBytes("", "tok512.model");
  EXPECT_EQ(FindLlama2cTokenizer(path, &why), temp_.File("tok512.model"));  // the only one
  WriteBytes("", "other.model");
  EXPECT_EQ(FindLlama2cTokenizer(path, &why), "");
  EXPECT_NE(why.find("2 .model files"), std::string::npos);
  WriteBytes("", "tokenizer.model");
  EXPECT_EQ(FindLlama2cTokenizer(path, &why), temp_.File("tokenizer.model"));
  WriteBytes("", "stories.model");
  EXPECT_EQ(FindLlama2cTokenizer(path, &why), temp_.File("stories.model"));
}

}  // namespace
}  // namespace llmserve::worker
