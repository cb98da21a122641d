#include "gateway/http/request_checks.h"

#include <cstdint>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace llmserve::gateway::http {
namespace {

namespace bhttp = boost::beast::http;

// Error messages quote what the client sent, within reason.
constexpr size_t kMaxQuotedBytes = 100;

absl::string_view View(boost::beast::string_view text) {
  return absl::string_view(text.data(), text.size());
}

std::string Quote(absl::string_view value) {
  const bool cut = value.size() > kMaxQuotedBytes;
  return absl::StrCat("\"", absl::CHexEscape(value.substr(0, kMaxQuotedBytes)), cut ? "..." : "",
                      "\"");
}

// The values of every `name` field, in order, as one comma-separated list (RFC 9110, 5.3).
std::string JoinedValues(const bhttp::request_header<>& header, bhttp::field name) {
  std::vector<absl::string_view> values;
  const auto range = header.equal_range(name);
  for (auto it = range.first; it != range.second; ++it) values.push_back(View(it->value()));
  return absl::StrJoin(values, ", ");
}

Refusal Refuse(int http_status, std::string message, HttpHeaders headers = {}) {
  return {.http_status = http_status,
          .error = absl::InvalidArgumentError(std::move(message)),
          .headers = std::move(headers)};
}

std::optional<Refusal> CheckHost(const bhttp::request_header<>& header) {
  const size_t hosts = header.count(bhttp::field::host);
  // RFC 9112, 3.2: a server MUST answer 400 to both. Without Host, a proxy and this server may
  // disagree about which site the request is for.
  if (hosts == 0 && header.version() >= 11) {
    return Refuse(400, "an HTTP/1.1 request must have a host header");
  }
  if (hosts > 1) return Refuse(400, "a request may have only one host header");
  return std::nullopt;
}

std::optional<Refusal> CheckTransferEncoding(const bhttp::request_header<>& header) {
  if (header.count(bhttp::field::transfer_encoding) == 0) return std::nullopt;
  // HTTP/1.0 has no transfer codings: a 1.0 proxy in front would frame the body by its length.
  if (header.version() < 11) {
    return Refuse(400, "transfer-encoding in an HTTP/1.0 request");
  }
  // The classic request smuggling: a proxy that frames by one and a server by the other see
  // different requests (RFC 9112, 6.1: such a message "ought to be handled as an error").
  if (header.count(bhttp::field::content_length) > 0) {
    return Refuse(400,
                  "transfer-encoding and content-length together: the body's length is ambiguous");
  }
  const std::string codings = JoinedValues(header, bhttp::field::transfer_encoding);
  if (!absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(codings), "chunked")) {
    // Beast would frame "gzip, chunked" as chunked and hand over a body it never decoded, and
    // ignore "gzip" alone (leaving the body in the stream as the next request).
    return Refuse(501, absl::StrCat("transfer-encoding ", Quote(codings),
                                    " is not implemented: only \"chunked\" is"));
  }
  return std::nullopt;
}

std::optional<Refusal> CheckContentEncoding(const bhttp::request_header<>& header) {
  if (header.count(bhttp::field::content_encoding) == 0) return std::nullopt;
  const std::string codings = JoinedValues(header, bhttp::field::content_encoding);
  for (absl::string_view coding : absl::StrSplit(codings, ',')) {
    coding = absl::StripAsciiWhitespace(coding);
    if (coding.empty() || absl::EqualsIgnoreCase(coding, "identity")) continue;
    // We do not decode request bodies: the handler would get compressed bytes as the body.
    // RFC 7694: 415 with the codings the server accepts.
    return Refuse(415,
                  absl::StrCat("content-encoding ", Quote(codings),
                               " is not supported: send the request body uncompressed"),
                  {{"accept-encoding", "identity"}});
  }
  return std::nullopt;
}

std::optional<Refusal> CheckJsonBody(const bhttp::request_header<>& header,
                                     const HttpServerOptions& options) {
  if (!options.require_json_post_body || header.method() != bhttp::verb::post) {
    return std::nullopt;
  }
  const size_t types = header.count(bhttp::field::content_type);
  const std::string content_type = JoinedValues(header, bhttp::field::content_type);
  if (types == 1 && IsJsonMediaType(content_type)) return std::nullopt;
  // A web page can make a browser POST text/plain or a form to a server on localhost without a
  // CORS preflight; application/json needs one, so requiring it keeps such pages out.
  return Refuse(415, absl::StrCat("the request body must be JSON, sent with content-type: "
                                  "application/json (got ",
                                  types == 0 ? "no content-type" : Quote(content_type), ")"));
}

}  // namespace

std::optional<Refusal> CheckRequestHeader(const bhttp::request_header<>& header,
                                          const HttpServerOptions& options) {
  for (auto check : {CheckHost, CheckTransferEncoding, CheckContentEncoding}) {
    if (std::optional<Refusal> refusal = check(header)) return refusal;
  }
  return CheckJsonBody(header, options);
}

std::optional<Refusal> CheckUnfinishedChunkedData(absl::string_view unparsed,
                                                  size_t max_trailer_bytes) {
  // The CRLF that ends the previous chunk's data is parsed with the next chunk-size line.
  if (absl::StartsWith(unparsed, "\r\n")) unparsed.remove_prefix(2);
  const size_t eol = unparsed.find("\r\n");
  if (eol == absl::string_view::npos) {
    if (unparsed.size() <= kMaxChunkLineBytes) return std::nullopt;
    return Refuse(400, absl::StrCat("a chunk-size line (with its extensions) is longer than ",
                                    kMaxChunkLineBytes, " bytes"));
  }
  // A complete chunk-size line that the parser keeps can only be the last chunk's: it waits for
  // the end of the trailer section.
  if (unparsed.size() - (eol + 2) <= max_trailer_bytes) return std::nullopt;
  return Refuse(431,
                absl::StrCat("request trailers exceed the limit of ", max_trailer_bytes, " bytes"));
}

std::optional<Refusal> CheckChunkExtensions(absl::string_view extensions) {
  if (extensions.size() < kMaxChunkLineBytes) return std::nullopt;
  return Refuse(400, absl::StrCat("a chunk-size line (with its extensions) is longer than ",
                                  kMaxChunkLineBytes, " bytes"));
}

std::optional<Refusal> CheckTrailers(const bhttp::fields& fields, size_t header_fields,
                                     size_t max_trailer_bytes) {
  size_t index = 0;
  size_t bytes = 0;
  for (const auto& field : fields) {
    if (index++ < header_fields) continue;
    bytes += field.name_string().size() + field.value().size() + 4;  // ": " and CRLF
  }
  if (bytes <= max_trailer_bytes) return std::nullopt;
  return Refuse(431,
                absl::StrCat("request trailers exceed the limit of ", max_trailer_bytes, " bytes"));
}

bool IsJsonMediaType(absl::string_view content_type) {
  const absl::string_view type = content_type.substr(0, content_type.find(';'));
  return absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(type), "application/json");
}

bool ContainsObsFold(absl::string_view data) {
  size_t line_start = 0;
  for (;;) {
    const size_t eol = data.find("\r\n", line_start);
    // A blank line ends the header section: what follows is the body.
    if (eol == absl::string_view::npos || eol == line_start) return false;
    const size_t next = eol + 2;
    if (next < data.size() && (data[next] == ' ' || data[next] == '\t')) return true;
    line_start = next;
  }
}

}  // namespace llmserve::gateway::http
