// End-to-end tests of HttpServer over TLS on loopback: a self-signed certificate made at test time
// with OpenSSL's C API, and the test client (test_http_client.h) speaking TLS and trusting only
// that certificate, so that the server's certificate is verified as a real client would.

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gateway/http/http_server.h"
#include "gateway/http/sse.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tests/unit/gateway/http/server_test_helpers.h"
#include "tests/unit/gateway/http/test_http_client.h"

namespace llmserve::gateway::http {
namespace {

using ::llmserve::gateway::http::testing::CloseCounter;
using ::llmserve::gateway::http::testing::ExpectedSse;
using ::llmserve::gateway::http::testing::SseEvent;
using ::llmserve::gateway::http::testing::StreamEvents;
using ::llmserve::gateway::http::testing::TestHttpClient;
using ::llmserve::gateway::http::testing::TestResponse;
using ::llmserve::gateway::http::testing::WriterBox;
using ::testing::HasSubstr;

struct PkeyDeleter {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};
struct X509Deleter {
  void operator()(X509* cert) const { X509_free(cert); }
};
struct FileCloser {
  void operator()(FILE* file) const { std::fclose(file); }
};
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyDeleter>;
using X509Ptr = std::unique_ptr<X509, X509Deleter>;
using FilePtr = std::unique_ptr<FILE, FileCloser>;

::testing::AssertionResult WriteKey(EVP_PKEY* key, const std::string& path) {
  FilePtr file(std::fopen(path.c_str(), "w"));
  if (file == nullptr) return ::testing::AssertionFailure() << "cannot create " << path;
  if (PEM_write_PrivateKey(file.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return ::testing::AssertionFailure() << "cannot write " << path;
  }
  return ::testing::AssertionSuccess();
}

// A fresh EC P-256 key in `key_path` and a self-signed certificate for it in `cert_path`: CN
// localhost, subjectAltName 127.0.0.1 and localhost, valid from an hour ago for a day. It is its
// own CA (as `openssl req -x509` makes them), so clients can trust it directly.
::testing::AssertionResult WriteSelfSignedCertificate(const std::string& cert_path,
                                                      const std::string& key_path) {
  PkeyPtr key(EVP_EC_gen("P-256"));
  X509Ptr cert(X509_new());
  if (key == nullptr || cert == nullptr) return ::testing::AssertionFailure() << "out of memory";
  bool ok = X509_set_version(cert.get(), 2) == 1 &&  // v3, for the extensions
            ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), 1) == 1 &&
            X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600) != nullptr &&
            X509_gmtime_adj(X509_getm_notAfter(cert.get()), 24 * 3600) != nullptr &&
            X509_set_pubkey(cert.get(), key.get()) == 1;
  X509_NAME* name = X509_get_subject_name(cert.get());
  ok = ok &&
       X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                                  reinterpret_cast<const unsigned char*>("localhost"), -1, -1,
                                  0) == 1 &&
       X509_set_issuer_name(cert.get(), name) == 1;
  X509V3_CTX context;
  X509V3_set_ctx_nodb(&context);
  X509V3_set_ctx(&context, cert.get(), cert.get(), nullptr, nullptr, 0);
  const std::pair<int, const char*> extensions[] = {
      {NID_basic_constraints, "critical,CA:TRUE"},
      {NID_subject_key_identifier, "hash"},
      {NID_subject_alt_name, "IP:127.0.0.1,DNS:localhost"},
  };
  for (const auto& [nid, value] : extensions) {
    X509_EXTENSION* extension = X509V3_EXT_conf_nid(nullptr, &context, nid, value);
    ok = ok && extension != nullptr && X509_add_ext(cert.get(), extension, -1) == 1;
    X509_EXTENSION_free(extension);
  }
  ok = ok && X509_sign(cert.get(), key.get(), EVP_sha256()) > 0;
  if (!ok) return ::testing::AssertionFailure() << "cannot build the certificate";
  {
    FilePtr file(std::fopen(cert_path.c_str(), "w"));
    if (file == nullptr || PEM_write_X509(file.get(), cert.get()) != 1) {
      return ::testing::AssertionFailure() << "cannot write " << cert_path;
    }
  }
  return WriteKey(key.get(), key_path);
}

// Reads until the server closes the connection; false if it does not within 10 s.
bool ReadUntilClosed(int fd, std::string* received) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  char buffer[4096];
  while (absl::Now() < deadline) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n == 0) return true;
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno == ECONNRESET;  // EAGAIN: the client's 10 s receive timeout
    }
    received->append(buffer, static_cast<size_t>(n));
  }
  return false;
}

class HttpTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cert_file_ = dir_.File("cert.pem");
    key_file_ = dir_.File("key.pem");
    ASSERT_TRUE(WriteSelfSignedCertificate(cert_file_, key_file_));
  }

  void StartServer(HttpServerOptions options = {}) {
    options.host = "127.0.0.1";
    options.port = 0;
    options.tls_cert_file = cert_file_;
    options.tls_key_file = key_file_;
    absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start(
        options, [this](HttpRequest request, std::shared_ptr<ResponseWriter> writer) {
          if (request.path == "/hello") {
            writer->Send(200, {{"content-type", "text/plain"}}, "hello");
          } else if (request.path == "/echo") {
            writer->Send(200, {{"content-type", "application/octet-stream"}}, request.body);
          } else if (request.path == "/sse") {
            StreamEvents(*writer, 3);
          } else if (request.path == "/drop") {
            // Releases the writer without answering: 500.
          } else {
            box_.Add(std::move(writer), std::move(request));
          }
        });
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  std::unique_ptr<TestHttpClient> ConnectTls(const std::string& host = "localhost") {
    std::string error;
    std::unique_ptr<TestHttpClient> client =
        TestHttpClient::ConnectTls(server_->port(), cert_file_, host, &error);
    EXPECT_NE(client, nullptr) << error;
    return client;
  }

  void ExpectHello(TestHttpClient& client) {
    ASSERT_TRUE(client.Send("GET /hello HTTP/1.1\r\nHost: localhost\r\n\r\n"));
    std::optional<TestResponse> response = client.ReadResponse();
    ASSERT_TRUE(response.has_value());
    EXPECT_EQ(response->status, 200);
    EXPECT_EQ(response->body, "hello");
  }

  ::llmserve::testing::ScopedTempDir dir_{"http_tls_test"};
  std::string cert_file_;
  std::string key_file_;
  std::unique_ptr<HttpServer> server_;
  WriterBox box_;
};

TEST_F(HttpTlsTest, GetWholeResponseAndKeepAlive) {
  StartServer();
  auto client = ConnectTls();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Send("GET /hello HTTP/1.1\r\nHost: localhost\r\n\r\n"));
  std::optional<TestResponse> response = client->ReadResponse();
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->body, "hello");
  EXPECT_EQ(response->Header("content-length"), "5");
  EXPECT_EQ(response->Header("connection"), "");
  // The same TLS connection serves the next request.
  ExpectHello(*client);
  EXPECT_EQ(server_->active_connections(), 1);
}

TEST_F(HttpTlsTest, CertificateIsVerifiedForTheIpAddressToo) {
  StartServer();
  auto client = ConnectTls("127.0.0.1");
  ASSERT_NE(client, nullptr);
  ExpectHello(*client);
}

TEST_F(HttpTlsTest, PostBodyIsEchoed) {
  StartServer();
  auto client = ConnectTls();
  ASSERT_NE(client, nullptr);
  const std::string body(100000, 'b');  // several TLS records
  ASSERT_TRUE(client->Send(
      absl::StrCat("POST /echo HTTP/1.1\r\nHost: localhost\r\nContent-Length: ", body.size(),
                   "\r\n\r\n", body)));
  std::optional<TestResponse> response = client->ReadResponse();
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->body, body);
}

TEST_F(HttpTlsTest, PipelinedRequestsAreAnsweredInOrder) {
  StartServer();
  auto client = ConnectTls();
  ASSERT_NE(client, nullptr);
  // Separate TLS records in one TCP segment (corked): the server decrypts one record at a time,
  // so the later requests wait in its TLS buffers, with the socket drained, while it answers the
  // first. It must not wait for the socket to become readable again.
  int cork = 1;
  ASSERT_EQ(::setsockopt(client->fd(), IPPROTO_TCP, TCP_CORK, &cork, sizeof(cork)), 0);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(client->Send("GET /hello HTTP/1.1\r\nHost: localhost\r\n\r\n"));
  }
  cork = 0;
  ASSERT_EQ(::setsockopt(client->fd(), IPPROTO_TCP, TCP_CORK, &cork, sizeof(cork)), 0);
  for (int i = 0; i < 3; ++i) {
    std::optional<TestResponse> response = client->ReadResponse();
    ASSERT_TRUE(response.has_value()) << i;
    EXPECT_EQ(response->body, "hello");
  }
}

TEST_F(HttpTlsTest, SseStreamReadToDone) {
  StartServer();
  auto client = ConnectTls();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Send("POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n\r\n"));
  std::vector<std::shared_ptr<ResponseWriter>> writers = box_.WaitFor(1);
  ASSERT_EQ(writers.size(), 1u);
  // Written from this thread, as the gateway's generation code does.
  StreamEvents(*writers[0], 5);
  box_.Clear();
  writers.clear();

  std::optional<TestResponse> head = client->ReadHead();
  ASSERT_TRUE(head.has_value());
  EXPECT_EQ(head->status, 200);
  EXPECT_EQ(head->Header("content-type"), "text/event-stream");
  EXPECT_EQ(head->Header("transfer-encoding"), "chunked");
  std::string body;
  for (;;) {
    std::optional<std::string> chunk = client->ReadChunk();
    ASSERT_TRUE(chunk.has_value()) << body;
    if (chunk->empty()) break;
    body += *chunk;
  }
  EXPECT_EQ(body, ExpectedSse(5));
  EXPECT_TRUE(absl::EndsWith(body, kSseDone));
  ExpectHello(*client);  // the stream ended properly: the connection is reused
}

TEST_F(HttpTlsTest, Http10StreamEndsWithTheConnection) {
  StartServer();
  auto client = ConnectTls();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Send("GET /sse HTTP/1.0\r\n\r\n"));
  // Delimited by the end of the TLS stream, which the client reads as such (close_notify).
  std::optional<TestResponse> response = client->ReadResponse();
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->Header("transfer-encoding"), "");
  EXPECT_EQ(response->body, ExpectedSse(3));
}

TEST_F(HttpTlsTest, ClientDisconnectMidStreamRunsOnClose) {
  StartServer();
  auto client = ConnectTls();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Send("GET /held HTTP/1.1\r\nHost: localhost\r\n\r\n"));
  std::vector<std::shared_ptr<ResponseWriter>> writers = box_.WaitFor(1);
  ASSERT_EQ(writers.size(), 1u);
  std::shared_ptr<ResponseWriter> writer = writers[0];
  CloseCounter counter;
  writer->SetOnClose([&counter] { counter.Increment(); });
  writer->StartStream(200, {{"content-type", "text/event-stream"}});
  writer->Write(SseEvent(0));
  ASSERT_TRUE(client->ReadHead().has_value());
  ASSERT_EQ(client->ReadChunk(), SseEvent(0));

  client->Close();  // gone without a close_notify, as a killed client would be
  ASSERT_TRUE(counter.WaitForCalls(1));
  EXPECT_TRUE(writer->closed());
  for (int i = 1; i < 20; ++i) writer->Write(SseEvent(i));
  writer->Finish();
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(counter.Calls(), 1);
  box_.Clear();
}

TEST_F(HttpTlsTest, PlainHttpClientIsDisconnectedAndTlsClientsAreStillServed) {
  StartServer();
  std::unique_ptr<TestHttpClient> plain = TestHttpClient::Connect(server_->port());
  ASSERT_NE(plain, nullptr);
  ASSERT_TRUE(plain->Send("GET /hello HTTP/1.1\r\nHost: localhost\r\n\r\n"));
  std::string received;
  EXPECT_TRUE(ReadUntilClosed(plain->fd(), &received));
  // At most a TLS alert, never an HTTP response in the clear.
  EXPECT_THAT(received, ::testing::Not(HasSubstr("HTTP/1.1")));
  EXPECT_THAT(received, ::testing::Not(HasSubstr("hello")));

  auto client = ConnectTls();
  ASSERT_NE(client, nullptr);
  ExpectHello(*client);
}

TEST_F(HttpTlsTest, ClientThatDistrustsTheCertificateFailsAndOthersAreServed) {
  StartServer();
  const std::string other_cert = dir_.File("other-cert.pem");
  ASSERT_TRUE(WriteSelfSignedCertificate(other_cert, dir_.File("other-key.pem")));
  std::string error;
  EXPECT_EQ(TestHttpClient::ConnectTls(server_->port(), other_cert, "localhost", &error), nullptr);
  EXPECT_THAT(error, HasSubstr("certificate"));

  auto client = ConnectTls();
  ASSERT_NE(client, nullptr);
  ExpectHello(*client);
}

TEST_F(HttpTlsTest, HandshakeMustCompleteWithinTheHeaderTimeout) {
  StartServer({.header_timeout = absl::Milliseconds(300)});
  std::unique_ptr<TestHttpClient> silent = TestHttpClient::Connect(server_->port());
  ASSERT_NE(silent, nullptr);
  const absl::Time start = absl::Now();
  std::string received;
  EXPECT_TRUE(ReadUntilClosed(silent->fd(), &received));
  EXPECT_EQ(received, "");
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST_F(HttpTlsTest, OversizedBodyGets413AndTheConnectionCloses) {
  StartServer({.max_body_bytes = 1024});
  auto client = ConnectTls();
  ASSERT_NE(client, nullptr);
  // Everything before reading, as simple clients do: the server must let the client read the 413
  // rather than reset the connection on the body it did not read.
  const std::string body(200000, 'x');
  ASSERT_TRUE(client->Send(
      absl::StrCat("POST /echo HTTP/1.1\r\nHost: localhost\r\nContent-Length: ", body.size(),
                   "\r\n\r\n", body)));
  std::optional<TestResponse> response = client->ReadResponse();
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 413);
  EXPECT_EQ(response->Header("connection"), "close");
  EXPECT_THAT(response->body, HasSubstr("exceeds the limit"));
  EXPECT_TRUE(client->WaitForClose());
}

TEST_F(HttpTlsTest, GarbageGets400) {
  StartServer();
  auto client = ConnectTls();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Send("NOT HTTP AT ALL\r\n\r\n"));
  std::optional<TestResponse> response = client->ReadResponse();
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 400);
  EXPECT_TRUE(client->WaitForClose());
}

TEST_F(HttpTlsTest, DroppedWriterGets500) {
  StartServer();
  auto client = ConnectTls();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Send("GET /drop HTTP/1.1\r\nHost: localhost\r\n\r\n"));
  std::optional<TestResponse> response = client->ReadResponse();
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 500);
  EXPECT_TRUE(client->WaitForClose());
}

TEST_F(HttpTlsTest, StopAcceptingLetsAStreamFinishThenCloses) {
  StartServer();
  auto client = ConnectTls();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Send("GET /held HTTP/1.1\r\nHost: localhost\r\n\r\n"));
  std::vector<std::shared_ptr<ResponseWriter>> writers = box_.WaitFor(1);
  ASSERT_EQ(writers.size(), 1u);
  writers[0]->StartStream(200, {{"content-type", "text/event-stream"}});
  std::optional<TestResponse> head = client->ReadHead();
  ASSERT_TRUE(head.has_value());

  server_->StopAccepting();
  for (int i = 0; i < 3; ++i) writers[0]->Write(SseEvent(i));
  writers[0]->Write(std::string(kSseDone));
  writers[0]->Finish();
  ASSERT_TRUE(client->ReadBody(*head));
  EXPECT_EQ(head->body, ExpectedSse(3));
  EXPECT_TRUE(client->WaitForClose());
  box_.Clear();
}

TEST_F(HttpTlsTest, ShutdownClosesAnOpenStreamAndRunsOnClose) {
  StartServer();
  auto client = ConnectTls();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Send("GET /held HTTP/1.1\r\nHost: localhost\r\n\r\n"));
  std::vector<std::shared_ptr<ResponseWriter>> writers = box_.WaitFor(1);
  ASSERT_EQ(writers.size(), 1u);
  CloseCounter counter;
  writers[0]->SetOnClose([&counter] { counter.Increment(); });
  writers[0]->StartStream(200, {{"content-type", "text/event-stream"}});
  ASSERT_TRUE(client->ReadHead().has_value());

  server_->Shutdown(absl::Milliseconds(100));
  EXPECT_TRUE(counter.WaitForCalls(1));
  EXPECT_TRUE(writers[0]->closed());
  box_.Clear();
}

TEST_F(HttpTlsTest, CurlReadsAnSseStream) {
  if (::access("/usr/bin/curl", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/curl";
  StartServer();
  const std::string command =
      absl::StrCat("/usr/bin/curl -sS -N --max-time 10 --cacert ", cert_file_,
                   " https://127.0.0.1:", server_->port(), "/sse");
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, n);
  EXPECT_EQ(::pclose(pipe), 0);
  EXPECT_EQ(output, ExpectedSse(3));
}

// Start's checks of the TLS options.
class HttpTlsStartTest : public ::testing::Test {
 protected:
  absl::Status Start(const std::string& cert_file, const std::string& key_file) {
    return HttpServer::Start({.host = "127.0.0.1",
                              .port = 0,
                              .tls_cert_file = cert_file,
                              .tls_key_file = key_file},
                             [](HttpRequest, std::shared_ptr<ResponseWriter> writer) {
                               writer->Send(204, {}, "");
                             })
        .status();
  }

  ::llmserve::testing::ScopedTempDir dir_{"http_tls_start_test"};
};

TEST_F(HttpTlsStartTest, CertWithoutKeyIsInvalid) {
  const absl::Status status = Start(dir_.File("cert.pem"), "");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("tls_key_file"));
}

TEST_F(HttpTlsStartTest, KeyWithoutCertIsInvalid) {
  const absl::Status status = Start("", dir_.File("key.pem"));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("tls_cert_file"));
}

TEST_F(HttpTlsStartTest, MismatchedCertAndKeyAreInvalidAndNamed) {
  const std::string cert = dir_.File("cert.pem");
  const std::string other_key = dir_.File("other-key.pem");
  ASSERT_TRUE(WriteSelfSignedCertificate(cert, dir_.File("key.pem")));
  PkeyPtr key(EVP_EC_gen("P-256"));
  ASSERT_NE(key, nullptr);
  ASSERT_TRUE(WriteKey(key.get(), other_key));
  const absl::Status status = Start(cert, other_key);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr(other_key));
  EXPECT_THAT(std::string(status.message()), HasSubstr(cert));
}

TEST_F(HttpTlsStartTest, MissingFilesAreInvalidAndNamed) {
  const std::string key = dir_.File("key.pem");
  ASSERT_TRUE(WriteSelfSignedCertificate(dir_.File("cert.pem"), key));
  const std::string missing = dir_.File("missing.pem");
  absl::Status status = Start(missing, key);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr(missing));
  EXPECT_THAT(std::string(status.message()), HasSubstr("No such file"));
  status = Start(dir_.File("cert.pem"), missing);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr(missing));
}

TEST_F(HttpTlsStartTest, FilesThatAreNotPemAreInvalidAndNamed) {
  const std::string cert = dir_.File("cert.pem");
  const std::string key = dir_.File("key.pem");
  ASSERT_TRUE(WriteSelfSignedCertificate(cert, key));
  const std::string garbage = dir_.File("garbage.pem");
  std::ofstream(garbage) << "not a PEM file\n";

  absl::Status status = Start(garbage, key);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr(garbage));
  status = Start(cert, garbage);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr(garbage));
}

}  // namespace
}  // namespace llmserve::gateway::http
