// llmserve-bench-engine: prompt-processing and decode throughput of a backend on a model
// directory, for several batch sizes. One JSON line per batch size on stdout, a table on stderr.
//
//   llmserve-bench-engine --model models/small --dtype bf16 --batch 1,4,16 --prompt-len 512
//       --gen-len 128 --threads 2
//   llmserve-bench-engine --model model-Q4_K_M.gguf --dtype f32 --batch 1,8
//
// Flags may be spelled with dashes or underscores (--prompt-len, --prompt_len).
//
// Per batch size: `batch` sequences of random prompt tokens are prefilled (in chunks of at most
// --max-batched-tokens tokens per forward pass), then decoded together for gen_len steps, each
// step feeding back the argmax token. prefill_tok_s counts prompt tokens over the prefill time;
// decode_tok_s counts generated tokens summed over the batch over the decode steps' time,
// including the benchmark's own argmax over each row of logits on the host (a serving engine
// samples there too); decode_forward_s is the decode steps' Forward calls alone, what a backend
// comparison and the bandwidth roofline want. A warm-up pass runs first.
//
// --backend=cuda runs the same passes on a GPU through the CUDA backend plugin (builds with nvcc):
// --device picks it, --dtype must be bf16 or f16, and Forward synchronises, so wall-clock timing
// is valid. weight_bytes is the runtime weights' size (packed and quantized, as the backend holds
// them); step_read_bytes what a decode step must read of them (all but an untied input
// embedding table), which over decode_forward_s / gen_len gives the bandwidth roofline.
//
// --quantization=int8 quantizes every projection to int8 at load (both backends),
// the LM head with quantized projections unless --quantize_lm_head=false (CPU only),
// --quantized_activations the integer-dot decode
// path (CPU only, quantized_dot.h); AWQ/GPTQ checkpoints run their 4-bit projections on both
// backends. The JSON lines say which ran, and cpu_isa which CPU kernels (cpu_features.h:
// LLMSERVE_CPU_ISA=avx2 runs an AVX2 machine's paths on an AVX-512 one).
//
// --profile (CPU only) adds, after each batch size's line, a line with "kind": "profile": where the
// decode steps' time went (cpu/forward_profile.h): per phase of the forward pass its milliseconds
// per step, share of the step and, for projections, the weight bytes per step and the GB/s they
// were read at; the thread pool's loops per step and the calling thread's wait for the other
// threads in them; and the time per step outside Forward (the benchmark's argmax).
//
// --lora_adapters=0,1,4,16 (CPU only) runs every batch size once per count: each sequence's
// projections add the delta of adapter (sequence index mod count), unmerged, as a worker serves
// them (0: the base model alone, in the same process for a fair ratio). The adapters are random,
// of --lora_rank over --lora_targets, written as PEFT directories and read back by the worker's
// loader. Each line gets lora_adapters, lora_rank and decode_vs_base (decode_tok_s over the same
// batch size's with no adapter, when 0 is in the list).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/base/flag_names.h"
#include "tools/bench_engine/random_lora.h"
#include "worker/engine/cpu/cpu_backend.h"
#include "worker/engine/cpu/cpu_features.h"
#include "worker/engine/cuda/cuda_plugin_loader.h"
#include "worker/engine/cuda/projection_image.h"
#include "worker/model/auto_dtype.h"
#include "worker/model/dtype.h"
#include "worker/model/model_loader.h"
#include "worker/model/model_weights.h"
#include "worker/model/quantization.h"
#include "worker/sampling/vector_ops.h"

ABSL_FLAG(std::string, model, "",
          "a model directory (config.json, safetensors, ...) or a GGUF file");
ABSL_FLAG(int64_t, max_model_len, 0,
          "context length (0: the model's); a GGUF file's RoPE model may go past its declared "
          "context_length");
ABSL_FLAG(std::string, dtype, "auto",
          "runtime weight dtype: f32, bf16, f16 or auto (the checkpoint's torch_dtype)");
ABSL_FLAG(std::string, batch, "1,4,16,32,64", "comma-separated batch sizes");
ABSL_FLAG(int, prompt_len, 512, "prompt tokens per sequence");
ABSL_FLAG(int, gen_len, 128, "generated tokens per sequence");
ABSL_FLAG(int, threads, 0, "kernel threads (0: one per hardware thread)");
ABSL_FLAG(int, max_batched_tokens, 2048, "most prompt tokens in one forward pass");
ABSL_FLAG(int, block_size, 16, "KV cache block size");
ABSL_FLAG(std::string, backend, "cpu", "cpu or cuda");
ABSL_FLAG(int, device, 0, "CUDA device index for --backend=cuda");
ABSL_FLAG(std::string, quantization, "none",
          "none, int8 (quantize at load, per output channel, weights only), or awq / gptq (the "
          "checkpoint's own 4-bit format, which also runs with none); CPU only");
ABSL_FLAG(bool, quantize_lm_head, false,
          "the LM head in int8. Unset: on exactly when the projections are quantized (int8 or a "
          "4-bit checkpoint); false turns that off");
ABSL_FLAG(std::string, lora_adapters, "",
          "CPU only: comma-separated counts of distinct LoRA adapters in each batch (e.g. "
          "0,1,4,16); empty: no LoRA");
ABSL_FLAG(int, lora_rank, 16, "the benchmark adapters' rank");
ABSL_FLAG(std::string, lora_targets, "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj",
          "the modules the benchmark adapters adapt");
ABSL_FLAG(bool, profile, false,
          "CPU only: after each batch size, a JSON line with the decode steps' time per phase of "
          "the forward pass");
ABSL_FLAG(bool, quantized_activations, false,
          "with int8 or a 4-bit checkpoint: batches of up to 16 tokens quantize activations to "
          "int8 per block and multiply with integer dot products; CPU only");

namespace {

using llmserve::worker::Backend;
using llmserve::worker::ForwardBatch;
using llmserve::worker::ForwardOutput;

int Fail(const std::string& message) {
  std::fprintf(stderr, "llmserve-bench-engine: %s\n", message.c_str());
  return 1;
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

struct Result {
  double prefill_s = 0;
  double decode_s = 0;
  // The decode steps' Forward calls alone, without the benchmark's own argmax over the rows.
  double decode_forward_s = 0;
};

// The sampler's vectorized argmax (std::max_element took 0.43 ms per 128k row on the H100
// machine's CPU, 28 ms of a 45 ms batch-64 step). It expects no NaN; a NaN row gives n, so 0.
int32_t Argmax(const float* logits, int64_t n) {
  const int32_t id = llmserve::worker::Argmax(absl::MakeConstSpan(logits, static_cast<size_t>(n)));
  return id < n ? id : 0;
}

// Prefills `batch` random prompts then decodes gen_len steps. Blocks are handed out
// sequentially: sequence s owns blocks [s * per_seq, (s + 1) * per_seq).
// `adapters` > 0: sequence s runs the adapter in slot s % adapters.
// `profiled`: the CPU backend to profile the decode steps of (null: none).
Result RunOnce(Backend& backend, int batch, int prompt_len, int gen_len, int max_tokens,
               int adapters = 0, llmserve::worker::CpuBackend* profiled = nullptr) {
  const auto slot = [adapters](int s) { return adapters > 0 ? s % adapters : -1; };
  const int32_t bs = backend.block_size();
  const int32_t per_seq = (prompt_len + gen_len + bs - 1) / bs;
  std::vector<std::vector<int32_t>> blocks(batch);
  for (int s = 0; s < batch; ++s) {
    for (int32_t b = 0; b < per_seq; ++b) blocks[s].push_back(s * per_seq + b);
  }
  std::mt19937 rng(1234);
  const int64_t vocab = backend.config().vocab_size;
  std::vector<std::vector<int32_t>> prompts(batch);
  for (auto& prompt : prompts) {
    for (int i = 0; i < prompt_len; ++i) prompt.push_back(static_cast<int32_t>(rng() % vocab));
  }
  ForwardBatch fb;
  ForwardOutput out;
  std::vector<int32_t> next(batch, 0);
  Result result;
  auto start = std::chrono::steady_clock::now();
  // Prefill: pack chunks of prompts up to max_tokens per pass.
  std::vector<int> done(batch, 0);
  for (int s = 0; s < batch;) {
    fb.Clear();
    int budget = max_tokens;
    std::vector<int> in_pass;
    for (int t = s; t < batch && budget > 0; ++t) {
      const int chunk = std::min(budget, prompt_len - done[t]);
      fb.AddSequence(
          std::vector<int32_t>(prompts[t].begin() + done[t], prompts[t].begin() + done[t] + chunk),
          done[t], blocks[t], /*want_all_logits=*/false,
          /*want_hidden_states=*/false, slot(t));
      in_pass.push_back(t);
      done[t] += chunk;
      budget -= chunk;
    }
    if (auto status = backend.Forward(fb, &out); !status.ok()) {
      std::fprintf(stderr, "llmserve-bench-engine: prefill: %s\n", status.ToString().c_str());
      std::exit(1);
    }
    for (size_t i = 0; i < in_pass.size(); ++i) {
      if (done[in_pass[i]] == prompt_len) next[in_pass[i]] = Argmax(out.LastRow(i), vocab);
    }
    while (s < batch && done[s] == prompt_len) ++s;
  }
  result.prefill_s = Seconds(start);
  if (profiled != nullptr) {
    profiled->ResetProfile();
    profiled->EnableProfile(true);
  }
  start = std::chrono::steady_clock::now();
  for (int step = 0; step < gen_len; ++step) {
    fb.Clear();
    for (int s = 0; s < batch; ++s) {
      fb.AddSequence({next[s]}, prompt_len + step, blocks[s], /*want_all_logits=*/false,
                     /*want_hidden_states=*/false, slot(s));
    }
    const auto forward_start = std::chrono::steady_clock::now();
    const absl::Status status = backend.Forward(fb, &out);
    result.decode_forward_s += Seconds(forward_start);
    if (!status.ok()) {
      std::fprintf(stderr, "llmserve-bench-engine: decode: %s\n", status.ToString().c_str());
      std::exit(1);
    }
    for (int s = 0; s < batch; ++s) next[s] = Argmax(out.LastRow(s), vocab);
  }
  result.decode_s = Seconds(start);
  if (profiled != nullptr) profiled->EnableProfile(false);
  return result;
}

// The "kind": "profile" JSON line of --profile (the top of this file), and a table on stderr.
void PrintProfile(const llmserve::worker::cpu::ForwardProfile& p, int batch, const Result& r) {
  using llmserve::worker::cpu::ForwardPhase;
  const double steps = std::max<int64_t>(p.forwards, 1);
  const double forward_ms = p.forward_nanos / 1e6 / steps;
  std::string phases;
  std::fprintf(stderr, "  %-14s %9s %6s %10s %7s %9s\n", "phase", "ms/step", "share", "MB/step",
               "GB/s", "waited ms");
  double accounted_ms = 0;
  for (int i = 0; i < llmserve::worker::cpu::kNumForwardPhases; ++i) {
    const double ms = p.nanos[i] / 1e6 / steps;
    const double mb = p.weight_bytes[i] / 1e6 / steps;
    const double waited_ms = p.wait_nanos[i] / 1e6 / steps;
    accounted_ms += ms;
    const std::string name(ForwardPhaseName(static_cast<ForwardPhase>(i)));
    const double gb_s = ms > 0 ? mb / ms : 0;
    absl::StrAppendFormat(&phases,
                          "%s\"%s\": {\"ms_per_step\": %.4f, \"share\": %.4f, "
                          "\"weight_bytes_per_step\": %.0f, \"gb_s\": %.2f, "
                          "\"pool_wait_ms_per_step\": %.4f}",
                          phases.empty() ? "" : ", ", name, ms,
                          forward_ms > 0 ? ms / forward_ms : 0, p.weight_bytes[i] / steps, gb_s,
                          waited_ms);
    std::fprintf(stderr, "  %-14s %9.3f %5.1f%% %10.1f %7.2f %9.3f\n", name.c_str(), ms,
                 forward_ms > 0 ? 100 * ms / forward_ms : 0, mb, gb_s, waited_ms);
  }
  const double outside_ms = (r.decode_s - r.decode_forward_s) * 1e3 / steps;
  const double loops = p.pool_loops / steps, wait_ms = p.pool_wait_nanos / 1e6 / steps;
  std::printf(
      "{\"kind\": \"profile\", \"batch\": %d, \"steps\": %lld, \"forward_ms_per_step\": %.4f, "
      "\"unaccounted_ms_per_step\": %.4f, \"outside_forward_ms_per_step\": %.4f, "
      "\"pool_loops_per_step\": %.1f, \"pool_wait_ms_per_step\": %.4f, \"phases\": {%s}}\n",
      batch, static_cast<long long>(p.forwards), forward_ms, forward_ms - accounted_ms, outside_ms,
      loops, wait_ms, phases.c_str());
  std::fflush(stdout);
  std::fprintf(stderr,
               "  forward %.3f ms/step (%.3f unaccounted), outside forward %.3f ms/step; %.1f pool "
               "loops/step, caller waited %.3f ms/step in them\n",
               forward_ms, forward_ms - accounted_ms, outside_ms, loops, wait_ms);
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "engine throughput: --model DIR|FILE.gguf [--dtype] [--batch 1,4,16] ...");
  llmserve::common::NormalizeFlagNames(argc, argv);
  const bool lm_head_set = llmserve::common::CommandLineSetsFlag(argc, argv, "quantize_lm_head");
  absl::ParseCommandLine(argc, argv);
  const std::string model = absl::GetFlag(FLAGS_model);
  if (model.empty()) return Fail("--model DIR is required");
  const auto dtype = llmserve::worker::ResolveDTypeFlag(absl::GetFlag(FLAGS_dtype), model,
                                                        absl::GetFlag(FLAGS_backend));
  if (!dtype.ok()) return Fail("--dtype: " + std::string(dtype.status().message()));
  const auto quantization = llmserve::worker::ParseQuantization(absl::GetFlag(FLAGS_quantization));
  if (!quantization.ok()) {
    return Fail("--quantization: " + std::string(quantization.status().message()));
  }
  const std::optional<bool> quantize_lm_head =
      lm_head_set ? std::optional<bool>(absl::GetFlag(FLAGS_quantize_lm_head)) : std::nullopt;
  if (quantize_lm_head.value_or(false) && absl::GetFlag(FLAGS_backend) != "cpu") {
    return Fail(
        "--quantize_lm_head runs on the CPU backend only (the CUDA backend keeps the LM head in "
        "--dtype)");
  }
  const bool quantized_activations = absl::GetFlag(FLAGS_quantized_activations);
  if (quantized_activations && absl::GetFlag(FLAGS_backend) != "cpu") {
    return Fail(
        "--quantized_activations runs on the CPU backend only (no CUDA integer-dot kernels)");
  }
  std::vector<int> batches;
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_batch), ',')) {
    int value = 0;
    if (!absl::SimpleAtoi(part, &value) || value < 1 || value > 1024) {
      return Fail("--batch must be a comma-separated list of sizes in [1, 1024]");
    }
    batches.push_back(value);
  }
  const int prompt_len = absl::GetFlag(FLAGS_prompt_len), gen_len = absl::GetFlag(FLAGS_gen_len);
  if (prompt_len < 1 || gen_len < 1) return Fail("--prompt_len and --gen_len must be >= 1");
  const int max_tokens = absl::GetFlag(FLAGS_max_batched_tokens);
  if (max_tokens < 1) return Fail("--max_batched_tokens must be >= 1");
  // An empty list runs without LoRA (one pass per batch size, no LoRA fields).
  std::vector<int> lora_counts;
  for (absl::string_view part :
       absl::StrSplit(absl::GetFlag(FLAGS_lora_adapters), ',', absl::SkipEmpty())) {
    int value = 0;
    if (!absl::SimpleAtoi(part, &value) || value < 0 || value > 64) {
      return Fail("--lora_adapters must be a comma-separated list of counts in [0, 64]");
    }
    lora_counts.push_back(value);
  }
  const bool lora = !lora_counts.empty();
  const int lora_rank = absl::GetFlag(FLAGS_lora_rank);
  if (lora && (lora_rank < 1 || lora_rank > llmserve::worker::kMaxLoraRank)) {
    return Fail("--lora_rank must be in [1, 512]");
  }
  if (absl::GetFlag(FLAGS_profile) && absl::GetFlag(FLAGS_backend) != "cpu") {
    return Fail("--profile runs on the CPU backend only");
  }
  if (lora && absl::GetFlag(FLAGS_backend) != "cpu") {
    return Fail("--lora_adapters runs on the CPU backend only (no CUDA LoRA kernels yet)");
  }
  const int max_adapters = lora ? *std::max_element(lora_counts.begin(), lora_counts.end()) : 0;
  if (!lora) lora_counts = {0};

  const int64_t max_model_len = absl::GetFlag(FLAGS_max_model_len);
  auto config = llmserve::worker::LoadModelConfig(model, max_model_len);
  if (!config.ok()) return Fail(std::string(config.status().message()));
  // What runs: the flag, or an AWQ/GPTQ checkpoint's own.
  const auto resolved = llmserve::worker::ResolveQuantization(*quantization, config->quantization);
  if (!resolved.ok()) return Fail(std::string(resolved.status().message()));
  if (prompt_len + gen_len > config->max_model_len) {
    return Fail("prompt_len + gen_len exceeds the model's context length");
  }
  if (absl::GetFlag(FLAGS_backend) == "cuda") {
    // Before the weights are read: a missing device should not cost a 16 GB load first.
    if (auto status = llmserve::worker::CheckCudaDevice(absl::GetFlag(FLAGS_device));
        !status.ok()) {
      return Fail(status.ToString());
    }
  }
  auto weights = llmserve::worker::LoadModel(model, max_model_len, *dtype);
  if (!weights.ok()) return Fail(std::string(weights.status().message()));
  const int max_batch = *std::max_element(batches.begin(), batches.end());
  const int32_t block_size = absl::GetFlag(FLAGS_block_size);
  const int64_t blocks_needed =
      static_cast<int64_t>(max_batch) * ((prompt_len + gen_len + block_size - 1) / block_size);
  const std::string backend_name = absl::GetFlag(FLAGS_backend);
  // The kernels the CPU backend runs (LLMSERVE_CPU_ISA may cap them), as a JSON value.
  const std::string cpu_isa = backend_name == "cpu"
                                  ? absl::StrCat("\"", llmserve::worker::cpu::CpuIsaSummary(), "\"")
                                  : "null";
  std::unique_ptr<Backend> backend;
  llmserve::worker::CpuBackend* profiled = nullptr;  // --profile
  int threads = 0;
  int64_t weight_bytes = static_cast<int64_t>((*weights)->SizeBytes());
  if (backend_name == "cpu") {
    const int64_t block_bytes = llmserve::worker::CpuBackend::KvBytesPerBlock(*config, block_size);
    auto cpu = llmserve::worker::CpuBackend::Create(*std::move(weights),
                                                    {.kv_cache_bytes = blocks_needed * block_bytes,
                                                     .block_size = block_size,
                                                     .num_threads = absl::GetFlag(FLAGS_threads),
                                                     .quantization = *quantization,
                                                     .quantize_lm_head = quantize_lm_head,
                                                     .quantized_activations = quantized_activations,
                                                     .max_loras = max_adapters,
                                                     .max_lora_rank = lora_rank});
    if (!cpu.ok()) return Fail(std::string(cpu.status().message()));
    for (int a = 0; a < max_adapters; ++a) {
      char dir[] = "/tmp/llmserve-bench-lora-XXXXXX";
      if (mkdtemp(dir) == nullptr) return Fail("cannot make a temporary directory for adapters");
      auto adapter = llmserve::tools::MakeRandomLoraAdapter(
          *config, lora_rank, absl::StrSplit(absl::GetFlag(FLAGS_lora_targets), ','),
          static_cast<uint32_t>(100 + a), dir);
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
      if (!adapter.ok()) return Fail(std::string(adapter.status().message()));
      if (auto set = (*cpu)->SetLoraAdapter(a, *std::move(adapter)); !set.ok()) {
        return Fail(std::string(set.message()));
      }
    }
    threads = (*cpu)->num_threads();
    if (absl::GetFlag(FLAGS_profile)) profiled = cpu->get();
    weight_bytes = (*cpu)->weight_bytes();
    backend = *std::move(cpu);
  } else if (backend_name == "cuda") {
    llmserve::worker::CudaBackendOptions options;
    options.device = absl::GetFlag(FLAGS_device);
    options.dtype = *dtype;
    options.block_size = block_size;
    // Only what the runs need (K and V, 16-bit), so that a big model's cache is quick to allocate.
    options.kv_cache_bytes =
        blocks_needed * llmserve::worker::CudaKvBytesPerBlock(*config, block_size);
    options.max_num_batched_tokens = std::max(max_tokens, max_batch);
    options.max_num_seqs = max_batch;
    // int8 is quantized while uploading; an AWQ/GPTQ checkpoint's projections stay 4-bit.
    const bool int8 = *resolved == llmserve::worker::Quantization::kInt8;
    options.quantization =
        int8 ? llmserve::worker::Quantization::kInt8 : llmserve::worker::Quantization::kNone;
    const auto device_bytes = llmserve::worker::cuda::DeviceWeightBytes(**weights, *dtype, int8);
    if (!device_bytes.ok()) return Fail(std::string(device_bytes.status().message()));
    weight_bytes = *device_bytes;
    auto cuda = llmserve::worker::CreateCudaBackend(*std::move(weights), options);
    if (!cuda.ok()) return Fail(cuda.status().ToString());
    backend = *std::move(cuda);
  } else {
    return Fail("--backend must be cpu or cuda, not '" + backend_name + "'");
  }

  // A decode step reads every weight but the input embedding table, of which it gathers a row per
  // sequence (a tied table is the LM head too, read whole).
  const int64_t embedding_bytes =
      config->tied_embeddings ? 0
                              : config->vocab_size * config->hidden_size *
                                    static_cast<int64_t>(llmserve::worker::DTypeSize(*dtype));
  const int64_t step_read_bytes = std::max<int64_t>(weight_bytes - embedding_bytes, 0);
  RunOnce(*backend, 1, std::min(prompt_len, 32), 4, max_tokens);  // warm-up
  std::fprintf(stderr, "%6s %10s %8s %6s %14s %14s\n", "batch", "prompt_len", "gen_len", "dtype",
               "prefill tok/s", "decode tok/s");
  for (int batch : batches) {
    double base_decode_tok_s = 0;
    for (int adapters : lora_counts) {
      const Result r =
          RunOnce(*backend, batch, prompt_len, gen_len, max_tokens, adapters, profiled);
      const double prefill_tok_s = batch * static_cast<double>(prompt_len) / r.prefill_s;
      const double decode_tok_s = batch * static_cast<double>(gen_len) / r.decode_s;
      if (adapters == 0) base_decode_tok_s = decode_tok_s;
      std::string lora_fields;
      if (lora) {
        lora_fields = absl::StrFormat(
            ", \"lora_adapters\": %d, \"lora_rank\": %d, \"decode_vs_base\": %s", adapters,
            lora_rank,
            base_decode_tok_s > 0 ? absl::StrFormat("%.4f", decode_tok_s / base_decode_tok_s)
                                  : std::string("null"));
      }
      std::printf(
          "{\"batch\": %d, \"prompt_len\": %d, \"gen_len\": %d, \"dtype\": \"%s\", "
          "\"quantization\": \"%s\", \"quantize_lm_head\": %s, \"quantized_activations\": %s, "
          "\"threads\": %d, "
          "\"backend\": \"%s\", \"cpu_isa\": %s, \"weight_bytes\": %lld, \"step_read_bytes\": "
          "%lld, "
          "\"prefill_s\": %.6f, \"decode_s\": %.6f, \"decode_forward_s\": %.6f, "
          "\"prefill_tok_s\": %.2f, \"decode_tok_s\": %.2f%s}\n",
          batch, prompt_len, gen_len, std::string(llmserve::worker::DTypeName(*dtype)).c_str(),
          llmserve::worker::RunningQuantizationName(*resolved, config->quantization).c_str(),
          backend->lm_head_quantized() ? "true" : "false", quantized_activations ? "true" : "false",
          threads, backend_name.c_str(), cpu_isa.c_str(), static_cast<long long>(weight_bytes),
          static_cast<long long>(step_read_bytes), r.prefill_s, r.decode_s, r.decode_forward_s,
          prefill_tok_s, decode_tok_s, lora_fields.c_str());
      std::fflush(stdout);
      std::fprintf(stderr, "%6d %10d %8d %6s %14.1f %14.1f%s\n", batch, prompt_len, gen_len,
                   std::string(llmserve::worker::DTypeName(*dtype)).c_str(), prefill_tok_s,
                   decode_tok_s,
                   lora ? absl::StrFormat("  (%d LoRA adapters)", adapters).c_str() : "");
      if (profiled != nullptr) PrintProfile(profiled->profile(), batch, r);
    }
  }
  return 0;
}
