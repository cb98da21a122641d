// llmserve-worker: serves one model on one device over llmserve.worker.v1.Worker.
//
// SIGTERM or SIGINT drains (stop admitting, finish running requests up to --drain_timeout, abort
// the rest) and exits 0; a second signal exits at once with status 1.

#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "common/base/byte_size.h"
#include "common/base/flag_names.h"
#include "common/base/protobuf_log.h"
#include "common/base/serve_until_signal.h"
#include "common/status/status_macros.h"
#include "common/tracing/tracing_flags.h"
#include "worker/model/auto_dtype.h"
#include "worker/model/model_files.h"
#include "worker/model/model_loader.h"
#include "worker/service/worker_server.h"
#include "worker/speculative/speculative_flags.h"

ABSL_FLAG(std::string, model, "",
          "the model to serve (required): a Hugging Face model directory, a GGUF file or a "
          "llama2.c checkpoint (.bin, with its SentencePiece .model beside it)");
ABSL_FLAG(std::string, served_model_name, "",
          "name the model is served under (default: the model directory's name)");
ABSL_FLAG(std::string, backend, "cpu", "compute backend: cpu or cuda");
ABSL_FLAG(int, device, 0, "accelerator index for --backend=cuda");
ABSL_FLAG(std::string, dtype, "auto",
          "runtime weight dtype: auto (the checkpoint's torch_dtype; f32 checkpoints run as f16 on "
          "cuda), f32, bf16 or f16");
ABSL_FLAG(std::string, quantization, "none",
          "none; int8 (quantize every linear projection at load, per output channel, symmetric, "
          "weights only; embeddings and norms keep --dtype); or awq / gptq, which AWQ and GPTQ "
          "checkpoints run as with none too (their own 4-bit weights); both backends");
ABSL_FLAG(bool, quantize_lm_head, false,
          "the LM head in int8 (--backend=cpu only). Unset: on exactly when the projections are "
          "quantized (int8, or an AWQ/GPTQ/GGUF 4-bit checkpoint); false turns that off, true "
          "asks for it and refuses an unquantized model");
ABSL_FLAG(bool, quantized_activations, false,
          "with int8 or an AWQ/GPTQ checkpoint: at batches of up to 16 tokens, quantize each "
          "token's activations to int8 per block of 32 (or the 4-bit group) and multiply with "
          "integer dot products; faster decode, slightly different numerics; --backend=cpu only");
ABSL_FLAG(std::string, host, "127.0.0.1",
          "address to listen on (gRPC and metrics); the worker API has no authentication of its "
          "own: listen beyond loopback (0.0.0.0) only on a private network, or with --tls_cert "
          "and --tls_client_ca (mutual TLS)");
ABSL_FLAG(int, port, 50051, "gRPC port (0: pick a free one)");
ABSL_FLAG(int, metrics_port, 9400, "Prometheus /metrics port (0: pick a free one; -1: off)");
ABSL_FLAG(std::string, kv_cache_memory, "25%",
          "KV cache size: bytes (4GiB, 512MiB) or a percentage of the memory free after the "
          "weights are loaded (25%; cpu: within the container's memory limit, cuda: of the GPU)");
ABSL_FLAG(int, block_size, 16, "tokens per KV cache block");
ABSL_FLAG(int, max_num_seqs, 64, "most requests in one engine step");
ABSL_FLAG(int, max_num_batched_tokens, 2048, "most tokens in one engine step");
ABSL_FLAG(int64_t, max_model_len, 0, "context length to serve (0: the model's)");
ABSL_FLAG(bool, enable_prefix_caching, true, "reuse the KV cache of shared prompt prefixes");
ABSL_FLAG(int, threads, 0,
          "CPU kernel threads (0: one per CPU this process may use, within a container's CPU "
          "quota)");
ABSL_FLAG(
    int, max_queue, 256,
    "requests allowed to wait for a slot before new ones get RESOURCE_EXHAUSTED (0: no limit)");
ABSL_FLAG(std::string, lora_modules, "",
          "LoRA adapters to load at start: NAME=DIRECTORY,... (PEFT adapter_config.json and "
          "adapter_model.safetensors); requests name them as their model");
ABSL_FLAG(int, max_loras, -1,
          "LoRA adapters that can run at once (adapter slots); -1: 4 with --lora_modules or "
          "--allow_runtime_lora_updating, else 0 (no LoRA)");
ABSL_FLAG(int64_t, max_lora_rank, 64, "the largest LoRA rank an adapter may have");
ABSL_FLAG(bool, allow_runtime_lora_updating, false,
          "let LoadLoraAdapter / UnloadLoraAdapter (the gateway's /v1/load_lora_adapter) change "
          "the adapters at run time");
ABSL_FLAG(std::string, task, "generate",
          "generate: text generation; embed: serve the model as embeddings (/v1/embeddings), "
          "prompt only, one vector per request");
ABSL_FLAG(std::string, pooling, "auto",
          "--task=embed: which hidden states make the embedding: last (token), mean, cls, or auto "
          "(the model's sentence-transformers Pooling module, else last)");
ABSL_FLAG(bool, normalize_embeddings, true,
          "--task=embed: scale every embedding to unit length (L2)");
ABSL_FLAG(std::string, tls_cert, "", "PEM certificate chain: serve gRPC over TLS");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA: require client certificates signed by it (mutual TLS with the gateway)");
ABSL_FLAG(absl::Duration, drain_timeout, absl::Seconds(30),
          "on SIGTERM, how long running requests may take before they are aborted");
ABSL_FLAG(bool, vllm_metric_names, false,
          "also export the metrics that have a vLLM counterpart under vLLM's names and labels "
          "(vllm:num_requests_waiting{model_name=...}, ...), for dashboards, autoscalers and "
          "inference gateways written for vLLM");

ABSL_FLAG(std::string, test_only_crash_on_prompt_tokens, "",
          "TEST ONLY, never in production: comma-separated token ids; the worker crashes "
          "(SIGSEGV) on a Generate request whose prompt contains them in a row, standing for a "
          "request that kills its worker (the gateway's query-of-death tests). Empty: off");

namespace {

// --test_only_crash_on_prompt_tokens: "ID,ID,..." of ids >= 0; no empty element.
absl::StatusOr<std::vector<int32_t>> ParseCrashTokens(const std::string& text) {
  std::vector<int32_t> ids;
  if (text.empty()) return ids;
  for (absl::string_view piece : absl::StrSplit(text, ',')) {
    int32_t id = -1;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(piece), &id) || id < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--test_only_crash_on_prompt_tokens=", text,
                       ": expected comma-separated token ids >= 0, got \"", piece, "\""));
    }
    ids.push_back(id);
  }
  return ids;
}

absl::Status ParseKvCacheMemory(const std::string& text,
                                llmserve::worker::WorkerServerOptions* options) {
  absl::string_view value = text;
  if (absl::ConsumeSuffix(&value, "%")) {
    double percent = 0;
    if (!absl::SimpleAtod(value, &percent) || !(percent > 0 && percent <= 100)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--kv_cache_memory=", text, ": a percentage must be in (0%, 100%]"));
    }
    options->kv_cache_bytes = 0;
    options->kv_cache_fraction = percent / 100;
    return absl::OkStatus();
  }
  absl::StatusOr<int64_t> bytes = llmserve::common::ParseByteSize(value);
  if (!bytes.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--kv_cache_memory: ", bytes.status().message(), ", or a percentage (25%)"));
  }
  if (*bytes <= 0) return absl::InvalidArgumentError("--kv_cache_memory must be more than 0");
  options->kv_cache_bytes = *bytes;
  return absl::OkStatus();
}

absl::StatusOr<llmserve::worker::WorkerServerOptions> OptionsFromFlags(bool lm_head_set) {
  llmserve::worker::WorkerServerOptions options;
  options.model_dir = absl::GetFlag(FLAGS_model);
  options.served_model_name = absl::GetFlag(FLAGS_served_model_name);
  options.backend = absl::GetFlag(FLAGS_backend);
  options.device = absl::GetFlag(FLAGS_device);
  // auto reads the model directory. When it cannot be opened, the load in WorkerServer::Start
  // reports why (NOT_FOUND, a malformed file) as it does for any dtype; without --model,
  // validation below names that flag.
  const bool auto_dtype = absl::GetFlag(FLAGS_dtype) == "auto";
  if (!auto_dtype || llmserve::worker::ModelFiles::Open(options.model_dir).ok() ||
      llmserve::worker::DetectModelFormat(options.model_dir)
              .value_or(llmserve::worker::ModelFormat::kHuggingFaceDirectory) !=
          llmserve::worker::ModelFormat::kHuggingFaceDirectory) {
    absl::StatusOr<llmserve::worker::DType> dtype = llmserve::worker::ResolveDTypeFlag(
        absl::GetFlag(FLAGS_dtype), options.model_dir, options.backend);
    if (!dtype.ok()) {
      return absl::Status(
          dtype.status().code(),
          absl::StrCat("--dtype=", absl::GetFlag(FLAGS_dtype), ": ", dtype.status().message()));
    }
    options.dtype = *dtype;
  }
  absl::StatusOr<llmserve::worker::Quantization> quantization =
      llmserve::worker::ParseQuantization(absl::GetFlag(FLAGS_quantization));
  if (!quantization.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--quantization: ", quantization.status().message()));
  }
  options.quantization = *quantization;
  if (lm_head_set) options.quantize_lm_head = absl::GetFlag(FLAGS_quantize_lm_head);
  options.quantized_activations = absl::GetFlag(FLAGS_quantized_activations);
  options.host = absl::GetFlag(FLAGS_host);
  options.port = absl::GetFlag(FLAGS_port);
  options.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  LLMSERVE_RETURN_IF_ERROR(ParseKvCacheMemory(absl::GetFlag(FLAGS_kv_cache_memory), &options));
  options.block_size = absl::GetFlag(FLAGS_block_size);
  options.max_num_seqs = absl::GetFlag(FLAGS_max_num_seqs);
  options.max_num_batched_tokens = absl::GetFlag(FLAGS_max_num_batched_tokens);
  options.max_model_len = absl::GetFlag(FLAGS_max_model_len);
  options.enable_prefix_caching = absl::GetFlag(FLAGS_enable_prefix_caching);
  options.threads = absl::GetFlag(FLAGS_threads);
  options.max_queue = absl::GetFlag(FLAGS_max_queue);
  options.drain_timeout = absl::GetFlag(FLAGS_drain_timeout);
  options.vllm_metric_names = absl::GetFlag(FLAGS_vllm_metric_names);
  for (absl::string_view module :
       absl::StrSplit(absl::GetFlag(FLAGS_lora_modules), ',', absl::SkipWhitespace())) {
    const std::pair<absl::string_view, absl::string_view> pair =
        absl::StrSplit(module, absl::MaxSplits('=', 1));
    const absl::string_view name = absl::StripAsciiWhitespace(pair.first);
    const absl::string_view path = absl::StripAsciiWhitespace(pair.second);
    if (name.empty() || path.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--lora_modules: \"", module, "\" is not NAME=DIRECTORY (entries separated by commas)"));
    }
    options.lora_modules.emplace_back(std::string(name), std::string(path));
  }
  options.allow_runtime_lora_updating = absl::GetFlag(FLAGS_allow_runtime_lora_updating);
  options.max_lora_rank = absl::GetFlag(FLAGS_max_lora_rank);
  options.max_loras = absl::GetFlag(FLAGS_max_loras);
  if (options.max_loras == -1) {
    options.max_loras =
        !options.lora_modules.empty() || options.allow_runtime_lora_updating ? 4 : 0;
  }
  options.task = absl::GetFlag(FLAGS_task);
  if (const std::string pooling = absl::GetFlag(FLAGS_pooling); pooling != "auto") {
    absl::StatusOr<llmserve::worker::PoolingMethod> method =
        llmserve::worker::ParsePoolingMethod(pooling);
    if (!method.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--pooling=", pooling, " is not one of auto, last, mean, cls"));
    }
    options.pooling = *method;
  }
  options.normalize_embeddings = absl::GetFlag(FLAGS_normalize_embeddings);
  absl::StatusOr<llmserve::worker::SpeculativeConfig> speculative =
      llmserve::worker::SpeculativeConfigFromFlags();
  if (!speculative.ok()) return speculative.status();
  options.speculative = *speculative;
  options.tls = {.cert_file = absl::GetFlag(FLAGS_tls_cert),
                 .key_file = absl::GetFlag(FLAGS_tls_key),
                 .client_ca_file = absl::GetFlag(FLAGS_tls_client_ca)};
  absl::StatusOr<std::vector<int32_t>> crash_tokens =
      ParseCrashTokens(absl::GetFlag(FLAGS_test_only_crash_on_prompt_tokens));
  if (!crash_tokens.ok()) return crash_tokens.status();
  options.test_only_crash_on_prompt_tokens = *std::move(crash_tokens);
  LLMSERVE_RETURN_IF_ERROR(llmserve::worker::ValidateWorkerServerOptions(options));
  absl::StatusOr<llmserve::common::tracing::TracingFlags> tracing =
      llmserve::common::tracing::TracingFlagsFromCommandLine();
  if (!tracing.ok()) return tracing.status();
  options.tracing = *std::move(tracing);
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Serves one model over gRPC (llmserve.worker.v1.Worker).\n"
      "  llmserve-worker --model=DIR [--port=50051] [--metrics_port=9400] [--dtype=auto]");
  // Before any thread parses a request: a client can provoke a libprotobuf log line per request.
  llmserve::common::InstallThrottledProtobufLogHandler();
  llmserve::common::NormalizeFlagNames(argc, argv);
  const bool lm_head_set = llmserve::common::CommandLineSetsFlag(argc, argv, "quantize_lm_head");
  absl::ParseCommandLine(argc, argv);
  return llmserve::common::ServeUntilShutdownSignal(
      "llmserve-worker", OptionsFromFlags(lm_head_set), &llmserve::worker::WorkerServer::Start,
      /*invalid_start_is_usage_error=*/false);
}
