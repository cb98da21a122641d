// What makes two requests "the same request" to a worker, for query-of-death protection
// (query_of_death.h): a hash of the model's name and of the worker request as the gateway sends
// it (prompt token ids, sampling, stopping, the structured-output constraint), leaving out what
// cannot change how the worker runs it: the request id, the tenant's cache salt, the priority,
// and the sampling seed (the n choices of one request get seeds seed, seed + 1, ...; a client
// may pick a fresh seed for each retry; a crash in compiling a constraint or prefilling a prompt
// does not depend on it).
//
// Text and chat prompts are fingerprinted after the chat template and the tokenizer, so the same
// prompt sent through the gRPC and the OpenAI APIs, or as text and as token ids, is one request.
// The hash is 64 bits of absl::Hash (seeded per process: a client cannot build collisions
// offline), over protobuf's deterministic serialization.
//
// Thread-safe (a pure function).

#ifndef LLMSERVE_GATEWAY_PIPELINE_REQUEST_FINGERPRINT_H_
#define LLMSERVE_GATEWAY_PIPELINE_REQUEST_FINGERPRINT_H_

#include <cstdint>

#include "absl/strings/string_view.h"
#include "llmserve/worker/v1/worker.pb.h"

namespace llmserve::gateway {

uint64_t RequestFingerprint(absl::string_view model, const worker::v1::GenerateRequest& request);

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_PIPELINE_REQUEST_FINGERPRINT_H_
