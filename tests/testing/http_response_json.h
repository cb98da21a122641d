// The JSON body of a whole HTTP response as HttpExchange returns it (headers, blank line, body),
// for tests of the gateway's JSON endpoints. Header-only.

#ifndef LLMSERVE_TESTS_TESTING_HTTP_RESPONSE_JSON_H_
#define LLMSERVE_TESTS_TESTING_HTTP_RESPONSE_JSON_H_

#include <nlohmann/json.hpp>
#include <string>

namespace llmserve::testing {

// The body parsed as JSON; null when the response has no body.
inline nlohmann::json HttpResponseJson(const std::string& response) {
  const size_t start = response.find("\r\n\r\n");
  return start == std::string::npos ? nlohmann::json()
                                    : nlohmann::json::parse(response.substr(start + 4));
}

}  // namespace llmserve::testing

#endif  // LLMSERVE_TESTS_TESTING_HTTP_RESPONSE_JSON_H_
