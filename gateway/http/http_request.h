// One parsed HTTP request as the server hands it to a Handler.
//
// A plain value: no thread-safety concerns beyond those of its members.

#ifndef LLMSERVE_GATEWAY_HTTP_HTTP_REQUEST_H_
#define LLMSERVE_GATEWAY_HTTP_HTTP_REQUEST_H_

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"

namespace llmserve::gateway::http {

struct HttpRequest {
  std::string method;  // "GET", "POST", ... as sent (methods are case-sensitive)
  std::string path;    // the request target without the query string, e.g. "/v1/models"
  std::string query;   // what follows '?', raw (not percent-decoded); empty when absent
  // Names lower-cased. A header sent several times is joined with ", " (RFC 9110 5.3).
  absl::flat_hash_map<std::string, std::string> headers;
  std::string body;
  std::string remote_address;  // "ip:port", "[v6]:port" for IPv6

  // The value of header `lower_case_name`, or empty when absent.
  absl::string_view Header(absl::string_view lower_case_name) const {
    auto it = headers.find(lower_case_name);
    return it == headers.end() ? absl::string_view() : absl::string_view(it->second);
  }
};

}  // namespace llmserve::gateway::http

#endif  // LLMSERVE_GATEWAY_HTTP_HTTP_REQUEST_H_
