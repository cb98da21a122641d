// llmserve-dump-logits and llmserve-bench-engine as the GPU check (scripts/gpu/check.sh) runs
// them, on the CPU backend and a generated tiny model: the logits file holds every prompt row,
// the greedy tokens are the engine's (llmserve-run, through the scheduler and sampler), bad input
// ends with a message naming it, and the benchmark separates its Forward time from its own argmax.

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/testing/build_paths.h"
#include "tests/testing/json_lines_run.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tests/testing/test_model.h"

namespace llmserve {
namespace {

using ::llmserve::testing::JsonLinesRun;
using Json = nlohmann::json;

constexpr absl::Duration kPatience = absl::Seconds(120);

JsonLinesRun RunBinary(const std::vector<std::string>& argv) {
  return ::llmserve::testing::RunForJsonLines(argv, kPatience);
}

class EngineToolsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new ::llmserve::testing::ScopedTempDir();
    ASSERT_TRUE(::llmserve::testing::WriteTinyModel(dir_->path()).ok());
    std::ifstream in(dir_->path() + "/config.json");
    config_ = new Json(Json::parse(in));
  }
  static void TearDownTestSuite() {
    delete config_;
    delete dir_;
  }
  static std::string Model() { return "--model=" + dir_->path(); }
  static std::string Prompts(const std::string& name, const std::string& text) {
    const std::string path = dir_->File(name);
    std::ofstream(path) << text;
    return path;
  }

  static ::llmserve::testing::ScopedTempDir* dir_;
  static Json* config_;
};
::llmserve::testing::ScopedTempDir* EngineToolsTest::dir_ = nullptr;
Json* EngineToolsTest::config_ = nullptr;

TEST_F(EngineToolsTest, DumpLogitsWritesEveryPromptRowAndDecodesTheEnginesGreedyTokens) {
  const int64_t vocab = (*config_)["vocab_size"];
  const std::string out = dir_->File("logits.f32");
  const JsonLinesRun run = RunBinary(
      {::llmserve::testing::DumpLogitsBinary(), Model(), "--dtype=f32", "--threads=1",
       "--prompts=" + Prompts("ids.txt", "1 2 3 4 5\n\n7 8 9\n"), "--out=" + out, "--gen_len=4"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  ASSERT_EQ(run.lines.size(), 2u) << run.output;
  EXPECT_EQ(run.lines[0]["tokens"], 5);
  EXPECT_EQ(run.lines[1]["tokens"], 3);

  std::ifstream file(out, std::ios::binary);
  std::vector<float> logits((5 + 3) * vocab);
  file.read(reinterpret_cast<char*>(logits.data()), logits.size() * sizeof(float));
  ASSERT_EQ(file.gcount(), static_cast<std::streamsize>(logits.size() * sizeof(float)));
  EXPECT_EQ(file.peek(), std::char_traits<char>::eof()) << "more than the 8 prompt rows";
  for (float value : logits) ASSERT_TRUE(std::isfinite(value));
  // The first greedy token of each prompt is the argmax of its last prompt row in the file.
  for (const auto& [prompt, last_row] : std::vector<std::pair<int, int64_t>>{{0, 4}, {1, 7}}) {
    const float* row = logits.data() + last_row * vocab;
    const int64_t argmax = std::max_element(row, row + vocab) - row;
    EXPECT_EQ(run.lines[prompt]["greedy"][0], argmax) << "prompt " << prompt;
  }
  // Rows differ between positions: every prompt token has its own row, not copies of the last.
  EXPECT_NE(std::vector<float>(logits.begin(), logits.begin() + vocab),
            std::vector<float>(logits.begin() + vocab, logits.begin() + 2 * vocab));

  // The engine (scheduler, KV cache, sampler) decodes the same tokens greedily.
  const JsonLinesRun engine = RunBinary(
      {::llmserve::testing::RunToolBinary(), Model(), "--dtype=f32", "--threads=1",
       "--prompt_ids=1 2 3 4 5", "--temperature=0", "--max_tokens=4", "--ignore_eos", "--json"});
  ASSERT_EQ(engine.exit_code, 0) << engine.output;
  ASSERT_GE(engine.lines.size(), 1u) << engine.output;  // then a summary line
  EXPECT_EQ(engine.lines[0]["token_ids"], run.lines[0]["greedy"]);
}

TEST_F(EngineToolsTest, DumpLogitsRefusesBadInputNamingIt) {
  const int64_t vocab = (*config_)["vocab_size"];
  const std::string out = "--out=" + dir_->File("bad.f32");
  const struct {
    std::vector<std::string> flags;
    std::string message;
  } cases[] = {
      {{"--prompts=" + Prompts("range.txt", "1 2\n3 " + std::to_string(vocab) + "\n"), out},
       "--prompts line 2: '" + std::to_string(vocab) + "' is not a token id in [0, " +
           std::to_string(vocab) + ")"},
      {{"--prompts=" + Prompts("word.txt", "1 two\n"), out}, "'two' is not a token id"},
      {{"--prompts=" + Prompts("empty.txt", "\n\n"), out}, "--prompts file has no prompts"},
      {{"--prompts=" + dir_->File("missing.txt"), out}, "cannot open --prompts file"},
      {{"--prompts=" + Prompts("ok.txt", "1\n")}, "--out FILE is required"},
      {{"--prompts=" + Prompts("ok2.txt", "1\n"), out, "--backend=tpu"},
       "--backend must be cpu or cuda, not 'tpu'"},
      {{"--prompts=" + Prompts("ok3.txt", "1\n"), out, "--gen_len=-1"}, "--gen_len must be in"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> argv = {::llmserve::testing::DumpLogitsBinary(), Model(),
                                     "--dtype=f32"};
    argv.insert(argv.end(), c.flags.begin(), c.flags.end());
    const JsonLinesRun run = RunBinary(argv);
    EXPECT_EQ(run.exit_code, 1) << c.message << "\n" << run.output;
    EXPECT_NE(run.output.find(c.message), std::string::npos) << run.output;
  }
}

TEST_F(EngineToolsTest, BenchEngineReportsForwardTimeAndTheBytesAStepReads) {
  const JsonLinesRun run =
      RunBinary({::llmserve::testing::BenchEngineBinary(), Model(), "--dtype=f32", "--threads=1",
                 "--batch=1,3", "--prompt_len=8", "--gen_len=4"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  ASSERT_EQ(run.lines.size(), 2u) << run.output;
  const int64_t vocab = (*config_)["vocab_size"], hidden = (*config_)["hidden_size"];
  const bool tied = config_->value("tie_word_embeddings", false);
  for (const Json& line : run.lines) {
    EXPECT_GT(line["decode_forward_s"].get<double>(), 0.0) << line;
    EXPECT_LE(line["decode_forward_s"].get<double>(), line["decode_s"].get<double>()) << line;
    // f32 weights: a decode step reads all of them but an untied input embedding table.
    EXPECT_EQ(line["step_read_bytes"].get<int64_t>(),
              line["weight_bytes"].get<int64_t>() - (tied ? 0 : vocab * hidden * 4))
        << line;
  }
  EXPECT_EQ(run.lines[1]["batch"], 3);
}

// LLMSERVE_CPU_ISA caps the kernels for the whole process (an AVX-512 machine runs an AVX2 one's
// paths); the JSON says which ran, and a value it does not know stops the tool, naming it.
TEST_F(EngineToolsTest, TheCpuIsaSettingCapsTheKernelsAndABadOneIsRefused) {
  auto run_with = [&](const std::string& isa) {
    return RunBinary({"/usr/bin/env", "LLMSERVE_CPU_ISA=" + isa,
                      ::llmserve::testing::BenchEngineBinary(), Model(), "--dtype=f32",
                      "--threads=1", "--batch=1", "--prompt_len=4", "--gen_len=2"});
  };
  const JsonLinesRun uncapped = run_with("");
  ASSERT_EQ(uncapped.exit_code, 0) << uncapped.output;
  ASSERT_EQ(uncapped.lines.size(), 1u) << uncapped.output;
  const std::string best = uncapped.lines[0]["cpu_isa"];
  EXPECT_EQ(best.find("capped"), std::string::npos) << best;

  const JsonLinesRun baseline = run_with("baseline");
  ASSERT_EQ(baseline.exit_code, 0) << baseline.output;
  ASSERT_EQ(baseline.lines.size(), 1u) << baseline.output;
  const std::string portable = baseline.lines[0]["cpu_isa"];
  EXPECT_EQ(portable.rfind("baseline", 0), 0u) << portable;
  EXPECT_EQ(portable.find("capped") != std::string::npos, best != "baseline") << portable;

  const JsonLinesRun avx2 = run_with("avx2");
  ASSERT_EQ(avx2.exit_code, 0) << avx2.output;
  ASSERT_EQ(avx2.lines.size(), 1u) << avx2.output;
  const std::string capped = avx2.lines[0]["cpu_isa"];
  if (best.rfind("avx512", 0) == 0 || best.find("avx-vnni") != std::string::npos) {
    EXPECT_EQ(capped, "avx2 capped by LLMSERVE_CPU_ISA=avx2") << capped;
  } else {
    EXPECT_EQ(capped, best) << "a cap at or above what the CPU has changes nothing";
  }

  const JsonLinesRun bad = run_with("sse9");
  EXPECT_NE(bad.exit_code, 0) << bad.output;
  EXPECT_NE(bad.output.find("LLMSERVE_CPU_ISA=sse9: expected avx512, avxvnni, avx2 or baseline"),
            std::string::npos)
      << bad.output;
}

// --profile adds one "profile" line after each batch size's: every phase of the forward pass,
// times that add up to at most the decode steps' Forward time, and the projections' weight bytes,
// which sum to what a step reads.
TEST_F(EngineToolsTest, BenchEngineProfileSplitsTheDecodeStepsByPhase) {
  const JsonLinesRun run =
      RunBinary({::llmserve::testing::BenchEngineBinary(), Model(), "--dtype=f32", "--threads=2",
                 "--batch=1,2", "--prompt_len=8", "--gen_len=5", "--profile"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  ASSERT_EQ(run.lines.size(), 4u) << run.output;
  for (int i = 0; i < 2; ++i) {
    const Json& result = run.lines[2 * i];
    const Json& profile = run.lines[2 * i + 1];
    ASSERT_EQ(profile["kind"], "profile") << profile;
    EXPECT_EQ(profile["batch"], result["batch"]);
    EXPECT_EQ(profile["steps"], 5);
    const double forward_ms = profile["forward_ms_per_step"];
    EXPECT_NEAR(forward_ms * 5, result["decode_forward_s"].get<double>() * 1e3,
                0.05 * forward_ms * 5 + 0.5)
        << profile;
    double phase_ms = 0;
    int64_t bytes = 0;
    for (const char* phase :
         {"embed", "norm_residual", "qkv_proj", "attention", "o_proj", "gate_up_proj", "activation",
          "down_proj", "lora", "final_norm", "lm_head"}) {
      ASSERT_TRUE(profile["phases"].contains(phase)) << phase << " " << profile;
      phase_ms += profile["phases"][phase]["ms_per_step"].get<double>();
      bytes += profile["phases"][phase]["weight_bytes_per_step"].get<int64_t>();
    }
    // Each figure is printed to 4 decimals (half of 0.0001 ms of rounding each), and this model's
    // step takes well under a millisecond, so the 11 rounded phases may exceed the rounded whole.
    EXPECT_LE(phase_ms, forward_ms * 1.001 + 12 * 0.00005) << profile;
    double wait_ms = 0;
    for (const auto& phase : profile["phases"].items()) {
      wait_ms += phase.value()["pool_wait_ms_per_step"].get<double>();
    }
    EXPECT_NEAR(wait_ms, profile["pool_wait_ms_per_step"].get<double>(), 12 * 0.00005) << profile;
    EXPECT_GT(profile["phases"]["qkv_proj"]["weight_bytes_per_step"].get<int64_t>(), 0);
    EXPECT_EQ(profile["phases"]["attention"]["weight_bytes_per_step"].get<int64_t>(), 0);
    // The projections and the LM head are everything a step reads but the norms (1-D, not
    // counted) and an untied input embedding table (not read but for its rows).
    EXPECT_LE(bytes, result["step_read_bytes"].get<int64_t>()) << profile;
    EXPECT_GE(bytes, result["step_read_bytes"].get<int64_t>() * 9 / 10) << profile;
    EXPECT_GT(profile["pool_loops_per_step"].get<double>(), 0) << profile;
  }
  const JsonLinesRun cuda = RunBinary({::llmserve::testing::BenchEngineBinary(), Model(),
                                       "--backend=cuda", "--dtype=f16", "--profile"});
  EXPECT_NE(cuda.exit_code, 0);
  EXPECT_NE(cuda.output.find("--profile runs on the CPU backend only"), std::string::npos)
      << cuda.output;
}

}  // namespace
}  // namespace llmserve
