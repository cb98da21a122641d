#include "gateway/pipeline/stop_matcher.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace llmserve::gateway {
namespace {

// Feeds `deltas` and returns everything emitted, with the match.
std::pair<std::string, std::string> Feed(std::vector<std::string> stops,
                                         const std::vector<std::string>& deltas) {
  StopMatcher matcher(std::move(stops));
  std::string out, matched;
  for (const std::string& delta : deltas) {
    StopMatcher::Step step = matcher.Add(delta);
    out += step.text;
    if (step.matched.has_value()) matched = *step.matched;
  }
  out += matcher.Flush();
  return {out, matched};
}

TEST(StopMatcherTest, NoStopsPassesEverythingAtOnce) {
  StopMatcher matcher({});
  EXPECT_EQ(matcher.Add("hello").text, "hello");
  EXPECT_EQ(matcher.Flush(), "");
}

TEST(StopMatcherTest, CutsBeforeAStopStringSpanningDeltas) {
  EXPECT_EQ(Feed({"###"}, {"The answer", " is 4#", "#", "# and more"}),
            std::make_pair(std::string("The answer is 4"), std::string("###")));
}

TEST(StopMatcherTest, HoldsBackOnlyWhatCouldStartAStop) {
  StopMatcher matcher({"END"});
  EXPECT_EQ(matcher.Add("abc E").text, "abc ");
  EXPECT_EQ(matcher.Add("N").text, "");
  EXPECT_EQ(matcher.Add("X").text, "ENX");  // ruled out: released
  EXPECT_EQ(matcher.Flush(), "");
}

TEST(StopMatcherTest, FlushReleasesAnUnfinishedPrefix) {
  EXPECT_EQ(Feed({"stop here"}, {"we stop"}),
            std::make_pair(std::string("we stop"), std::string()));
}

TEST(StopMatcherTest, EarliestStopWinsAndNothingFollows) {
  StopMatcher matcher({"b", "abc"});
  const StopMatcher::Step step = matcher.Add("xxabcb");
  EXPECT_EQ(step.text, "xx");
  EXPECT_EQ(*step.matched, "abc");
  EXPECT_EQ(matcher.Add("more").text, "");
  EXPECT_EQ(matcher.Flush(), "");
}

TEST(StopMatcherTest, MultibyteStopStrings) {
  EXPECT_EQ(Feed({"\xe2\x80\x94"}, {"a \xe2\x80", "\x94 b"}),  // an em dash split across deltas
            std::make_pair(std::string("a "), std::string("\xe2\x80\x94")));
}

}  // namespace
}  // namespace llmserve::gateway
