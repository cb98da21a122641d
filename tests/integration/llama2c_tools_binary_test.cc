// The tools on the llama2.c checkpoint ($LLMSERVE_TESTDATA/models/stories260K/stories260K.bin):
// `llmserve-run --model stories260K.bin` (its tokenizer tok512.model, found beside it) turns the
// reference's text prompts into the reference story (expected/reference_greedy.jsonl), and
// `llmserve-make-model --from-llama2c` writes a Hugging Face directory that llmserve-run serves
// with the same result. Skips with a message when LLMSERVE_TESTDATA is unset or lacks the model.

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/testing/build_paths.h"
#include "tests/testing/json_lines_run.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tests/testing/testdata_models.h"

namespace llmserve {
namespace {

using ::llmserve::testing::JsonLinesRun;
using Json = nlohmann::json;

constexpr absl::Duration kPatience = absl::Seconds(120);

// The text prompts of the reference (the cases after the BOS-only one) and their stories.
struct TextCase {
  std::string prompt;
  Json reference;
};

std::vector<TextCase> TextCases(const std::string& dir) {
  const std::vector<std::pair<std::string, std::string>> prompts = {
      {"tom-60", "Tom and his dog went to the"}, {"bird-80", "The little bird wanted to fly"}};
  std::vector<TextCase> cases;
  std::ifstream in(dir + "/expected/reference_greedy.jsonl");
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const Json c = Json::parse(line);
    for (const auto& [name, prompt] : prompts) {
      if (c["case"] == name) cases.push_back({prompt, c});
    }
  }
  return cases;
}

// llmserve-run on `model` with every text case batched: each gives its reference ids and text.
void ExpectTheReferenceStories(const std::string& model, const std::vector<TextCase>& cases,
                               const ::llmserve::testing::ScopedTempDir& temp) {
  const std::string prompts = temp.File("prompts.jsonl");
  {
    std::ofstream out(prompts);
    for (const TextCase& c : cases) {
      out << Json{{"prompt", c.prompt}, {"max_tokens", c.reference["greedy_ids"].size()}}.dump()
          << "\n";
    }
  }
  const JsonLinesRun run = ::llmserve::testing::RunForJsonLines(
      {::llmserve::testing::RunToolBinary(), "--model=" + model, "--temperature=0", "--ignore_eos",
       "--threads=1", "--json", "--prompts=" + prompts},
      kPatience);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  ASSERT_EQ(run.lines.size(), cases.size() + 1) << run.output;  // then a summary line
  for (size_t i = 0; i < cases.size(); ++i) {
    const Json& result = run.lines[i];
    const size_t index = result["index"].get<size_t>();  // in the order they finished
    ASSERT_LT(index, cases.size());
    const TextCase& c = cases[index];
    EXPECT_EQ(result["token_ids"], c.reference["greedy_ids"]) << c.prompt;
    EXPECT_EQ(c.prompt + result["text"].get<std::string>(), c.reference["text"].get<std::string>());
  }
}

TEST(Llama2cToolsTest, RunTellsTheReferenceStoriesFromTextPrompts) {
  std::string why;
  const std::string dir = ::llmserve::testing::ModelsDir("stories260K", &why);
  if (dir.empty()) GTEST_SKIP() << why;
  const std::vector<TextCase> cases = TextCases(dir);
  ASSERT_EQ(cases.size(), 2u);
  const ::llmserve::testing::ScopedTempDir temp("llama2c_run");
  ExpectTheReferenceStories(dir + "/stories260K.bin", cases, temp);
}

TEST(Llama2cToolsTest, MakeModelFromLlama2cWritesADirectoryThatTellsTheSameStories) {
  std::string why;
  const std::string dir = ::llmserve::testing::ModelsDir("stories260K", &why);
  if (dir.empty()) GTEST_SKIP() << why;
  const std::vector<TextCase> cases = TextCases(dir);
  ASSERT_EQ(cases.size(), 2u);
  const ::llmserve::testing::ScopedTempDir temp("llama2c_make_model");
  const std::string out = temp.File("stories260K");
  const JsonLinesRun made = ::llmserve::testing::RunForJsonLines(
      {::llmserve::testing::MakeModelBinary(), "--from-llama2c=" + dir + "/stories260K.bin",
       "--tokenizer=" + dir + "/tok512.model", "--out=" + out},
      kPatience);
  ASSERT_EQ(made.exit_code, 0) << made.output;
  ExpectTheReferenceStories(out, cases, temp);
}

}  // namespace
}  // namespace llmserve
