// Internal to gateway/http: the ResponseWriter handed to handlers. It holds its connection weakly
// and forwards every call to the connection's strand through the server's WriterGate, so it stays
// safe to call, and to destroy, from any thread after the client or the server went away.
//
// Thread-safety: thread-safe (see ResponseWriter).

#ifndef LLMSERVE_GATEWAY_HTTP_CONNECTION_WRITER_H_
#define LLMSERVE_GATEWAY_HTTP_CONNECTION_WRITER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "gateway/http/connection.h"
#include "gateway/http/response_writer.h"

namespace llmserve::gateway::http {

class ConnectionWriter final : public ResponseWriter {
 public:
  ConnectionWriter(std::weak_ptr<Connection> connection, uint64_t request_id,
                   std::shared_ptr<WriterGate> gate, std::shared_ptr<ResponseShared> shared);
  // Tells the connection, which answers 500 if no response was started.
  ~ConnectionWriter() override;

  void Send(int status, HttpHeaders headers, std::string body) override;
  void StartStream(int status, HttpHeaders headers) override;
  void Write(std::string chunk) override;
  void Finish() override;
  void SetOnClose(std::function<void()> on_close) override;
  bool closed() const override;
  size_t buffered_bytes() const override;

 private:
  // Runs `call(connection)` on the connection's strand; false when the connection or the server
  // is gone (then `call` is dropped).
  bool Post(std::function<void(Connection&)> call);

  const std::weak_ptr<Connection> connection_;
  const uint64_t request_id_;
  const std::shared_ptr<WriterGate> gate_;
  const std::shared_ptr<ResponseShared> shared_;
};

}  // namespace llmserve::gateway::http

#endif  // LLMSERVE_GATEWAY_HTTP_CONNECTION_WRITER_H_
