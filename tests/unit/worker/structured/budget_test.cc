// The bounds that keep one constraint from crashing or stalling a worker (issue 28): the static
// expansion bound of GrammarBuilder::Build, the compile-time probe, the matcher's per-call work
// budget, the iterative expansion that replaced recursion, enum/const with sibling keywords, and
// the compiler cache's byte budget. Every constraint the issue reports as crashing or stalling a
// worker is here, by name.
#include <pthread.h>

#include <chrono>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/worker/structured/test_util.h"

namespace llmserve::worker::structured {
namespace {

using testing::Accepts;
using testing::ByteVocabulary;
using testing::CompileError;
using testing::CompileOk;
using ::testing::HasSubstr;
using testing::Make;

struct Hostile {
  const char* name;
  Constraint::Kind kind;
  std::string text;
};

// The query-of-death shapes of issue 28 and their relatives.
std::vector<Hostile> HostileConstraints() {
  const std::string nested_pattern = "((a?){0,256}){0,256}";
  return {
      {"nested optional repetition (the 20-byte request)", Constraint::Kind::kRegex,
       "((a?){0,256}){0,256}"},
      {"nested optional any-character repetition (the 14 s stall)", Constraint::Kind::kRegex,
       "((.?){0,180}){0,180}"},
      {"counted star of a counted group", Constraint::Kind::kRegex,
       "(?:(?:(?:.{4096})*){0,64}){4096}"},
      {"GBNF nested repetition of an optional", Constraint::Kind::kGrammar,
       "root ::= x{0,256}\nx ::= y{0,256}\ny ::= \"a\"?\n"},
      {"JSON Schema pattern", Constraint::Kind::kJsonSchema,
       R"({"type": "object", "properties": {"a": {"type": "string", "pattern": ")" +
           nested_pattern + R"("}}, "required": ["a"]})"},
      {"tool parameters with the pattern, reached after a literal prefix",
       Constraint::Kind::kGrammar,
       "root ::= \"<tool_call>{\\\"name\\\": \\\"f\\\", \\\"arguments\\\": \" args "
       "\"}</tool_call>\"\nargs ::= x{0,256}\nx ::= y{0,256}\ny ::= \"a\"?\n"},
      {"three nested levels", Constraint::Kind::kRegex, "(((a?){0,40}){0,40}){0,40}"},
      {"exact count of an optional group", Constraint::Kind::kRegex, "(.?){4096}"},
  };
}

TEST(BudgetTest, HostileConstraintsAreRefusedFastNamingTheLimit) {
  for (const Hostile& h : HostileConstraints()) {
    const auto start = std::chrono::steady_clock::now();
    GrammarCompiler compiler(ByteVocabulary());
    const absl::Status status = compiler.Compile(Make(h.kind, h.text)).status();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << h.name << ": " << status;
    EXPECT_THAT(status.message(),
                ::testing::AnyOf(HasSubstr("too complex"), HasSubstr("units of matching work")))
        << h.name;
    EXPECT_THAT(status.message(), HasSubstr("limit")) << h.name;
    // Bounded work, not a timing assertion: far above what the budget allows even under
    // sanitizers, far below the minutes the unbounded matcher took.
    EXPECT_LT(seconds, 30.0) << h.name;
  }
}

TEST(BudgetTest, ErrorsInGeneratedGrammarsCiteNoPositionTheClientNeverWrote) {
  // A regex (or schema, or choice list) is compiled through GBNF that the client never sees: a
  // limit reached while parsing it names the constraint's kind, not "line 1, column 267" of
  // the generated text. A client's own GBNF keeps its line and column. 260 exact repetitions of
  // 4096 are more than the 2^20 symbols a grammar may expand to.
  std::string regex_text, gbnf_text = "root ::=";
  for (int i = 0; i < 260; ++i) {
    regex_text += "a{4096}";
    gbnf_text += " \"a\"{4096}";
  }
  const std::string regex = CompileError(Constraint::Kind::kRegex, regex_text);
  EXPECT_THAT(regex, HasSubstr("regex: grammar too large"));
  EXPECT_THAT(regex, ::testing::Not(HasSubstr("column")));
  const std::string grammar = CompileError(Constraint::Kind::kGrammar, gbnf_text);
  EXPECT_THAT(grammar, HasSubstr("grammar too large"));
  EXPECT_THAT(grammar, HasSubstr("line 1, column"));
}

TEST(BudgetTest, StaticBoundNamesTheGrammarRule) {
  EXPECT_THAT(CompileError(Constraint::Kind::kGrammar,
                           "root ::= \"x\" outer\nouter ::= inner{0,300}\ninner ::= y{0,300}\n"
                           "y ::= \"a\"?\n"),
              ::testing::AllOf(HasSubstr("grammar: too complex"), HasSubstr("limit is 32768"),
                               HasSubstr("at rule \"outer\"")));
  // The same shape under the bound compiles and matches.
  auto small = CompileOk(Constraint::Kind::kRegex, "((a?){0,20}){0,20}", ByteVocabulary());
  ASSERT_NE(small, nullptr);
  EXPECT_TRUE(Accepts(small, ""));
  EXPECT_TRUE(Accepts(small, std::string(400, 'a')));
  EXPECT_FALSE(Accepts(small, std::string(401, 'a')));
}

TEST(BudgetTest, LongNullableChainsExpandWithoutRecursion) {
  // 4096 optional items in a row: one expansion visits every one of them. The recursive matcher
  // needed a C++ frame per item; the iterative one a vector entry.
  auto chain = CompileOk(Constraint::Kind::kRegex, "(ab?){4096}", ByteVocabulary());
  ASSERT_NE(chain, nullptr);
  std::string text;
  for (int i = 0; i < 4096; ++i) text += i % 3 == 0 ? "ab" : "a";
  EXPECT_TRUE(Accepts(chain, text));
  EXPECT_FALSE(Accepts(chain, text + "a"));
  auto optional_chain =
      CompileOk(Constraint::Kind::kGrammar, "root ::= \"x\" y{0,4000} \"z\"\ny ::= \"a\"?\n",
                ByteVocabulary());
  ASSERT_NE(optional_chain, nullptr);
  EXPECT_TRUE(Accepts(optional_chain, "xz"));
  EXPECT_TRUE(Accepts(optional_chain, "x" + std::string(500, 'a') + "z"));
  auto short_chain = CompileOk(Constraint::Kind::kGrammar,
                               "root ::= \"x\" y{0,300} \"z\"\ny ::= \"a\"?\n", ByteVocabulary());
  ASSERT_NE(short_chain, nullptr);
  EXPECT_TRUE(Accepts(short_chain, "x" + std::string(300, 'a') + "z"));
  EXPECT_FALSE(Accepts(short_chain, "x" + std::string(301, 'a') + "z"));
}

// Runs fn on a thread with a 256 KB stack: the recursive expansion needed a frame per nullable
// item, so thousands of them overflowed it.
void RunOnSmallStack(void (*fn)()) {
  pthread_attr_t attr;
  ASSERT_EQ(pthread_attr_init(&attr), 0);
  ASSERT_EQ(pthread_attr_setstacksize(&attr, 256 << 10), 0);
  pthread_t thread;
  ASSERT_EQ(pthread_create(
                &thread, &attr,
                [](void* arg) -> void* {
                  reinterpret_cast<void (*)()>(arg)();
                  return nullptr;
                },
                reinterpret_cast<void*>(fn)),
            0);
  ASSERT_EQ(pthread_join(thread, nullptr), 0);
  pthread_attr_destroy(&attr);
}

TEST(BudgetTest, ExpansionNeedsNoStackPerItem) {
  RunOnSmallStack([] {
    auto grammar = CompileOk(Constraint::Kind::kGrammar,
                             "root ::= \"x\" y{0,4000} \"z\"\ny ::= \"a\"?\n", ByteVocabulary());
    ASSERT_NE(grammar, nullptr);
    GrammarMatcher matcher(grammar);
    std::vector<uint32_t> bits((grammar->vocab().size() + 31) / 32);
    ASSERT_TRUE(matcher.AcceptString("x"));
    ASSERT_TRUE(matcher.FillNextTokenBitmask(absl::MakeSpan(bits)));
    EXPECT_TRUE((bits['a' / 32] >> ('a' % 32)) & 1);
    EXPECT_TRUE((bits['z' / 32] >> ('z' % 32)) & 1);
  });
}

TEST(BudgetTest, MatcherPastItsBudgetFailsAndRefusesEverything) {
  // Under the static bound and cheap at its start (the probe passes), expensive once the
  // literal prefix is behind: the matcher's per-call budget ends it.
  auto grammar = CompileOk(Constraint::Kind::kRegex, "abc(.?){2000}", ByteVocabulary());
  ASSERT_NE(grammar, nullptr);
  GrammarMatcher matcher(grammar);
  ASSERT_TRUE(matcher.status().ok());
  std::vector<uint32_t> bits((grammar->vocab().size() + 31) / 32);
  ASSERT_TRUE(matcher.FillNextTokenBitmask(absl::MakeSpan(bits)));
  ASSERT_TRUE(matcher.AcceptString("abc"));
  EXPECT_FALSE(matcher.FillNextTokenBitmask(absl::MakeSpan(bits)));
  EXPECT_TRUE(absl::IsInvalidArgument(matcher.status())) << matcher.status();
  EXPECT_THAT(matcher.status().message(), HasSubstr("units of matching work"));
  for (const uint32_t word : bits) EXPECT_EQ(word, 0u);
  EXPECT_FALSE(matcher.AcceptToken('x'));
  EXPECT_FALSE(matcher.Rollback(1));
  EXPECT_FALSE(matcher.FillNextTokenBitmask(absl::MakeSpan(bits)));
}

TEST(BudgetTest, TheCompilersWorkBudgetIsEveryMatchersBudget) {
  // The mask after "abc" takes W units within the default budget; a compiler given a budget
  // under W compiles the same constraint (its probe is cheap) into matchers that fail there,
  // naming that budget, and one given a budget over W into matchers that do not.
  const std::string regex = "abc(.?){60}";
  int64_t work = 0;
  {
    auto grammar = CompileOk(Constraint::Kind::kRegex, regex, ByteVocabulary());
    ASSERT_NE(grammar, nullptr);
    GrammarMatcher matcher(grammar);
    std::vector<uint32_t> bits((grammar->vocab().size() + 31) / 32);
    ASSERT_TRUE(matcher.AcceptString("abc"));
    ASSERT_TRUE(matcher.FillNextTokenBitmask(absl::MakeSpan(bits))) << matcher.status();
    work = matcher.stats().max_call_work;
  }
  ASSERT_GT(work, 1000);
  for (const int64_t budget : {work / 2, work * 2}) {
    SCOPED_TRACE(budget);
    GrammarCompiler compiler(ByteVocabulary(), 4, GrammarCompiler::kDefaultCacheBytes, budget);
    absl::StatusOr<std::shared_ptr<const CompiledGrammar>> grammar =
        compiler.Compile(Make(Constraint::Kind::kRegex, regex));
    ASSERT_TRUE(grammar.ok()) << grammar.status();
    EXPECT_EQ((*grammar)->max_work_per_call(), budget);
    GrammarMatcher matcher(*grammar);
    std::vector<uint32_t> bits(((*grammar)->vocab().size() + 31) / 32);
    ASSERT_TRUE(matcher.AcceptString("abc"));
    const bool filled = matcher.FillNextTokenBitmask(absl::MakeSpan(bits));
    EXPECT_EQ(filled, budget > work) << matcher.status();
    if (!filled) {
      EXPECT_THAT(matcher.status().message(), HasSubstr(absl::StrCat("more than ", budget)));
    }
  }
}

TEST(BudgetTest, EveryMatcherOfTheExpensiveStateFails) {
  // A mask cut short by the budget never reaches the grammar's shared cache, where another
  // matcher would take it for a real one: the second matcher fails the same way.
  auto grammar = CompileOk(Constraint::Kind::kRegex, "abc(.?){2000}", ByteVocabulary());
  ASSERT_NE(grammar, nullptr);
  std::vector<uint32_t> bits((grammar->vocab().size() + 31) / 32);
  for (int round = 0; round < 2; ++round) {
    GrammarMatcher matcher(grammar);
    ASSERT_TRUE(matcher.AcceptString("abc"));
    EXPECT_FALSE(matcher.FillNextTokenBitmask(absl::MakeSpan(bits))) << round;
  }
}

TEST(BudgetTest, EnumAndConstHonourTheirSiblingKeywords) {
  auto integers =
      CompileOk(Constraint::Kind::kJsonSchema,
                R"({"type": "integer", "enum": [1, 50], "maximum": 10})", ByteVocabulary());
  ASSERT_NE(integers, nullptr);
  EXPECT_TRUE(Accepts(integers, "1"));
  EXPECT_FALSE(Accepts(integers, "50"));
  auto strings = CompileOk(Constraint::Kind::kJsonSchema,
                           R"({"type": "string", "enum": ["apple", "banana"], "maxLength": 5})",
                           ByteVocabulary());
  ASSERT_NE(strings, nullptr);
  EXPECT_TRUE(Accepts(strings, "\"apple\""));
  EXPECT_FALSE(Accepts(strings, "\"banana\""));
  auto arrays = CompileOk(Constraint::Kind::kJsonSchema,
                          R"({"enum": [[1], [1, 2, 3], "x"], "maxItems": 2})", ByteVocabulary());
  ASSERT_NE(arrays, nullptr);
  EXPECT_TRUE(Accepts(arrays, "[1]"));
  EXPECT_TRUE(Accepts(arrays, "\"x\""));  // maxItems holds for what is not an array
  EXPECT_FALSE(Accepts(arrays, "[1, 2, 3]"));
  auto exclusive = CompileOk(Constraint::Kind::kJsonSchema,
                             R"({"enum": [0, 0.5, 1, -3], "exclusiveMinimum": 0, "maximum": 1})",
                             ByteVocabulary());
  ASSERT_NE(exclusive, nullptr);
  EXPECT_TRUE(Accepts(exclusive, "0.5"));
  EXPECT_TRUE(Accepts(exclusive, "1"));
  EXPECT_FALSE(Accepts(exclusive, "0"));
  EXPECT_FALSE(Accepts(exclusive, "-3"));
  auto objects =
      CompileOk(Constraint::Kind::kJsonSchema,
                R"({"enum": [{"a": 1}, {"b": 2}], "required": ["b"]})", ByteVocabulary());
  ASSERT_NE(objects, nullptr);
  EXPECT_TRUE(Accepts(objects, "{\"b\": 2}"));
  EXPECT_FALSE(Accepts(objects, "{\"a\": 1}"));
  auto big = CompileOk(Constraint::Kind::kJsonSchema,
                       R"({"enum": [9007199254740993, 9007199254740992],
                           "maximum": 9007199254740992})",
                       ByteVocabulary());
  ASSERT_NE(big, nullptr);
  EXPECT_TRUE(Accepts(big, "9007199254740992"));
  EXPECT_FALSE(Accepts(big, "9007199254740993"));  // compared exactly, not as doubles

  EXPECT_THAT(CompileError(Constraint::Kind::kJsonSchema, R"({"const": 50, "minimum": 60})"),
              HasSubstr("const: no value satisfies"));
  EXPECT_THAT(CompileError(Constraint::Kind::kJsonSchema, R"({"const": "ab", "pattern": "^a$"})"),
              HasSubstr("pattern: not supported next to \"const\""));
  EXPECT_THAT(CompileError(Constraint::Kind::kJsonSchema, R"({"enum": ["a"], "format": "email"})"),
              HasSubstr("format: not supported next to \"enum\""));
  EXPECT_THAT(CompileError(Constraint::Kind::kJsonSchema, R"({"enum": [1], "maximum": "x"})"),
              HasSubstr("maximum: must be a finite number"));
  EXPECT_THAT(CompileError(Constraint::Kind::kJsonSchema, R"({"enum": ["a"], "maxLength": -1})"),
              HasSubstr("maxLength: must be a non-negative integer"));
  // Annotations stay annotations.
  EXPECT_NE(CompileOk(Constraint::Kind::kJsonSchema,
                      R"({"enum": ["a"], "description": "d", "title": "t"})", ByteVocabulary()),
            nullptr);
}

TEST(BudgetTest, CacheStaysWithinItsByteBudget) {
  const auto vocab = ByteVocabulary();
  // Room for about three of these grammars.
  auto one = CompileOk(Constraint::Kind::kRegex, "[a-z]{0,2000}", vocab);
  ASSERT_NE(one, nullptr);
  const size_t each = one->MemoryBound();
  GrammarCompiler compiler(vocab, 128, 3 * each + each / 2);
  for (int i = 0; i < 20; ++i) {
    const std::string regex = "[a-z]{0,2000}" + std::string(i, 'q');
    ASSERT_TRUE(compiler.Compile(Make(Constraint::Kind::kRegex, regex)).ok()) << i;
    EXPECT_LE(compiler.cached_bytes(), 3 * each + each / 2) << i;
  }
  EXPECT_GE(compiler.cached_grammars(), 2u);
  EXPECT_LE(compiler.cached_grammars(), 3u);
  // A grammar bigger than the whole budget is compiled and used, never kept.
  GrammarCompiler tiny(vocab, 128, each / 2);
  auto big = tiny.Compile(Make(Constraint::Kind::kRegex, "[a-z]{0,2000}"));
  ASSERT_TRUE(big.ok());
  EXPECT_TRUE(Accepts(*big, "abc"));
  EXPECT_EQ(tiny.cached_grammars(), 0u);
  EXPECT_EQ(tiny.cached_bytes(), 0u);
}

}  // namespace
}  // namespace llmserve::worker::structured
