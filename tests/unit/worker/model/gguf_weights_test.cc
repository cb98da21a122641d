// LoadModel on GGUF files: a random model written as a Hugging Face directory and as a GGUF file
// the way llama.cpp's converter lays it out (its tensor names, GGUF shapes, Q/K rows permuted into
// adjacent-pair order for `llama`) loads into byte-identical runtime weights either way, for
// llama (with and without q/k/v biases), qwen2 and gpt2; and the loader's errors (missing,
// misshapen and unused tensors, a model larger than memory, context lengths, paths that are not
// models) name what is wrong.

#include "worker/model/gguf_weights.h"

#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/gguf_writer.h"
#include "tests/testing/scoped_temp_dir.h"
#include "worker/model/model_loader.h"
#include "worker/model/model_writer.h"

namespace llmserve::worker {
namespace {

using ::llmserve::testing::GgufBytes;
using ::llmserve::testing::GgufWriter;
using ::testing::HasSubstr;

ModelConfig LlamaConfig(const std::string& architecture, bool qkv_bias) {
  ModelConfig c;
  c.architecture = architecture;
  c.family = ModelFamily::kLlama;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 8;
  c.vocab_size = 40;
  c.max_position_embeddings = c.max_model_len = 64;
  c.norm_eps = 1e-5;
  c.qkv_bias = qkv_bias;
  // Llama's attention_bias covers o_proj too; Qwen2 has q/k/v biases only.
  c.o_bias = qkv_bias && architecture == "LlamaForCausalLM";
  c.tied_embeddings = false;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  return c;
}

ModelConfig Gpt2Config() {
  ModelConfig c;
  c.architecture = "GPT2LMHeadModel";
  c.family = ModelFamily::kGpt2;
  c.hidden_size = 32;
  c.intermediate_size = 128;
  c.num_layers = 2;
  c.num_heads = c.num_kv_heads = 4;
  c.head_dim = 8;
  c.vocab_size = 40;
  c.max_position_embeddings = c.max_model_len = 64;
  c.norm = NormKind::kLayerNorm;
  c.activation = Activation::kGeluTanh;
  c.gated_mlp = false;
  c.position = PositionKind::kLearned;
  c.qkv_bias = c.o_bias = c.mlp_bias = c.norm_bias = true;
  c.tied_embeddings = true;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  return c;
}

// Rows [first, first + count) of a runtime tensor ([rows, cols] or a vector of `rows` values).
std::vector<float> Rows(const Tensor& t, int64_t first, int64_t count) {
  const int64_t cols = t.shape().size() == 1 ? 1 : t.shape()[1];
  const float* data = t.data_as<float>() + first * cols;
  return std::vector<float>(data, data + count * cols);
}

// llama.cpp's LlamaModel.permute: halves -> adjacent pairs, within each of `heads` heads.
std::vector<float> PermuteToPairs(const std::vector<float>& rows, int64_t heads, int64_t cols) {
  const int64_t n = static_cast<int64_t>(rows.size()) / cols, head_rows = n / heads;
  std::vector<float> out(rows.size());
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < head_rows / 2; ++i) {
      for (int64_t j = 0; j < 2; ++j) {
        const int64_t to = h * head_rows + 2 * i + j, from = h * head_rows + j * head_rows / 2 + i;
        std::copy_n(rows.data() + from * cols, cols, out.data() + to * cols);
      }
    }
  }
  return out;
}

// The GGUF encoding of `values` as F32, or as F16 when `f16`.
std::string Encode(const std::vector<float>& values, bool f16) {
  GgufBytes bytes;
  for (float v : values) {
    if (f16) {
      bytes.U16(FloatToHalf(v));
    } else {
      bytes.F32(v);
    }
  }
  return bytes.str();
}

// Writes `w` (f32 runtime weights) as llama.cpp would: `arch` keys and tensor names. Matrices in
// F16 when `f16`. `skip` leaves one tensor out; `extra` adds one.
class GgufFromWeights {
 public:
  GgufFromWeights(const ModelWeights& w, const std::string& arch, bool f16 = false)
      : w_(w), arch_(arch), f16_(f16) {}

  std::string skip;
  bool extra = false;
  // The shape written for blk.0.ffn_down.weight, when set.
  std::vector<uint64_t> down_dims;

  std::string Build() {
    const ModelConfig& c = w_.config;
    GgufWriter g;
    g.AddString("general.architecture", arch_);
    g.AddU32(arch_ + ".context_length", static_cast<uint32_t>(c.max_position_embeddings));
    g.AddU32(arch_ + ".embedding_length", static_cast<uint32_t>(c.hidden_size));
    g.AddU32(arch_ + ".feed_forward_length", static_cast<uint32_t>(c.intermediate_size));
    g.AddU32(arch_ + ".block_count", static_cast<uint32_t>(c.num_layers));
    g.AddU32(arch_ + ".attention.head_count", static_cast<uint32_t>(c.num_heads));
    g.AddU32(arch_ + ".attention.head_count_kv", static_cast<uint32_t>(c.num_kv_heads));
    g.AddF32(arch_ + (arch_ == "gpt2" ? ".attention.layer_norm_epsilon"
                                      : ".attention.layer_norm_rms_epsilon"),
             static_cast<float>(c.norm_eps));
    g.AddU32("tokenizer.ggml.bos_token_id", 1).AddU32("tokenizer.ggml.eos_token_id", 2);
    const int64_t h = c.hidden_size, q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
    const int64_t inter = c.intermediate_size;
    Add(g, "token_embd.weight", w_.token_embedding, 0, c.vocab_size);
    if (arch_ == "gpt2") {
      Add(g, "position_embd.weight", w_.position_embedding, 0, c.max_position_embeddings, false);
    }
    for (int i = 0; i < c.num_layers; ++i) {
      const LayerWeights& l = w_.layers[i];
      const std::string p = absl::StrCat("blk.", i, ".");
      Add(g, p + "attn_norm.weight", l.attn_norm_weight);
      Add(g, p + "ffn_norm.weight", l.mlp_norm_weight);
      if (arch_ == "gpt2") {
        Add(g, p + "attn_norm.bias", l.attn_norm_bias);
        Add(g, p + "ffn_norm.bias", l.mlp_norm_bias);
        Add(g, p + "attn_qkv.weight", l.qkv_weight, 0, 3 * h);
        Add(g, p + "attn_qkv.bias", l.qkv_bias);
        Add(g, p + "attn_output.bias", l.o_bias);
        Add(g, p + "ffn_up.weight", l.up_weight, 0, inter);
        Add(g, p + "ffn_up.bias", l.up_bias);
        Add(g, p + "ffn_down.bias", l.down_bias);
      } else {
        const bool permute = arch_ == "llama";
        Add(g, p + "attn_q.weight", l.qkv_weight, 0, q, true, permute ? c.num_heads : 0);
        Add(g, p + "attn_k.weight", l.qkv_weight, q, kv, true, permute ? c.num_kv_heads : 0);
        Add(g, p + "attn_v.weight", l.qkv_weight, q + kv, kv);
        if (c.qkv_bias) {
          AddVector(g, p + "attn_q.bias", Rows(l.qkv_bias, 0, q), permute ? c.num_heads : 0);
          AddVector(g, p + "attn_k.bias", Rows(l.qkv_bias, q, kv), permute ? c.num_kv_heads : 0);
          AddVector(g, p + "attn_v.bias", Rows(l.qkv_bias, q + kv, kv), 0);
        }
        if (c.o_bias) Add(g, p + "attn_output.bias", l.o_bias);
        Add(g, p + "ffn_gate.weight", l.up_weight, 0, inter);
        Add(g, p + "ffn_up.weight", l.up_weight, inter, inter);
      }
      Add(g, p + "attn_output.weight", l.o_weight, 0, h);
      Add(g, p + "ffn_down.weight", l.down_weight, 0, h);
    }
    Add(g, "output_norm.weight", w_.final_norm_weight);
    if (arch_ == "gpt2") Add(g, "output_norm.bias", w_.final_norm_bias);
    if (!w_.lm_head.empty()) Add(g, "output.weight", w_.lm_head, 0, c.vocab_size);
    if (extra) Add(g, "blk.0.attn_rot_embd", w_.final_norm_weight);
    return g.Build();
  }

 private:
  // A vector (norm, bias) when `count` is 0; otherwise rows [first, first + count) of a matrix,
  // permuted into pairs over `heads` heads when > 0.
  void Add(GgufWriter& g, const std::string& name, const Tensor& t, int64_t first = 0,
           int64_t count = 0, bool may_f16 = true, int64_t heads = 0) {
    if (name == skip) return;
    if (count == 0) {
      AddVector(g, name, Rows(t, 0, t.shape()[0]), 0);
      return;
    }
    const int64_t cols = t.shape()[1];
    std::vector<float> rows = Rows(t, first, count);
    if (heads > 0) rows = PermuteToPairs(rows, heads, cols);
    std::vector<uint64_t> dims = {static_cast<uint64_t>(cols), static_cast<uint64_t>(count)};
    if (name == "blk.0.ffn_down.weight" && !down_dims.empty()) dims = down_dims;
    const bool f16 = f16_ && may_f16;
    g.AddTensor({name, dims, f16 ? ::llmserve::testing::kGgmlF16 : ::llmserve::testing::kGgmlF32,
                 Encode(rows, f16), std::nullopt});
  }
  void AddVector(GgufWriter& g, const std::string& name, const std::vector<float>& values,
                 int64_t heads) {
    const std::vector<float> v = heads > 0 ? PermuteToPairs(values, heads, 1) : values;
    g.AddTensor({name, {v.size()}, ::llmserve::testing::kGgmlF32, Encode(v, false), std::nullopt});
  }

  const ModelWeights& w_;
  std::string arch_;
  bool f16_;
};

void ExpectSameTensor(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.empty(), b.empty()) << what;
  ASSERT_EQ(a.shape(), b.shape()) << what;
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  // An absent tensor has no data pointer, and memcmp's arguments must not be null.
  if (a.empty()) return;
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.SizeBytes()), 0) << what << " differs";
}

void ExpectSameWeights(const ModelWeights& a, const ModelWeights& b) {
  ExpectSameTensor(a.token_embedding, b.token_embedding, "token_embedding");
  ExpectSameTensor(a.position_embedding, b.position_embedding, "position_embedding");
  ExpectSameTensor(a.final_norm_weight, b.final_norm_weight, "final_norm_weight");
  ExpectSameTensor(a.final_norm_bias, b.final_norm_bias, "final_norm_bias");
  ExpectSameTensor(a.lm_head, b.lm_head, "lm_head");
  ASSERT_EQ(a.layers.size(), b.layers.size());
  for (size_t i = 0; i < a.layers.size(); ++i) {
    const LayerWeights &x = a.layers[i], &y = b.layers[i];
    const std::string p = absl::StrCat("layer ", i, " ");
    ExpectSameTensor(x.attn_norm_weight, y.attn_norm_weight, p + "attn_norm_weight");
    ExpectSameTensor(x.attn_norm_bias, y.attn_norm_bias, p + "attn_norm_bias");
    ExpectSameTensor(x.qkv_weight, y.qkv_weight, p + "qkv_weight");
    ExpectSameTensor(x.qkv_bias, y.qkv_bias, p + "qkv_bias");
    ExpectSameTensor(x.o_weight, y.o_weight, p + "o_weight");
    ExpectSameTensor(x.o_bias, y.o_bias, p + "o_bias");
    ExpectSameTensor(x.mlp_norm_weight, y.mlp_norm_weight, p + "mlp_norm_weight");
    ExpectSameTensor(x.mlp_norm_bias, y.mlp_norm_bias, p + "mlp_norm_bias");
    ExpectSameTensor(x.up_weight, y.up_weight, p + "up_weight");
    ExpectSameTensor(x.up_bias, y.up_bias, p + "up_bias");
    ExpectSameTensor(x.down_weight, y.down_weight, p + "down_weight");
    ExpectSameTensor(x.down_bias, y.down_bias, p + "down_bias");
  }
}

class GgufWeightsTest : public ::testing::Test {
 protected:
  // The model of `config` as a directory, loaded in `dtype`.
  std::unique_ptr<ModelWeights> Directory(const ModelConfig& config, DType dtype = DType::kF32) {
    const std::string dir = temp_.File(absl::StrCat("dir", ++count_));
    EXPECT_TRUE(WriteRandomModel(config, {.seed = 7}, dir).ok());
    absl::StatusOr<std::unique_ptr<ModelWeights>> weights = LoadModel(dir, 0, dtype);
    EXPECT_TRUE(weights.ok()) << weights.status();
    return weights.ok() ? *std::move(weights) : nullptr;
  }
  std::string WriteFile(const std::string& bytes, const std::string& name = "") {
    const std::string path =
        temp_.File(name.empty() ? absl::StrCat("model", ++count_, ".gguf") : name);
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }

  ::llmserve::testing::ScopedTempDir temp_{"gguf_weights"};
  int count_ = 0;
};

TEST_F(GgufWeightsTest, LlamaLoadsAsTheSameWeightsWithQAndKRowsPermutedBack) {
  for (const bool bias : {false, true}) {
    SCOPED_TRACE(bias ? "with q/k/v biases" : "no biases");
    const std::unique_ptr<ModelWeights> dir = Directory(LlamaConfig("LlamaForCausalLM", bias));
    ASSERT_NE(dir, nullptr);
    const std::string path = WriteFile(GgufFromWeights(*dir, "llama").Build());
    absl::StatusOr<std::unique_ptr<ModelWeights>> gguf = LoadModel(path, 0, DType::kF32);
    ASSERT_TRUE(gguf.ok()) << gguf.status();
    EXPECT_EQ((*gguf)->config.architecture, "LlamaForCausalLM");
    EXPECT_EQ((*gguf)->config.qkv_bias, bias);
    ExpectSameWeights(*dir, **gguf);
  }
}

TEST_F(GgufWeightsTest, Qwen2KeepsItsRowOrderAndBiases) {
  const std::unique_ptr<ModelWeights> dir = Directory(LlamaConfig("Qwen2ForCausalLM", true));
  ASSERT_NE(dir, nullptr);
  const std::string path = WriteFile(GgufFromWeights(*dir, "qwen2").Build());
  absl::StatusOr<std::unique_ptr<ModelWeights>> gguf = LoadModel(path, 0, DType::kF32);
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  ExpectSameWeights(*dir, **gguf);
}

TEST_F(GgufWeightsTest, Gpt2LoadsItsFusedProjectionsPositionsAndBiases) {
  const std::unique_ptr<ModelWeights> dir = Directory(Gpt2Config());
  ASSERT_NE(dir, nullptr);
  const std::string path = WriteFile(GgufFromWeights(*dir, "gpt2").Build());
  absl::StatusOr<std::unique_ptr<ModelWeights>> gguf = LoadModel(path, 0, DType::kF32);
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  EXPECT_TRUE((*gguf)->config.tied_embeddings);
  ExpectSameWeights(*dir, **gguf);
}

TEST_F(GgufWeightsTest, F16TensorsLoadAsTheSameF16Weights) {
  const std::unique_ptr<ModelWeights> f32 = Directory(LlamaConfig("LlamaForCausalLM", false));
  ASSERT_NE(f32, nullptr);
  const std::string path = WriteFile(GgufFromWeights(*f32, "llama", /*f16=*/true).Build());
  // The directory's f32 weights rounded to f16 at load, and the GGUF's f16 values, are one thing.
  const std::unique_ptr<ModelWeights> dir =
      Directory(LlamaConfig("LlamaForCausalLM", false), DType::kF16);
  absl::StatusOr<std::unique_ptr<ModelWeights>> gguf = LoadModel(path, 0, DType::kF16);
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  ExpectSameWeights(*dir, **gguf);
}

TEST_F(GgufWeightsTest, ErrorsNameTheTensor) {
  const std::unique_ptr<ModelWeights> dir = Directory(LlamaConfig("LlamaForCausalLM", false));
  ASSERT_NE(dir, nullptr);
  GgufFromWeights missing(*dir, "llama");
  missing.skip = "blk.1.ffn_up.weight";
  absl::StatusOr<std::unique_ptr<ModelWeights>> loaded =
      LoadModel(WriteFile(missing.Build()), 0, DType::kF32);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(loaded.status().message(),
              HasSubstr("tensor 'blk.1.ffn_up.weight' [32, 48] is missing"));

  GgufFromWeights misshapen(*dir, "llama");
  misshapen.down_dims = {32, 48};
  loaded = LoadModel(WriteFile(misshapen.Build()), 0, DType::kF32);
  EXPECT_THAT(loaded.status().message(),
              HasSubstr("tensor 'blk.0.ffn_down.weight' has shape [32, 48], expected [48, 32]"));

  GgufFromWeights extra(*dir, "llama");
  extra.extra = true;
  loaded = LoadModel(WriteFile(extra.Build()), 0, DType::kF32);
  EXPECT_THAT(loaded.status().message(),
              HasSubstr("1 tensors this model does not use: blk.0.attn_rot_embd"));
}

TEST_F(GgufWeightsTest, AModelLargerThanMemoryIsRefusedBeforeLoading) {
  const std::unique_ptr<ModelWeights> dir = Directory(LlamaConfig("LlamaForCausalLM", false));
  ASSERT_NE(dir, nullptr);
  const std::string path = WriteFile(GgufFromWeights(*dir, "llama").Build());
  absl::StatusOr<std::unique_ptr<gguf::GgufFile>> file = gguf::GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<ModelConfig> config = LoadModelConfig(path, 0);
  ASSERT_TRUE(config.ok()) << config.status();
  const int64_t bytes = GgufRuntimeWeightBytes(**file, *config, DType::kF32);
  EXPECT_EQ(bytes, static_cast<int64_t>(dir->SizeBytes()));
  EXPECT_EQ(GgufRuntimeWeightBytes(**file, *config, DType::kBF16) * 2 - bytes,
            (2 * config->num_layers + 1) * config->hidden_size * 4)
      << "matrices halve, norms stay f32";
  const absl::StatusOr<std::unique_ptr<ModelWeights>> loaded =
      LoadGgufWeights(**file, *config, {.dtype = DType::kF32, .memory_limit_bytes = 4096});
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(loaded.status().message(), HasSubstr("more than the 4096 bytes of memory"));
  EXPECT_GT(PhysicalMemoryBytes(), int64_t{1} << 24);
}

TEST_F(GgufWeightsTest, ContextLengthMayGrowForRopeModelsOnly) {
  const std::unique_ptr<ModelWeights> llama = Directory(LlamaConfig("LlamaForCausalLM", false));
  const std::unique_ptr<ModelWeights> gpt2 = Directory(Gpt2Config());
  ASSERT_NE(llama, nullptr);
  ASSERT_NE(gpt2, nullptr);
  const std::string llama_path = WriteFile(GgufFromWeights(*llama, "llama").Build());
  const std::string gpt2_path = WriteFile(GgufFromWeights(*gpt2, "gpt2").Build());
  EXPECT_EQ(LoadModelConfig(llama_path, 0)->max_model_len, 64);
  EXPECT_EQ(LoadModelConfig(llama_path, 32)->max_model_len, 32);
  EXPECT_EQ(LoadModelConfig(llama_path, 512)->max_model_len, 512);
  EXPECT_THAT(LoadModelConfig(llama_path, kMaxGgufModelLen + 1).status().message(),
              HasSubstr("is outside [1, 1048576]"));
  EXPECT_EQ(LoadModelConfig(gpt2_path, 64)->max_model_len, 64);
  EXPECT_THAT(LoadModelConfig(gpt2_path, 65).status().message(),
              HasSubstr("max_model_len 65 is outside [1, 64] (the model's context length)"));
  // A directory keeps its own limit.
  const std::string dir = temp_.File("dir_limit");
  ASSERT_TRUE(WriteRandomModel(LlamaConfig("LlamaForCausalLM", false), {}, dir).ok());
  EXPECT_THAT(LoadModelConfig(dir, 65).status().message(), HasSubstr("outside [1, 64]"));
}

TEST_F(GgufWeightsTest, DetectModelFormatTellsDirectoriesGgufFilesAndTheRestApart) {
  EXPECT_EQ(*DetectModelFormat(temp_.path()), ModelFormat::kHuggingFaceDirectory);
  EXPECT_EQ(*DetectModelFormat(WriteFile("GGUF\3\0\0\0", "model.bin")), ModelFormat::kGguf);
  // Named .gguf: the GGUF reader then says what is wrong with it.
  const std::string named = WriteFile("not gguf", "named.GGUF");
  EXPECT_EQ(*DetectModelFormat(named), ModelFormat::kGguf);
  EXPECT_EQ(LoadModel(named, 0, DType::kF32).status().code(), absl::StatusCode::kInvalidArgument);
  const absl::StatusOr<ModelFormat> other = DetectModelFormat(WriteFile("{}", "config.json"));
  EXPECT_EQ(other.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(other.status().message(), HasSubstr("is a file but not a GGUF file"));
  const absl::StatusOr<ModelFormat> missing = DetectModelFormat(temp_.File("nothing"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("does not exist"));
}

}  // namespace
}  // namespace llmserve::worker
