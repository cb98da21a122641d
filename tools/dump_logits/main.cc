// llmserve-dump-logits: the logits a backend computes for given prompts, for comparison with an
// outside implementation (scripts/gpu/hf_parity.py compares them with Hugging Face transformers).
//
//   llmserve-dump-logits --model DIR --backend cuda --dtype bf16 --prompts ids.txt
//       --out logits.f32 --gen_len 16
//
// --prompts holds one prompt per line as space-separated token ids. Each prompt is prefilled alone
// in one forward pass with the logits of every prompt token, then decoded greedily for --gen_len
// steps. --out receives the prompt rows of every prompt, one after another, as raw little-endian
// f32 [tokens, vocab]; stdout one JSON line per prompt: {"prompt", "tokens", "greedy"}.

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/base/flag_names.h"
#include "worker/engine/cpu/cpu_backend.h"
#include "worker/engine/cuda/cuda_plugin_loader.h"
#include "worker/model/auto_dtype.h"
#include "worker/model/model_loader.h"
#include "worker/model/model_weights.h"

ABSL_FLAG(std::string, model, "",
          "a model directory (config.json, safetensors, ...) or a GGUF file");
ABSL_FLAG(int64_t, max_model_len, 0,
          "context length (0: the model's); a GGUF file's RoPE model may go past its declared "
          "context_length");
ABSL_FLAG(std::string, backend, "cpu", "cpu or cuda");
ABSL_FLAG(std::string, dtype, "f32", "runtime weight dtype: f32 (CPU only), bf16, f16 or auto");
ABSL_FLAG(int, device, 0, "CUDA device index for --backend=cuda");
ABSL_FLAG(int, threads, 0, "CPU kernel threads (0: one per hardware thread)");
ABSL_FLAG(std::string, prompts, "", "file: one prompt per line as space-separated token ids");
ABSL_FLAG(std::string, out, "", "file the prompt rows' logits are written to (raw f32)");
ABSL_FLAG(int, gen_len, 16, "greedy tokens decoded after each prompt");

namespace {

using llmserve::worker::Backend;
using llmserve::worker::ForwardBatch;
using llmserve::worker::ForwardOutput;

constexpr int32_t kBlockSize = 16;

int Fail(const std::string& message) {
  std::fprintf(stderr, "llmserve-dump-logits: %s\n", message.c_str());
  return 1;
}

absl::StatusOr<std::vector<std::vector<int32_t>>> ReadPrompts(const std::string& path,
                                                              int64_t vocab) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError("cannot open --prompts file '" + path + "'");
  std::vector<std::vector<int32_t>> prompts;
  std::string line;
  while (std::getline(in, line)) {
    std::vector<int32_t> ids;
    for (absl::string_view part : absl::StrSplit(line, ' ', absl::SkipWhitespace())) {
      int32_t id = 0;
      if (!absl::SimpleAtoi(part, &id) || id < 0 || id >= vocab) {
        return absl::InvalidArgumentError(absl::StrCat("--prompts line ", prompts.size() + 1, ": '",
                                                       part, "' is not a token id in [0, ", vocab,
                                                       ")"));
      }
      ids.push_back(id);
    }
    if (!ids.empty()) prompts.push_back(std::move(ids));
  }
  if (prompts.empty()) return absl::InvalidArgumentError("--prompts file has no prompts");
  return prompts;
}

// Scalar on purpose: a NaN row (a kernel bug this tool exists to show) still gives an id.
int32_t Argmax(const float* row, int64_t n) {
  int32_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (row[i] > row[best]) best = static_cast<int32_t>(i);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "backend logits for token-id prompts: --model DIR --prompts FILE --out FILE [--backend]");
  llmserve::common::NormalizeFlagNames(argc, argv);
  absl::ParseCommandLine(argc, argv);
  const std::string model = absl::GetFlag(FLAGS_model);
  const std::string backend_name = absl::GetFlag(FLAGS_backend);
  if (model.empty()) return Fail("--model DIR is required");
  if (absl::GetFlag(FLAGS_out).empty()) return Fail("--out FILE is required");
  const int gen_len = absl::GetFlag(FLAGS_gen_len);
  if (gen_len < 0 || gen_len > 4096) return Fail("--gen_len must be in [0, 4096]");
  if (backend_name != "cpu" && backend_name != "cuda") {
    return Fail("--backend must be cpu or cuda, not '" + backend_name + "'");
  }
  const auto dtype =
      llmserve::worker::ResolveDTypeFlag(absl::GetFlag(FLAGS_dtype), model, backend_name);
  if (!dtype.ok()) return Fail("--dtype: " + std::string(dtype.status().message()));
  const int64_t max_model_len = absl::GetFlag(FLAGS_max_model_len);
  auto config = llmserve::worker::LoadModelConfig(model, max_model_len);
  if (!config.ok()) return Fail(std::string(config.status().message()));
  const auto prompts = ReadPrompts(absl::GetFlag(FLAGS_prompts), config->vocab_size);
  if (!prompts.ok()) return Fail(std::string(prompts.status().message()));
  int64_t longest = 0;
  for (const auto& prompt : *prompts) longest = std::max<int64_t>(longest, prompt.size());
  if (longest + gen_len > config->max_model_len) {
    return Fail("a prompt plus --gen_len exceeds the model's context length");
  }
  if (backend_name == "cuda") {
    if (auto status = llmserve::worker::CheckCudaDevice(absl::GetFlag(FLAGS_device));
        !status.ok()) {
      return Fail(status.ToString());
    }
  }
  auto weights = llmserve::worker::LoadModel(model, max_model_len, *dtype);
  if (!weights.ok()) return Fail(std::string(weights.status().message()));

  // Prompts run one at a time, so one sequence's blocks are enough and are reused.
  const int32_t blocks = static_cast<int32_t>((longest + gen_len + kBlockSize - 1) / kBlockSize);
  std::vector<int32_t> block_table;
  for (int32_t b = 0; b < blocks; ++b) block_table.push_back(b);
  std::unique_ptr<Backend> backend;
  if (backend_name == "cpu") {
    auto cpu = llmserve::worker::CpuBackend::Create(
        *std::move(weights),
        {.kv_cache_bytes =
             blocks * llmserve::worker::CpuBackend::KvBytesPerBlock(*config, kBlockSize),
         .block_size = kBlockSize,
         .num_threads = absl::GetFlag(FLAGS_threads)});
    if (!cpu.ok()) return Fail(cpu.status().ToString());
    backend = *std::move(cpu);
  } else {
    llmserve::worker::CudaBackendOptions options;
    options.device = absl::GetFlag(FLAGS_device);
    options.dtype = *dtype;
    options.block_size = kBlockSize;
    options.kv_cache_bytes =
        int64_t{blocks} * llmserve::worker::CudaKvBytesPerBlock(*config, kBlockSize);
    options.max_num_batched_tokens = static_cast<int32_t>(std::max<int64_t>(longest, 1));
    options.max_num_seqs = 1;
    auto cuda = llmserve::worker::CreateCudaBackend(*std::move(weights), options);
    if (!cuda.ok()) return Fail(cuda.status().ToString());
    backend = *std::move(cuda);
  }

  std::ofstream out(absl::GetFlag(FLAGS_out), std::ios::binary | std::ios::trunc);
  if (!out) return Fail("cannot write --out file '" + absl::GetFlag(FLAGS_out) + "'");
  const int64_t vocab = config->vocab_size;
  ForwardBatch batch;
  ForwardOutput output;
  for (size_t p = 0; p < prompts->size(); ++p) {
    const auto& prompt = (*prompts)[p];
    batch.Clear();
    batch.AddSequence(prompt, 0, block_table, /*want_all_logits=*/true);
    if (auto status = backend->Forward(batch, &output); !status.ok()) {
      return Fail("prompt " + std::to_string(p) + ": " + status.ToString());
    }
    out.write(reinterpret_cast<const char*>(output.logits.data()),
              static_cast<std::streamsize>(prompt.size() * vocab * sizeof(float)));
    std::vector<int32_t> greedy;
    int32_t next = Argmax(output.LastRow(0), vocab);
    for (int step = 0; step < gen_len; ++step) {
      greedy.push_back(next);
      if (step + 1 == gen_len) break;
      batch.Clear();
      batch.AddSequence({next}, static_cast<int32_t>(prompt.size()) + step, block_table);
      if (auto status = backend->Forward(batch, &output); !status.ok()) {
        return Fail("prompt " + std::to_string(p) + " decode: " + status.ToString());
      }
      next = Argmax(output.LastRow(0), vocab);
    }
    std::printf("{\"prompt\": %zu, \"tokens\": %zu, \"greedy\": [%s]}\n", p, prompt.size(),
                absl::StrJoin(greedy, ", ").c_str());
  }
  out.close();
  if (!out) return Fail("writing --out failed");
  return 0;
}
