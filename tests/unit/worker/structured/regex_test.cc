// The regex frontend: whole-output matching, accepted and rejected strings, unsupported
// features named with their position, and random walks over a real vocabulary checked with
// std::regex.
#include <regex>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/worker/structured/test_util.h"

namespace llmserve::worker::structured {
namespace {

using testing::Accepts;
using testing::ByteVocabulary;
using ::testing::HasSubstr;
using testing::Make;

std::shared_ptr<const CompiledGrammar> Regex(const std::string& pattern,
                                             std::shared_ptr<const TokenVocabulary> vocab) {
  return testing::CompileOk(Constraint::Kind::kRegex, pattern, std::move(vocab));
}

std::string RegexError(const std::string& pattern) {
  return testing::CompileError(Constraint::Kind::kRegex, pattern);
}

struct Case {
  std::string pattern;
  std::vector<std::string> yes;
  std::vector<std::string> no;
};

TEST(RegexTest, AcceptsExactlyTheMatches) {
  const std::vector<Case> cases = {
      {R"(\d{3}-\d{4})", {"555-1234"}, {"555-123", "5551234", "555-12345", "abc-defg"}},
      {R"(^(?:yes|no)$)", {"yes", "no"}, {"yesno", "", "y"}},
      {R"([A-Z][a-z]*( [A-Z][a-z]*)?)", {"Ada", "Ada Lovelace", "X"}, {"ada", "Ada lovelace"}},
      {R"(\w+@\w+\.com)", {"a_1@b.com"}, {"a@b.org", "@b.com"}},
      {R"(a.c)",
       {"abc",
        "a\xC3\xA9"
        "c"},
       {"a\nc", "ac"}},
      {R"([^abc]+)", {"xyz", "\xE2\x82\xAC"}, {"xaz", ""}},
      {R"(\u00e9\x41\.\*)",
       {"\xC3\xA9"
        "A.*"},
       {"\xC3\xA9"
        "A.x"}},
      {R"((ab){2,3}?c+?)", {"ababc", "abababcc"}, {"abc", "ababababc"}},
      {R"(\s\S\D\W)", {" xx!"}, {"  x!", " x1!", " xxa"}},
      {R"(colou?r|gr[ae]y)", {"color", "colour", "gray", "grey"}, {"colouur", "gry"}},
      {"", {""}, {"a"}},
  };
  for (const Case& c : cases) {
    auto g = Regex(c.pattern, ByteVocabulary());
    ASSERT_NE(g, nullptr);
    for (const std::string& s : c.yes) EXPECT_TRUE(Accepts(g, s)) << c.pattern << " / " << s;
    for (const std::string& s : c.no) EXPECT_FALSE(Accepts(g, s)) << c.pattern << " / " << s;
  }
}

TEST(RegexTest, UnsupportedFeaturesAreNamed) {
  EXPECT_THAT(RegexError(R"((a)\1)"), HasSubstr("backreferences"));
  EXPECT_THAT(RegexError(R"(a(?=b))"), HasSubstr("lookaround"));
  EXPECT_THAT(RegexError(R"((?<!a)b)"), HasSubstr("lookaround"));
  EXPECT_THAT(RegexError(R"(\bword)"), HasSubstr("regex: position 1: word boundary"));
  EXPECT_THAT(RegexError(R"(a^b)"), HasSubstr("'^'"));
  EXPECT_THAT(RegexError(R"(a$b)"), HasSubstr("'$'"));
  EXPECT_THAT(RegexError(R"(\p{L})"), HasSubstr("Unicode property"));
  EXPECT_THAT(RegexError(R"(a{2,1})"), HasSubstr("n < m"));
  EXPECT_THAT(RegexError(R"(a{100000})"), HasSubstr("limit"));
  EXPECT_THAT(RegexError(R"(*a)"), HasSubstr("nothing to repeat"));
  EXPECT_THAT(RegexError(R"((ab)"), HasSubstr("missing ')'"));
  EXPECT_THAT(RegexError(R"(ab))"), HasSubstr("unmatched ')'"));
  EXPECT_THAT(RegexError(R"([b-a])"), HasSubstr("out of order"));
  EXPECT_THAT(RegexError(R"(a++)"), HasSubstr("possessive"));
}

TEST(RegexTest, RandomWalksOverARealVocabularyMatch) {
  auto vocab = testing::RealVocabulary("deepseek-llm");
  if (vocab == nullptr) GTEST_SKIP() << "LLMSERVE_TESTDATA is not set";
  const std::vector<std::string> patterns = {
      R"(\d{3}-\d{3}-\d{4})", R"((red|green|blue)( and (red|green|blue)){0,3})",
      R"([a-z]{1,12}@[a-z]{1,8}\.(com|org))", R"(-?(0|[1-9]\d{0,5})(\.\d{1,4})?)",
      R"([A-Z][a-z ]{0,30}[.!?])"};
  for (const std::string& pattern : patterns) {
    auto g = Regex(pattern, vocab);
    ASSERT_NE(g, nullptr);
    const std::regex re(pattern);
    for (uint32_t seed = 0; seed < 25; ++seed) {
      std::optional<std::string> out = testing::RandomWalk(g, seed, 400);
      ASSERT_TRUE(out.has_value()) << pattern << " seed " << seed;
      EXPECT_TRUE(std::regex_match(*out, re)) << pattern << ": \"" << *out << "\"";
    }
  }
}

}  // namespace
}  // namespace llmserve::worker::structured
