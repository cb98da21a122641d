// Does ThreadSanitizer give signal through Abseil and gRPC here? One scenario per run, named by
// argv[1]: the "clean:" ones synchronize correctly through absl::Mutex, CondVar, Condition,
// Notification, BlockingCounter, a shared absl::Status or a gRPC callback and must produce no
// report; the "racy:" ones contain a real data race that TSan must report.
// tests/tsan/CMakeLists.txt runs each as a ctest with the suite's suppressions and checks for the
// report, and runs clean scenarios once more in a binary without the annotations
// (absl_sync_annotations.cc, grpc_annotations.cc), where TSan must report the false races that the
// annotations remove.

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace {

constexpr int kIterations = 2000;

// Two threads increment a counter under one absl::Mutex.
int LockedCounter() {
  absl::Mutex mu;
  int counter = 0;
  auto work = [&] {
    for (int i = 0; i < kIterations; ++i) {
      absl::MutexLock lock(&mu);
      ++counter;
    }
  };
  std::thread a(work), b(work);
  a.join();
  b.join();
  return counter == 2 * kIterations ? 0 : 1;
}

// Readers under ReaderMutexLock, a writer under MutexLock.
int ReaderWriter() {
  absl::Mutex mu;
  std::vector<int> values(16, 0);
  long sum = 0;
  std::thread writer([&] {
    for (int i = 0; i < kIterations; ++i) {
      absl::MutexLock lock(&mu);
      values[i % values.size()] = i;
    }
  });
  std::thread reader([&] {
    for (int i = 0; i < kIterations; ++i) {
      absl::ReaderMutexLock lock(&mu);
      for (int v : values) sum += v;
    }
  });
  writer.join();
  reader.join();
  return sum >= 0 ? 0 : 1;
}

// A hand-off through CondVar: the consumer reads what the producer wrote under the lock, then
// data the producer wrote before taking the lock at all.
int CondVarHandOff() {
  absl::Mutex mu;
  absl::CondVar cv;
  bool ready = false;
  std::string payload;  // written before the lock, read after the wait
  std::thread producer([&] {
    payload = "hello";
    absl::MutexLock lock(&mu);
    ready = true;
    cv.Signal();
  });
  std::string seen;
  {
    absl::MutexLock lock(&mu);
    while (!ready) cv.WaitWithTimeout(&mu, absl::Seconds(10));
  }
  seen = payload;
  producer.join();
  return seen == "hello" ? 0 : 1;
}

// Conditions: LockWhen and Await evaluate a lambda that reads guarded state, in this thread or
// in the thread whose Unlock wakes it.
int Conditions() {
  absl::Mutex mu;
  int stage = 0;
  std::vector<int> log;
  std::thread other([&] {
    for (int i = 0; i < 100; ++i) {
      absl::MutexLock lock(&mu);
      mu.Await(absl::Condition(
          +[](int* s) { return *s % 2 == 1; }, &stage));
      log.push_back(stage);
      ++stage;
    }
  });
  for (int i = 0; i < 100; ++i) {
    mu.LockWhen(absl::Condition(
        +[](int* s) { return *s % 2 == 0; }, &stage));
    log.push_back(stage);
    ++stage;
    mu.Unlock();
  }
  {
    absl::MutexLock lock(&mu);
    mu.AwaitWithTimeout(absl::Condition(
                            +[](int* s) { return *s == 200; }, &stage),
                        absl::Seconds(10));
  }
  other.join();
  return log.size() == 200 ? 0 : 1;
}

// Notification: data written before Notify is read after WaitForNotification, and after a
// HasBeenNotified() poll (an inline atomic load, paired with the release inside Notify).
int NotificationHandOff() {
  std::vector<int> first(64), second(64);
  absl::Notification first_ready, second_ready;
  std::thread producer([&] {
    for (int i = 0; i < 64; ++i) first[i] = i;
    first_ready.Notify();
    for (int i = 0; i < 64; ++i) second[i] = 2 * i;
    second_ready.Notify();
  });
  first_ready.WaitForNotification();
  long sum = 0;
  for (int v : first) sum += v;
  while (!second_ready.HasBeenNotified()) absl::SleepFor(absl::Microseconds(100));
  for (int v : second) sum += v;
  producer.join();
  return sum == 3 * 63 * 64 / 2 ? 0 : 1;
}

// BlockingCounter: each worker writes its own slot, then decrements.
int Counter() {
  constexpr int kWorkers = 4;
  std::vector<int> slots(kWorkers);
  absl::BlockingCounter done(kWorkers);
  std::vector<std::thread> workers;
  for (int w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&, w] {
      slots[w] = w + 1;
      done.DecrementCount();
    });
  }
  done.Wait();
  int sum = 0;
  for (int v : slots) sum += v;
  for (std::thread& t : workers) t.join();
  return sum == 10 ? 0 : 1;
}

// A heap-allocated absl::Status (it has a message) copied to another thread; both read the
// message and drop their copy, in either order; the last one frees it inside libabsl_status.
int SharedStatus() {
  size_t total = 0;
  for (int i = 0; i < 200; ++i) {
    absl::Status status = absl::InvalidArgumentError(std::string(64, 'x') + std::to_string(i));
    absl::Status copy = status;
    std::thread other([copy = std::move(copy), &total]() mutable {
      total += copy.message().size();
      copy = absl::OkStatus();
    });
    const size_t mine = status.message().size();
    status = absl::OkStatus();
    other.join();
    total += mine;
  }
  return total > 0 ? 0 : 1;
}

// Racy: one thread increments under the lock, the other without it.
int RacyUnlockedIncrement() {
  absl::Mutex mu;
  int counter = 0;
  std::thread a([&] {
    for (int i = 0; i < kIterations; ++i) {
      absl::MutexLock lock(&mu);
      ++counter;
    }
  });
  std::thread b([&] {
    for (int i = 0; i < kIterations; ++i) ++counter;
  });
  a.join();
  b.join();
  return 0;
}

// Racy: the producer writes after Notify, the consumer reads after the wait.
int RacyWriteAfterNotify() {
  int value = 0;
  absl::Notification ready;
  std::thread producer([&] {
    ready.Notify();
    absl::SleepFor(absl::Milliseconds(20));
    value = 2;
  });
  ready.WaitForNotification();
  int seen = value;
  absl::SleepFor(absl::Milliseconds(50));
  seen += value;
  producer.join();
  return seen >= 0 ? 0 : 1;
}

// Racy: the consumer reads what the producer writes after its critical section, through a
// condition that saw the flag set under the lock.
int RacyWriteAfterUnlock() {
  absl::Mutex mu;
  bool ready = false;
  int payload = 0;
  std::thread producer([&] {
    {
      absl::MutexLock lock(&mu);
      ready = true;
    }
    payload = 7;  // after the unlock: nothing orders it before the consumer's read
  });
  mu.LockWhen(absl::Condition(&ready));
  mu.Unlock();
  absl::SleepFor(absl::Milliseconds(50));
  const int seen = payload;
  producer.join();
  return seen >= 0 ? 0 : 1;
}

// A gRPC stream between callback reactors on both sides, as the worker and the gateway use them:
// the server reactor writes a plain field before each StartWrite and reads it in OnWriteDone,
// which gRPC runs on another thread once the write is done, kWrites times, then Finish; the client
// reactor reads every message and records it in plain fields that the caller reads after OnDone.
// `write_after_start` writes the server's field once more after the first StartWrite (in the middle
// of the write, while OnWriteDone waits to read it): a race.
constexpr int kWrites = 8;

class EchoReactor final : public grpc::ServerGenericBidiReactor {
 public:
  explicit EchoReactor(bool write_after_start) : write_after_start_(write_after_start) {
    StartRead(&request_);
  }
  void OnReadDone(bool ok) override {
    if (ok) Write();  // the client's one message; its half-close ends the next read
  }
  void OnWriteDone(bool ok) override {
    // After the racy write below, when there is one.
    absl::SleepFor(absl::Milliseconds(writes_ == 0 && write_after_start_ ? 60 : 2));
    long sum = 0;
    for (int v : note_) sum += v;
    if (!ok || sum != 120 * (writes_ + 1)) {
      Finish(grpc::Status(grpc::StatusCode::INTERNAL, "wrong note"));
    } else if (++writes_ < kWrites) {
      Write();
    } else {
      Finish(grpc::Status::OK);
    }
  }
  void OnDone() override { delete this; }

 private:
  void Write() {
    for (int i = 0; i < 16; ++i) note_[i] = i * (writes_ + 1);
    response_ = request_;
    StartWrite(&response_);
    if (write_after_start_ && writes_ == 0) {
      absl::SleepFor(absl::Milliseconds(20));
      note_[3] = 3;
    }
  }

  const bool write_after_start_;
  grpc::ByteBuffer request_, response_;
  int note_[16] = {};
  int writes_ = 0;
};

class EchoService final : public grpc::CallbackGenericService {
 public:
  explicit EchoService(bool write_after_start) : write_after_start_(write_after_start) {}
  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext*) override {
    return new EchoReactor(write_after_start_);
  }

 private:
  const bool write_after_start_;
};

class EchoClient final : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  EchoClient(grpc::GenericStub& stub, grpc::ClientContext* context) {
    grpc::Slice slice("ping", 4);
    request_ = grpc::ByteBuffer(&slice, 1);
    stub.PrepareBidiStreamingCall(context, "/test.Echo/Stream", grpc::StubOptions(), this);
    StartWrite(&request_);
    StartWritesDone();
    StartRead(&response_);
    StartCall();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    ++reads_;
    StartRead(&response_);
  }
  void OnDone(const grpc::Status& status) override {
    status_ = status;
    done_.Notify();
  }
  // The messages read and the final status, once the stream is done.
  int Wait(grpc::Status* status) {
    done_.WaitForNotification();
    *status = status_;
    return reads_;
  }

 private:
  grpc::ByteBuffer request_, response_;
  int reads_ = 0;
  grpc::Status status_;
  absl::Notification done_;
};

int GrpcStream(bool write_after_start) {
  EchoService service(write_after_start);
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterCallbackGenericService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) return 1;
  grpc::GenericStub stub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  int reads = 0;
  grpc::Status status;
  for (int stream = 0; stream < 4; ++stream) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    EchoClient client(stub, &context);
    reads += client.Wait(&status);
    if (!status.ok()) break;
  }
  server->Shutdown();
  return status.ok() && reads == 4 * kWrites ? 0 : 1;
}

struct Scenario {
  const char* name;
  int (*run)();
};

constexpr Scenario kScenarios[] = {
    {"clean:mutex", LockedCounter},
    {"clean:reader-writer", ReaderWriter},
    {"clean:condvar", CondVarHandOff},
    {"clean:conditions", Conditions},
    {"clean:notification", NotificationHandOff},
    {"clean:blocking-counter", Counter},
    {"clean:status", SharedStatus},
    {"clean:grpc-stream", [] { return GrpcStream(false); }},
    {"racy:unlocked-increment", RacyUnlockedIncrement},
    {"racy:write-after-notify", RacyWriteAfterNotify},
    {"racy:write-after-unlock", RacyWriteAfterUnlock},
    {"racy:grpc-write-after-start", [] { return GrpcStream(true); }},
};

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2) {
    for (const Scenario& scenario : kScenarios) {
      if (std::strcmp(argv[1], scenario.name) == 0) {
        const int status = scenario.run();
        std::printf("%s: %s\n", scenario.name, status == 0 ? "done" : "wrong result");
        return status;
      }
    }
  }
  std::fprintf(stderr, "usage: tsan_signal_test SCENARIO; scenarios:");
  for (const Scenario& scenario : kScenarios) std::fprintf(stderr, " %s", scenario.name);
  std::fprintf(stderr, "\n");
  return 2;
}
