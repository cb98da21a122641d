// The compiler: its cache, thread safety, choices, and hostile inputs (which must give OK or
// INVALID_ARGUMENT, never hang or crash).
#include <random>
#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/worker/structured/test_util.h"

namespace llmserve::worker::structured {
namespace {

using testing::Accepts;
using testing::ByteVocabulary;
using ::testing::HasSubstr;
using testing::Make;

TEST(CompilerTest, CacheReturnsTheSamePointer) {
  GrammarCompiler compiler(ByteVocabulary(), 2);
  auto a = compiler.Compile(Make(Constraint::Kind::kRegex, "a+"));
  auto b = compiler.Compile(Make(Constraint::Kind::kRegex, "a+"));
  auto c = compiler.Compile(Make(Constraint::Kind::kGrammar, "root ::= \"a\"+"));
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->get(), b->get());
  EXPECT_NE(a->get(), c->get());
  // Evicted past the capacity (2): a new object, the same language.
  ASSERT_TRUE(compiler.Compile(Make(Constraint::Kind::kRegex, "b")).ok());
  ASSERT_TRUE(compiler.Compile(Make(Constraint::Kind::kRegex, "c")).ok());
  auto again = compiler.Compile(Make(Constraint::Kind::kRegex, "a+"));
  ASSERT_TRUE(again.ok());
  EXPECT_NE(a->get(), again->get());
  EXPECT_TRUE(Accepts(*again, "aaa"));
}

TEST(CompilerTest, ChoicesAreExact) {
  GrammarCompiler compiler(ByteVocabulary());
  Constraint c;
  c.kind = Constraint::Kind::kChoice;
  c.choices = {"yes", "no", "n\"o\\", "\xC3\xA9t\xC3\xA9"};
  auto g = compiler.Compile(c);
  ASSERT_TRUE(g.ok()) << g.status();
  for (const std::string& s : c.choices) EXPECT_TRUE(Accepts(*g, s)) << s;
  EXPECT_FALSE(Accepts(*g, "ye"));
  EXPECT_FALSE(Accepts(*g, "yesno"));
  c.choices = {"ok", "\xFF"};
  EXPECT_THAT(compiler.Compile(c).status().message(), HasSubstr("choice 1: not valid UTF-8"));
  c.choices.clear();
  EXPECT_THAT(compiler.Compile(c).status().message(), HasSubstr("no choices"));
}

TEST(CompilerTest, ManyThreadsCompileAndMatch) {
  GrammarCompiler compiler(ByteVocabulary(), 4);
  const std::vector<Constraint> constraints = {
      Make(Constraint::Kind::kJsonObject, ""),
      Make(Constraint::Kind::kRegex, "[0-9]+"),
      Make(Constraint::Kind::kJsonSchema, R"({"type": "integer", "minimum": 3})"),
      Make(Constraint::Kind::kGrammar, "root ::= \"x\"*"),
      Make(Constraint::Kind::kRegex, "(a|b){2,5}"),
      Make(Constraint::Kind::kRegex, "bad(")};
  std::vector<std::thread> threads;
  std::atomic<int> failures = 0;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 60; ++i) {
        const Constraint& c = constraints[(i + t) % constraints.size()];
        auto g = compiler.Compile(c);
        if (g.ok() != (c.text != "bad(")) ++failures;
        if (!g.ok()) continue;
        GrammarMatcher m(*g);  // matchers of a shared grammar on different threads
        std::vector<uint32_t> mask(9);
        m.FillNextTokenBitmask(absl::MakeSpan(mask));
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures, 0);
}

TEST(CompilerTest, HostileInputsAreBounded) {
  GrammarCompiler compiler(ByteVocabulary());
  const std::string deep_schema = std::string(10000, '[') + std::string(10000, ']');
  std::string nested = "{}";
  for (int i = 0; i < 200; ++i) nested = R"({"type": "array", "items": )" + nested + "}";
  std::string deep_group = std::string(5000, '(') + "a" + std::string(5000, ')');
  std::vector<Constraint> hostile = {
      Make(Constraint::Kind::kJsonSchema, deep_schema),
      Make(Constraint::Kind::kJsonSchema, nested),
      Make(Constraint::Kind::kRegex, deep_group),
      Make(Constraint::Kind::kGrammar, "root ::= " + deep_group),
      Make(Constraint::Kind::kRegex, "((a{1000}){1000}){1000}"),
      Make(Constraint::Kind::kGrammar, "root ::= ((\"a\"{4000}){4000}){4000}"),
      Make(Constraint::Kind::kJsonSchema, R"({"type": "string", "maxLength": 1e300})"),
      Make(Constraint::Kind::kJsonSchema, R"({"type": "integer", "minimum": 1e300})"),
      Make(Constraint::Kind::kJsonSchema, R"({"$ref": "#"})"),
      Make(Constraint::Kind::kJsonSchema,
           R"({"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}})"),
      Make(Constraint::Kind::kGrammar, "root ::= a\na ::= b\nb ::= a"),
      Make(Constraint::Kind::kGrammar, "root ::= \"\xC3\""),
      Make(Constraint::Kind::kRegex, "\xE2\x82"),
      Make(Constraint::Kind::kGrammar, "root ::= (((\"\")*)*)*"),
  };
  hostile.push_back(Make(Constraint::Kind::kJsonSchema, std::string(1000000, '[')));
  hostile.push_back(Make(Constraint::Kind::kJsonSchema, std::string(500000, '{')));
  hostile.push_back(
      Make(Constraint::Kind::kJsonSchema, std::string(300000, '[') + std::string(300000, ']')));
  hostile.push_back(Make(Constraint::Kind::kRegex, std::string(1 << 20, '(')));
  std::string counts;
  for (int i = 0; i < 100000; ++i) counts += "a{4096}";
  hostile.push_back(Make(Constraint::Kind::kRegex, counts));
  std::string chain = "root ::= x0\n";
  for (int i = 0; i < 50000; ++i) {
    chain += "x" + std::to_string(i) + " ::= \"a\" x" + std::to_string(i + 1) + " | \"b\"\n";
  }
  chain += "x50000 ::= \"c\"\n";
  hostile.push_back(Make(Constraint::Kind::kGrammar, chain));
  Constraint many;
  many.kind = Constraint::Kind::kChoice;
  many.choices.assign(4096, std::string(200, 'q'));
  hostile.push_back(many);
  for (const Constraint& c : hostile) {
    auto g = compiler.Compile(c);
    if (g.ok()) {
      GrammarMatcher m(*g);
      std::vector<uint32_t> mask(9);
      m.FillNextTokenBitmask(absl::MakeSpan(mask));
    } else {
      EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << g.status();
    }
  }
}

TEST(CompilerTest, RandomBytesGiveOkOrInvalidArgument) {
  GrammarCompiler compiler(ByteVocabulary(), 0);
  std::mt19937 rng(7);
  const std::string alphabet = "{}[]\":,0123456789abcdefnrtu \\()|*+?.^$-#=:;'\n\xC3\xA9\xFF";
  for (int i = 0; i < 3000; ++i) {
    std::string text;
    const int len = rng() % 40;
    for (int j = 0; j < len; ++j) {
      text.push_back(rng() % 4 == 0 ? static_cast<char>(rng() % 256)
                                    : alphabet[rng() % alphabet.size()]);
    }
    for (auto kind :
         {Constraint::Kind::kJsonSchema, Constraint::Kind::kRegex, Constraint::Kind::kGrammar}) {
      std::string source = text;
      if (kind == Constraint::Kind::kGrammar && i % 2 == 0) source = "root ::= " + text;
      auto g = compiler.Compile(Make(kind, source));
      if (!g.ok()) {
        ASSERT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << g.status();
        continue;
      }
      GrammarMatcher m(*g);
      std::vector<uint32_t> mask(9);
      m.FillNextTokenBitmask(absl::MakeSpan(mask));
      for (int step = 0; step < 5; ++step) m.AcceptToken(rng() % 259);
    }
  }
}

}  // namespace
}  // namespace llmserve::worker::structured
