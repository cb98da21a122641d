#include "common/tracing/otlp_http_exporter.h"

// Boost 1.74's Asio needs <utility> before its headers with GCC 12 (docs/building.md).
#include <zlib.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <chrono>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace llmserve::common::tracing {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

bool IsTokenChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
         absl::StrContains("!#$%&'*+-.^_`|~", c);
}

std::string PercentDecode(absl::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    int value = 0;
    if (text[i] == '%' && i + 2 < text.size() &&
        absl::SimpleHexAtoi(text.substr(i + 1, 2), &value)) {
      out.push_back(static_cast<char>(value));
      i += 2;
    } else {
      out.push_back(text[i]);
    }
  }
  return out;
}

// What the server's answer means for the spans: OTLP/HTTP lets 429, 502, 503 and 504 be
// retried, and no other error.
absl::Status StatusOfResponse(const http::response<http::string_body>& response,
                              const std::string& where) {
  const unsigned status = response.result_int();
  if (status >= 200 && status < 300) return absl::OkStatus();
  const std::string message =
      absl::StrCat(where, " answered HTTP ", status, ": ", response.body().substr(0, 200));
  if (status == 429) return absl::ResourceExhaustedError(message);
  if (status == 502 || status == 503 || status == 504) return absl::UnavailableError(message);
  return absl::InvalidArgumentError(message);
}

// One POST on `stream` (connected, after its handshake), asynchronously so that the stream's
// expiry bounds every step (Beast's timeouts apply to asynchronous operations only).
template <typename Stream>
class Exchange {
 public:
  Exchange(Stream& stream, http::request<http::string_body>& request, std::string where)
      : stream_(stream), request_(request), where_(std::move(where)) {}

  void Start() {
    http::async_write(stream_, request_, [this](beast::error_code error, size_t) {
      if (error) return Fail("sending", error);
      http::async_read(stream_, buffer_, response_, [this](beast::error_code error, size_t) {
        if (error) return Fail("reading", error);
        status_ = StatusOfResponse(response_, where_);
      });
    });
  }
  void Fail(absl::string_view stage, const beast::error_code& error) {
    status_ = absl::UnavailableError(absl::StrCat(where_, ": ", stage, ": ", error.message()));
  }
  const absl::Status& status() const { return status_; }

 private:
  Stream& stream_;
  http::request<http::string_body>& request_;
  const std::string where_;
  beast::flat_buffer buffer_;
  http::response<http::string_body> response_;
  absl::Status status_ = absl::DeadlineExceededError("not finished");
};

}  // namespace

absl::StatusOr<OtlpEndpoint> ParseOtlpEndpoint(absl::string_view url) {
  OtlpEndpoint endpoint;
  absl::string_view rest = url;
  if (absl::ConsumePrefix(&rest, "https://")) {
    endpoint.tls = true;
  } else if (!absl::ConsumePrefix(&rest, "http://")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "OTLP endpoint '", url, "': expected http://host[:port][/path] or https://..."));
  }
  const size_t slash = rest.find('/');
  absl::string_view authority = rest.substr(0, slash);
  endpoint.target = slash == absl::string_view::npos ? "" : std::string(rest.substr(slash));
  if (endpoint.target.empty() || endpoint.target == "/") endpoint.target = "/v1/traces";
  if (absl::StrContains(authority, '@')) {
    return absl::InvalidArgumentError(
        "OTLP endpoint: credentials in the URL are not supported; pass them as headers "
        "(--otlp_headers, e.g. Authorization=Basic%20...)");
  }
  size_t colon = authority.rfind(':');
  if (absl::StartsWith(authority, "[")) {  // [IPv6]:port
    const size_t close = authority.find(']');
    if (close == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("OTLP endpoint '", url, "': unclosed '['"));
    }
    endpoint.host = std::string(authority.substr(1, close - 1));
    colon = authority.size() > close + 1 && authority[close + 1] == ':' ? close + 1
                                                                        : absl::string_view::npos;
  } else {
    endpoint.host = std::string(authority.substr(0, colon));
  }
  endpoint.port = colon == absl::string_view::npos ? (endpoint.tls ? "443" : "80")
                                                   : std::string(authority.substr(colon + 1));
  int port = 0;
  if (endpoint.host.empty() || !absl::SimpleAtoi(endpoint.port, &port) || port < 1 ||
      port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("OTLP endpoint '", url, "': needs a host and a port in [1, 65535]"));
  }
  return endpoint;
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParseOtlpHeaders(
    absl::string_view headers) {
  std::vector<std::pair<std::string, std::string>> parsed;
  for (absl::string_view entry : absl::StrSplit(headers, ',', absl::SkipWhitespace())) {
    const size_t equals = entry.find('=');
    if (equals == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("OTLP headers: entry '", entry.substr(0, 40), "' has no '='"));
    }
    std::string name(absl::StripAsciiWhitespace(entry.substr(0, equals)));
    if (name.empty() || !std::all_of(name.begin(), name.end(), IsTokenChar)) {
      return absl::InvalidArgumentError(
          absl::StrCat("OTLP headers: '", name.substr(0, 40), "' is not a valid header name"));
    }
    std::string value = PercentDecode(absl::StripAsciiWhitespace(entry.substr(equals + 1)));
    if (absl::StrContains(value, '\r') || absl::StrContains(value, '\n')) {
      return absl::InvalidArgumentError(
          absl::StrCat("OTLP headers: the value of '", name, "' holds a line break"));
    }
    parsed.emplace_back(std::move(name), std::move(value));
  }
  return parsed;
}

absl::StatusOr<std::string> Gzip(absl::string_view data) {
  z_stream stream{};
  // 15 window bits + 16: a gzip header and trailer instead of zlib's.
  if (deflateInit2(&stream, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) !=
      Z_OK) {
    return absl::InternalError("gzip: deflateInit2 failed");
  }
  std::string out(deflateBound(&stream, data.size()) + 32, '\0');
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  stream.avail_in = static_cast<uInt>(data.size());
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  stream.avail_out = static_cast<uInt>(out.size());
  const int result = deflate(&stream, Z_FINISH);
  out.resize(stream.total_out);
  deflateEnd(&stream);
  if (result != Z_STREAM_END) return absl::InternalError("gzip: deflate did not finish");
  return out;
}

std::string OtlpHttpExporter::Describe() const {
  const OtlpEndpoint& e = options_.endpoint;
  return absl::StrCat(e.tls ? "https://" : "http://", e.host, ":", e.port, e.target);
}

absl::Status OtlpHttpExporter::Export(absl::Span<const SpanData> spans) {
  std::string body = EncodeExportTraceServiceRequest(options_.resource, options_.scope, spans);
  const OtlpEndpoint& endpoint = options_.endpoint;
  http::request<http::string_body> request{http::verb::post, endpoint.target, 11};
  request.set(http::field::host, endpoint.host);
  request.set(http::field::user_agent, "llmserve-otlp");
  request.set(http::field::content_type, "application/x-protobuf");
  if (options_.gzip) {
    absl::StatusOr<std::string> compressed = Gzip(body);
    if (!compressed.ok()) return compressed.status();
    body = *std::move(compressed);
    request.set(http::field::content_encoding, "gzip");
  }
  for (const auto& [name, value] : options_.headers) request.set(name, value);
  request.body() = std::move(body);
  request.prepare_payload();

  const std::string where = Describe();
  const auto timeout = std::chrono::nanoseconds(absl::ToInt64Nanoseconds(options_.timeout));
  asio::io_context io;
  beast::error_code error;
  // Blocking, bounded by the resolver's own timeouts: this runs on the export thread only.
  asio::ip::tcp::resolver resolver(io);
  const auto addresses = resolver.resolve(endpoint.host, endpoint.port, error);
  if (error) return absl::UnavailableError(absl::StrCat(where, ": resolving: ", error.message()));
  if (!endpoint.tls) {
    beast::tcp_stream stream(io);
    stream.expires_after(timeout);  // the whole exchange, from the connect to the answer
    Exchange<beast::tcp_stream> exchange(stream, request, where);
    stream.async_connect(addresses, [&](beast::error_code error, const auto&) {
      if (error) return exchange.Fail("connecting", error);
      exchange.Start();
    });
    io.run();
    stream.socket().shutdown(asio::ip::tcp::socket::shutdown_both, error);
    return exchange.status();
  }
  asio::ssl::context tls(asio::ssl::context::tls_client);
  tls.set_default_verify_paths(error);
  tls.set_verify_mode(asio::ssl::verify_peer);
  beast::ssl_stream<beast::tcp_stream> stream(io, tls);
  stream.set_verify_callback(asio::ssl::host_name_verification(endpoint.host));
  if (!SSL_set_tlsext_host_name(stream.native_handle(), endpoint.host.c_str())) {
    return absl::InternalError(absl::StrCat(where, ": cannot set the TLS server name"));
  }
  beast::get_lowest_layer(stream).expires_after(timeout);
  Exchange<beast::ssl_stream<beast::tcp_stream>> exchange(stream, request, where);
  beast::get_lowest_layer(stream).async_connect(
      addresses, [&](beast::error_code error, const auto&) {
        if (error) return exchange.Fail("connecting", error);
        stream.async_handshake(asio::ssl::stream_base::client, [&](beast::error_code error) {
          if (error) return exchange.Fail("TLS handshake", error);
          exchange.Start();
        });
      });
  io.run();
  // No close_notify: many servers close without one, and the answer is already in.
  beast::get_lowest_layer(stream).socket().shutdown(asio::ip::tcp::socket::shutdown_both, error);
  return exchange.status();
}

}  // namespace llmserve::common::tracing
