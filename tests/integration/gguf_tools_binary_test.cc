// The engine tools on a GGUF file (`--model x.gguf`): llmserve-run reproduces stories260K's
// reference greedy ids (expected/reference_greedy.jsonl) from the f32 file, one prompt alone and
// all of them batched, served with --max_model_len=512 (the checkpoint's context; the file
// declares llama.cpp's converter default of 128); llmserve-bench-engine (with --quantization=int8)
// and llmserve-dump-logits run on the quantized file; text prompts give llama.cpp's own greedy text
// (expected/llama_cpp_greedy.jsonl); a path that is no model is refused by name;
// llmserve-perplexity gives a model zero KL divergence and full top-1 agreement against its own
// base run, a small positive divergence to int8 and the quantized file, and refuses a base of other
// ctx or tokens. Skips with a message when LLMSERVE_TESTDATA is unset or lacks the models.

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
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

std::string StoriesDir(std::string* why) {
  return ::llmserve::testing::ModelsDir("stories260K", why);
}

std::vector<Json> ReferenceCases(const std::string& dir) {
  std::vector<Json> cases;
  std::ifstream in(dir + "/expected/reference_greedy.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) cases.push_back(Json::parse(line));
  }
  return cases;
}

TEST(GgufToolsTest, RunReproducesTheReferenceGreedyIdsAloneAndBatched) {
  std::string why;
  const std::string dir = StoriesDir(&why);
  if (dir.empty()) GTEST_SKIP() << why;
  const std::vector<Json> cases = ReferenceCases(dir);
  ASSERT_GE(cases.size(), 3u);
  const std::vector<std::string> common = {::llmserve::testing::RunToolBinary(),
                                           "--model=" + dir + "/gguf/stories260K-f32.gguf",
                                           "--max_model_len=512",
                                           "--temperature=0",
                                           "--ignore_eos",
                                           "--threads=1",
                                           "--json"};

  // Alone: the last case from the command line.
  const Json& last = cases.back();
  std::vector<std::string> alone = common;
  alone.push_back("--prompt_ids=" + absl::StrJoin(last["prompt_ids"].get<std::vector<int>>(), " "));
  alone.push_back("--max_tokens=" + std::to_string(last["greedy_ids"].size()));
  const JsonLinesRun one = ::llmserve::testing::RunForJsonLines(alone, kPatience);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  ASSERT_GE(one.lines.size(), 1u) << one.output;
  EXPECT_EQ(one.lines[0]["token_ids"], last["greedy_ids"]) << last["case"];

  // Batched: every case from a prompts file, in one engine.
  const ::llmserve::testing::ScopedTempDir temp("gguf_tools");
  const std::string prompts = temp.File("prompts.jsonl");
  {
    std::ofstream out(prompts);
    for (const Json& c : cases) {
      out << Json{{"prompt_ids", c["prompt_ids"]}, {"max_tokens", c["greedy_ids"].size()}}.dump()
          << "\n";
    }
  }
  std::vector<std::string> batched = common;
  batched.push_back("--prompts=" + prompts);
  const JsonLinesRun all = ::llmserve::testing::RunForJsonLines(batched, kPatience);
  ASSERT_EQ(all.exit_code, 0) << all.output;
  ASSERT_EQ(all.lines.size(), cases.size() + 1) << all.output;  // then a summary line
  for (size_t i = 0; i < cases.size(); ++i) {
    const Json& result = all.lines[i];
    const size_t index = result["index"].get<size_t>();
    ASSERT_LT(index, cases.size());
    EXPECT_EQ(result["token_ids"], cases[index]["greedy_ids"]) << cases[index]["case"];
  }
}

// Text in, text out, against llama.cpp itself (expected/llama_cpp_greedy.jsonl, llama-cli --temp 0
// -n 64): the f32 file's three stories, with the tokenizer from the file's metadata.
TEST(GgufToolsTest, RunWritesLlamaCppsGreedyTextFromTextPrompts) {
  std::string why;
  const std::string dir = StoriesDir(&why);
  if (dir.empty()) GTEST_SKIP() << why;
  std::vector<Json> cases;
  std::ifstream in(dir + "/expected/llama_cpp_greedy.jsonl");
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    Json c = Json::parse(line);
    if (c["gguf"] == "stories260K-f32.gguf") cases.push_back(std::move(c));
  }
  ASSERT_EQ(cases.size(), 3u);
  const ::llmserve::testing::ScopedTempDir temp("gguf_text");
  const std::string prompts = temp.File("prompts.jsonl");
  {
    std::ofstream out(prompts);
    for (const Json& c : cases) {
      // An empty prompt is BOS alone for llama.cpp.
      out << (c["prompt"] == "" ? Json{{"prompt_ids", {1}}} : Json{{"prompt", c["prompt"]}}).dump()
          << "\n";
    }
  }
  const JsonLinesRun run = ::llmserve::testing::RunForJsonLines(
      {::llmserve::testing::RunToolBinary(), "--model=" + dir + "/gguf/stories260K-f32.gguf",
       "--max_model_len=512", "--temperature=0", "--ignore_eos", "--max_tokens=64", "--threads=1",
       "--json", "--prompts=" + prompts},
      kPatience);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  ASSERT_EQ(run.lines.size(), cases.size() + 1) << run.output;
  const auto strip = [](std::string text) {
    text.erase(0, text.find_first_not_of(" \n"));
    text.erase(text.find_last_not_of(" \n") + 1);
    return text;
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const Json& c = cases[run.lines[i]["index"].get<size_t>()];
    EXPECT_EQ(strip(c["prompt"].get<std::string>() + run.lines[i]["text"].get<std::string>()),
              strip(c["text"].get<std::string>()))
        << c["prompt"];
  }
}

TEST(GgufToolsTest, BenchEngineAndDumpLogitsRunOnAQuantizedFile) {
  std::string why;
  const std::string dir = StoriesDir(&why);
  if (dir.empty()) GTEST_SKIP() << why;
  const std::string model = "--model=" + dir + "/gguf/stories260K-Q4_K_M.gguf";
  const JsonLinesRun bench = ::llmserve::testing::RunForJsonLines(
      {::llmserve::testing::BenchEngineBinary(), model, "--dtype=f32", "--threads=1", "--batch=1,2",
       "--prompt_len=8", "--gen_len=4", "--quantization=int8"},
      kPatience);
  ASSERT_EQ(bench.exit_code, 0) << bench.output;
  ASSERT_EQ(bench.lines.size(), 2u) << bench.output;
  // The dequantized projections go through the int8 quantizer like a directory's.
  EXPECT_EQ(bench.lines[0]["quantization"], "int8") << bench.output;

  const ::llmserve::testing::ScopedTempDir temp("gguf_dump");
  std::ofstream(temp.File("ids.txt")) << "1 274 287 269 345\n";
  const JsonLinesRun dump = ::llmserve::testing::RunForJsonLines(
      {::llmserve::testing::DumpLogitsBinary(), model, "--dtype=f32", "--threads=1",
       "--prompts=" + temp.File("ids.txt"), "--out=" + temp.File("logits.f32"), "--gen_len=4"},
      kPatience);
  ASSERT_EQ(dump.exit_code, 0) << dump.output;
  ASSERT_EQ(dump.lines.size(), 1u) << dump.output;
  EXPECT_EQ(dump.lines[0]["greedy"].size(), 4u);
  EXPECT_EQ(std::filesystem::file_size(temp.File("logits.f32")), 5u * 512 * sizeof(float));
}

TEST(GgufToolsTest, APathThatIsNoModelIsRefusedByName) {
  const ::llmserve::testing::ScopedTempDir temp("gguf_bad_model");
  std::ofstream(temp.File("notes.txt")) << "not a model";
  const JsonLinesRun run = ::llmserve::testing::RunForJsonLines(
      {::llmserve::testing::RunToolBinary(), "--model=" + temp.File("notes.txt"),
       "--prompt_ids=1 2", "--threads=1"},
      kPatience);
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("is a file but not a GGUF file"), std::string::npos) << run.output;
}

TEST(GgufToolsTest, PerplexityMeasuresWhatAModeCostsAgainstABaseRun) {
  std::string why;
  const std::string dir = StoriesDir(&why);
  if (dir.empty()) GTEST_SKIP() << why;
  // The reference cases' prompts and greedy continuations, one after another: 300+ tokens.
  const ::llmserve::testing::ScopedTempDir temp("gguf_perplexity");
  const std::string ids = temp.File("ids.txt");
  {
    std::ofstream out(ids);
    for (const Json& c : ReferenceCases(dir)) {
      out << absl::StrJoin(c["prompt_ids"].get<std::vector<int>>(), " ") << " "
          << absl::StrJoin(c["greedy_ids"].get<std::vector<int>>(), " ") << "\n";
    }
  }
  const std::string f32 = dir + "/gguf/stories260K-f32.gguf";
  const std::string base = temp.File("base.bin");
  auto run = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {::llmserve::testing::PerplexityBinary(), "--tokens=" + ids,
                               "--ctx=64", "--threads=1"});
    return ::llmserve::testing::RunForJsonLines(args, kPatience);
  };
  const JsonLinesRun saved = run({"--model=" + f32, "--save_base=" + base});
  ASSERT_EQ(saved.exit_code, 0) << saved.output;
  ASSERT_EQ(saved.lines.size(), 1u) << saved.output;
  const double ppl = saved.lines[0]["ppl"].get<double>();
  EXPECT_GT(ppl, 1.0);
  EXPECT_LT(ppl, 512.0);  // better than uniform over the vocabulary
  EXPECT_EQ(saved.lines[0]["scored"].get<int>(), saved.lines[0]["chunks"].get<int>() * 31);

  const JsonLinesRun same = run({"--model=" + f32, "--kl_base=" + base});
  ASSERT_EQ(same.exit_code, 0) << same.output;
  ASSERT_EQ(same.lines.size(), 1u) << same.output;
  EXPECT_EQ(same.lines[0]["mean_kld"].get<double>(), 0.0);
  EXPECT_EQ(same.lines[0]["top1_agreement"].get<double>(), 1.0);
  EXPECT_EQ(same.lines[0]["ppl_base"].get<double>(), ppl);

  for (const std::vector<std::string>& mode :
       {std::vector<std::string>{"--model=" + f32, "--quantization=int8"},
        std::vector<std::string>{"--model=" + dir + "/gguf/stories260K-Q4_K_M.gguf"}}) {
    std::vector<std::string> args = mode;
    args.push_back("--kl_base=" + base);
    const JsonLinesRun quantized = run(args);
    ASSERT_EQ(quantized.exit_code, 0) << quantized.output;
    ASSERT_EQ(quantized.lines.size(), 1u) << quantized.output;
    const double kld = quantized.lines[0]["mean_kld"].get<double>();
    EXPECT_GT(kld, 0.0) << mode[1];
    EXPECT_LT(kld, 0.05) << mode[1];
    EXPECT_GT(quantized.lines[0]["top1_agreement"].get<double>(), 0.9) << mode[1];
  }

  const JsonLinesRun other_ctx = run({"--model=" + f32, "--kl_base=" + base, "--ctx=32"});
  EXPECT_EQ(other_ctx.exit_code, 1);
  EXPECT_NE(other_ctx.output.find("was made with ctx 64"), std::string::npos) << other_ctx.output;
  const std::string bad_ids = temp.File("bad.txt");
  std::ofstream(bad_ids) << "1 2 512";
  const JsonLinesRun bad = ::llmserve::testing::RunForJsonLines(
      {::llmserve::testing::PerplexityBinary(), "--model=" + f32, "--tokens=" + bad_ids},
      kPatience);
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.output.find("word 3 '512' is not a token id in [0, 512)"), std::string::npos)
      << bad.output;
}

}  // namespace
}  // namespace llmserve
