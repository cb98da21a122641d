// Helpers shared by the HTTP server's end-to-end tests (http_server_test.cc, http_tls_test.cc):
// handing writers to the test thread, counting on_close calls, and the SSE events the tests send.
//
// WriterBox and CloseCounter are thread-safe; the rest are pure functions.

#ifndef LLMSERVE_TESTS_UNIT_HTTP_SERVER_TEST_HELPERS_H_
#define LLMSERVE_TESTS_UNIT_HTTP_SERVER_TEST_HELPERS_H_

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gateway/http/http_request.h"
#include "gateway/http/response_writer.h"
#include "gateway/http/sse.h"

namespace llmserve::gateway::http::testing {

// Writers that handlers hand over to the test thread, which then answers from outside the I/O
// threads, as the gateway's generation code will.
class WriterBox {
 public:
  void Add(std::shared_ptr<ResponseWriter> writer, HttpRequest request) {
    absl::MutexLock lock(&mu_);
    writers_.push_back(std::move(writer));
    requests_.push_back(std::move(request));
    added_.SignalAll();
  }
  // The writers once there are `n`, waiting up to 10 s; fewer on timeout.
  std::vector<std::shared_ptr<ResponseWriter>> WaitFor(size_t n) {
    absl::MutexLock lock(&mu_);
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (writers_.size() < n) {
      if (added_.WaitWithDeadline(&mu_, deadline)) break;
    }
    return writers_;
  }
  std::vector<HttpRequest> requests() {
    absl::MutexLock lock(&mu_);
    return requests_;
  }
  void Clear() {
    absl::MutexLock lock(&mu_);
    writers_.clear();
  }

 private:
  absl::Mutex mu_;
  absl::CondVar added_;
  std::vector<std::shared_ptr<ResponseWriter>> writers_ ABSL_GUARDED_BY(mu_);
  std::vector<HttpRequest> requests_ ABSL_GUARDED_BY(mu_);
};

// Counts on_close calls, which arrive on an I/O thread.
class CloseCounter {
 public:
  void Increment() {
    absl::MutexLock lock(&mu_);
    ++calls_;
    changed_.SignalAll();
  }
  bool WaitForCalls(int n) {
    absl::MutexLock lock(&mu_);
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (calls_ < n) {
      if (changed_.WaitWithDeadline(&mu_, deadline)) break;
    }
    return calls_ >= n;
  }
  int Calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }

 private:
  absl::Mutex mu_;
  absl::CondVar changed_;
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
};

inline std::string SseEvent(int i) { return FormatSseEvent(absl::StrCat("{\"index\":", i, "}")); }

inline std::string ExpectedSse(int events) {
  std::string out;
  for (int i = 0; i < events; ++i) out += SseEvent(i);
  absl::StrAppend(&out, kSseDone);
  return out;
}

inline void StreamEvents(ResponseWriter& writer, int events) {
  writer.StartStream(200, {{"content-type", "text/event-stream"}, {"cache-control", "no-cache"}});
  for (int i = 0; i < events; ++i) writer.Write(SseEvent(i));
  writer.Write(std::string(kSseDone));
  writer.Finish();
}

}  // namespace llmserve::gateway::http::testing

#endif  // LLMSERVE_TESTS_UNIT_HTTP_SERVER_TEST_HELPERS_H_
