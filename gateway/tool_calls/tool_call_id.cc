#include "gateway/tool_calls/tool_call_id.h"

#include <string_view>

#include "absl/random/random.h"

namespace llmserve::gateway::tool_calls {

std::string NewToolCallId() {
  static constexpr std::string_view kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  // One generator per thread: no lock, and absl::BitGen is seeded from the OS.
  thread_local absl::BitGen gen;
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) {
    id.push_back(kAlphabet[absl::Uniform<size_t>(gen, 0, kAlphabet.size())]);
  }
  return id;
}

}  // namespace llmserve::gateway::tool_calls
