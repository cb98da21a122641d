#include "worker/model/pooling_config.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "tests/testing/scoped_temp_dir.h"

namespace llmserve::worker {
namespace {

constexpr char kModules[] = R"([
  {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
  {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
  {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}
])";

std::string PoolingJson(const std::string& mode, const std::string& extra = "") {
  std::string json = R"({"word_embedding_dimension": 64, "pooling_mode_cls_token": false,
    "pooling_mode_mean_tokens": false, "pooling_mode_max_tokens": false,
    "pooling_mode_mean_sqrt_len_tokens": false, "pooling_mode_weightedmean_tokens": false,
    "pooling_mode_lasttoken": false, "include_prompt": true)";
  const size_t at = json.find("\"" + mode + "\": false");
  if (at != std::string::npos) json.replace(at, mode.size() + 9, "\"" + mode + "\": true");
  return json + extra + "}";
}

class PoolingConfigTest : public ::testing::Test {
 protected:
  void Write(const std::string& relative, const std::string& text) {
    const std::filesystem::path path = std::filesystem::path(temp_.path()) / relative;
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path) << text;
  }
  absl::StatusOr<PoolingConfig> Read(const std::string& config_json = "{}") {
    return ReadPoolingConfig(temp_.path(), config_json, 64);
  }
  void ExpectInvalid(const std::string& fragment, const std::string& config_json = "{}") {
    const absl::StatusOr<PoolingConfig> read = Read(config_json);
    ASSERT_TRUE(absl::IsInvalidArgument(read.status())) << fragment;
    EXPECT_NE(read.status().message().find(fragment), absl::string_view::npos)
        << read.status().message();
  }
  ::llmserve::testing::ScopedTempDir temp_{"pooling_config_test"};
};

TEST_F(PoolingConfigTest, ADirectoryWithoutModulesHasNoOpinion) {
  const absl::StatusOr<PoolingConfig> read = Read();
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_FALSE(read->method.has_value());
  EXPECT_FALSE(read->normalize);
  EXPECT_FALSE(read->matryoshka);
}

TEST_F(PoolingConfigTest, ReadsEachModeAndTheNormalizeModule) {
  Write("modules.json", kModules);
  for (const auto& [mode, method] : {std::pair{"pooling_mode_lasttoken", PoolingMethod::kLast},
                                     std::pair{"pooling_mode_mean_tokens", PoolingMethod::kMean},
                                     std::pair{"pooling_mode_cls_token", PoolingMethod::kCls}}) {
    Write("1_Pooling/config.json", PoolingJson(mode));
    const absl::StatusOr<PoolingConfig> read = Read();
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(read->method, method) << mode;
    EXPECT_TRUE(read->normalize);
  }
}

TEST_F(PoolingConfigTest, RefusesWhatItCannotComputeByName) {
  Write("modules.json", kModules);
  Write("1_Pooling/config.json", PoolingJson("pooling_mode_max_tokens"));
  ExpectInvalid("pooling_mode_max_tokens is not supported");
  Write("1_Pooling/config.json", PoolingJson("nothing"));
  ExpectInvalid("sets no pooling_mode_*");
  Write("1_Pooling/config.json",
        R"({"word_embedding_dimension": 32, "pooling_mode_lasttoken": true})");
  ExpectInvalid("does not match the model's hidden_size 64");
  Write("1_Pooling/config.json", R"({"pooling_mode_mean_tokens": true, "include_prompt": false})");
  ExpectInvalid("include_prompt false");
  Write("1_Pooling/config.json",
        R"({"pooling_mode_mean_tokens": true, "pooling_mode_cls_token": true})");
  ExpectInvalid("more than one pooling_mode_*");
  Write("modules.json", R"([{"type": "sentence_transformers.models.Dense", "path": "2_Dense"}])");
  ExpectInvalid("sentence_transformers.models.Dense is not supported");
  Write("modules.json", R"([{"type": "sentence_transformers.models.Pooling", "path": "../x"}])");
  ExpectInvalid("must name a directory inside the model directory");
  Write("modules.json", "{not json");
  ExpectInvalid("is not valid JSON");
}

TEST_F(PoolingConfigTest, ReadsMatryoshkaFromTheModelConfig) {
  absl::StatusOr<PoolingConfig> read = Read(R"({"matryoshka_dimensions": [16, 32, 64]})");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(read->matryoshka);
  EXPECT_EQ(read->matryoshka_dimensions, (std::vector<int64_t>{16, 32, 64}));
  read = Read(R"({"is_matryoshka": true})");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(read->matryoshka);
  EXPECT_TRUE(read->matryoshka_dimensions.empty());
  ExpectInvalid("outside [1, hidden_size 64]", R"({"matryoshka_dimensions": [16, 128]})");
  ExpectInvalid("non-empty list", R"({"matryoshka_dimensions": []})");
}

TEST(PoolingMethodTest, NamesRoundTrip) {
  for (PoolingMethod method : {PoolingMethod::kLast, PoolingMethod::kMean, PoolingMethod::kCls}) {
    EXPECT_EQ(ParsePoolingMethod(PoolingMethodName(method)).value(), method);
  }
  EXPECT_TRUE(absl::IsInvalidArgument(ParsePoolingMethod("max").status()));
}

}  // namespace
}  // namespace llmserve::worker
