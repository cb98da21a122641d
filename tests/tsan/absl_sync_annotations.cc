// ThreadSanitizer annotations for Debian's uninstrumented Abseil synchronization.
//
// libabsl_synchronization.so is compiled without -fsanitize=thread, so its Abseil TSan
// annotations are compiled out and its futex waits are invisible: TSan sees no happens-before
// through absl::Mutex, absl::CondVar or absl::Notification and reports false races on everything
// they protect (in our code, and in gRPC's, whose grpc_core::Mutex and gpr_mu are absl::Mutex).
//
// This file, linked into every executable of a LLMSERVE_SANITIZE=thread build, defines the same
// symbols as the library (absl::Mutex::Lock and so on). ELF interposition makes the executable's
// definitions win for every caller, gRPC and Abseil itself included (the library calls its own
// exported functions through the PLT); each definition tells TSan what the operation means with
// the __tsan_mutex_* and __tsan_acquire/__tsan_release annotations and calls the library's own
// definition, found with dlsym(RTLD_NEXT). The annotations are the ones Abseil's own source makes
// when it is built with TSan (mutex.cc: the "delicate annotation dance" around Condition::Eval),
// so the model is the same as an instrumented Abseil's, down to lock-order inversions.
//
// What is still invisible: the library's own memory accesses (it is not instrumented, so nothing
// it does is ever reported) and synchronization in gRPC that does not go through absl::Mutex
// (lock-free queues, atomics): grpc_annotations.cc covers the callback API's hand-offs, and
// tests/tsan/tsan_suppressions.txt names what is left. tests/tsan/tsan_signal_test.cc proves the
// annotations work: correctly synchronized programs are clean, racy ones are reported.

#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/base/options.h"
#include "absl/status/status.h"
#include "absl/synchronization/barrier.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

#if !defined(__SANITIZE_THREAD__) && !(defined(__has_feature) && __has_feature(thread_sanitizer))
#error "absl_sync_annotations.cc is for -fsanitize=thread builds only"
#endif

namespace {

// The library's definition of the symbol whose mangled name is PREFIX + absl's namespace + REST
// ("_ZN" + "4absl7debian3" + "5Mutex4LockEv"). Aborts when there is none: an Abseil whose ABI
// differs from the one this file was written for (20220623) must not run half-annotated.
void* Next(bool const_member, const char* rest) {
#define LLMSERVE_STRINGIFY_INNER(x) #x
#define LLMSERVE_STRINGIFY(x) LLMSERVE_STRINGIFY_INNER(x)
  std::string name = const_member ? "_ZNK4absl" : "_ZN4absl";
#if ABSL_OPTION_USE_INLINE_NAMESPACE
  const char* inline_namespace = LLMSERVE_STRINGIFY(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  name += std::to_string(std::strlen(inline_namespace)) + inline_namespace;
#endif
  name += rest;
  void* function = dlsym(RTLD_NEXT, name.c_str());
  if (function == nullptr) {
    std::fprintf(stderr, "absl_sync_annotations: %s is not defined after the executable: %s\n",
                 name.c_str(), dlerror());
    std::abort();
  }
  return function;
}

template <typename Function>
Function Real(bool const_member, const char* rest) {
  return reinterpret_cast<Function>(Next(const_member, rest));
}

constexpr unsigned kRead = __tsan_mutex_read_lock;
constexpr unsigned kTry = __tsan_mutex_try_lock;
constexpr unsigned kTryFailed = __tsan_mutex_try_lock_failed;

// Where this thread is inside the library, for Condition::Eval: conditions are evaluated inside
// lock and unlock operations (by the waiter, or by the thread whose Unlock hands the mutex over),
// where TSan ignores the thread's accesses and believes the mutex not held.
enum class Phase { kNone, kLocking, kUnlocking };
struct Context {
  const absl::Mutex* mu = nullptr;
  Phase phase = Phase::kNone;
  unsigned flags = 0;
};
thread_local Context current;

class ScopedContext {
 public:
  ScopedContext(const absl::Mutex* mu, Phase phase, unsigned flags) : saved_(current) {
    current = Context{mu, phase, flags};
  }
  ~ScopedContext() { current = saved_; }
  ScopedContext(const ScopedContext&) = delete;
  ScopedContext& operator=(const ScopedContext&) = delete;

 private:
  Context saved_;
};

// Mutexes this thread holds in shared mode, so that a CondVar wait or an Await reacquires them in
// the mode they were held in (a thread holds few at a time).
constexpr int kMaxReaderHeld = 16;
thread_local const absl::Mutex* reader_held[kMaxReaderHeld];
thread_local int reader_held_count = 0;

void NoteReaderLocked(const absl::Mutex* mu) {
  if (reader_held_count < kMaxReaderHeld) reader_held[reader_held_count++] = mu;
}
void NoteReaderUnlocked(const absl::Mutex* mu) {
  for (int i = reader_held_count - 1; i >= 0; --i) {
    if (reader_held[i] == mu) {
      reader_held[i] = reader_held[--reader_held_count];
      return;
    }
  }
}
unsigned HeldFlags(const absl::Mutex* mu) {
  for (int i = 0; i < reader_held_count; ++i) {
    if (reader_held[i] == mu) return kRead;
  }
  return 0;
}

void* Addr(const void* p) { return const_cast<void*>(p); }

// Whether `code` is in the executable (our code and the inline library code compiled into it,
// all instrumented) rather than in a shared library.
bool InExecutable(const void* code) {
  static const void* executable_base = [] {
    Dl_info info{};
    dladdr(reinterpret_cast<const void*>(&InExecutable), &info);
    return info.dli_fbase;
  }();
  Dl_info info{};
  return dladdr(code, &info) != 0 && info.dli_fbase == executable_base;
}

// A second synchronization address inside each absl::Mutex, for the edge from a thread that
// waits with a condition to the thread that evaluates it (Acquire). Not the mutex's own address:
// TSan's unlock replaces the clock kept there, which would drop that edge.
void* WaiterAddr(const absl::Mutex* mu) {
  return const_cast<char*>(reinterpret_cast<const char*>(mu)) + 1;
}

// A wait that releases `mu` and holds it again on return (Await, CondVar::Wait): TSan sees the
// release first, the acquisition last, and conditions evaluated in between see `mu` held.
template <typename Call>
auto ReleaseAndReacquire(const absl::Mutex* mu, Call call) {
  const unsigned flags = HeldFlags(mu);
  __tsan_release(WaiterAddr(mu));
  __tsan_mutex_pre_unlock(Addr(mu), flags);
  ScopedContext context(mu, Phase::kUnlocking, flags);
  auto result = call();
  __tsan_mutex_post_unlock(Addr(mu), flags);
  __tsan_mutex_pre_lock(Addr(mu), flags);
  __tsan_mutex_post_lock(Addr(mu), flags, 0);
  return result;
}

// An acquisition (Lock, LockWhen...): `call` returns what the operation returns.
//
// A thread that waits in LockWhen for a condition enqueues itself, with a pointer to its
// Condition, by a release CAS on the mutex word, which the thread whose Unlock evaluates that
// condition reads with acquire. `conditional` makes that edge visible (Condition::Eval acquires
// it); Await and CondVar waits hand their Condition over the same way, after their release.
template <typename Call>
auto Acquire(const absl::Mutex* mu, unsigned flags, bool conditional, Call call) {
  if (conditional) __tsan_release(WaiterAddr(mu));
  __tsan_mutex_pre_lock(Addr(mu), flags);
  ScopedContext context(mu, Phase::kLocking, flags);
  auto result = call();
  __tsan_mutex_post_lock(Addr(mu), flags, 0);
  if (flags & kRead) NoteReaderLocked(mu);
  return result;
}

void Release(const absl::Mutex* mu, unsigned flags, void (*real)(absl::Mutex*)) {
  if (flags & kRead) NoteReaderUnlocked(mu);
  __tsan_mutex_pre_unlock(Addr(mu), flags);
  {
    ScopedContext context(mu, Phase::kUnlocking, flags);
    real(const_cast<absl::Mutex*>(mu));
  }
  __tsan_mutex_post_unlock(Addr(mu), flags);
}

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

// TSan treats a destroy as a write to the mutex, to report a destroy that races with a use. Only
// for mutexes our code destroys: a library destroys its own after reference counts and hand-offs
// that TSan cannot see, and frees them next, which forgets their state anyway.
Mutex::~Mutex() {
  static const auto real = Real<void (*)(Mutex*)>(false, "5MutexD2Ev");
  if (InExecutable(__builtin_return_address(0))) {
    __tsan_mutex_destroy(this, 0);
    __tsan_mutex_destroy(WaiterAddr(this), 0);
  }
  real(this);
}

void Mutex::Lock() {
  static const auto real = Real<void (*)(Mutex*)>(false, "5Mutex4LockEv");
  Acquire(this, 0, false, [&] { return (real(this), 0); });
}

void Mutex::ReaderLock() {
  static const auto real = Real<void (*)(Mutex*)>(false, "5Mutex10ReaderLockEv");
  Acquire(this, kRead, false, [&] { return (real(this), 0); });
}

bool Mutex::TryLock() {
  static const auto real = Real<bool (*)(Mutex*)>(false, "5Mutex7TryLockEv");
  __tsan_mutex_pre_lock(this, kTry);
  bool locked;
  {
    ScopedContext context(this, Phase::kLocking, kTry);
    locked = real(this);
  }
  __tsan_mutex_post_lock(this, kTry | (locked ? 0 : kTryFailed), 0);
  return locked;
}

bool Mutex::ReaderTryLock() {
  static const auto real = Real<bool (*)(Mutex*)>(false, "5Mutex13ReaderTryLockEv");
  __tsan_mutex_pre_lock(this, kRead | kTry);
  bool locked;
  {
    ScopedContext context(this, Phase::kLocking, kRead | kTry);
    locked = real(this);
  }
  __tsan_mutex_post_lock(this, kRead | kTry | (locked ? 0 : kTryFailed), 0);
  if (locked) NoteReaderLocked(this);
  return locked;
}

void Mutex::Unlock() {
  static const auto real = Real<void (*)(Mutex*)>(false, "5Mutex6UnlockEv");
  Release(this, 0, real);
}

void Mutex::ReaderUnlock() {
  static const auto real = Real<void (*)(Mutex*)>(false, "5Mutex12ReaderUnlockEv");
  Release(this, kRead, real);
}

void Mutex::LockWhen(const Condition& cond) {
  static const auto real =
      Real<void (*)(Mutex*, const Condition&)>(false, "5Mutex8LockWhenERKNS0_9ConditionE");
  Acquire(this, 0, true, [&] { return (real(this, cond), 0); });
}

void Mutex::ReaderLockWhen(const Condition& cond) {
  static const auto real =
      Real<void (*)(Mutex*, const Condition&)>(false, "5Mutex14ReaderLockWhenERKNS0_9ConditionE");
  Acquire(this, kRead, true, [&] { return (real(this, cond), 0); });
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  static const auto real = Real<bool (*)(Mutex*, const Condition&, Time)>(
      false, "5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  return Acquire(this, 0, true, [&] { return real(this, cond, deadline); });
}

bool Mutex::ReaderLockWhenWithDeadline(const Condition& cond, Time deadline) {
  static const auto real = Real<bool (*)(Mutex*, const Condition&, Time)>(
      false, "5Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  return Acquire(this, kRead, true, [&] { return real(this, cond, deadline); });
}

void Mutex::Await(const Condition& cond) {
  static const auto real =
      Real<void (*)(Mutex*, const Condition&)>(false, "5Mutex5AwaitERKNS0_9ConditionE");
  ReleaseAndReacquire(this, [&] { return (real(this, cond), 0); });
}

bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  static const auto real = Real<bool (*)(Mutex*, const Condition&, Time)>(
      false, "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  return ReleaseAndReacquire(this, [&] { return real(this, cond, deadline); });
}

// The library's *WithTimeout functions compute Now() + timeout and call their *WithDeadline
// twin through the PLT, which would annotate twice: these do the same, with the annotated twin.
bool Mutex::LockWhenWithTimeout(const Condition& cond, Duration timeout) {
  return LockWhenWithDeadline(cond, Now() + timeout);
}

bool Mutex::ReaderLockWhenWithTimeout(const Condition& cond, Duration timeout) {
  return ReaderLockWhenWithDeadline(cond, Now() + timeout);
}

bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  return AwaitWithDeadline(cond, Now() + timeout);
}

bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  return WaitWithDeadline(mu, Now() + timeout);
}

// Called by the library inside lock and unlock operations (see Context): TSan is told the mutex
// is held while the condition runs, as Abseil's EvalConditionAnnotated does.
bool Condition::Eval() const {
  static const auto real = Real<bool (*)(const Condition*)>(true, "9Condition4EvalEv");
  const Context context = current;
  if (context.mu == nullptr) return real(this);
  void* mu = Addr(context.mu);
  const unsigned flags = context.flags & ~(kTry | kTryFailed);
  bool result;
  if (context.phase == Phase::kLocking) {
    __tsan_mutex_post_lock(mu, context.flags, 0);
    __tsan_acquire(WaiterAddr(context.mu));
    result = real(this);
    __tsan_mutex_pre_unlock(mu, flags);
    __tsan_mutex_post_unlock(mu, flags);
    __tsan_mutex_pre_lock(mu, context.flags);
  } else {
    __tsan_mutex_post_unlock(mu, flags);
    __tsan_mutex_pre_lock(mu, flags);
    __tsan_mutex_post_lock(mu, flags, 0);
    __tsan_acquire(WaiterAddr(context.mu));
    result = real(this);
    __tsan_mutex_pre_unlock(mu, flags);
  }
  return result;
}

void CondVar::Wait(Mutex* mu) {
  static const auto real = Real<void (*)(CondVar*, Mutex*)>(false, "7CondVar4WaitEPNS0_5MutexE");
  ReleaseAndReacquire(mu, [&] { return (real(this, mu), 0); });
}

bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  static const auto real = Real<bool (*)(CondVar*, Mutex*, Time)>(
      false, "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  return ReleaseAndReacquire(mu, [&] { return real(this, mu, deadline); });
}

// Notify publishes with a store inside the library, and WaitForNotification may return on a
// load inside the library without taking the mutex: both are made visible on the Notification's
// own address. HasBeenNotified() is inline (instrumented): its acquire load of notified_yet_ is
// paired with a release on that address.
namespace {
void* NotifiedYet(const Notification* n) {
  // The layout of 20220623: `mutable Mutex mutex_; std::atomic<bool> notified_yet_;`.
  static_assert(sizeof(Notification) == 2 * sizeof(Mutex), "Notification's layout changed");
  return const_cast<char*>(reinterpret_cast<const char*>(n) + sizeof(Mutex));
}
}  // namespace

void Notification::Notify() {
  static const auto real = Real<void (*)(Notification*)>(false, "12Notification6NotifyEv");
  __tsan_release(this);
  __tsan_release(NotifiedYet(this));
  real(this);
}

void Notification::WaitForNotification() const {
  static const auto real =
      Real<void (*)(const Notification*)>(true, "12Notification19WaitForNotificationEv");
  real(this);
  __tsan_acquire(Addr(this));
}

bool Notification::WaitForNotificationWithTimeout(Duration timeout) const {
  static const auto real = Real<bool (*)(const Notification*, Duration)>(
      true, "12Notification30WaitForNotificationWithTimeoutENS0_8DurationE");
  const bool notified = real(this, timeout);
  if (notified) __tsan_acquire(Addr(this));
  return notified;
}

bool Notification::WaitForNotificationWithDeadline(Time deadline) const {
  static const auto real = Real<bool (*)(const Notification*, Time)>(
      true, "12Notification31WaitForNotificationWithDeadlineENS0_4TimeE");
  const bool notified = real(this, deadline);
  if (notified) __tsan_acquire(Addr(this));
  return notified;
}

// Each decrement publishes (fetch_sub inside the library); Wait returns after the last.
bool BlockingCounter::DecrementCount() {
  static const auto real =
      Real<bool (*)(BlockingCounter*)>(false, "15BlockingCounter14DecrementCountEv");
  __tsan_release(this);
  return real(this);
}

void BlockingCounter::Wait() {
  static const auto real = Real<void (*)(BlockingCounter*)>(false, "15BlockingCounter4WaitEv");
  real(this);
  __tsan_acquire(this);
}

bool Barrier::Block() {
  static const auto real = Real<bool (*)(Barrier*)>(false, "7Barrier5BlockEv");
  __tsan_release(this);
  const bool last = real(this);
  __tsan_acquire(this);
  return last;
}

// absl::Status's shared representation is reference counted inside the library (an acq_rel
// fetch_sub, then delete): without this, TSan sees the last owner's free race with another
// thread's earlier read of the message.
void Status::UnrefNonInlined(uintptr_t rep) {
  static const auto real = Real<void (*)(uintptr_t)>(false, "6Status15UnrefNonInlinedEm");
  void* address = reinterpret_cast<void*>(rep);
  __tsan_release(address);
  __tsan_acquire(address);
  real(rep);
}

ABSL_NAMESPACE_END
}  // namespace absl
