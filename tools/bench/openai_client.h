// The benchmark's client for OpenAI-compatible servers (llmserve's gateway, vLLM, llama-server,
// TGI's Messages API): streaming POSTs to /v1/completions or /v1/chat/completions, the way vLLM's
// benchmark_serving sends them — max tokens, ignore_eos, stream_options.include_usage — timing
// every SSE event that carries text.
//
// Thread-safe: Send may be called from many threads; connections are kept alive in a pool.

#ifndef LLMSERVE_TOOLS_BENCH_OPENAI_CLIENT_H_
#define LLMSERVE_TOOLS_BENCH_OPENAI_CLIENT_H_

#include <nlohmann/json.hpp>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tools/bench/bench_client.h"
#include "tools/bench/http_client.h"

namespace llmserve::tools {

enum class OpenAiEndpoint { kCompletions, kChat };

struct OpenAiClientOptions {
  HttpTarget target;
  OpenAiEndpoint endpoint = OpenAiEndpoint::kCompletions;
  // Path of the endpoint; empty: /v1/completions or /v1/chat/completions.
  std::string path;
  // The "model" field. Required (FirstServedModel finds one).
  std::string model;
  // Sent as "Authorization: Bearer ..." when not empty.
  std::string api_key;
  // Merged into every request body last (so it may override temperature, ignore_eos, ...).
  nlohmann::json extra_body = nlohmann::json::object();
  absl::Duration connect_timeout = absl::Seconds(10);
};

class OpenAiClient final : public BenchClient {
 public:
  explicit OpenAiClient(OpenAiClientOptions options);

  // The body Send posts for `request` (exposed for tests).
  nlohmann::json RequestBody(const BenchRequest& request) const;
  RequestOutcome Send(const std::string& id, const BenchRequest& request,
                      absl::Time deadline) override;

 private:
  const OpenAiClientOptions options_;
  const std::string path_;
  HttpConnectionPool pool_;
};

// GET /v1/models: the id of the first model listed. UNAVAILABLE when the server cannot be
// reached or answers with an error (its message quoted); NOT_FOUND when it lists none.
absl::StatusOr<std::string> FirstServedModel(const HttpTarget& target, const std::string& api_key,
                                             absl::Duration timeout);

}  // namespace llmserve::tools

#endif  // LLMSERVE_TOOLS_BENCH_OPENAI_CLIENT_H_
