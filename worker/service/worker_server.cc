#include "worker/service/worker_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/base/host_name.h"
#include "common/base/huge_page_memory.h"
#include "common/base/logging.h"
#include "common/base/worker_api_limits.h"
#include "common/chat_template/tokenizer_config_template.h"
#include "common/status/status_macros.h"
#include "common/tokenizer/sentencepiece_model.h"
#include "worker/engine/cpu/cpu_backend.h"
#include "worker/engine/cpu_engine_builder.h"
#include "worker/engine/cuda/cuda_engine_builder.h"
#include "worker/model/gguf_tokenizer.h"
#include "worker/model/lora_adapter.h"
#include "worker/model/model_files.h"
#include "worker/model/model_loader.h"

namespace llmserve::worker {
namespace {

// Tokenizer files travel in GetModelInfo: larger ones could not be sent.
constexpr size_t kMaxTokenizerBytes = common::kWorkerApiMaxMessageBytes;

absl::Status CheckRange(absl::string_view flag, int64_t value, int64_t low, int64_t high) {
  if (value >= low && value <= high) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, "=", value, " is outside [", low, ", ", high, "]"));
}

// The model's name when --served_model_name is not given: the directory's or the file's name,
// without a ".gguf" or ".bin" extension.
std::string DirectoryName(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const size_t slash = path.rfind('/');
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  if (name.size() > 5 && absl::EndsWithIgnoreCase(name, ".gguf")) name.resize(name.size() - 5);
  if (name.size() > 4 && absl::EndsWithIgnoreCase(name, ".bin")) name.resize(name.size() - 4);
  return name;
}

std::string WorkerId() {
  const std::string host = common::HostName();
  return absl::StrCat(host.empty() ? "worker" : host, "-", getpid(), "-",
                      absl::ToUnixMillis(absl::Now()));
}

// The tokenizer files the gateway needs (GetModelInfo). A missing tokenizer.json is allowed
// (token-id prompts still work) but logged; a malformed tokenizer_config.json is an error.
// A tokenizer built from another format (GGUF metadata, a SentencePiece model) must fit in
// GetModelInfo as a tokenizer.json read from disk does (ReadTextFile bounds those).
absl::Status CheckConvertedTokenizerSize(const std::string& model_dir,
                                         const std::string& tokenizer_json) {
  if (tokenizer_json.size() <= kMaxTokenizerBytes) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      model_dir, ": the tokenizer is ", tokenizer_json.size(),
      " bytes as tokenizer.json, more than GetModelInfo carries (", kMaxTokenizerBytes, ")"));
}

absl::Status AddTokenizerFiles(const std::string& model_dir, v1::ModelInfo* info) {
  if (DetectModelFormat(model_dir).value_or(ModelFormat::kHuggingFaceDirectory) !=
      ModelFormat::kHuggingFaceDirectory) {
    // The same files a directory has, built from a GGUF file's tokenizer.ggml.* or the
    // SentencePiece model next to a llama2.c checkpoint (model_loader.h).
    absl::StatusOr<common::tokenizer::TokenizerFiles> files = ModelFileTokenizer(model_dir);
    if (absl::IsNotFound(files.status()) || absl::IsUnimplemented(files.status())) {
      LLMSERVE_LOG(WARNING) << files.status().message() << ": clients must send token ids";
      return absl::OkStatus();
    }
    if (!files.ok()) return files.status();
    LLMSERVE_RETURN_IF_ERROR(CheckConvertedTokenizerSize(model_dir, files->tokenizer_json));
    info->set_tokenizer_json(std::move(files->tokenizer_json));
    info->set_tokenizer_config_json(std::move(files->tokenizer_config_json));
    info->set_chat_template(std::move(files->chat_template));
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> tokenizer =
      ReadTextFile(model_dir + "/tokenizer.json", kMaxTokenizerBytes);
  // Without a tokenizer.json, a SentencePiece tokenizer.model (older Llama repositories) is
  // converted as a llama2.c checkpoint's is; its tokenizer_config.json, when present, still wins.
  std::string sentencepiece_config = "{}";
  if (absl::IsNotFound(tokenizer.status())) {
    absl::StatusOr<common::tokenizer::SentencePieceModel> model =
        common::tokenizer::ReadSentencePieceModel(model_dir + "/tokenizer.model");
    if (model.ok()) {
      common::tokenizer::TokenizerFiles files =
          common::tokenizer::TokenizerFilesFromSentencePiece(*model);
      tokenizer = std::move(files.tokenizer_json);
      sentencepiece_config = std::move(files.tokenizer_config_json);
      LLMSERVE_LOG(INFO) << model_dir << ": the tokenizer is tokenizer.model (SentencePiece)";
    } else if (!absl::IsNotFound(model.status())) {
      return model.status();
    }
  }
  if (tokenizer.ok()) {
    LLMSERVE_RETURN_IF_ERROR(CheckConvertedTokenizerSize(model_dir, *tokenizer));
    info->set_tokenizer_json(*std::move(tokenizer));
  } else if (absl::IsNotFound(tokenizer.status())) {
    LLMSERVE_LOG(WARNING)
        << model_dir << " has no tokenizer.json or tokenizer.model: clients must send token ids";
  } else {
    return tokenizer.status();
  }
  absl::StatusOr<std::string> config =
      ReadTextFile(model_dir + "/tokenizer_config.json", kMaxTokenizerBytes);
  if (!config.ok() && !absl::IsNotFound(config.status())) return config.status();
  info->set_tokenizer_config_json(config.ok() ? *config : sentencepiece_config);
  if (config.ok()) {
    // The same reading of "chat_template" (a string, or the "default" entry of a named list) as
    // ChatTemplate::FromTokenizerConfig's; a malformed one stops the worker here rather than
    // leaving the gateway, which parses what GetModelInfo carries, without a template.
    absl::StatusOr<std::string> chat_template =
        common::ChatTemplateSourceFromTokenizerConfig(*config);
    if (chat_template.ok()) {
      info->set_chat_template(*std::move(chat_template));
    } else if (!absl::IsNotFound(chat_template.status())) {
      return absl::InvalidArgumentError(
          absl::StrCat(model_dir, "/", chat_template.status().message()));
    }
  }
  if (info->chat_template().empty()) {
    absl::StatusOr<std::string> jinja =
        ReadTextFile(model_dir + "/chat_template.jinja", kMaxTokenizerBytes);
    if (jinja.ok()) info->set_chat_template(*std::move(jinja));
  }
  return absl::OkStatus();
}

// One short request through the whole engine, so the first client does not pay for cold caches
// and lazily allocated buffers, and a broken backend fails at start, not on traffic.
absl::Status WarmUp(Engine& engine, bool embed) {
  absl::Notification done;
  absl::Status result;
  EngineRequest request;
  request.prompt = {engine.model_config().bos_token_id >= 0 ? engine.model_config().bos_token_id
                                                            : 0};
  if (embed) {
    request.stopping.max_tokens = 0;
    request.pooling = PoolingParams{};
  } else {
    request.sampling.temperature = 0;
    request.stopping.max_tokens = 1;
    request.stopping.ignore_eos = true;
  }
  request.on_output = [&](const EngineOutput& output) {
    if (output.finish == FinishReason::kNone) return;
    if (output.finish == FinishReason::kError) result = output.error;
    if (output.finish == FinishReason::kAbort) result = absl::AbortedError("warm-up aborted");
    done.Notify();
  };
  const int64_t steps_before = engine.Counts().steps;
  LLMSERVE_RETURN_IF_ERROR(engine.AddRequest(std::move(request)).status());
  done.WaitForNotification();
  // The output arrives mid-step; the step's end (and its metrics report) comes just after.
  if (engine.WaitForSteps(steps_before + 1, absl::Now() + absl::Minutes(1)).steps == steps_before) {
    return absl::DeadlineExceededError("warm-up: the engine's step did not end within a minute");
  }
  if (!result.ok()) {
    return absl::Status(result.code(), absl::StrCat("warm-up step failed: ", result.message()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateWorkerServerOptions(const WorkerServerOptions& o) {
  if (o.model_dir.empty()) return absl::InvalidArgumentError("--model is required");
  if (o.backend != "cpu" && o.backend != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("--backend=", o.backend, " is not one of cpu, cuda"));
  }
  // int8 and AWQ/GPTQ projections run on both backends; whether the model is quantized (int8, or
  // an AWQ/GPTQ checkpoint) is known once it is read. The CUDA backend keeps the LM head in
  // --dtype: it has no int8 LM head.
  if (o.quantize_lm_head.value_or(false) && o.backend != "cpu") {
    return absl::InvalidArgumentError(
        absl::StrCat("--quantize_lm_head runs on --backend=cpu only (the ", o.backend,
                     " backend keeps the LM head in --dtype; it has no int8 LM head)"));
  }
  if (o.quantized_activations && o.backend != "cpu") {
    return absl::InvalidArgumentError(
        absl::StrCat("--quantized_activations runs on --backend=cpu only (the ", o.backend,
                     " backend has no integer-dot kernels)"));
  }
  LLMSERVE_RETURN_IF_ERROR(CheckRange("device", o.device, 0, 1023));
  LLMSERVE_RETURN_IF_ERROR(CheckRange("port", o.port, 0, 65535));
  LLMSERVE_RETURN_IF_ERROR(CheckRange("metrics_port", o.metrics_port, -1, 65535));
  if (o.kv_cache_bytes <= 0 && !(o.kv_cache_fraction > 0 && o.kv_cache_fraction <= 1)) {
    return absl::InvalidArgumentError(
        "--kv_cache_memory: give a size (4GiB) or a percentage of free memory in (0%, 100%]");
  }
  LLMSERVE_RETURN_IF_ERROR(CheckRange("block_size", o.block_size, 1, 1024));
  LLMSERVE_RETURN_IF_ERROR(CheckRange("max_num_seqs", o.max_num_seqs, 1, 65536));
  LLMSERVE_RETURN_IF_ERROR(
      CheckRange("max_num_batched_tokens", o.max_num_batched_tokens, 1, 1 << 20));
  LLMSERVE_RETURN_IF_ERROR(CheckRange("max_model_len", o.max_model_len, 0, 1 << 24));
  LLMSERVE_RETURN_IF_ERROR(CheckRange("threads", o.threads, 0, 4096));
  LLMSERVE_RETURN_IF_ERROR(CheckRange("max_queue", o.max_queue, 0, 1 << 20));
  if (absl::Status speculative = ValidateSpeculativeConfig(o.speculative); !speculative.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--", speculative.message()));
  }
  if (o.speculative.method == SpeculativeMethod::kDraft && o.backend != "cpu") {
    return absl::InvalidArgumentError(
        absl::StrCat("--speculative_method=draft runs on --backend=cpu only (the ", o.backend,
                     " backend cannot load a draft model yet); --speculative_method=ngram runs on "
                     "both"));
  }
  LLMSERVE_RETURN_IF_ERROR(CheckRange("max_loras", o.max_loras, 0, 1024));
  LLMSERVE_RETURN_IF_ERROR(CheckRange("max_lora_rank", o.max_lora_rank, 1, kMaxLoraRank));
  if ((!o.lora_modules.empty() || o.allow_runtime_lora_updating) && o.max_loras == 0) {
    return absl::InvalidArgumentError(
        "--lora_modules and --allow_runtime_lora_updating need --max_loras of at least 1");
  }
  if (o.task != "generate" && o.task != "embed") {
    return absl::InvalidArgumentError(
        absl::StrCat("--task=", o.task, " is not one of generate, embed"));
  }
  if (o.task == "embed") {
    if (o.backend != "cpu") {
      return absl::InvalidArgumentError(
          absl::StrCat("--task=embed runs on --backend=cpu only (the ", o.backend,
                       " backend does not return hidden states yet)"));
    }
    if (o.speculative.enabled()) {
      return absl::InvalidArgumentError(
          "--speculative_method does not apply to --task=embed (embeddings generate no tokens)");
    }
  } else if (o.pooling.has_value() || !o.normalize_embeddings) {
    return absl::InvalidArgumentError(
        "--pooling and --normalize_embeddings apply to --task=embed only");
  }
  if (o.drain_timeout < absl::ZeroDuration() || o.drain_timeout > absl::Hours(24)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--drain_timeout=", absl::FormatDuration(o.drain_timeout), " is outside [0s, 24h]"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<WorkerServer>> WorkerServer::Start(
    const WorkerServerOptions& options) {
  LLMSERVE_RETURN_IF_ERROR(ValidateWorkerServerOptions(options));
  // Before the (possibly long) model load: a bad certificate fails at once.
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      common::MakeServerCredentials(options.tls, "");
  if (!credentials.ok()) return credentials.status();
  std::unique_ptr<WorkerServer> server(new WorkerServer());
  server->options_ = options;
  server->model_name_ = options.served_model_name.empty() ? DirectoryName(options.model_dir)
                                                          : options.served_model_name;
  LLMSERVE_RETURN_IF_ERROR(server->LoadEngine());
  LLMSERVE_RETURN_IF_ERROR(server->DescribeModel());
  LLMSERVE_RETURN_IF_ERROR(server->StartMetrics());
  LLMSERVE_RETURN_IF_ERROR(server->StartEngine());
  LLMSERVE_RETURN_IF_ERROR(server->MakeService());
  LLMSERVE_RETURN_IF_ERROR(server->Listen(*credentials));
  return server;
}

absl::Status WorkerServer::LoadEngine() {
  const WorkerServerOptions& options = options_;
  LLMSERVE_LOG(INFO)
      << "loading " << options.model_dir << " (" << DTypeName(options.dtype) << " weights"
      << (options.quantization == Quantization::kNone
              ? ""
              : absl::StrCat(", quantized to ", QuantizationName(options.quantization),
                             options.quantize_lm_head.value_or(false) ? " with the LM head" : "",
                             options.quantized_activations
                                 ? ", activations quantized at small batches"
                                 : ""))
      << ", " << options.backend << " backend)";
  const absl::Time load_start = absl::Now();
  absl::Time last_progress = load_start;
  CpuEngineOptions engine_options{
      .model_dir = options.model_dir,
      .dtype = options.dtype,
      .quantization = options.quantization,
      .quantize_lm_head = options.quantize_lm_head,
      .quantized_activations = options.quantized_activations,
      .num_threads = options.threads,
      .kv_cache_bytes = options.kv_cache_bytes,
      .kv_cache_fraction = options.kv_cache_fraction,
      .block_size = options.block_size,
      .max_model_len = options.max_model_len,
      .max_lora_rank = options.max_lora_rank,
      .engine = {.max_num_batched_tokens = options.max_num_batched_tokens,
                 .max_num_seqs = options.max_num_seqs,
                 .enable_prefix_caching = options.enable_prefix_caching,
                 .max_loras = options.max_loras,
                 .max_waiting = options.max_queue,
                 .speculative = options.speculative,
                 // Metrics are null until after the warm-up, which is not traffic.
                 .on_step =
                     [this](const StepStats& step) {
                       load_.Record(step);
                       if (WorkerMetrics* metrics = step_metrics_.load()) metrics->OnStep(step);
                     }},
      .load_progress =
          [&last_progress](int64_t done, int64_t total) {
            const absl::Time now = absl::Now();
            if (done == total || now - last_progress >= absl::Seconds(2)) {
              LLMSERVE_LOG(INFO) << "loading weights: layer " << done << "/" << total;
              last_progress = now;
            }
          },
  };
  if (options.backend == "cuda") {
    // --threads has no meaning on the GPU; the rest carries over.
    const CudaEngineOptions cuda_options{
        .model_dir = engine_options.model_dir,
        .device = options.device,
        .dtype = options.dtype,
        .quantization = options.quantization,
        .kv_cache_bytes = options.kv_cache_bytes,
        .kv_cache_fraction = options.kv_cache_fraction,
        .block_size = options.block_size,
        .max_model_len = options.max_model_len,
        .max_lora_rank = options.max_lora_rank,
        .engine = engine_options.engine,
        .load_progress = engine_options.load_progress,
    };
    LLMSERVE_ASSIGN_OR_RETURN(engine_, BuildCudaEngine(cuda_options));
  } else {
    LLMSERVE_ASSIGN_OR_RETURN(engine_, BuildCpuEngine(engine_options));
  }
  const ModelConfig& config = engine_->model_config();
  // What runs: the flag, or an AWQ/GPTQ checkpoint's own (the engine builder checked the pair).
  LLMSERVE_ASSIGN_OR_RETURN(quantization_,
                            ResolveQuantization(options.quantization, config.quantization));
  LLMSERVE_LOG(INFO) << "loaded " << config.architecture << " (" << config.NumParameters() / 1e6
                     << "M parameters, " << config.num_layers << " layers, vocab "
                     << config.vocab_size << ") in "
                     << absl::FormatDuration(
                            absl::Trunc(absl::Now() - load_start, absl::Milliseconds(1)));
  if (options.backend != "cuda" && TransparentHugePagesMode() == "never") {
    LLMSERVE_LOG(WARNING) << "transparent huge pages are off "
                             "(/sys/kernel/mm/transparent_hugepage/enabled: never): the weights "
                             "stay in 4 KiB pages, and decode reads them slower (madvise or always "
                             "gives them 2 MiB pages; docs/engine.md)";
  }
  if (engine_->backend().lm_head_quantized() && !options.quantize_lm_head.has_value()) {
    LLMSERVE_LOG(INFO) << "LM head in int8, as the quantized projections "
                          "(--quantize_lm_head=false keeps it in --dtype)";
  }
  const int32_t kv_blocks = engine_->num_kv_blocks();
  LLMSERVE_LOG(INFO) << "KV cache: " << kv_blocks << " blocks of " << options.block_size
                     << " tokens = " << int64_t{kv_blocks} * options.block_size
                     << " tokens; context " << engine_->max_model_len()
                     << " tokens, prefix caching "
                     << (options.enable_prefix_caching ? "on" : "off");
  for (const auto& [name, path] : options.lora_modules) {
    absl::StatusOr<std::unique_ptr<LoraAdapter>> adapter =
        LoadLoraAdapter(path, config, options.max_lora_rank);
    if (!adapter.ok()) {
      return absl::Status(adapter.status().code(), absl::StrCat("--lora_modules: ", name, "=", path,
                                                                ": ", adapter.status().message()));
    }
    const int64_t rank = (*adapter)->rank;
    const std::string modules = absl::StrJoin((*adapter)->target_modules, ",");
    if (absl::Status added = engine_->AddLoraAdapter(name, *std::move(adapter)); !added.ok()) {
      return absl::Status(added.code(), absl::StrCat("--lora_modules: ", added.message()));
    }
    LLMSERVE_LOG(INFO) << "LoRA adapter " << name << ": rank " << rank << " on " << modules
                       << ", from " << path;
  }
  if (options.max_loras > 0) {
    LLMSERVE_LOG(INFO) << "LoRA: " << options.max_loras << " adapters at once, rank up to "
                       << options.max_lora_rank
                       << (options.allow_runtime_lora_updating
                               ? "; adapters may be loaded and unloaded at run time"
                               : "");
  }
  if (options.speculative.enabled()) {
    const SpeculativeConfig& spec = options.speculative;
    LLMSERVE_LOG(INFO) << "speculative decoding: " << SpeculativeMethodName(spec.method)
                       << ", up to " << spec.num_speculative_tokens << " draft tokens, "
                       << (spec.method == SpeculativeMethod::kDraft
                               ? absl::StrCat("drafted by the model in ", spec.model,
                                              spec.model_int8 ? " (in int8)" : "")
                               : absl::StrCat("n-grams of ", spec.prompt_lookup_min, "..",
                                              spec.prompt_lookup_max, " tokens"))
                       << ", "
                       << (spec.EffectiveDisableBatchSize() == 0
                               ? std::string("at any batch size")
                               : absl::StrCat("while at most ", spec.EffectiveDisableBatchSize(),
                                              " requests run"));
  }
  return absl::OkStatus();
}

absl::Status WorkerServer::DescribeModel() {
  const ModelConfig& config = engine_->model_config();
  v1::ModelInfo& info = model_info_;
  info.set_model_name(model_name_);
  info.set_max_model_len(engine_->max_model_len());
  for (int32_t eos : config.eos_token_ids) info.add_eos_token_ids(eos);
  info.set_bos_token_id(config.bos_token_id);
  info.set_block_size(options_.block_size);
  info.set_vocab_size(static_cast<uint32_t>(config.vocab_size));
  info.set_num_kv_blocks(engine_->num_kv_blocks());
  info.set_max_num_seqs(options_.max_num_seqs);
  info.set_backend(std::string(engine_->backend().name()));
  info.set_dtype(std::string(DTypeName(options_.dtype)));
  info.set_quantization(RunningQuantizationName(quantization_, config.quantization));
  info.set_lm_head_quantized(engine_->backend().lm_head_quantized());
  info.set_worker_id(WorkerId());
  info.set_prefix_caching(options_.enable_prefix_caching);
  info.set_task(options_.task);
  info.set_max_loras(static_cast<uint32_t>(options_.max_loras));
  info.set_max_lora_rank(options_.max_loras > 0 ? static_cast<uint32_t>(options_.max_lora_rank)
                                                : 0);
  info.set_allow_runtime_lora_updating(options_.allow_runtime_lora_updating);
  if (options_.task == "embed") LLMSERVE_RETURN_IF_ERROR(DescribeEmbeddings(config, &info));
  return AddTokenizerFiles(options_.model_dir, &info);
}

absl::Status WorkerServer::DescribeEmbeddings(const ModelConfig& config, v1::ModelInfo* info) {
  // A GGUF or llama2.c file has no sentence-transformers modules: the flags decide.
  absl::StatusOr<PoolingConfig> pooling = PoolingConfig{};
  std::error_code error;
  if (std::filesystem::is_directory(options_.model_dir, error)) {
    const std::string config_json =
        ReadTextFile(options_.model_dir + "/config.json", kMaxTokenizerBytes).value_or("");
    pooling = ReadPoolingConfig(options_.model_dir, config_json, config.hidden_size);
  }
  if (!pooling.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(options_.model_dir, "/", pooling.status().message()));
  }
  const PoolingMethod method =
      options_.pooling.value_or(pooling->method.value_or(PoolingMethod::kLast));
  info->set_embedding_size(static_cast<uint32_t>(config.hidden_size));
  info->set_pooling(std::string(PoolingMethodName(method)));
  info->set_normalize_embeddings(options_.normalize_embeddings);
  info->set_matryoshka(pooling->matryoshka);
  for (int64_t dimensions : pooling->matryoshka_dimensions) {
    info->add_matryoshka_dimensions(static_cast<uint32_t>(dimensions));
  }
  // Embeddings share no blocks (every prompt token's hidden state is pooled): the cache has
  // nothing to offer, and the gateway should route by load alone.
  info->set_prefix_caching(false);
  LLMSERVE_LOG(INFO) << "serving embeddings of " << config.hidden_size << " dimensions, "
                     << PoolingMethodName(method) << " pooling"
                     << (options_.pooling.has_value()  ? " (--pooling)"
                         : pooling->method.has_value() ? " (sentence-transformers config)"
                                                       : " (the default)")
                     << (options_.normalize_embeddings ? ", normalized" : ", not normalized")
                     << (pooling->matryoshka ? ", Matryoshka truncation allowed" : "");
  return absl::OkStatus();
}

absl::Status WorkerServer::StartMetrics() {
  metrics_ = std::make_unique<WorkerMetrics>(
      WorkerMetricsConfig{.model_name = model_name_,
                          .block_size = options_.block_size,
                          .num_blocks = static_cast<int32_t>(model_info_.num_kv_blocks()),
                          .backend = model_info_.backend(),
                          .dtype = model_info_.dtype(),
                          .quantization = model_info_.quantization(),
                          .lm_head_quantized = model_info_.lm_head_quantized(),
                          .vllm_names = options_.vllm_metric_names,
                          .max_loras = options_.max_loras},
      [this] { return load_.Load(engine_->Counts()); });
  if (options_.metrics_port < 0) return absl::OkStatus();
  LLMSERVE_ASSIGN_OR_RETURN(exposer_,
                            common::MetricsExposer::Start(options_.host, options_.metrics_port));
  for (const auto& collectable : metrics_->collectables()) exposer_->Register(collectable);
  return absl::OkStatus();
}

absl::Status WorkerServer::StartEngine() {
  engine_->Start();
  const absl::Time warm_start = absl::Now();
  LLMSERVE_RETURN_IF_ERROR(WarmUp(*engine_, options_.task == "embed"));
  step_metrics_ = metrics_.get();
  LLMSERVE_LOG(INFO) << "warm-up step done in "
                     << absl::FormatDuration(
                            absl::Trunc(absl::Now() - warm_start, absl::Microseconds(100)));
  return absl::OkStatus();
}

absl::Status WorkerServer::MakeService() {
  const ModelConfig& config = engine_->model_config();
  std::string structured_error;
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<StructuredOutputCompiler>> structured =
      StructuredOutputCompiler::Create(
          model_info_.tokenizer_json(), model_info_.tokenizer_config_json(),
          static_cast<int32_t>(config.vocab_size), config.eos_token_ids);
  if (structured.ok()) {
    structured_ = *std::move(structured);
    LLMSERVE_LOG(INFO) << "structured outputs: vocabulary indexed in "
                       << absl::FormatDuration(
                              absl::Trunc(absl::Now() - start, absl::Milliseconds(1)));
  } else {
    structured_error = std::string(structured.status().message());
    LLMSERVE_LOG(WARNING) << structured_error;
  }
  service_ = std::make_unique<WorkerService>(engine_.get(), &load_, metrics_.get(), model_info_,
                                             structured_.get(), std::move(structured_error));
  service_->set_allow_runtime_lora_updating(options_.allow_runtime_lora_updating);
  if (!options_.tracing.endpoint.empty()) {
    LLMSERVE_ASSIGN_OR_RETURN(tracer_, common::tracing::Tracer::Create(
                                           options_.tracing, "llmserve-worker", LLMSERVE_VERSION));
    service_->set_tracer(tracer_.get());
    LLMSERVE_LOG(INFO) << "traces to " << tracer_->Describe() << " (sampled "
                       << options_.tracing.sample_ratio << ")";
  }
  if (!options_.test_only_crash_on_prompt_tokens.empty()) {
    LLMSERVE_LOG(WARNING) << "--test_only_crash_on_prompt_tokens is set: this worker crashes on "
                             "purpose on some prompts (a test-only fault; never in production)";
    service_->CrashOnPromptTokensForTesting(options_.test_only_crash_on_prompt_tokens);
  }
  return absl::OkStatus();
}

absl::Status WorkerServer::Listen(const std::shared_ptr<grpc::ServerCredentials>& credentials) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  const std::string address = absl::StrCat(options_.host, ":", options_.port);
  builder.AddListeningPort(address, credentials, &port_);
  builder.SetMaxReceiveMessageSize(common::WorkerRequestMaxBytes(engine_->max_model_len()));
  builder.SetMaxSendMessageSize(common::kWorkerApiMaxMessageBytes);
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", address, " (port in use, or a bad address?)"));
  }
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  health->SetServingStatus("", true);
  health->SetServingStatus(kReadinessServiceName, true);
  LLMSERVE_LOG(INFO) << "serving " << model_name_ << " on " << options_.host << ":" << port_
                     << (exposer_ != nullptr ? absl::StrCat(", metrics on http://", options_.host,
                                                            ":", exposer_->port(), "/metrics")
                                             : std::string(", no metrics server"));
  return absl::OkStatus();
}

WorkerServer::~WorkerServer() {
  if (server_ != nullptr) Drain();
  // Everything that reads the engine (scrapes, the load thread) stops before the engine goes; the
  // engine goes before the service and the metrics, which its last outputs (requests a stuck
  // drain could not end) still reach.
  exposer_.reset();
  if (service_ != nullptr) {
    service_->StopLoadThread();
    service_->StopLoraLoader();
  }
  engine_.reset();
  service_.reset();
}

int WorkerServer::Drain() {
  if (drained_.exchange(true)) return 0;
  // The exposer outlives the drain (it stops in the destructor), so the gauge reads 1 until exit.
  metrics_->OnDrainStarted();
  server_->GetHealthCheckService()->SetServingStatus(kReadinessServiceName, false);
  service_->StartDrain();
  const int running = service_->live_requests();
  LLMSERVE_LOG(INFO) << "draining: " << running << " requests running, waiting up to "
                     << absl::FormatDuration(options_.drain_timeout);
  const int left = service_->WaitForIdle(absl::Now() + options_.drain_timeout);
  if (left > 0) {
    LLMSERVE_LOG(WARNING) << "drain timeout passed: aborting " << left << " requests";
    service_->AbortAll(absl::StrCat(
        "the worker shut down before the request finished (drain "
        "timeout of ",
        absl::FormatDuration(options_.drain_timeout), " passed); retry on another worker"));
    // Aborts take effect at the engine's next iteration.
    service_->WaitForIdle(absl::Now() + absl::Seconds(10));
  }
  service_->FinishWatchers();
  // Streams still writing to a stuck client are cancelled after this deadline.
  server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  server_->Wait();
  LLMSERVE_LOG(INFO) << "drained";
  return left;
}

}  // namespace llmserve::worker
