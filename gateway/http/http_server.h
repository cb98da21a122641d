// HttpServer: an asynchronous HTTP/1.1 server (Boost.Beast parser, Asio sockets, C++20
// coroutines) for the gateway's OpenAI-compatible API. Generic: every request goes to one Handler,
// which answers through a ResponseWriter (gateway/http/response_writer.h), at once or later from
// any thread; streamed responses (SSE) hold no thread, so one I/O thread serves thousands of them.
//
//   auto server = HttpServer::Start({.port = 8080}, [](HttpRequest request,
//                                                      std::shared_ptr<ResponseWriter> writer) {
//     writer->Send(200, {{"content-type", "text/plain"}}, "ok\n");
//   });
//   ...
//   (*server)->CloseConnectionsAfterResponses();  // SIGTERM: no more keep-alive, still accepting
//   (*server)->Shutdown(absl::Seconds(30));  // refuse new connections, finish streams, close the
//                                            // rest and join the threads
//
// What the server answers itself, as OpenAI-style JSON errors, closing the connection: 400 for a
// malformed request, 413 for a body over max_body_bytes (as soon as the headers announce it,
// without reading the body), 431 for headers over max_header_bytes, 500 when a handler drops its
// writer without answering. A connection whose headers do not arrive in time is closed silently.
// Framing that a proxy could read differently is refused before the body is read, as nginx does
// (gateway/http/request_checks.h): a transfer coding other than chunked (501), transfer-encoding
// with content-length, HTTP/1.1 without one host, folded header lines, chunk-size lines over
// 4 KiB (400), trailers over max_header_bytes (431), content-encoding (415). Trailers are
// dropped, never merged into the headers.
//
// Connections: keep-alive (one request at a time; pipelined requests wait their turn),
// "connection: close", HTTP/1.0, HEAD (the handler's body is not sent), "expect: 100-continue".
// While a response is pending the server keeps reading the socket, so a client who disconnects is
// noticed at once and the writer's on_close runs. After StopAccepting, idle keep-alive connections
// are closed and busy ones close after their current response.
//
// Timeouts: a new connection must deliver its first request's headers within header_timeout; a
// kept-alive connection may sit idle for idle_timeout, and once the next request starts its headers
// get header_timeout. Reading a body and every socket write must complete within idle_timeout.
//
// TLS: with HttpServerOptions::tls_cert_file and tls_key_file the server speaks HTTPS only, with
// everything above unchanged (docs/http-server.md, "TLS").
//
// Thread-safety: all methods are thread-safe and may be called from handlers, except Shutdown and
// the destructor, which join the I/O threads and so must not run on one (Shutdown checks this).

#ifndef LLMSERVE_GATEWAY_HTTP_HTTP_SERVER_H_
#define LLMSERVE_GATEWAY_HTTP_HTTP_SERVER_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gateway/http/http_request.h"
#include "gateway/http/response_writer.h"

namespace llmserve::gateway::http {

struct HttpServerOptions {
  // A numeric IPv4/IPv6 address or a host name to resolve (the first address is used).
  std::string host = "0.0.0.0";
  int port = 0;  // 0 picks a free port; see HttpServer::port()
  int io_threads = 1;
  size_t max_body_bytes = size_t{1} << 20;
  size_t max_header_bytes = 16 * 1024;
  // A streaming client this far behind (bytes written but not yet sent) is disconnected, which
  // runs on_close. 0 = unlimited. Producers should watch buffered_bytes() long before this.
  size_t max_buffered_bytes = size_t{64} << 20;
  absl::Duration idle_timeout = absl::Seconds(60);
  absl::Duration header_timeout = absl::Seconds(10);
  int listen_backlog = 4096;
  // PEM files; both or neither. With them the server speaks HTTPS only (TLS 1.2 or later; a
  // client that fails the handshake within header_timeout is disconnected). The certificate file
  // may hold the chain after the server's certificate. The key must not be encrypted.
  std::string tls_cert_file;
  std::string tls_key_file;
  // Every POST must declare a JSON body ("content-type: application/json", any case, parameters
  // such as "; charset=utf-8" allowed), else 415 before its body is read. For an API whose POST
  // routes all take JSON: a web page can make a browser POST text/plain or a form to a server on
  // localhost without a CORS preflight, but not application/json.
  bool require_json_post_body = false;
};

class HttpServer {
 public:
  // Binds, listens and starts the I/O threads. UNAVAILABLE naming the address when it cannot
  // listen; INVALID_ARGUMENT for bad options, naming the file when a TLS certificate or key cannot
  // be loaded or they do not match.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& options,
                                                           Handler handler);

  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;
  // Shutdown(absl::ZeroDuration()) unless already shut down.
  ~HttpServer();

  // The port listened on (the chosen one when options.port was 0).
  int port() const;

  // Keeps accepting, but every connection closes after its current response and idle keep-alive
  // connections close now: clients reconnect (through a load balancer, to another server) while
  // health checks still get an answer. For a drain whose readiness must read "not ready" rather
  // than "refused". Idempotent.
  void CloseConnectionsAfterResponses();

  // Stops accepting (new connections are refused from when this returns), closes idle keep-alive
  // connections and makes busy ones close after their current response. Idempotent.
  void StopAccepting();

  // StopAccepting, waits up to `grace` for the connections to finish, closes the rest (their
  // on_close callbacks run) and joins the I/O threads. Writers held elsewhere stay safe to call:
  // they do nothing. Idempotent.
  void Shutdown(absl::Duration grace);

  // Open connections (idle keep-alive ones included).
  int active_connections() const;

  struct Impl;  // public only so that the .cc's helpers can name it

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace llmserve::gateway::http

#endif  // LLMSERVE_GATEWAY_HTTP_HTTP_SERVER_H_
