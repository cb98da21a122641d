// W3C traceparent parsing and formatting, by the spec's rules.

#include "common/tracing/trace_context.h"

#include <string>

#include "gtest/gtest.h"

namespace llmserve::common::tracing {
namespace {

constexpr char kExample[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

TEST(TraceContextTest, ParsesTheSpecExampleAndFormatsItBack) {
  std::optional<TraceContext> context = ParseTraceParent(kExample, "congo=t61rcWkgMzE");
  ASSERT_TRUE(context.has_value());
  EXPECT_EQ(HexId(context->trace_id), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(HexId(context->span_id), "00f067aa0ba902b7");
  EXPECT_TRUE(context->sampled());
  EXPECT_EQ(context->trace_state, "congo=t61rcWkgMzE");
  EXPECT_EQ(FormatTraceParent(*context), kExample);
  std::optional<TraceContext> unsampled =
      ParseTraceParent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
  ASSERT_TRUE(unsampled.has_value());
  EXPECT_FALSE(unsampled->sampled());
}

TEST(TraceContextTest, RefusesWhatTheSpecCallsInvalid) {
  for (const char* bad : {
           "",
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",       // no flags
           "00-00000000000000000000000000000000-00f067aa0ba902b7-01",    // zero trace id
           "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",    // zero span id
           "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",    // upper case
           "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",    // version ff
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",  // 00 with more
           "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",    // separator
           "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",    // not hex
           "0x-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",    // version not hex
       }) {
    EXPECT_FALSE(ParseTraceParent(bad).has_value()) << bad;
  }
}

TEST(TraceContextTest, AFutureVersionIsReadForItsFirstFourFields) {
  std::optional<TraceContext> context =
      ParseTraceParent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes-later");
  ASSERT_TRUE(context.has_value());
  EXPECT_EQ(HexId(context->span_id), "00f067aa0ba902b7");
  EXPECT_FALSE(
      ParseTraceParent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x").has_value());
}

TEST(TraceContextTest, AMalformedTraceStateIsDroppedNotTheContext) {
  std::optional<TraceContext> context = ParseTraceParent(kExample, "bad\nstate");
  ASSERT_TRUE(context.has_value());
  EXPECT_EQ(context->trace_state, "");
  context = ParseTraceParent(kExample, std::string(513, 'a'));
  ASSERT_TRUE(context.has_value());
  EXPECT_EQ(context->trace_state, "");
}

TEST(TraceContextTest, NewIdsAreNonZeroAndDiffer) {
  const TraceId a = NewTraceId();
  const TraceId b = NewTraceId();
  EXPECT_NE(a, b);
  EXPECT_NE(HexId(a), std::string(32, '0'));
  EXPECT_NE(NewSpanId(), NewSpanId());
}

}  // namespace
}  // namespace llmserve::common::tracing
