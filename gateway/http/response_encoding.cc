#include "gateway/http/response_encoding.h"

#include <utility>

// GCC 12 needs <utility> before Asio/Beast headers (docs/building.md, "Dependencies").
#include <boost/beast/http/status.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status/http_error.h"

namespace llmserve::gateway::http {
namespace {

absl::string_view ReasonPhrase(int status) {
  const auto reason = boost::beast::http::obsolete_reason(
      static_cast<boost::beast::http::status>(static_cast<unsigned>(status)));
  absl::string_view text(reason.data(), reason.size());
  // Beast names unknown codes "<unknown-status>"; a reason phrase may be empty instead.
  return text.empty() || text.front() == '<' ? absl::string_view() : text;
}

bool IsServerOwnedHeader(absl::string_view name) {
  return absl::EqualsIgnoreCase(name, "content-length") ||
         absl::EqualsIgnoreCase(name, "transfer-encoding") ||
         absl::EqualsIgnoreCase(name, "connection") || absl::EqualsIgnoreCase(name, "date");
}

}  // namespace

bool StatusHasNoBody(int status) { return status < 200 || status == 204 || status == 304; }

bool IsValidHeaderName(absl::string_view name) {
  if (name.empty()) return false;
  for (const char c : name) {
    const bool token = absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
                       absl::string_view("!#$%&'*+-.^_`|~").find(c) != absl::string_view::npos;
    if (!token) return false;
  }
  return true;
}

bool IsValidHeaderValue(absl::string_view value) {
  return value.find_first_of(absl::string_view("\r\n\0", 3)) == absl::string_view::npos;
}

std::string EncodeResponseHead(int status, const HttpHeaders& headers,
                               const ResponseHeadOptions& options) {
  std::string out = absl::StrCat("HTTP/1.1 ", status, " ", ReasonPhrase(status), "\r\n");
  absl::StrAppend(&out, "date: ",
                  absl::FormatTime("%a, %d %b %Y %H:%M:%S GMT", absl::Now(), absl::UTCTimeZone()),
                  "\r\n");
  for (const auto& [name, value] : headers) {
    if (IsServerOwnedHeader(name) || !IsValidHeaderName(name) || !IsValidHeaderValue(value)) {
      continue;
    }
    absl::StrAppend(&out, name, ": ", value, "\r\n");
  }
  switch (options.framing) {
    case BodyFraming::kContentLength:
      absl::StrAppend(&out, "content-length: ", options.content_length, "\r\n");
      break;
    case BodyFraming::kChunked:
      out += "transfer-encoding: chunked\r\n";
      break;
    case BodyFraming::kUntilClose:
    case BodyFraming::kNone:
      break;
  }
  if (!options.keep_alive) out += "connection: close\r\n";
  out += "\r\n";
  return out;
}

std::string EncodeChunk(absl::string_view data) {
  if (data.empty()) return std::string();
  return absl::StrCat(absl::Hex(data.size()), "\r\n", data, "\r\n");
}

std::string EncodeErrorResponse(int status, const absl::Status& error, bool head_request,
                                const HttpHeaders& headers) {
  common::HttpError body = common::ToHttpError(error);
  HttpHeaders all_headers = {{"content-type", "application/json"}};
  all_headers.insert(all_headers.end(), headers.begin(), headers.end());
  std::string out = EncodeResponseHead(status, all_headers,
                                       {.framing = BodyFraming::kContentLength,
                                        .content_length = body.body.size(),
                                        .keep_alive = false});
  if (!head_request) out += body.body;
  return out;
}

}  // namespace llmserve::gateway::http
