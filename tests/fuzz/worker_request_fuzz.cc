// Fuzz target: the worker's Generate request path before the engine, as WorkerService::Generate
// runs it on the bytes of a call: ParseRawRequest (the raw method's own protobuf parse) into
// llmserve.worker.v1.GenerateRequest, ValidateRequestId, then ToEngineRequest against a small
// model's limits (so that the fuzzer reaches every bound with short inputs).
//
// Any bytes must give INVALID_ARGUMENT or an engine request, never a crash (FAILED_PRECONDITION
// only for an embedding request to a generation worker or the reverse: the conversion runs
// against both); an accepted request must be one the engine can take as it is: a prompt within
// the context and the vocabulary, max_tokens within the room the prompt leaves, min_tokens <=
// max_tokens, sampling parameters and the other fields within the ranges worker.proto documents;
// an embedding request a whole context at most, no generation, a length the model allows.

#include <google/protobuf/stubs/logging.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/base/worker_api_limits.h"
#include "common/status/grpc_raw_message.h"
#include "llmserve/worker/v1/worker.pb.h"
#include "worker/engine/engine.h"
#include "worker/sampling/sampling_params.h"
#include "worker/service/request_conversion.h"

namespace {

namespace worker = llmserve::worker;

constexpr worker::RequestLimits kLimits = {.vocab_size = 1000, .max_model_len = 256};

// The same model served as embeddings of 64 dimensions, cut to 16 or 32 (Matryoshka).
const worker::RequestLimits& EmbeddingLimits() {
  static const worker::RequestLimits* const limits = new worker::RequestLimits{
      .vocab_size = kLimits.vocab_size,
      .max_model_len = kLimits.max_model_len,
      .embedding = worker::EmbeddingTask{.method = worker::PoolingMethod::kMean,
                                         .size = 64,
                                         .matryoshka = true,
                                         .matryoshka_dimensions = {16, 32}}};
  return *limits;
}

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "worker_request_fuzz: %s\n", what);
  std::abort();
}

bool InVocabulary(int32_t id) { return id >= 0 && id < kLimits.vocab_size; }

// NaN compares false, so every range check below refuses it.
bool InRange(float value, float low, float high) { return value >= low && value <= high; }

void CheckLoraName(const worker::EngineRequest& engine_request) {
  const std::string& name = engine_request.lora_adapter;
  if (name.size() > 128) Fail("a LoRA adapter name over 128 characters");
  for (char c : name) {
    if (c <= 0x20 || c >= 0x7f) Fail("a LoRA adapter name with a character not printable ASCII");
  }
}

void CheckAcceptedEmbedding(const llmserve::worker::v1::GenerateRequest& request,
                            const worker::EngineRequest& engine_request) {
  const int prompt_len = static_cast<int>(engine_request.prompt.size());
  if (prompt_len != request.prompt_token_ids_size()) Fail("the prompt changed length");
  if (prompt_len < 1 || prompt_len > kLimits.max_model_len) Fail("prompt length out of range");
  for (int32_t id : engine_request.prompt) {
    if (!InVocabulary(id)) Fail("a prompt token outside the vocabulary");
  }
  if (!engine_request.pooling.has_value()) Fail("an embedding request without pooling");
  if (engine_request.stopping.max_tokens != 0) Fail("an embedding request that generates");
  if (engine_request.grammar != nullptr) Fail("an embedding request with a grammar");
  const int32_t dimensions = engine_request.pooling->dimensions;
  if (dimensions != 0 && dimensions != 16 && dimensions != 32 && dimensions != 64) {
    Fail("embedding dimensions the model was not trained for");
  }
  CheckLoraName(engine_request);
}

void CheckAccepted(const llmserve::worker::v1::GenerateRequest& request,
                   const worker::EngineRequest& engine_request) {
  CheckLoraName(engine_request);
  if (engine_request.pooling.has_value()) Fail("a generation request with pooling");
  const int prompt_len = static_cast<int>(engine_request.prompt.size());
  if (prompt_len != request.prompt_token_ids_size()) Fail("the prompt changed length");
  if (prompt_len < 1 || prompt_len > kLimits.max_model_len - 1) Fail("prompt length out of range");
  for (int32_t id : engine_request.prompt) {
    if (!InVocabulary(id)) Fail("a prompt token outside the vocabulary");
  }
  const worker::StoppingParams& stopping = engine_request.stopping;
  if (stopping.max_tokens < 1 || stopping.max_tokens > kLimits.max_model_len - prompt_len) {
    Fail("max_tokens outside [1, room left by the prompt]");
  }
  if (stopping.min_tokens < 0 || stopping.min_tokens > stopping.max_tokens) {
    Fail("min_tokens outside [0, max_tokens]");
  }
  if (static_cast<int>(stopping.stop_token_ids.size()) > ::llmserve::common::kMaxStopTokenIds) {
    Fail("too many stop token ids");
  }
  for (int32_t id : stopping.stop_token_ids) {
    if (!InVocabulary(id)) Fail("a stop token outside the vocabulary");
  }
  if (engine_request.priority < -::llmserve::common::kMaxPriority ||
      engine_request.priority > ::llmserve::common::kMaxPriority) {
    Fail("priority out of range");
  }
  if (engine_request.cache_salt.size() > ::llmserve::common::kMaxCacheSaltBytes)
    Fail("cache_salt too long");
  const worker::SamplingParams& sampling = engine_request.sampling;
  if (!InRange(sampling.temperature, 0, 100) || !InRange(sampling.top_p, 0, 1) ||
      sampling.top_p == 0 || !InRange(sampling.min_p, 0, 1) ||
      !InRange(sampling.repetition_penalty, 0, 2) || sampling.repetition_penalty == 0 ||
      !InRange(sampling.presence_penalty, -2, 2) || !InRange(sampling.frequency_penalty, -2, 2) ||
      sampling.top_k < 0 || sampling.top_k > kLimits.vocab_size || sampling.top_logprobs < 0 ||
      sampling.top_logprobs > ::llmserve::common::kMaxTopLogprobs) {
    Fail("a sampling parameter out of range");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // libprotobuf logs an ERROR line for every string field that is not UTF-8; writing thousands a
  // second to stderr would be most of what this target does.
  static const bool quiet = (google::protobuf::SetLogHandler(nullptr), true);
  (void)quiet;
  // One slice, as a small message arrives; the parse reads through gRPC's buffer as the service's.
  grpc::Slice slice(data, size);
  const grpc::ByteBuffer bytes(&slice, 1);
  llmserve::worker::v1::GenerateRequest request;
  if (const absl::Status parsed = llmserve::common::ParseRawRequest(bytes, &request);
      !parsed.ok()) {
    if (!absl::IsInvalidArgument(parsed)) Fail("a parse error that is not INVALID_ARGUMENT");
    return 0;
  }
  if (const absl::Status id = worker::ValidateRequestId(request.request_id()); !id.ok()) {
    if (!absl::IsInvalidArgument(id)) Fail("a request-id error that is not INVALID_ARGUMENT");
    // The service refuses here; the conversion below still has to hold up on such requests.
  }
  for (const worker::RequestLimits* limits : {&kLimits, &EmbeddingLimits()}) {
    const bool embeds = limits->embedding.has_value();
    const absl::StatusOr<worker::EngineRequest> engine_request =
        worker::ToEngineRequest(request, *limits);
    if (!engine_request.ok()) {
      const bool wrong_task =
          request.prompt_token_ids_size() > 0 && request.has_embedding() != embeds;
      if (absl::IsFailedPrecondition(engine_request.status()) != wrong_task ||
          (!wrong_task && !absl::IsInvalidArgument(engine_request.status()))) {
        Fail(
            "a conversion error that is not INVALID_ARGUMENT (or FAILED_PRECONDITION for the "
            "other task)");
      }
      continue;
    }
    if (request.has_embedding() != embeds) Fail("a request of the other task was accepted");
    if (embeds) {
      CheckAcceptedEmbedding(request, *engine_request);
    } else {
      CheckAccepted(request, *engine_request);
    }
  }
  return 0;
}
