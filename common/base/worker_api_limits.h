// Limits both ends of the worker API (llmserve.worker.v1.Worker) must agree on.
//
// Thread-safe: constants.

#ifndef LLMSERVE_COMMON_BASE_WORKER_API_LIMITS_H_
#define LLMSERVE_COMMON_BASE_WORKER_API_LIMITS_H_

namespace llmserve::common {

// gRPC message size on the worker API: GetModelInfo carries tokenizer.json (Llama-3's is about
// 9 MB), past gRPC's 4 MB default (worker.proto).
inline constexpr int kWorkerApiMaxMessageBytes = 64 << 20;

}  // namespace llmserve::common

#endif  // LLMSERVE_COMMON_BASE_WORKER_API_LIMITS_H_
