#include "common/json/ordered_json.h"

#include <string>

#include "gtest/gtest.h"

namespace llmserve::common {
namespace {

TEST(OrderedJsonTest, KeepsKeyOrderAndValues) {
  absl::StatusOr<nlohmann::ordered_json> parsed = ParseOrderedJson(
      R"({"zeta": 1, "alpha": [true, null, 2.5, "x"], "mid": {"b": {}, "a": []}})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->dump(), R"({"zeta":1,"alpha":[true,null,2.5,"x"],"mid":{"b":{},"a":[]}})");
}

TEST(OrderedJsonTest, ARepeatedKeyReplacesTheValueInPlace) {
  absl::StatusOr<nlohmann::ordered_json> parsed = ParseOrderedJson(R"({"a": 1, "b": 2, "a": 3})");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->dump(), R"({"a":3,"b":2})");
}

TEST(OrderedJsonTest, ErrorsNameWhatWasParsed) {
  absl::StatusOr<nlohmann::ordered_json> parsed =
      ParseOrderedJson("{\"a\": ", {.what = "the schema"});
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(parsed.status().message().find("the schema is not valid JSON"), std::string::npos)
      << parsed.status();
  EXPECT_FALSE(ParseOrderedJson("\"\xff\"").ok());  // invalid UTF-8
  EXPECT_FALSE(ParseOrderedJson("[1] [2]").ok());
  EXPECT_FALSE(ParseOrderedJson("").ok());
}

TEST(OrderedJsonTest, DepthAndValueCountAreBounded) {
  const std::string deep = std::string(10, '[') + std::string(10, ']');
  EXPECT_TRUE(ParseOrderedJson(deep, {.max_depth = 10}).ok());
  absl::StatusOr<nlohmann::ordered_json> too_deep = ParseOrderedJson(deep, {.max_depth = 9});
  EXPECT_NE(too_deep.status().message().find("nested more than 9 levels"), std::string::npos);
  // Arbitrarily deep input never reaches the recursive DOM: the SAX walk stops at the bound.
  EXPECT_FALSE(ParseOrderedJson(std::string(1 << 20, '['), {.max_depth = 64}).ok());
  absl::StatusOr<nlohmann::ordered_json> many = ParseOrderedJson("[1,2,3,4]", {.max_values = 4});
  EXPECT_NE(many.status().message().find("more than 4 JSON values"), std::string::npos);
  EXPECT_TRUE(ParseOrderedJson("[1,2,3]", {.max_values = 4}).ok());
}

TEST(OrderedJsonTest, SkippedTopLevelKeysAreCountedNotKept) {
  const OrderedJsonLimits limits{
      .max_values = 6, .keep_top_level_key = [](std::string_view key) { return key == "kept"; }};
  absl::StatusOr<nlohmann::ordered_json> parsed =
      ParseOrderedJson(R"({"junk": [1, 2], "kept": {"junk": 1}})", limits);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  // Only top-level keys are filtered.
  EXPECT_EQ(parsed->dump(), R"({"kept":{"junk":1}})");
  EXPECT_FALSE(ParseOrderedJson(R"({"junk": [1, 2, 3, 4, 5, 6]})", limits).ok());
}

TEST(OrderedJsonTest, AnObjectWithVeryManyKeysTakesLinearTime) {
  std::string text = "{";
  for (int i = 0; i < 300000; ++i) text += "\"k" + std::to_string(i) + "\":" + "0,";
  text += "\"k0\":1}";
  // nlohmann::ordered_json::parse takes minutes on this; a linear parse, well under a second.
  absl::StatusOr<nlohmann::ordered_json> parsed = ParseOrderedJson(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->size(), 300000u);
  EXPECT_EQ(parsed->begin().key(), "k0");
  EXPECT_EQ(parsed->begin().value(), 1);
}

}  // namespace
}  // namespace llmserve::common
