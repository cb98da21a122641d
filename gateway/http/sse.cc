#include "gateway/http/sse.h"

#include <string>

namespace llmserve::gateway::http {

std::string FormatSseEvent(absl::string_view data) {
  std::string out;
  out.reserve(data.size() + 8);
  out += "data: ";
  for (size_t i = 0; i < data.size(); ++i) {
    const char c = data[i];
    if (c == '\r' || c == '\n') {
      if (c == '\r' && i + 1 < data.size() && data[i + 1] == '\n') ++i;
      out += "\ndata: ";
    } else {
      out += c;
    }
  }
  out += "\n\n";
  return out;
}

}  // namespace llmserve::gateway::http
