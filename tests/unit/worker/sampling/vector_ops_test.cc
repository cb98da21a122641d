#include "worker/sampling/vector_ops.h"

#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace llmserve::worker {
namespace {

using ::testing::ElementsAre;

constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(SamplingVectorOpsTest, SanitizeMapsNanAndInfinitiesWhateverTheTail) {
  for (size_t size = 1; size <= 9; ++size) {
    std::vector<float> logits(size, 1.5f);
    logits[size - 1] = std::nanf("");
    if (size > 1) logits[0] = kInf;
    SanitizeLogits(absl::MakeSpan(logits));
    EXPECT_EQ(logits[size - 1], -kInf) << size;
    if (size > 1) {
      EXPECT_EQ(logits[0], std::numeric_limits<float>::max());
    }
    if (size > 2) {
      EXPECT_EQ(logits[1], 1.5f);
    }
  }
  std::vector<float> logits = {-kInf, -0.0f, 3.0f};
  SanitizeLogits(absl::MakeSpan(logits));
  EXPECT_THAT(logits, ElementsAre(-kInf, -0.0f, 3.0f));
}

TEST(SamplingVectorOpsTest, MaxAndArgmaxWithTiesToTheLowestId) {
  for (size_t size = 1; size <= 19; ++size) {
    std::vector<float> logits(size);
    for (size_t i = 0; i < size; ++i) logits[i] = static_cast<float>((i * 7) % 5);
    float expected = logits[0];
    int32_t expected_index = 0;
    for (size_t i = 0; i < size; ++i) {
      if (logits[i] > expected) {
        expected = logits[i];
        expected_index = static_cast<int32_t>(i);
      }
    }
    EXPECT_EQ(MaxLogit(logits), expected) << size;
    EXPECT_EQ(Argmax(logits), expected_index) << size;
  }
  const std::vector<float> none = {-kInf, -kInf, -kInf, -kInf, -kInf};
  EXPECT_EQ(Argmax(none), 0);
  EXPECT_EQ(MaxLogit(none), -kInf);
}

TEST(SamplingVectorOpsTest, ExpIsAccurateAndExactAtZero) {
  EXPECT_EQ(ExpNonPositive(0.0f), 1.0f);
  EXPECT_EQ(ExpNonPositive(-kInf), 0.0f);
  EXPECT_EQ(ExpNonPositive(-87.5f), 0.0f);
  double worst = 0.0;
  for (float x = -86.9f; x <= 0.0f; x += 0.00731f) {
    worst = std::max(worst, std::fabs(ExpNonPositive(x) / std::exp(static_cast<double>(x)) - 1));
  }
  EXPECT_LT(worst, 2e-7);
}

TEST(SamplingVectorOpsTest, ExpWeightsAndSumExpMatchANaiveLoop) {
  std::mt19937 engine(5);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (const size_t size : {1, 3, 4, 5, 1023, 1024, 1025, 5000}) {
    std::vector<float> logits(size);
    for (float& logit : logits) logit = normal(engine);
    if (size > 1) logits[size / 2] = -kInf;
    const float max_logit = MaxLogit(logits);
    std::vector<float> weights(size);
    const double total = ExpWeights(logits, max_logit, 1.0f / 0.7f, 0.01f, absl::MakeSpan(weights));
    double expected_total = 0.0;
    double expected_sum_exp = 0.0;
    for (size_t i = 0; i < size; ++i) {
      const double exact = std::exp((static_cast<double>(logits[i]) - max_logit) / 0.7);
      expected_sum_exp += std::exp(static_cast<double>(logits[i]) - max_logit);
      if (exact < 0.0099 || exact > 0.0101) {  // away from the min-p edge
        EXPECT_NEAR(weights[i], exact >= 0.01 ? exact : 0.0, 1e-6 * exact) << i;
      }
      expected_total += weights[i];
    }
    EXPECT_NEAR(total, expected_total, 1e-6 * expected_total) << size;
    EXPECT_NEAR(SumExp(logits, max_logit), expected_sum_exp, 1e-6 * expected_sum_exp) << size;
  }
}

TEST(SamplingVectorOpsTest, DrawFromWeightsIsTheInverseCdf) {
  std::vector<float> weights(3000, 0.0f);
  weights[5] = 1.0f;
  weights[2000] = 2.0f;
  weights[2999] = 1.0f;
  std::vector<float> logits(3000, -kInf);
  std::vector<float> recomputed(3000);
  for (const size_t i : {5, 2000, 2999}) logits[i] = std::log(weights[i]);
  const double total = ExpWeights(logits, std::log(2.0f), 1.0f, 0.0f, absl::MakeSpan(recomputed));
  EXPECT_NEAR(total, 2.0, 1e-6);  // weights relative to the best: 0.5, 1, 0.5
  EXPECT_EQ(DrawFromWeights(recomputed, total, 0.0), 5);
  EXPECT_EQ(DrawFromWeights(recomputed, total, 0.2499), 5);
  EXPECT_EQ(DrawFromWeights(recomputed, total, 0.2501), 2000);
  EXPECT_EQ(DrawFromWeights(recomputed, total, 0.7499), 2000);
  EXPECT_EQ(DrawFromWeights(recomputed, total, 0.7501), 2999);
  EXPECT_EQ(DrawFromWeights(recomputed, total, 0.9999999999), 2999);
}

}  // namespace
}  // namespace llmserve::worker
