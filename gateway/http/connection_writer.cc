#include "gateway/http/connection_writer.h"

#include <utility>

namespace llmserve::gateway::http {

ConnectionWriter::ConnectionWriter(std::weak_ptr<Connection> connection, uint64_t request_id,
                                   std::shared_ptr<WriterGate> gate,
                                   std::shared_ptr<ResponseShared> shared)
    : connection_(std::move(connection)),
      request_id_(request_id),
      gate_(std::move(gate)),
      shared_(std::move(shared)) {}

ConnectionWriter::~ConnectionWriter() {
  const uint64_t id = request_id_;
  Post([id](Connection& connection) { connection.OnWriterReleased(id); });
}

bool ConnectionWriter::Post(std::function<void(Connection&)> call) {
  // The reader lock keeps the io_context alive until the post is done (see WriterGate), and the
  // connection reference taken here is handed to the queued call, so that if it is the last one
  // the connection dies on its strand or with the io_context, never on this thread afterwards.
  absl::ReaderMutexLock lock(&gate_->mu);
  if (!gate_->open) return false;
  std::shared_ptr<Connection> connection = connection_.lock();
  if (connection == nullptr) return false;
  const boost::asio::any_io_executor executor = connection->executor();
  boost::asio::post(executor, [connection = std::move(connection), call = std::move(call)] {
    call(*connection);
  });
  return true;
}

void ConnectionWriter::Send(int status, HttpHeaders headers, std::string body) {
  const uint64_t id = request_id_;
  Post([id, status, headers = std::move(headers),
        body = std::move(body)](Connection& connection) mutable {
    connection.SendResponse(id, status, std::move(headers), std::move(body));
  });
}

void ConnectionWriter::StartStream(int status, HttpHeaders headers) {
  const uint64_t id = request_id_;
  Post([id, status, headers = std::move(headers)](Connection& connection) mutable {
    connection.StartStream(id, status, std::move(headers));
  });
}

void ConnectionWriter::Write(std::string chunk) {
  if (chunk.empty()) return;
  const uint64_t id = request_id_;
  const size_t size = chunk.size();
  shared_->posted += size;
  const bool posted =
      Post([id, chunk = std::move(chunk), shared = shared_](Connection& connection) mutable {
        shared->posted -= chunk.size();
        connection.WriteChunk(id, std::move(chunk));
      });
  if (!posted) shared_->posted -= size;
}

void ConnectionWriter::Finish() {
  const uint64_t id = request_id_;
  Post([id](Connection& connection) { connection.FinishStream(id); });
}

void ConnectionWriter::SetOnClose(std::function<void()> on_close) {
  if (on_close == nullptr) return;
  // std::function must be copyable, so the callback travels in a shared holder; if the post fails
  // it is still here to run.
  auto holder = std::make_shared<std::function<void()>>(std::move(on_close));
  const uint64_t id = request_id_;
  const bool posted =
      Post([id, holder](Connection& connection) { connection.SetOnClose(id, std::move(*holder)); });
  // The connection is gone. It closed before the response ended exactly when `closed` is set.
  if (!posted && shared_->closed.load()) (*holder)();
}

bool ConnectionWriter::closed() const { return shared_->closed.load(); }

size_t ConnectionWriter::buffered_bytes() const {
  if (shared_->closed.load()) return 0;
  return shared_->buffered.load() + shared_->posted.load();
}

}  // namespace llmserve::gateway::http
