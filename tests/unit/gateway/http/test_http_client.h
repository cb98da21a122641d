// A blocking HTTP/1.1 client on plain POSIX sockets for the HTTP server's tests: it sends raw
// bytes (so tests can send garbage) and parses responses itself (content-length, chunked, or until
// close), keeping chunk boundaries. Every socket call has a 10 s timeout so no test can hang.
// ConnectTls speaks the same over TLS (OpenSSL), verifying the server's certificate.
//
// Not thread-safe: one client per thread at a time.

#ifndef LLMSERVE_TESTS_UNIT_HTTP_TEST_HTTP_CLIENT_H_
#define LLMSERVE_TESTS_UNIT_HTTP_TEST_HTTP_CLIENT_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

struct ssl_st;  // OpenSSL's SSL, kept out of the tests' includes

namespace llmserve::gateway::http::testing {

struct TestResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;                            // de-chunked
  std::vector<std::string> chunks;             // for a chunked body, each chunk's data
  bool complete = false;                       // the body ended as its framing says

  std::string Header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? std::string() : it->second;
  }
};

class TestHttpClient {
 public:
  // nullptr when the connection fails; `error` (if given) receives errno.
  static std::unique_ptr<TestHttpClient> Connect(int port, int* error = nullptr);
  // Connects and completes a TLS handshake, trusting only the PEM certificate(s) in `ca_file` and
  // requiring a certificate for `host` (a DNS name or an IP address). nullptr on failure, with
  // OpenSSL's reason in `error` (if given).
  static std::unique_ptr<TestHttpClient> ConnectTls(int port, const std::string& ca_file,
                                                    const std::string& host = "localhost",
                                                    std::string* error = nullptr);
  ~TestHttpClient();

  bool Send(absl::string_view data);
  // Reads a status line and headers (skipping 1xx responses unless `keep_informational`).
  std::optional<TestResponse> ReadHead(bool keep_informational = false);
  // Reads the body that `head` announces into it; false on error or timeout.
  bool ReadBody(TestResponse& head, bool head_request = false);
  // ReadHead + ReadBody.
  std::optional<TestResponse> ReadResponse(bool head_request = false);
  // For a chunked body: the next chunk's data, "" for the last chunk, nullopt on error.
  std::optional<std::string> ReadChunk();
  // True when the server closes the connection (EOF or reset) before `timeout_ms`, having sent no
  // more bytes than are already buffered. Under TLS the server's close_notify counts as closing.
  bool WaitForClose(int timeout_ms = 10000);
  // Abruptly, like a client that goes away: no TLS close_notify.
  void Close();
  int fd() const { return fd_; }

 private:
  explicit TestHttpClient(int fd) : fd_(fd) {}
  // At most `size` bytes into `data`: > 0 bytes read, 0 at the end of the stream, < 0 on error.
  long Receive(char* data, size_t size);
  bool Fill();
  bool ReadLine(std::string* line);
  bool ReadExact(size_t n, std::string* out);

  int fd_;
  ssl_st* ssl_ = nullptr;  // set for TLS; owns its SSL_CTX reference
  std::string buffer_;
};

}  // namespace llmserve::gateway::http::testing

#endif  // LLMSERVE_TESTS_UNIT_HTTP_TEST_HTTP_CLIENT_H_
