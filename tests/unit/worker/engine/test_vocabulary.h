// A 40-token vocabulary for engine tests with constrained decoding, and grammars compiled against
// it. Header-only, for gtest tests.
//
// Token 0: EOS; 1: a special token; 2..27: "a".."z"; 28: "\""; 29: "{"; 30: "}"; 31: ":";
// 32: ","; 33: " "; 34: "ab"; 35: "bc"; 36..39: digits "0".."3".

#ifndef LLMSERVE_TESTS_UNIT_ENGINE_TEST_VOCABULARY_H_
#define LLMSERVE_TESTS_UNIT_ENGINE_TEST_VOCABULARY_H_

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/structured/constraint.h"
#include "worker/structured/grammar_compiler.h"
#include "worker/structured/vocabulary.h"

namespace llmserve::worker::testing {

inline constexpr int32_t kTestVocabSize = 40;
inline constexpr int32_t kTestEos = 0;
inline constexpr int32_t kTestSpecial = 1;  // a control token, never text

inline std::vector<std::string> TestTokenTexts() {
  std::vector<std::string> texts(kTestVocabSize);
  for (int i = 0; i < 26; ++i) texts[2 + i] = std::string(1, static_cast<char>('a' + i));
  texts[28] = "\"";
  texts[29] = "{";
  texts[30] = "}";
  texts[31] = ":";
  texts[32] = ",";
  texts[33] = " ";
  texts[34] = "ab";
  texts[35] = "bc";
  for (int i = 0; i < 4; ++i) texts[36 + i] = std::string(1, static_cast<char>('0' + i));
  return texts;
}

// `constraint` compiled against the test vocabulary; null (with a test failure) when it cannot be.
inline std::shared_ptr<const structured::CompiledGrammar> CompileForTestVocabulary(
    const structured::Constraint& constraint) {
  std::vector<bool> is_text(kTestVocabSize, true);
  is_text[kTestEos] = false;
  is_text[kTestSpecial] = false;
  absl::StatusOr<std::shared_ptr<const structured::TokenVocabulary>> vocabulary =
      structured::TokenVocabulary::FromTokenBytes(TestTokenTexts(), is_text, {kTestEos});
  EXPECT_TRUE(vocabulary.ok()) << vocabulary.status();
  if (!vocabulary.ok()) return nullptr;
  structured::GrammarCompiler compiler(*vocabulary);
  absl::StatusOr<std::shared_ptr<const structured::CompiledGrammar>> grammar =
      compiler.Compile(constraint);
  EXPECT_TRUE(grammar.ok()) << grammar.status();
  return grammar.ok() ? *grammar : nullptr;
}

}  // namespace llmserve::worker::testing

#endif  // LLMSERVE_TESTS_UNIT_ENGINE_TEST_VOCABULARY_H_
