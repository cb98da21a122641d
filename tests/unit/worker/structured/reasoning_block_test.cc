// A constraint behind a reasoning block (Constraint::reasoning_block): the reasoning is free text
// up to the first "</think>" and is left alone, the constraint holds for what follows, and a
// mask never lets the output skip the block or end inside it.
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/worker/structured/test_util.h"

namespace llmserve::worker::structured {
namespace {

using testing::Accepts;
using testing::ByteVocabulary;

std::shared_ptr<const CompiledGrammar> Compile(Constraint::Kind kind, const std::string& text,
                                               Constraint::ReasoningBlock block) {
  GrammarCompiler compiler(ByteVocabulary());
  Constraint c = testing::Make(kind, text);
  c.reasoning_block = block;
  auto compiled = compiler.Compile(c);
  EXPECT_TRUE(compiled.ok()) << compiled.status();
  return compiled.ok() ? *compiled : nullptr;
}

constexpr char kSchema[] = R"({"type": "object", "properties": {"a": {"type": "integer"}},
                               "required": ["a"]})";

TEST(ReasoningBlockTest, AnOpenBlockIsFreeTextUpToTheFirstCloseTagThenTheConstraint) {
  auto g = Compile(Constraint::Kind::kJsonSchema, kSchema, Constraint::ReasoningBlock::kOpen);
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Accepts(g, "Let me think.</think>\n\n{\"a\": 1}"));
  EXPECT_TRUE(Accepts(g, "</think>{\"a\": 1}"));  // an empty block, no space
  // Anything but the tag is reasoning: other tags, a "<" that starts the tag again, parts of it,
  // "<think>" written again (an older checkpoint), JSON that breaks the schema.
  EXPECT_TRUE(Accepts(g, "<think>a <b> << </th </thin</think\n{\"b\": x}</think>\n{\"a\": 2}"));
  EXPECT_TRUE(Accepts(g, "<</think>{\"a\": 3}"));
  // The constraint holds after the tag, and only the first tag closes the block.
  EXPECT_FALSE(Accepts(g, "hm</think>\n\n{\"b\": 1}"));
  EXPECT_FALSE(Accepts(g, "hm</think>x</think>{\"a\": 1}"));
  EXPECT_FALSE(Accepts(g, "{\"a\": 1}"));  // the block must close first
  EXPECT_FALSE(Accepts(g, "hm</think>"));  // and the constrained output must follow
  EXPECT_FALSE(Accepts(g, "hm</think>         {\"a\": 1}"));  // at most 8 spaces between
  EXPECT_TRUE(Accepts(g, "hm</think>        {\"a\": 1}"));
}

TEST(ReasoningBlockTest, AnOptionalBlockMayOpenOrNot) {
  auto g = Compile(Constraint::Kind::kRegex, "[0-9]+", Constraint::ReasoningBlock::kOptional);
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Accepts(g, "42"));
  EXPECT_TRUE(Accepts(g, "<think>so</think>\n\n42"));
  EXPECT_TRUE(Accepts(g, "\n<think></think>7"));
  EXPECT_FALSE(Accepts(g, "so</think>42"));  // reasoning needs its opening tag here
  EXPECT_FALSE(Accepts(g, "<think>so</think>x"));
  EXPECT_FALSE(Accepts(g, "<think>42"));
}

// The mask follows the same rules token by token: EOS is never allowed inside the block, and
// every byte but the tag's next one is (the reasoning is free).
TEST(ReasoningBlockTest, MasksLeaveTheReasoningFreeAndNeverEndInIt) {
  GrammarCompiler compiler(ByteVocabulary());
  Constraint c;
  c.kind = Constraint::Kind::kChoice;
  c.choices = {"yes", "no"};
  c.reasoning_block = Constraint::ReasoningBlock::kOpen;
  auto compiled = compiler.Compile(c);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  GrammarMatcher matcher(*compiled);
  std::vector<uint32_t> bits((*compiled)->vocab().size() / 32 + 1);
  auto allowed = [&](int token) { return (bits[token / 32] >> (token % 32)) & 1u; };
  for (const char ch : std::string("I think yes, no? </thi")) {
    std::fill(bits.begin(), bits.end(), 0u);
    ASSERT_TRUE(matcher.FillNextTokenBitmask(absl::MakeSpan(bits)));
    EXPECT_FALSE(allowed(testing::kByteEos));
    for (int byte : {'a', 'y', '{', '<', '/', ' ', '\n'}) EXPECT_TRUE(allowed(byte)) << byte;
    ASSERT_TRUE(matcher.AcceptToken(static_cast<uint8_t>(ch)));
  }
  for (const char ch : std::string("nk>"))
    ASSERT_TRUE(matcher.AcceptToken(static_cast<uint8_t>(ch)));
  // Now only the choices (or up to 8 spaces first).
  std::fill(bits.begin(), bits.end(), 0u);
  ASSERT_TRUE(matcher.FillNextTokenBitmask(absl::MakeSpan(bits)));
  EXPECT_TRUE(allowed('y'));
  EXPECT_TRUE(allowed('n'));
  EXPECT_TRUE(allowed('\n'));
  EXPECT_FALSE(allowed('a'));
  EXPECT_FALSE(allowed('<'));
  EXPECT_FALSE(allowed(testing::kByteEos));
}

// A client's GBNF grammar keeps its own error positions, and may not define the block's rules.
TEST(ReasoningBlockTest, AClientsGrammarKeepsItsPositionsAndItsRuleNames) {
  GrammarCompiler compiler(ByteVocabulary());
  Constraint c = testing::Make(Constraint::Kind::kGrammar, "root ::= \"a\"\nx ::= (");
  c.reasoning_block = Constraint::ReasoningBlock::kOpen;
  EXPECT_THAT(std::string(compiler.Compile(c).status().message()),
              ::testing::HasSubstr("line 2, column"));
  c.text = "root ::= llmserve-think-0\nllmserve-think-0 ::= \"a\"";
  EXPECT_THAT(std::string(compiler.Compile(c).status().message()),
              ::testing::HasSubstr("defined twice"));
}

}  // namespace
}  // namespace llmserve::worker::structured
