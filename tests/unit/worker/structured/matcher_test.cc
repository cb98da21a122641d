// The matcher and its masks: the mask agrees with AcceptToken for every token, EOS exactly when
// the output is complete, non-text tokens never, multi-byte tokens, rollback, depth bound.
#include <random>
#include <string>

#include "gtest/gtest.h"
#include "tests/unit/worker/structured/test_util.h"

namespace llmserve::worker::structured {
namespace {

using testing::ByteVocabulary;
using testing::kByteEos;
using testing::kByteSpecial;
using testing::Make;

bool Bit(const std::vector<uint32_t>& mask, int32_t t) { return (mask[t / 32] >> (t % 32)) & 1; }

// A small vocabulary of multi-byte pieces, including partial UTF-8 and JSON punctuation.
std::shared_ptr<const TokenVocabulary> PieceVocabulary() {
  std::vector<std::string> pieces = {"{",
                                     "}",
                                     "\"",
                                     ":",
                                     ", ",
                                     ": ",
                                     "\"a\": ",
                                     "[",
                                     "]",
                                     "1",
                                     "23",
                                     "-",
                                     ".",
                                     "e",
                                     "a",
                                     "ab",
                                     " ",
                                     "\\",
                                     "n",
                                     "u00e9",
                                     "\xC3",
                                     "\xA9",
                                     "\xE2\x82\xAC",
                                     "\"}",
                                     "true",
                                     "null",
                                     "false",
                                     "}]",
                                     "\"]",
                                     "0",
                                     "\n",
                                     ", \"",
                                     "\xF0\x9F",
                                     "\x98\x80"};
  pieces.push_back("");            // EOS
  pieces.push_back("<|im_end|>");  // special
  std::vector<bool> is_text(pieces.size(), true);
  is_text[pieces.size() - 1] = false;
  return *TokenVocabulary::FromTokenBytes(pieces, is_text,
                                          {static_cast<int32_t>(pieces.size() - 2)});
}

// Every allowed token is accepted (and leaves the copy's state as expected) and every other
// token is refused, along random walks.
void CrossCheck(const std::shared_ptr<const CompiledGrammar>& grammar, int walks, int steps) {
  const TokenVocabulary& vocab = grammar->vocab();
  for (int w = 0; w < walks; ++w) {
    std::mt19937 rng(w);
    GrammarMatcher matcher(grammar);
    std::vector<int32_t> accepted;
    std::vector<uint32_t> mask((vocab.size() + 31) / 32);
    for (int s = 0; s < steps && !matcher.IsTerminated(); ++s) {
      matcher.FillNextTokenBitmask(absl::MakeSpan(mask));
      std::vector<int32_t> allowed;
      for (int32_t t = 0; t < vocab.size(); ++t) {
        GrammarMatcher copy(grammar);
        for (const int32_t a : accepted) ASSERT_TRUE(copy.AcceptToken(a));
        const bool ok = copy.AcceptToken(t);
        ASSERT_EQ(ok, Bit(mask, t)) << "token " << t << " after " << accepted.size();
        if (ok) allowed.push_back(t);
        if (!vocab.is_text(t) && !vocab.is_eos(t)) {
          ASSERT_FALSE(ok);
        }
        if (vocab.is_eos(t)) {
          ASSERT_EQ(ok, matcher.CanTerminate());
        }
      }
      ASSERT_FALSE(allowed.empty());
      const int32_t pick = allowed[rng() % allowed.size()];
      ASSERT_TRUE(matcher.AcceptToken(pick));
      accepted.push_back(pick);
    }
  }
}

TEST(MatcherTest, MaskAgreesWithAcceptTokenOnPieces) {
  GrammarCompiler compiler(PieceVocabulary());
  for (const Constraint& c :
       {Make(Constraint::Kind::kJsonObject, ""),
        Make(Constraint::Kind::kJsonSchema,
             R"({"type": "object", "properties": {"a": {"type": "array", "items":
                 {"type": "integer", "minimum": -3, "maximum": 123}}}})"),
        Make(Constraint::Kind::kRegex, "(ab|a\\n|\\u00e9|€)+"),
        Make(Constraint::Kind::kGrammar, "root ::= \"[\" (\"1\" | \"23\" | root)* \"]\"")}) {
    auto g = compiler.Compile(c);
    ASSERT_TRUE(g.ok()) << g.status();
    CrossCheck(*g, 8, 24);
  }
}

TEST(MatcherTest, MaskAgreesWithAcceptTokenOnBytes) {
  GrammarCompiler compiler(ByteVocabulary());
  auto g = compiler.Compile(Make(Constraint::Kind::kJsonSchema,
                                 R"({"type": "object", "properties": {"s": {"type": "string"}}})"));
  ASSERT_TRUE(g.ok()) << g.status();
  CrossCheck(*g, 4, 10);
}

TEST(MatcherTest, EosOnlyWhenCompleteAndSpecialTokensNever) {
  GrammarCompiler compiler(ByteVocabulary());
  Constraint c;
  c.kind = Constraint::Kind::kChoice;
  c.choices = {"ab", "abc"};
  auto g = compiler.Compile(c);
  ASSERT_TRUE(g.ok());
  GrammarMatcher m(*g);
  std::vector<uint32_t> mask((259 + 31) / 32);
  m.FillNextTokenBitmask(absl::MakeSpan(mask));
  EXPECT_TRUE(Bit(mask, 'a'));
  EXPECT_FALSE(Bit(mask, 'b'));
  EXPECT_FALSE(Bit(mask, kByteEos));
  EXPECT_FALSE(Bit(mask, kByteSpecial));
  EXPECT_FALSE(Bit(mask, 258));  // empty text token
  EXPECT_FALSE(m.AcceptToken(kByteEos));
  EXPECT_FALSE(m.AcceptToken(kByteSpecial));
  EXPECT_FALSE(m.AcceptToken(258));
  EXPECT_FALSE(m.AcceptToken(-1));
  EXPECT_FALSE(m.AcceptToken(100000));
  ASSERT_TRUE(m.AcceptToken('a'));
  ASSERT_TRUE(m.AcceptToken('b'));
  EXPECT_TRUE(m.CanTerminate());
  m.FillNextTokenBitmask(absl::MakeSpan(mask));
  EXPECT_TRUE(Bit(mask, kByteEos));
  EXPECT_TRUE(Bit(mask, 'c'));
  EXPECT_FALSE(Bit(mask, 'd'));
  ASSERT_TRUE(m.AcceptToken('c'));
  m.FillNextTokenBitmask(absl::MakeSpan(mask));
  EXPECT_TRUE(Bit(mask, kByteEos));
  EXPECT_FALSE(Bit(mask, 'c'));
  EXPECT_FALSE(m.AcceptToken('c'));
  ASSERT_TRUE(m.AcceptToken(kByteEos));
  EXPECT_TRUE(m.IsTerminated());
  EXPECT_FALSE(m.CanTerminate());
  EXPECT_FALSE(m.AcceptToken('a'));
}

TEST(MatcherTest, RollbackRestoresEarlierStates) {
  GrammarCompiler compiler(ByteVocabulary());
  auto g = compiler.Compile(Make(Constraint::Kind::kRegex, "abc|abd"));
  ASSERT_TRUE(g.ok());
  GrammarMatcher m(*g);
  ASSERT_TRUE(m.AcceptToken('a'));
  ASSERT_TRUE(m.AcceptToken('b'));
  ASSERT_TRUE(m.AcceptToken('c'));
  ASSERT_TRUE(m.AcceptToken(kByteEos));
  EXPECT_FALSE(m.Rollback(5));
  ASSERT_TRUE(m.Rollback(2));
  EXPECT_FALSE(m.IsTerminated());
  EXPECT_FALSE(m.CanTerminate());
  EXPECT_TRUE(m.AcceptToken('d'));
  EXPECT_TRUE(m.CanTerminate());
}

TEST(MatcherTest, NestingBeyondTheDepthBoundIsMasked) {
  GrammarCompiler compiler(ByteVocabulary());
  auto g = compiler.Compile(Make(Constraint::Kind::kGrammar, "root ::= \"[\" root? \"]\""));
  ASSERT_TRUE(g.ok());
  GrammarMatcher m(*g);
  int opened = 0;
  while (opened < 2 * GrammarMatcher::kMaxStackDepth && m.AcceptToken('[')) ++opened;
  EXPECT_GT(opened, 10);
  EXPECT_LT(opened, 2 * GrammarMatcher::kMaxStackDepth);
  std::vector<uint32_t> mask((259 + 31) / 32);
  m.FillNextTokenBitmask(absl::MakeSpan(mask));
  EXPECT_FALSE(Bit(mask, '['));
  EXPECT_TRUE(Bit(mask, ']'));
  for (int i = 0; i < opened; ++i) ASSERT_TRUE(m.AcceptToken(']'));
  EXPECT_TRUE(m.CanTerminate());
}

TEST(MatcherTest, LongGenerationsRebuildTheirTablesAndKeepGoing) {
  GrammarCompiler compiler(ByteVocabulary());
  auto g = compiler.Compile(Make(Constraint::Kind::kRegex, "[ab]{0,4096}c[ab]{0,4096}"));
  ASSERT_TRUE(g.ok()) << g.status();
  GrammarMatcher m(*g);
  std::vector<uint32_t> mask((259 + 31) / 32);
  // Every step is a new state: past kMaxStates the matcher rebuilds its tables.
  for (int i = 0; i < 4096; ++i) ASSERT_TRUE(m.AcceptToken(i % 3 ? 'a' : 'b')) << i;
  m.FillNextTokenBitmask(absl::MakeSpan(mask));
  EXPECT_FALSE(Bit(mask, 'a'));
  EXPECT_TRUE(Bit(mask, 'c'));
  ASSERT_TRUE(m.AcceptToken('c'));
  for (int i = 0; i < 4096; ++i) {
    if (i % 512 == 0) {
      m.FillNextTokenBitmask(absl::MakeSpan(mask));
      ASSERT_TRUE(Bit(mask, 'a') && Bit(mask, 'b') && Bit(mask, kByteEos) && !Bit(mask, 'c'));
    }
    ASSERT_TRUE(m.AcceptToken('b')) << i;
  }
  EXPECT_GT(m.stats().dfa_states, 0);
  EXPECT_LT(m.stats().dfa_states, static_cast<int64_t>(GrammarMatcher::kMaxStates) + 64);
  EXPECT_FALSE(m.AcceptToken('b'));
  ASSERT_TRUE(m.Rollback(3));
  EXPECT_TRUE(m.AcceptToken('a'));
  EXPECT_TRUE(m.AcceptToken(kByteEos));
}

// Masks come from shared entries cut to the top stack frames plus checks of the tokens that pop
// below the cut: on a real vocabulary, every token's bit must still equal AcceptToken, at
// states inside strings, keys and numbers at several nesting depths.
TEST(MatcherTest, RealVocabularyMaskAgreesWithAcceptToken) {
  auto vocab = testing::RealVocabulary("deepseek-llm");
  if (vocab == nullptr) GTEST_SKIP() << "LLMSERVE_TESTDATA is not set";
  GrammarCompiler compiler(vocab);
  for (const Constraint& c :
       {Make(Constraint::Kind::kJsonObject, ""),
        Make(Constraint::Kind::kJsonSchema,
             R"({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type":
                 "object", "properties": {"c": {"type": "string", "maxLength": 5},
                 "d": {"type": "array", "items": {"type": "string"}}}}},
                 "required": ["a", "b"]})")}) {
    auto g = compiler.Compile(c);
    ASSERT_TRUE(g.ok()) << g.status();
    for (const char* prefix :
         {"{\"a\": \"x", "{\"a\": \"\", \"b\": {\"c\": \"ab", "{\"a\": \"\", \"b\": {\"d\": [\"q",
          "{\"a\": [[{\"b\": \"", "{\"a\": [1, {\"b\": 12", "{\"a\": \"\", \"b\": {\""}) {
      GrammarMatcher m(*g);
      if (!m.AcceptString(prefix)) continue;  // a prefix of the other constraint
      std::vector<uint32_t> mask((vocab->size() + 31) / 32);
      m.FillNextTokenBitmask(absl::MakeSpan(mask));
      int allowed = 0;
      for (int32_t t = 0; t < vocab->size(); ++t) {
        const bool ok = m.AcceptToken(t);
        if (ok) {
          ASSERT_TRUE(m.Rollback(1));
        }
        ASSERT_EQ(ok, Bit(mask, t))
            << prefix << " token " << t << " \"" << vocab->token_bytes(t) << "\"";
        allowed += ok;
      }
      EXPECT_GT(allowed, 0) << prefix;
    }
  }
}

TEST(MatcherTest, RealVocabularyMasksAllowMultiByteTokens) {
  auto vocab = testing::RealVocabulary("deepseek-llm");
  if (vocab == nullptr) GTEST_SKIP() << "LLMSERVE_TESTDATA is not set";
  GrammarCompiler compiler(vocab);
  auto g = compiler.Compile(Make(Constraint::Kind::kJsonSchema,
                                 R"({"type": "object", "properties": {"name": {"type": "string"}},
                                     "required": ["name"]})"));
  ASSERT_TRUE(g.ok());
  GrammarMatcher m(*g);
  std::vector<uint32_t> mask((vocab->size() + 31) / 32);
  m.FillNextTokenBitmask(absl::MakeSpan(mask));
  int allowed = 0;
  for (int32_t t = 0; t < vocab->size(); ++t) {
    if (Bit(mask, t)) {
      ++allowed;
      EXPECT_EQ(std::string("{\"name\": ").rfind(vocab->token_bytes(t), 0), 0u)
          << vocab->token_bytes(t);
    }
  }
  EXPECT_GT(allowed, 1);
  ASSERT_TRUE(m.AcceptString("{\"name\": \""));
  m.FillNextTokenBitmask(absl::MakeSpan(mask));
  int in_string = 0;
  for (int32_t t = 0; t < vocab->size(); ++t) in_string += Bit(mask, t);
  EXPECT_GT(in_string, vocab->size() / 2);  // nearly every token fits inside a string
  // The second fill at the same state is a cache hit.
  m.FillNextTokenBitmask(absl::MakeSpan(mask));
  EXPECT_GE(m.stats().local_hits, 1);
}

}  // namespace
}  // namespace llmserve::worker::structured
