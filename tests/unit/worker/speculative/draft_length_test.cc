#include "worker/speculative/draft_length.h"

#include <vector>

#include "gtest/gtest.h"

namespace llmserve::worker {
namespace {

TEST(DraftLengthControllerTest, StartsAtTheMaximumAndFollowsAcceptance) {
  DraftLengthController control(4);
  EXPECT_EQ(control.NextLength(), 4);
  control.Record(4, 2);  // two accepted: ask for three
  EXPECT_EQ(control.NextLength(), 3);
  control.Record(3, 3);  // all accepted: one more
  EXPECT_EQ(control.NextLength(), 4);
  control.Record(4, 4);  // never past the maximum
  EXPECT_EQ(control.NextLength(), 4);
  control.Record(2, 2);  // fewer were proposed (the proposer ran short) and all matched
  EXPECT_EQ(control.NextLength(), 3);
}

TEST(DraftLengthControllerTest, RepeatedMissesPauseForLongerEachTime) {
  DraftLengthController control(4);
  control.Record(4, 0);
  EXPECT_EQ(control.NextLength(), 1);  // one miss: shorter, no pause
  control.Record(1, 0);                // second miss in a row: pause 1 step
  std::vector<int32_t> lengths;
  for (int i = 0; i < 2; ++i) lengths.push_back(control.NextLength());
  EXPECT_EQ(lengths, (std::vector<int32_t>{0, 1}));
  control.Record(1, 0);  // third: pause 2
  lengths.clear();
  for (int i = 0; i < 3; ++i) lengths.push_back(control.NextLength());
  EXPECT_EQ(lengths, (std::vector<int32_t>{0, 0, 1}));
  for (int miss = 0; miss < 20; ++miss) {
    control.Record(1, 0);
    int pause = 0;
    while (control.NextLength() == 0) ++pause;
    EXPECT_LE(pause, DraftLengthController::kMaxBackoffSteps);
  }
  int pause = 0;
  control.Record(1, 0);
  while (control.NextLength() == 0) ++pause;
  EXPECT_EQ(pause, DraftLengthController::kMaxBackoffSteps);
  // One accepted draft ends the streak: the next miss does not pause.
  control.Record(1, 1);
  EXPECT_EQ(control.NextLength(), 2);
  control.Record(2, 0);
  EXPECT_EQ(control.NextLength(), 1);
}

TEST(DraftLengthControllerTest, IgnoresEmptyReportsAndClampsAccepted) {
  DraftLengthController control(3);
  control.Record(0, 0);
  EXPECT_EQ(control.NextLength(), 3);
  control.Record(2, 5);  // more accepted than proposed counts as all
  EXPECT_EQ(control.NextLength(), 3);
  DraftLengthController at_least_one(0);
  EXPECT_EQ(at_least_one.NextLength(), 1);
}

}  // namespace
}  // namespace llmserve::worker
