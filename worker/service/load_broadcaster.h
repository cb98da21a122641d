// Worker.WatchLoad: one thread that reads the engine's load and prefix-cache events (as the
// LoadAccountant keeps them) and fans them out to every watching client, each at its own interval.
//
// A report goes out when the client's interval has passed and something changed (counts,
// draining, cache events), and at least every max(interval, 1 s) as a heartbeat, so a gateway can
// tell a silent worker from an idle one. Draining is reported at once. The first report of each
// stream is a snapshot (reset = true, every cached block listed as stored); a client too slow to
// take its events gets a fresh snapshot instead of an unbounded backlog.
//
// The accountant's event queue has one consumer, this thread; the snapshot is read after the events
// are taken, so a block may appear both in the snapshot and in the next events: replaying events
// in order on the snapshot still gives the right set (each hash ends as its last event says).
//
// Thread-safe: Watch, SetDraining and FinishAll may be called from any thread.

#ifndef LLMSERVE_WORKER_SERVICE_LOAD_BROADCASTER_H_
#define LLMSERVE_WORKER_SERVICE_LOAD_BROADCASTER_H_

#include <grpcpp/grpcpp.h>

#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "llmserve/worker/v1/worker.pb.h"
#include "worker/service/load_accountant.h"

namespace llmserve::worker {

class LoadBroadcaster {
 public:
  // `load` and `engine` outlive this. The running / waiting / free-block counts come from the
  // engine itself (waiting counts a request from the moment it is added, not from the engine's
  // next iteration: a gateway routing on it sees it at once); the rest from `load`. Without prefix
  // caching, reports carry no events.
  LoadBroadcaster(LoadAccountant* load, const Engine* engine, bool prefix_caching);
  // Every watcher must be done (the gRPC server shut down) before this runs.
  ~LoadBroadcaster();

  // Stops the thread that reads the accountant (idempotent).
  void Stop();

  // The reactor for one WatchLoad call; interval_ms already validated.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Watch(absl::Duration interval);

  // Reports draining to every watcher at once.
  void SetDraining();
  // Ends every stream with OK (before the server shuts down); new watchers end at once too.
  void FinishAll();

  // The shortest interval a client may ask for, and the heartbeat floor.
  static constexpr absl::Duration kMinInterval = absl::Milliseconds(50);
  static constexpr absl::Duration kHeartbeat = absl::Seconds(1);

 private:
  class Watcher;

  void Loop();
  void Remove(Watcher* watcher);

  LoadAccountant* const load_;
  const Engine* const engine_;
  const bool prefix_caching_;
  absl::Mutex mutex_;
  absl::flat_hash_set<Watcher*> watchers_ ABSL_GUARDED_BY(mutex_);
  bool draining_ ABSL_GUARDED_BY(mutex_) = false;
  bool finishing_ ABSL_GUARDED_BY(mutex_) = false;
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  // Set by Watch and SetDraining: run a round now.
  bool wake_ ABSL_GUARDED_BY(mutex_) = false;
  std::thread thread_;
};

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_SERVICE_LOAD_BROADCASTER_H_
