// One embeddings request's answer (POST /v1/embeddings), from its run's events: OpenAI's list
// object, {"object": "list", "data": [{"object": "embedding", "index": i, "embedding": ...}],
// "model", "usage": {"prompt_tokens", "total_tokens"}}, each embedding a JSON array of floats
// (shortest round-trip decimal of each float32) or, for encoding_format "base64", the base64 of
// its little-endian float32 bytes. Any input's failure is the whole answer, with its HTTP status.
//
// Thread-safe: the run's events may come from any thread.

#ifndef LLMSERVE_GATEWAY_FRONTENDS_OPENAI_EMBEDDINGS_JOB_H_
#define LLMSERVE_GATEWAY_FRONTENDS_OPENAI_EMBEDDINGS_JOB_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "gateway/http/response_writer.h"
#include "gateway/pipeline/request_runner.h"

namespace llmserve::gateway {

class EmbeddingsJob final : public RequestSink {
 public:
  explicit EmbeddingsJob(std::shared_ptr<http::ResponseWriter> writer);
  // On the prepare thread, before the run starts: the request's encoding_format.
  void SetBase64(bool base64);

  void OnRefused(const absl::Status& status, absl::Duration retry_after) override;
  void OnStarted(const PreparedRun& run) override;
  void OnDelta(int, GenerationDelta) override {}
  void OnChoiceEnd(int choice, const GenerationResult* result, const absl::Status& error) override;
  void OnCompleted(const absl::Status& first_error) override;

 private:
  const std::shared_ptr<http::ResponseWriter> writer_;
  absl::Mutex mutex_;
  bool base64_ ABSL_GUARDED_BY(mutex_) = false;
  std::string model_ ABSL_GUARDED_BY(mutex_);
  std::vector<std::vector<float>> embeddings_ ABSL_GUARDED_BY(mutex_);
  int64_t prompt_tokens_ ABSL_GUARDED_BY(mutex_) = 0;
  absl::Status error_ ABSL_GUARDED_BY(mutex_);
};

// The response body for `embeddings` (index-aligned with the inputs) of `model`.
std::string EmbeddingsResponseJson(const std::string& model,
                                   const std::vector<std::vector<float>>& embeddings,
                                   int64_t prompt_tokens, bool base64);

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_FRONTENDS_OPENAI_EMBEDDINGS_JOB_H_
