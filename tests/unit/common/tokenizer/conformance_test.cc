// Every case of every vocabulary in $LLMSERVE_TESTDATA/tokenizers must encode to exactly the ids
// Hugging Face produced (add_special_tokens=false). On a mismatch the test prints both id lists
// with their tokens, which is what one needs to find the differing component.
#include <fstream>
#include <string>
#include <vector>

#include "common/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/unit/common/tokenizer/testdata_util.h"

namespace llmserve::common::tokenizer {
namespace {

std::string Describe(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  std::string out;
  for (const int32_t id : ids) {
    out += std::to_string(id) + "(" + tok.IdToToken(id).value_or("?") + ") ";
  }
  return out;
}

TEST(tokenizer_conformance, EveryCaseOfEveryVocabularyMatchesHuggingFace) {
  if (testing::TestdataDir().empty()) {
    GTEST_SKIP() << "LLMSERVE_TESTDATA is not set; set it to the shared testdata folder "
                    "(e.g. /work/shared/testdata) to run the conformance cases";
  }
  const auto dirs = testing::TokenizerDirs();
  ASSERT_FALSE(dirs.empty()) << "no tokenizers under " << testing::TestdataDir();
  int checked = 0;
  int failed = 0;
  for (const auto& dir : dirs) {
    SCOPED_TRACE(dir.string());
    auto tok = Tokenizer::FromDirectory(dir.string());
    ASSERT_TRUE(tok.ok()) << tok.status();
    std::ifstream cases(dir / "cases.jsonl");
    ASSERT_TRUE(cases) << "missing cases.jsonl";
    std::string line;
    while (std::getline(cases, line)) {
      if (line.empty()) continue;
      const nlohmann::json c = nlohmann::json::parse(line);
      const std::string text = c["text"].get<std::string>();
      const std::vector<int32_t> expected = c["ids"].get<std::vector<int32_t>>();
      auto ids = (*tok)->Encode(text, /*add_special_tokens=*/false);
      ASSERT_TRUE(ids.ok()) << ids.status();
      ++checked;
      if (*ids != expected) {
        ++failed;
        ADD_FAILURE() << dir.filename() << " text=" << nlohmann::json(text).dump()
                      << "\n  expected: " << Describe(**tok, expected)
                      << "\n  got:      " << Describe(**tok, *ids);
      }
    }
  }
  std::cout << "conformance: " << checked << " cases in " << dirs.size() << " vocabularies, "
            << failed << " mismatches\n";
}

TEST(tokenizer_conformance, AddSpecialTokensPrependsBosWhereConfigured) {
  if (testing::TestdataDir().empty()) GTEST_SKIP() << "LLMSERVE_TESTDATA is not set";
  for (const auto& dir : testing::TokenizerDirs()) {
    SCOPED_TRACE(dir.string());
    auto tok = Tokenizer::FromDirectory(dir.string());
    ASSERT_TRUE(tok.ok()) << tok.status();
    std::ifstream config_file(dir / "tokenizer_config.json");
    const nlohmann::json config = nlohmann::json::parse(config_file);
    const bool add_bos = config.value("add_bos_token", false);
    auto plain = (*tok)->Encode("Hello world", false);
    auto with_special = (*tok)->Encode("Hello world", true);
    ASSERT_TRUE(plain.ok() && with_special.ok());
    if (add_bos) {
      ASSERT_TRUE((*tok)->bos_token_id().has_value());
      ASSERT_EQ(with_special->size(), plain->size() + 1);
      EXPECT_EQ(with_special->front(), *(*tok)->bos_token_id());
      EXPECT_TRUE((*tok)->IsSpecial(with_special->front()));
    } else {
      EXPECT_EQ(*with_special, *plain);
    }
  }
}

}  // namespace
}  // namespace llmserve::common::tokenizer
