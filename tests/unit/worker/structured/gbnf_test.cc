// The GBNF frontend: accepted and rejected sentences (byte tokens), and errors with positions.
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

std::shared_ptr<const CompiledGrammar> Gbnf(const std::string& source) {
  GrammarCompiler compiler(ByteVocabulary());
  auto compiled = compiler.Compile(Make(Constraint::Kind::kGrammar, source));
  EXPECT_TRUE(compiled.ok()) << compiled.status();
  return compiled.ok() ? *compiled : nullptr;
}

std::string GbnfError(const std::string& source) {
  GrammarCompiler compiler(ByteVocabulary());
  return std::string(compiler.Compile(Make(Constraint::Kind::kGrammar, source)).status().message());
}

TEST(GbnfTest, LiteralsAlternativesAndGroups) {
  auto g = Gbnf(R"(root ::= "yes" | "no" | ( "may" "be" ))");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Accepts(g, "yes"));
  EXPECT_TRUE(Accepts(g, "no"));
  EXPECT_TRUE(Accepts(g, "maybe"));
  EXPECT_FALSE(Accepts(g, "ye"));
  EXPECT_FALSE(Accepts(g, "yess"));
  EXPECT_FALSE(Accepts(g, ""));
}

TEST(GbnfTest, ClassesRangesNegationAndDot) {
  auto g = Gbnf(R"(root ::= [a-c] [^0-9\n] . "\x41\u00e9\t")");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Accepts(g, "axyA\xC3\xA9\t"));
  EXPECT_TRUE(Accepts(g,
                      "c\xE2\x82\xAC\xF0\x9F\x98\x80"
                      "A\xC3\xA9\t"));  // € and 😀
  EXPECT_FALSE(Accepts(g,
                       "d"
                       "xyA\xC3\xA9\t"));
  EXPECT_FALSE(Accepts(g, "a5yA\xC3\xA9\t"));
  EXPECT_FALSE(Accepts(g, "a\nyA\xC3\xA9\t"));
  // `.` is one code point, never a stray byte of invalid UTF-8.
  EXPECT_FALSE(Accepts(g,
                       "ax\xC3"
                       "A\xC3\xA9\t"));
  EXPECT_FALSE(Accepts(g,
                       "ax\xED\xA0\x80"
                       "A\xC3\xA9\t"));  // a surrogate
}

TEST(GbnfTest, RepetitionsAndRecursion) {
  auto g = Gbnf(R"G(
    # a comment
    root ::= item{2,3} tail? list
    item ::= [0-9]+ ","
    tail ::= "x"*
    list ::= "(" ( list | "a" )* ")"
  )G");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Accepts(g, "1,22,()"));
  EXPECT_TRUE(Accepts(g, "1,2,3,xxx(a(a())a)"));
  EXPECT_FALSE(Accepts(g, "1,()"));
  EXPECT_FALSE(Accepts(g, "1,2,3,4,()"));
  EXPECT_FALSE(Accepts(g, "1,2,(a"));
  auto exact = Gbnf(R"(root ::= "ab"{3} "c"{,2} "d"{1,})");
  ASSERT_NE(exact, nullptr);
  EXPECT_TRUE(Accepts(exact, "abababd"));
  EXPECT_TRUE(Accepts(exact, "abababccddd"));
  EXPECT_FALSE(Accepts(exact, "ababd"));
  EXPECT_FALSE(Accepts(exact, "abababcccd"));
}

TEST(GbnfTest, ErrorsNamePositions) {
  EXPECT_THAT(GbnfError("root ::= \"a\"\nfoo ::= [b"), HasSubstr("grammar: line 2, column"));
  EXPECT_THAT(GbnfError("root ::= missing"), HasSubstr("undefined rule \"missing\""));
  EXPECT_THAT(GbnfError("start ::= \"a\""), HasSubstr("no rule \"root\""));
  EXPECT_THAT(GbnfError("root ::= root \"a\" | \"b\""), HasSubstr("left-recursive"));
  EXPECT_THAT(GbnfError("root ::= \"a\" root"), HasSubstr("language is empty"));
  EXPECT_THAT(GbnfError("root ::= \"a\"{5,2}"), HasSubstr("n < m"));
  EXPECT_THAT(GbnfError("root ::= \"a\"{99999}"), HasSubstr("limit"));
  EXPECT_THAT(GbnfError("root ::= \"\\q\""), HasSubstr("unknown escape"));
  EXPECT_THAT(GbnfError("root ::= \"a\" )"), HasSubstr("line 1, column 14: expected a rule name"));
  EXPECT_THAT(GbnfError("root ::= \"\xFF\""), HasSubstr("invalid UTF-8"));
  EXPECT_THAT(GbnfError("root ::= \"a\"\nroot ::= \"b\""), HasSubstr("defined twice"));
  EXPECT_THAT(GbnfError("root ::= (\"a\"?)*"), HasSubstr("left-recursive"));
}

}  // namespace
}  // namespace llmserve::worker::structured
