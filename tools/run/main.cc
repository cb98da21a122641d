// llmserve-run: the whole engine in one process, without servers.
//
//   llmserve-run --model DIR --prompt "Once upon a time" --max-tokens 32        (streams text)
//   llmserve-run --model model.gguf --prompt-ids "1 403" --temperature 0        (a GGUF file)
//   llmserve-run --model DIR --prompt-ids "1 2 3" --json --logprobs 3
//   llmserve-run --model DIR --prompts prompts.jsonl --json                       (batched)
//   llmserve-run --model DIR --bench --bench-requests 64 --bench-prompt-len 128
//       --bench-output-len 128 [--bench-rate 8] [--bench-shared-prefix 0.5]
//
// With --json: one JSON line per finished request ({"index", "token_ids", "text",
// "finish_reason", "ttft_s", "e2e_s", "prompt_tokens", "cached_prompt_tokens"[, "top_logprobs"]}),
// then a summary line.

#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "common/base/flag_names.h"
#include "common/tokenizer/tokenizer.h"
#include "tools/run/bench.h"
#include "tools/run/prompts.h"
#include "tools/run/runner.h"
#include "worker/engine/cpu_engine_builder.h"
#include "worker/model/auto_dtype.h"
#include "worker/model/gguf_tokenizer.h"
#include "worker/model/model_loader.h"
#include "worker/model/quantization.h"
#include "worker/speculative/speculative_flags.h"

ABSL_FLAG(std::string, model, "",
          "a Hugging Face model directory, a GGUF file or a llama2.c .bin checkpoint");
ABSL_FLAG(std::string, dtype, "auto",
          "runtime weight dtype: f32, bf16, f16 or auto (the checkpoint's torch_dtype)");
ABSL_FLAG(std::string, quantization, "none",
          "none, int8 (quantize at load, per output channel, weights only), or awq / gptq (the "
          "checkpoint's own 4-bit format, which also runs with none)");
ABSL_FLAG(bool, quantize_lm_head, false,
          "the LM head in int8. Unset: on exactly when the projections are quantized (int8 or a "
          "4-bit checkpoint); false turns that off");
ABSL_FLAG(bool, quantized_activations, false,
          "with int8 or a 4-bit checkpoint: batches of up to 16 tokens quantize activations to "
          "int8 per block and multiply with integer dot products (different numerics)");
ABSL_FLAG(int, threads, 0, "kernel threads (0: one per hardware thread)");
ABSL_FLAG(double, kv_cache_gb, 1.0, "KV cache size in GiB");
ABSL_FLAG(int, block_size, 16, "tokens per KV cache block");
ABSL_FLAG(int64_t, max_model_len, 0,
          "context length to serve (0: the model's); a GGUF file's RoPE model may go past its "
          "declared context_length");
ABSL_FLAG(int, max_num_seqs, 64, "most requests in one step");
ABSL_FLAG(int, max_num_batched_tokens, 2048, "most tokens in one step");
ABSL_FLAG(bool, prefix_caching, true, "reuse the KV cache of shared prompt prefixes");
ABSL_FLAG(std::string, prompt, "", "a text prompt");
ABSL_FLAG(std::string, prompt_ids, "", "a prompt as token ids: \"1 2 3\"");
ABSL_FLAG(std::string, prompts, "", "a JSONL file of prompts ({\"prompt\": ...} per line)");
ABSL_FLAG(double, temperature, 1.0, "sampling temperature (0: greedy)");
ABSL_FLAG(int, top_k, 0, "top-k (0: off)");
ABSL_FLAG(double, top_p, 1.0, "top-p (1: off)");
ABSL_FLAG(double, min_p, 0.0, "min-p (0: off)");
ABSL_FLAG(int64_t, seed, -1, "sampling seed (-1: random)");
ABSL_FLAG(double, repetition_penalty, 1.0, "repetition penalty (1: off)");
ABSL_FLAG(double, presence_penalty, 0.0, "presence penalty");
ABSL_FLAG(double, frequency_penalty, 0.0, "frequency penalty");
ABSL_FLAG(int, max_tokens, 64, "tokens to generate at most (0: to the end of the context)");
ABSL_FLAG(bool, ignore_eos, false, "keep generating past EOS");
ABSL_FLAG(int, logprobs, 0, "return the N most likely tokens at each step (with --json)");
ABSL_FLAG(bool, json, false, "print JSON lines instead of text");
ABSL_FLAG(bool, bench, false, "run the benchmark instead of prompts");
ABSL_FLAG(int, bench_requests, 64, "benchmark: requests");
ABSL_FLAG(int, bench_prompt_len, 128, "benchmark: prompt tokens per request");
ABSL_FLAG(int, bench_output_len, 128, "benchmark: generated tokens per request");
ABSL_FLAG(double, bench_rate, 0.0, "benchmark: requests per second, Poisson (0: all at once)");
ABSL_FLAG(double, bench_shared_prefix, 0.0, "benchmark: fraction of the prompt all share");
ABSL_FLAG(double, bench_temperature, 0.0,
          "benchmark: sampling temperature (0: greedy; otherwise request i is seeded with i + 1)");

namespace {

using llmserve::tools::RunPrompt;
using llmserve::tools::RunResult;

int Fail(const std::string& message) {
  std::fprintf(stderr, "llmserve-run: %s\n", message.c_str());
  return 1;
}

RunPrompt DefaultsFromFlags() {
  RunPrompt prompt;
  auto& s = prompt.sampling;
  s.temperature = static_cast<float>(absl::GetFlag(FLAGS_temperature));
  s.top_k = absl::GetFlag(FLAGS_top_k);
  s.top_p = static_cast<float>(absl::GetFlag(FLAGS_top_p));
  s.min_p = static_cast<float>(absl::GetFlag(FLAGS_min_p));
  if (absl::GetFlag(FLAGS_seed) >= 0) s.seed = static_cast<uint64_t>(absl::GetFlag(FLAGS_seed));
  s.repetition_penalty = static_cast<float>(absl::GetFlag(FLAGS_repetition_penalty));
  s.presence_penalty = static_cast<float>(absl::GetFlag(FLAGS_presence_penalty));
  s.frequency_penalty = static_cast<float>(absl::GetFlag(FLAGS_frequency_penalty));
  s.top_logprobs = absl::GetFlag(FLAGS_logprobs);
  s.return_logprobs = s.top_logprobs > 0;
  prompt.stopping.max_tokens = absl::GetFlag(FLAGS_max_tokens);
  prompt.stopping.ignore_eos = absl::GetFlag(FLAGS_ignore_eos);
  return prompt;
}

std::string ResultJson(const RunResult& r, bool with_logprobs) {
  nlohmann::json line = {{"index", r.index},
                         {"token_ids", r.token_ids},
                         {"text", r.text},
                         {"finish_reason", llmserve::tools::FinishReasonName(r.finish)},
                         {"ttft_s", r.ttft_s},
                         {"e2e_s", r.e2e_s},
                         {"prompt_tokens", r.prompt_tokens},
                         {"cached_prompt_tokens", r.cached_prompt_tokens}};
  if (!r.error.empty()) line["error"] = r.error;
  if (with_logprobs) {
    nlohmann::json steps = nlohmann::json::array();
    for (const auto& alternatives : r.top_logprobs) {
      nlohmann::json step = nlohmann::json::array();
      for (const auto& [id, logprob] : alternatives) step.push_back({id, logprob});
      steps.push_back(step);
    }
    line["top_logprobs"] = steps;
  }
  return line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

absl::StatusOr<std::vector<RunPrompt>> PromptsFromFlags() {
  const RunPrompt defaults = DefaultsFromFlags();
  const int given = !absl::GetFlag(FLAGS_prompt).empty() +
                    !absl::GetFlag(FLAGS_prompt_ids).empty() +
                    !absl::GetFlag(FLAGS_prompts).empty();
  if (given != 1) {
    return absl::InvalidArgumentError("give exactly one of --prompt, --prompt-ids, --prompts");
  }
  if (!absl::GetFlag(FLAGS_prompts).empty()) {
    return llmserve::tools::ReadPromptsFile(absl::GetFlag(FLAGS_prompts), defaults);
  }
  RunPrompt prompt = defaults;
  if (!absl::GetFlag(FLAGS_prompt).empty()) {
    prompt.text = absl::GetFlag(FLAGS_prompt);
  } else {
    absl::StatusOr<std::vector<int32_t>> ids =
        llmserve::tools::ParseIds(absl::GetFlag(FLAGS_prompt_ids));
    if (!ids.ok()) return ids.status();
    prompt.ids = *std::move(ids);
  }
  return std::vector<RunPrompt>{std::move(prompt)};
}

// The model's tokenizer: a directory's tokenizer.json, a GGUF file's tokenizer.ggml.* keys, or the
// SentencePiece model next to a llama2.c checkpoint; null when the model has none (token-id
// prompts still work).
absl::StatusOr<std::unique_ptr<llmserve::common::tokenizer::Tokenizer>> LoadTokenizer(
    const std::string& model) {
  using llmserve::common::tokenizer::Tokenizer;
  if (llmserve::worker::DetectModelFormat(model).value_or(
          llmserve::worker::ModelFormat::kHuggingFaceDirectory) !=
      llmserve::worker::ModelFormat::kHuggingFaceDirectory) {
    auto files = llmserve::worker::ModelFileTokenizer(model);
    if (absl::IsNotFound(files.status()) || absl::IsUnimplemented(files.status())) {
      std::fprintf(stderr, "llmserve-run: %s: only token-id prompts work\n",
                   std::string(files.status().message()).c_str());
      return std::unique_ptr<Tokenizer>();
    }
    if (!files.ok()) return files.status();
    return Tokenizer::FromJson(files->tokenizer_json, files->tokenizer_config_json);
  }
  auto loaded = Tokenizer::FromDirectory(model);
  if (absl::IsNotFound(loaded.status())) return std::unique_ptr<Tokenizer>();
  return loaded;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "offline generation: --model DIR|FILE.gguf (--prompt TEXT | --bench) ...");
  llmserve::common::NormalizeFlagNames(argc, argv);
  const bool lm_head_set = llmserve::common::CommandLineSetsFlag(argc, argv, "quantize_lm_head");
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_model).empty()) return Fail("--model DIR is required");
  const auto dtype = llmserve::worker::ResolveDTypeFlag(absl::GetFlag(FLAGS_dtype),
                                                        absl::GetFlag(FLAGS_model), "cpu");
  if (!dtype.ok()) return Fail("--dtype: " + std::string(dtype.status().message()));
  const auto quantization = llmserve::worker::ParseQuantization(absl::GetFlag(FLAGS_quantization));
  if (!quantization.ok()) {
    return Fail("--quantization: " + std::string(quantization.status().message()));
  }
  const auto speculative = llmserve::worker::SpeculativeConfigFromFlags();
  if (!speculative.ok()) return Fail(std::string(speculative.status().message()));
  const double kv_gb = absl::GetFlag(FLAGS_kv_cache_gb);
  if (!(kv_gb > 0 && kv_gb <= 1024)) return Fail("--kv-cache-gb must be in (0, 1024]");
  llmserve::worker::CpuEngineOptions options{
      .model_dir = absl::GetFlag(FLAGS_model),
      .dtype = *dtype,
      .quantization = *quantization,
      .quantize_lm_head =
          lm_head_set ? std::optional<bool>(absl::GetFlag(FLAGS_quantize_lm_head)) : std::nullopt,
      .quantized_activations = absl::GetFlag(FLAGS_quantized_activations),
      .num_threads = absl::GetFlag(FLAGS_threads),
      .kv_cache_bytes = static_cast<int64_t>(kv_gb * (1 << 30)),
      .block_size = absl::GetFlag(FLAGS_block_size),
      .max_model_len = absl::GetFlag(FLAGS_max_model_len),
      .engine = {.max_num_batched_tokens = absl::GetFlag(FLAGS_max_num_batched_tokens),
                 .max_num_seqs = absl::GetFlag(FLAGS_max_num_seqs),
                 .enable_prefix_caching = absl::GetFlag(FLAGS_prefix_caching),
                 .speculative = *speculative}};
  llmserve::worker::LoadAccountant accountant;
  options.engine.on_step = [&accountant](const llmserve::worker::StepStats& step) {
    accountant.Record(step);
  };
  auto engine = llmserve::worker::BuildCpuEngine(options);
  if (!engine.ok()) return Fail(std::string(engine.status().message()));

  if (absl::GetFlag(FLAGS_bench)) {
    const auto report =
        llmserve::tools::RunBenchmark(engine->get(), accountant,
                                      {.num_requests = absl::GetFlag(FLAGS_bench_requests),
                                       .prompt_len = absl::GetFlag(FLAGS_bench_prompt_len),
                                       .output_len = absl::GetFlag(FLAGS_bench_output_len),
                                       .rate = absl::GetFlag(FLAGS_bench_rate),
                                       .shared_prefix = absl::GetFlag(FLAGS_bench_shared_prefix)},
                                      static_cast<float>(absl::GetFlag(FLAGS_bench_temperature)));
    if (!report.ok()) return Fail(std::string(report.status().message()));
    std::printf("%s\n", report->c_str());
    return 0;
  }

  const auto prompts = PromptsFromFlags();
  if (!prompts.ok()) return Fail(std::string(prompts.status().message()));
  auto tokenizer = LoadTokenizer(options.model_dir);
  if (!tokenizer.ok()) return Fail(std::string(tokenizer.status().message()));
  llmserve::tools::Runner runner(engine->get(), tokenizer->get());
  const bool json = absl::GetFlag(FLAGS_json);
  const bool single = prompts->size() == 1;
  int64_t generated = 0, failed = 0;
  if (!json && single) {
    runner.set_on_text([](size_t, const std::string& delta) {
      std::fwrite(delta.data(), 1, delta.size(), stdout);
      std::fflush(stdout);
    });
  }
  runner.set_on_result([&](const RunResult& r) {
    generated += static_cast<int64_t>(r.token_ids.size());
    if (r.finish == llmserve::worker::FinishReason::kError) {
      ++failed;
      std::fprintf(stderr, "llmserve-run: prompt %zu: %s\n", r.index, r.error.c_str());
    }
    if (json) {
      std::printf("%s\n", ResultJson(r, absl::GetFlag(FLAGS_logprobs) > 0).c_str());
    } else if (!single) {
      std::printf("[%zu] %s\n", r.index, r.text.c_str());
    }
    std::fflush(stdout);
  });
  const auto elapsed = runner.Run(*prompts);
  if (!elapsed.ok()) return Fail(std::string(elapsed.status().message()));
  if (!json && single) std::printf("\n");
  const double seconds = absl::ToDoubleSeconds(*elapsed);
  const nlohmann::json summary = {{"summary", true},
                                  {"requests", prompts->size()},
                                  {"failed", failed},
                                  {"elapsed_s", seconds},
                                  {"requests_per_s", prompts->size() / seconds},
                                  {"generated_tokens", generated},
                                  {"generated_tokens_per_s", generated / seconds}};
  std::fprintf(json ? stdout : stderr, "%s\n", summary.dump().c_str());
  return failed == 0 ? 0 : 1;
}
