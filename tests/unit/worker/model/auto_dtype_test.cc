// --dtype=auto: the checkpoint's declared dtype, the largest tensor's when none is declared, f16
// for an f32 checkpoint on CUDA, and errors that name what is wrong.

#include "worker/model/auto_dtype.h"

#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "tests/testing/scoped_temp_dir.h"
#include "worker/model/model_writer.h"

namespace llmserve::worker {
namespace {

ModelConfig TinyLlama() {
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.family = ModelFamily::kLlama;
  c.vocab_size = 40;
  c.num_layers = 1;
  c.max_position_embeddings = c.max_model_len = 32;
  c.eos_token_ids = {0};
  c.num_heads = c.num_kv_heads = 2;
  c.head_dim = 4;
  c.hidden_size = 8;
  c.intermediate_size = 12;
  return c;
}

// Writes a model with weights in `dtype` and, unless empty, `field: value` added to config.json.
std::string WriteModel(const ::llmserve::testing::ScopedTempDir& temp, const std::string& name,
                       DType dtype, const std::string& field = "", const std::string& value = "") {
  const std::string dir = temp.path() + "/" + name;
  EXPECT_TRUE(WriteRandomModel(TinyLlama(), {.dtype = dtype}, dir).ok());
  if (!field.empty()) {
    std::ifstream in(dir + "/config.json");
    std::stringstream text;
    text << in.rdbuf();
    std::string json = text.str();
    json.insert(json.find('{') + 1, "\"" + field + "\": " + value + ", ");
    std::ofstream(dir + "/config.json") << json;
  }
  return dir;
}

absl::StatusOr<DType> Auto(const std::string& dir, const std::string& backend = "cpu") {
  return ResolveDTypeFlag("auto", dir, backend);
}

TEST(AutoDTypeTest, DeclaredDTypeWinsOverTheTensors) {
  const ::llmserve::testing::ScopedTempDir temp("auto_dtype");
  EXPECT_EQ(*Auto(WriteModel(temp, "a", DType::kF32, "torch_dtype", "\"bfloat16\"")), DType::kBF16);
  EXPECT_EQ(*Auto(WriteModel(temp, "b", DType::kBF16, "torch_dtype", "\"float16\"")), DType::kF16);
  // transformers >= 4.56 writes "dtype".
  EXPECT_EQ(*Auto(WriteModel(temp, "c", DType::kF16, "dtype", "\"float32\"")), DType::kF32);
}

TEST(AutoDTypeTest, UndeclaredDTypeIsTheLargestTensors) {
  const ::llmserve::testing::ScopedTempDir temp("auto_dtype_tensors");
  EXPECT_EQ(*Auto(WriteModel(temp, "f16", DType::kF16)), DType::kF16);
  EXPECT_EQ(*Auto(WriteModel(temp, "bf16", DType::kBF16)), DType::kBF16);
  EXPECT_EQ(*Auto(WriteModel(temp, "f32", DType::kF32)), DType::kF32);
}

TEST(AutoDTypeTest, CudaRunsF32CheckpointsAsF16AndExplicitValuesPassThrough) {
  const ::llmserve::testing::ScopedTempDir temp("auto_dtype_cuda");
  const std::string f32 = WriteModel(temp, "f32", DType::kF32);
  EXPECT_EQ(*Auto(f32, "cuda"), DType::kF16);
  EXPECT_EQ(*Auto(WriteModel(temp, "bf16", DType::kBF16), "cuda"), DType::kBF16);
  EXPECT_EQ(*ResolveDTypeFlag("bf16", f32, "cpu"), DType::kBF16);
  EXPECT_EQ(*ResolveDTypeFlag("float32", "/nonexistent", "cpu"), DType::kF32);
}

TEST(AutoDTypeTest, ErrorsNameTheValueOrTheField) {
  const ::llmserve::testing::ScopedTempDir temp("auto_dtype_errors");
  const absl::StatusOr<DType> unknown = ResolveDTypeFlag("fp8", temp.path(), "cpu");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("expected auto, f32, f16 or bf16"),
            absl::string_view::npos);
  const absl::StatusOr<DType> f64 =
      Auto(WriteModel(temp, "f64", DType::kF32, "torch_dtype", "\"float64\""));
  EXPECT_EQ(f64.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(f64.status().message().find("config.json: torch_dtype 'float64' has no runtime dtype"),
            absl::string_view::npos)
      << f64.status();
  EXPECT_EQ(Auto(temp.path() + "/missing").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace llmserve::worker
