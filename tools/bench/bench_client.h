// What the benchmark sends and what it measures of each request, and the interface of a client
// for one API (llmserve's worker or gateway gRPC APIs, or an OpenAI-compatible HTTP server such as
// llmserve's gateway, vLLM or llama-server). Every client streams and times tokens as they arrive.
//
// Thread-safety: BenchClient::Send is called from many threads at once.

#ifndef LLMSERVE_TOOLS_BENCH_BENCH_CLIENT_H_
#define LLMSERVE_TOOLS_BENCH_BENCH_CLIENT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace llmserve::tools {

struct ChatTurn {
  std::string role;
  std::string content;
};

// One request's prompt: token ids, text, or a conversation (at least one is set; a client uses
// the form its API takes and the others are left empty).
struct BenchRequest {
  std::vector<int32_t> prompt_ids;
  std::string prompt_text;
  std::vector<ChatTurn> messages;
  // Prompt tokens when known before sending (synthetic loads); 0: taken from the server's usage.
  int64_t prompt_tokens = 0;
  // Tokens to generate; the request asks the server to ignore EOS so that it makes exactly these.
  int32_t output_len = 0;
};

struct RequestOutcome {
  bool ok = false;
  // How it ended: "ok", or what failed: "http 429", "grpc UNAVAILABLE", "connect",
  // "timeout", "stream error" (an error event after a 200), "truncated" (the stream ended
  // without its end marker), "bad response".
  std::string status;
  std::string error;  // the server's message, when it failed
  double ttft_s = 0;  // send → first output token
  double e2e_s = 0;   // send → end of the response
  // Gaps between successive token-carrying messages (SSE events or stream messages).
  std::vector<double> itl_s;
  int64_t output_tokens = 0;
  int64_t prompt_tokens = 0;  // the server's usage when it reports one, else the request's
};

class BenchClient {
 public:
  virtual ~BenchClient() = default;
  // Sends `request` (named `id` where the API carries ids) and waits for its end, at most until
  // `deadline`.
  virtual RequestOutcome Send(const std::string& id, const BenchRequest& request,
                              absl::Time deadline) = 0;
};

}  // namespace llmserve::tools

#endif  // LLMSERVE_TOOLS_BENCH_BENCH_CLIENT_H_
