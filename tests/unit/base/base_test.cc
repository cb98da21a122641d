#include <string>
#include <vector>

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
