#include "worker/service/request_conversion.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/worker_api_limits.h"
#include "common/status/status_macros.h"

namespace llmserve::worker {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", problem));
}

// Sampling fields the proto leaves unset keep SamplingParams' defaults; the ranges are checked
// by ValidateSamplingParams (through the engine), which names the field the same way.
SamplingParams ToSamplingParams(const ::llmserve::v1::SamplingParams& proto) {
  SamplingParams params;
  if (proto.has_temperature()) params.temperature = proto.temperature();
  if (proto.has_top_k()) params.top_k = proto.top_k();
  if (proto.has_top_p()) params.top_p = proto.top_p();
  if (proto.has_min_p()) params.min_p = proto.min_p();
  if (proto.has_repetition_penalty()) params.repetition_penalty = proto.repetition_penalty();
  if (proto.has_presence_penalty()) params.presence_penalty = proto.presence_penalty();
  if (proto.has_frequency_penalty()) params.frequency_penalty = proto.frequency_penalty();
  if (proto.has_seed()) params.seed = proto.seed();
  params.top_logprobs = proto.top_logprobs();
  params.return_logprobs = proto.return_logprobs();
  params.logit_bias.reserve(proto.logit_bias_size());
  for (const ::llmserve::v1::LogitBias& entry : proto.logit_bias()) {
    params.logit_bias.emplace_back(entry.token_id(), entry.bias());
  }
  return params;
}

::llmserve::v1::FinishReason ToProtoFinish(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return ::llmserve::v1::FINISH_REASON_STOP;
    case FinishReason::kLength:
      return ::llmserve::v1::FINISH_REASON_LENGTH;
    case FinishReason::kAbort:
    case FinishReason::kError:
      return ::llmserve::v1::FINISH_REASON_ABORT;
    case FinishReason::kNone:
      break;
  }
  return ::llmserve::v1::FINISH_REASON_UNSPECIFIED;
}

// The prompt's ids into `prompt`, each checked against the vocabulary.
absl::Status CopyPrompt(const v1::GenerateRequest& request, const RequestLimits& limits,
                        std::vector<int32_t>* prompt) {
  prompt->reserve(request.prompt_token_ids_size());
  for (int i = 0; i < request.prompt_token_ids_size(); ++i) {
    const int32_t id = request.prompt_token_ids(i);
    if (id < 0 || id >= limits.vocab_size) {
      return Invalid(absl::StrCat("prompt_token_ids[", i, "]"),
                     absl::StrCat(id, " is outside the vocabulary [0, ", limits.vocab_size, ")"));
    }
    prompt->push_back(id);
  }
  return absl::OkStatus();
}

// The part of ToEngineRequest that is particular to embedding requests.
absl::StatusOr<EngineRequest> ToEmbeddingRequest(const v1::GenerateRequest& request,
                                                 const EmbeddingTask& task,
                                                 const RequestLimits& limits) {
  const int prompt_len = request.prompt_token_ids_size();
  if (prompt_len > limits.max_model_len) {
    return Invalid("prompt_token_ids",
                   absl::StrCat(prompt_len, " tokens, but the worker's context (max_model_len) is ",
                                limits.max_model_len));
  }
  const auto unused = [](absl::string_view field) {
    return Invalid(field, "does not apply to an embedding request; leave it unset");
  };
  if (request.has_sampling()) return unused("sampling");
  if (request.max_tokens() != 0) return unused("max_tokens");
  if (request.stop_token_ids_size() > 0) return unused("stop_token_ids");
  if (request.ignore_eos()) return unused("ignore_eos");
  if (request.min_tokens() != 0) return unused("min_tokens");
  if (request.has_structured_output()) return unused("structured_output");
  const int64_t dimensions = request.embedding().dimensions();
  if (dimensions != 0 && dimensions != task.size) {
    if (!task.matryoshka) {
      return Invalid("embedding.dimensions",
                     absl::StrCat(dimensions, ": this model's embeddings have ", task.size,
                                  " dimensions and it was not trained to be truncated "
                                  "(no matryoshka_dimensions or is_matryoshka in its config)"));
    }
    const std::vector<int64_t>& allowed = task.matryoshka_dimensions;
    if (dimensions > task.size || (!allowed.empty() && std::find(allowed.begin(), allowed.end(),
                                                                 dimensions) == allowed.end())) {
      return Invalid("embedding.dimensions",
                     allowed.empty() ? absl::StrCat(dimensions, " is outside [1, ", task.size, "]")
                                     : absl::StrCat(dimensions,
                                                    " is not one of the model's matryoshka "
                                                    "dimensions (",
                                                    absl::StrJoin(allowed, ", "), ")"));
    }
  }
  EngineRequest out;
  LLMSERVE_RETURN_IF_ERROR(CopyPrompt(request, limits, &out.prompt));
  out.stopping.max_tokens = 0;
  out.pooling = PoolingParams{.method = task.method,
                              .normalize = task.normalize,
                              .dimensions = static_cast<int32_t>(dimensions)};
  return out;
}

}  // namespace

absl::StatusOr<EngineRequest> CheckPriorityAndSalt(const v1::GenerateRequest& request,
                                                   EngineRequest out);

absl::Status ValidateRequestId(const std::string& request_id) {
  if (request_id.empty() || request_id.size() > common::kMaxRequestIdLength) {
    return Invalid("request_id", absl::StrCat("must be 1 to ", common::kMaxRequestIdLength,
                                              " characters, got ", request_id.size()));
  }
  for (char c : request_id) {
    if (c < 0x21 || c > 0x7e) {
      return Invalid("request_id", "must be printable ASCII without spaces");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<EngineRequest> ToEngineRequest(const v1::GenerateRequest& request,
                                              const RequestLimits& limits) {
  const int prompt_len = request.prompt_token_ids_size();
  if (prompt_len == 0) return Invalid("prompt_token_ids", "must not be empty");
  if (request.has_embedding() != limits.embedding.has_value()) {
    return absl::FailedPreconditionError(
        request.has_embedding()
            ? "embedding: this worker serves its model for text generation; embeddings need a "
              "worker started with --task=embed"
            : "this worker serves its model as embeddings (--task=embed): a request needs "
              "`embedding`");
  }
  if (limits.embedding.has_value()) {
    absl::StatusOr<EngineRequest> embedding =
        ToEmbeddingRequest(request, *limits.embedding, limits);
    if (!embedding.ok()) return embedding.status();
    return CheckPriorityAndSalt(request, *std::move(embedding));
  }
  if (prompt_len > limits.max_model_len - 1) {
    return Invalid("prompt_token_ids",
                   absl::StrCat(prompt_len, " tokens, but the worker's context (max_model_len) is ",
                                limits.max_model_len, " and leaves room for at most ",
                                limits.max_model_len - 1, " prompt tokens"));
  }
  EngineRequest out;
  LLMSERVE_RETURN_IF_ERROR(CopyPrompt(request, limits, &out.prompt));

  out.sampling = ToSamplingParams(request.sampling());
  if (const absl::Status sampling = ValidateSamplingParams(out.sampling, limits.vocab_size);
      !sampling.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("sampling.", sampling.message()));
  }

  const int32_t room = limits.max_model_len - prompt_len;
  if (request.max_tokens() > static_cast<uint32_t>(room)) {
    return Invalid("max_tokens",
                   absl::StrCat(request.max_tokens(), " with a prompt of ", prompt_len,
                                " tokens exceeds the context (max_model_len ", limits.max_model_len,
                                "); at most ", room, ", or 0 for up to the context end"));
  }
  out.stopping.max_tokens = request.max_tokens() == 0 ? room : request.max_tokens();
  if (request.min_tokens() > static_cast<uint32_t>(out.stopping.max_tokens)) {
    return Invalid("min_tokens", absl::StrCat(request.min_tokens(), " exceeds max_tokens ",
                                              out.stopping.max_tokens));
  }
  out.stopping.min_tokens = static_cast<int32_t>(request.min_tokens());
  out.stopping.ignore_eos = request.ignore_eos();
  if (request.stop_token_ids_size() > common::kMaxStopTokenIds) {
    return Invalid("stop_token_ids", absl::StrCat(request.stop_token_ids_size(), " ids; at most ",
                                                  common::kMaxStopTokenIds));
  }
  for (int i = 0; i < request.stop_token_ids_size(); ++i) {
    const int32_t id = request.stop_token_ids(i);
    if (id < 0 || id >= limits.vocab_size) {
      return Invalid(absl::StrCat("stop_token_ids[", i, "]"),
                     absl::StrCat(id, " is outside the vocabulary [0, ", limits.vocab_size, ")"));
    }
    out.stopping.stop_token_ids.push_back(id);
  }
  return CheckPriorityAndSalt(request, std::move(out));
}

absl::StatusOr<EngineRequest> CheckPriorityAndSalt(const v1::GenerateRequest& request,
                                                   EngineRequest out) {
  if (request.priority() < -common::kMaxPriority || request.priority() > common::kMaxPriority) {
    return Invalid("priority",
                   absl::StrCat(request.priority(), " is outside [", -common::kMaxPriority, ", ",
                                common::kMaxPriority, "]"));
  }
  out.priority = request.priority();
  if (request.cache_salt().size() > common::kMaxCacheSaltBytes) {
    return Invalid("cache_salt", absl::StrCat(request.cache_salt().size(), " bytes; at most ",
                                              common::kMaxCacheSaltBytes));
  }
  out.cache_salt = request.cache_salt();
  if (const std::string& lora = request.lora_adapter(); !lora.empty()) {
    if (lora.size() > 128 ||
        !std::all_of(lora.begin(), lora.end(), [](char c) { return c > 0x20 && c < 0x7f; })) {
      return Invalid("lora_adapter", "must be 1 to 128 printable ASCII characters without spaces");
    }
    out.lora_adapter = lora;
  }
  return out;
}

void AppendTokens(const EngineOutput& output, v1::GenerateResponse* response) {
  for (const GeneratedToken& token : output.tokens) {
    v1::GeneratedToken* out = response->add_tokens();
    out->set_token_id(token.token_id);
    if (token.logprob.has_value()) out->set_logprob(*token.logprob);
    for (const auto& [id, logprob] : token.top_logprobs) {
      v1::TokenLogprob* alternative = out->add_top_logprobs();
      alternative->set_token_id(id);
      alternative->set_logprob(logprob);
    }
  }
}

void SetFinal(const EngineOutput& output, v1::GenerateResponse* response) {
  response->set_finish_reason(ToProtoFinish(output.finish));
  response->mutable_embedding()->Assign(output.embedding.begin(), output.embedding.end());
  ::llmserve::v1::Usage* usage = response->mutable_usage();
  usage->set_prompt_tokens(output.prompt_tokens);
  usage->set_completion_tokens(output.output_tokens);
  usage->set_cached_prompt_tokens(output.cached_prompt_tokens);
  v1::WorkerTiming* timing = response->mutable_timing();
  timing->set_queue_s(output.queue_s);
  timing->set_time_to_first_token_s(output.ttft_s);
  timing->set_total_s(output.total_s);
  timing->set_preemptions(output.preemptions);
}

}  // namespace llmserve::worker
