#include <string>
#include <vector>

#include "common/base/byte_size.h"
#include "common/base/flag_names.h"
#include "common/base/logging.h"
#include "gtest/gtest.h"

namespace llmserve::common {
namespace {

std::vector<std::string> Normalize(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  NormalizeFlagNames(static_cast<int>(argv.size()), argv.data());
  return std::vector<std::string>(argv.begin(), argv.end());
}

TEST(FlagNamesTest, DashesInFlagNamesBecomeUnderscores) {
  EXPECT_EQ(Normalize({"prog", "--prompt-len", "512", "--gen-len=128", "--batch=1,4", "--text=a-b",
                       "-x", "pos-arg", "--", "--not-a-flag"}),
            (std::vector<std::string>{"prog", "--prompt_len", "512", "--gen_len=128", "--batch=1,4",
                                      "--text=a-b", "-x", "pos-arg", "--", "--not-a-flag"}));
}

bool Sets(std::vector<std::string> args, absl::string_view name) {
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  return CommandLineSetsFlag(static_cast<int>(argv.size()), argv.data(), name);
}

TEST(FlagNamesTest, TellsAFlagTheCommandLineSetFromOneAtItsDefault) {
  EXPECT_TRUE(Sets({"prog", "--quantize_lm_head"}, "quantize_lm_head"));
  EXPECT_TRUE(Sets({"prog", "--x=1", "--quantize_lm_head=false"}, "quantize_lm_head"));
  EXPECT_TRUE(Sets({"prog", "--noquantize_lm_head"}, "quantize_lm_head"));
  EXPECT_TRUE(Sets({"prog", "-quantize_lm_head=true"}, "quantize_lm_head"));
  EXPECT_FALSE(Sets({"prog", "--quantize_lm_head_x", "--xquantize_lm_head"}, "quantize_lm_head"));
  EXPECT_FALSE(Sets({"prog", "quantize_lm_head", "--", "--quantize_lm_head"}, "quantize_lm_head"))
      << "positional arguments, and what follows a bare --, set no flag";
  EXPECT_FALSE(Sets({"prog"}, "quantize_lm_head"));
}

TEST(LoggingTest, CheckPassesAndFatalAborts) {
  LLMSERVE_CHECK(1 + 1 == 2) << "never printed";
  EXPECT_DEATH({ LLMSERVE_CHECK(1 + 1 == 3) << "arithmetic"; },
               "Check failed: 1 \\+ 1 == 3 arithmetic");
  EXPECT_DEATH({ LLMSERVE_LOG(FATAL) << "stop here"; }, "stop here");
}

TEST(LoggingTest, SeverityFilter) {
  SetMinLogSeverity(LogSeverity::WARNING);
  EXPECT_EQ(MinLogSeverity(), LogSeverity::WARNING);
  ::testing::internal::CaptureStderr();
  LLMSERVE_LOG(INFO) << "dropped";
  LLMSERVE_LOG(ERROR) << "kept";
  const std::string output = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(output.find("dropped"), std::string::npos);
  EXPECT_NE(output.find("kept"), std::string::npos);
  EXPECT_EQ(output[0], 'E');
  SetMinLogSeverity(LogSeverity::INFO);
}

}  // namespace
}  // namespace llmserve::common

namespace llmserve::common {
namespace {

TEST(ByteSizeTest, UnitsAreBinary) {
  EXPECT_EQ(*ParseByteSize("65536"), 65536);
  EXPECT_EQ(*ParseByteSize("12B"), 12);
  EXPECT_EQ(*ParseByteSize("4k"), 4096);
  EXPECT_EQ(*ParseByteSize("512MiB"), int64_t{512} << 20);
  EXPECT_EQ(*ParseByteSize("1.5G"), int64_t{3} << 29);
  EXPECT_EQ(*ParseByteSize(" 2 GB "), int64_t{2} << 30);
  EXPECT_EQ(*ParseByteSize("1TiB"), int64_t{1} << 40);
}

TEST(ByteSizeTest, RejectsWhatIsNotASize) {
  for (const char* text : {"", "GiB", "-1G", "4 parsecs", "1e3", "1..2M", "99999999999T"}) {
    const absl::StatusOr<int64_t> parsed = ParseByteSize(text);
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_NE(parsed.status().message().find("is not a size"), absl::string_view::npos);
  }
}

}  // namespace
}  // namespace llmserve::common
