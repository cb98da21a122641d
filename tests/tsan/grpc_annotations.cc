// ThreadSanitizer annotations for gRPC's callback API (LLMSERVE_SANITIZE=thread builds; see
// absl_sync_annotations.cc for the approach).
//
// A callback operation (StartWrite, StartRead, Finish...) is prepared by grpcpp's inline header
// code in the calling thread, handed to libgrpc with grpc_call_start_batch(call, ops, n, tag), and
// completed on a gRPC thread, which calls tag->functor_run: CallbackWithSuccessTag::StaticRun
// (or CallbackWithStatusTag's), again grpcpp's inline code, and then the reactor's OnWriteDone /
// OnReadDone / OnDone. The hand-off between the two threads happens inside libgrpc (lock-free
// queues, atomics, the poller), which is not instrumented: TSan sees the operation's objects
// written by one thread and read by another with nothing between, in grpcpp's code and in the
// reactor's.
//
// So: grpc_call_start_batch is interposed (the executable's definition wins over libgrpc's for
// libgrpc++ and for our code) to release on the tag, and the two StaticRun functions get strong
// definitions here that acquire on the tag before running it (the header's inline definitions
// are weak, and the linker keeps the strong one; the header stores &StaticRun in the tag, so
// every completion comes through here). That is the happens-before gRPC promises between an
// operation's start and its completion callback.

#include <dlfcn.h>
#include <grpc/grpc.h>
#include <grpcpp/support/callback_common.h>
#include <grpcpp/support/server_callback.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>

#if !defined(__SANITIZE_THREAD__) && !(defined(__has_feature) && __has_feature(thread_sanitizer))
#error "grpc_annotations.cc is for -fsanitize=thread builds only"
#endif

namespace {

// Run() is private in both tag classes; an explicit instantiation may name a private member, and
// this one hands out its address (the access exception for explicit instantiations).
using SuccessTag = grpc::internal::CallbackWithSuccessTag;
using StatusTag = grpc::internal::CallbackWithStatusTag;
template <typename Tag>
struct RunOf {
  using type = void (Tag::*)(bool);
  friend type RunMember(RunOf);
};
template <typename Key, typename Key::type Member>
struct Expose {
  friend typename Key::type RunMember(Key) { return Member; }
};
template struct Expose<RunOf<SuccessTag>, &SuccessTag::Run>;
template struct Expose<RunOf<StatusTag>, &StatusTag::Run>;

template <typename Tag>
void RunTag(grpc_completion_queue_functor* functor, int ok) {
  __tsan_acquire(functor);
  Tag* tag = static_cast<Tag*>(functor);
  (tag->*RunMember(RunOf<Tag>{}))(static_cast<bool>(ok));
}

}  // namespace

// The strong definitions of the headers' inline StaticRun functions (assembler names: the
// members are private, and this file must not also emit the weak ones).
extern "C" void LlmserveSuccessTagStaticRun(grpc_completion_queue_functor* functor, int ok) __asm__(
    "_ZN4grpc8internal22CallbackWithSuccessTag9StaticRunEP29grpc_completion_queue_functori");
extern "C" void LlmserveSuccessTagStaticRun(grpc_completion_queue_functor* functor, int ok) {
  RunTag<SuccessTag>(functor, ok);
}
extern "C" void LlmserveStatusTagStaticRun(grpc_completion_queue_functor* functor, int ok) __asm__(
    "_ZN4grpc8internal21CallbackWithStatusTag9StaticRunEP29grpc_completion_queue_functori");
extern "C" void LlmserveStatusTagStaticRun(grpc_completion_queue_functor* functor, int ok) {
  RunTag<StatusTag>(functor, ok);
}

namespace grpc::internal {

// A server call's OnDone runs once the call's reference count (callbacks_outstanding_, acq_rel
// decrements) reaches zero, in the thread of the last decrement or in an executor it hands the
// call to. Decrements made by grpcpp's inline code here are instrumented; the ServerContext's
// CompletionOp makes its own inside libgrpc++, which is not: the thread that takes the count to
// zero there would miss the others' releases. It always goes through here next.
void ServerCallbackCall::ScheduleOnDone(bool inline_ondone) {
  using Real = void (*)(ServerCallbackCall*, bool);
  static const auto real = [] {
    void* function = dlsym(RTLD_NEXT, "_ZN4grpc8internal18ServerCallbackCall14ScheduleOnDoneEb");
    if (function == nullptr) {
      std::fprintf(stderr,
                   "grpc_annotations: no ServerCallbackCall::ScheduleOnDone after the "
                   "executable\n");
      std::abort();
    }
    return reinterpret_cast<Real>(function);
  }();
  __tsan_acquire(&callbacks_outstanding_);
  real(this, inline_ondone);
}

// gRPC calls a reactor's OnCancel, unless the reactor is inlineable (ours are not), in an
// executor closure inside libgrpc++ that first takes a reference on the call and drops it with
// MaybeDone after OnCancel returns: OnDone cannot run before OnCancel has returned. Both the
// closure hand-off and that decrement are uninstrumented, so when another thread's decrement is
// the last one, TSan sees OnCancel's accesses (under the reactor's mutex) race with OnDone
// deleting the reactor. This definition replaces libgrpc++'s (as ScheduleOnDone's above): it runs
// OnCancel inline, as gRPC runs an inlineable reactor's, and releases on the counter that
// ScheduleOnDone acquires before OnDone.
void ServerCallbackCall::CallOnCancel(ServerReactor* reactor) {
  reactor->OnCancel();
  __tsan_release(&callbacks_outstanding_);
}

}  // namespace grpc::internal

extern "C" grpc_call_error grpc_call_start_batch(grpc_call* call, const grpc_op* ops, size_t nops,
                                                 void* tag, void* reserved) {
  using StartBatch = grpc_call_error (*)(grpc_call*, const grpc_op*, size_t, void*, void*);
  static const auto real = [] {
    void* function = dlsym(RTLD_NEXT, "grpc_call_start_batch");
    if (function == nullptr) {
      std::fprintf(stderr, "grpc_annotations: no grpc_call_start_batch after the executable\n");
      std::abort();
    }
    return reinterpret_cast<StartBatch>(function);
  }();
  __tsan_release(tag);
  return real(call, ops, nops, tag, reserved);
}
