#include "tests/cuda_emu/executor.h"

#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tests/cuda_emu/fiber.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LLMSERVE_EMU_BIG_STACKS 1
#endif
#endif
#if defined(LLMSERVE_EMU_TSAN) || defined(__SANITIZE_ADDRESS__)
#define LLMSERVE_EMU_BIG_STACKS 1
#endif
// ThreadSanitizer builds compile this file uninstrumented (its bookkeeping is shared by all the
// fibers of a block, which TSan would report) and define LLMSERVE_EMU_TSAN for the annotations.
#if LLMSERVE_EMU_TSAN
#include <sanitizer/tsan_interface.h>
#endif

namespace llmserve::cuda_emu {
namespace {

// Kernels keep small arrays in registers; sanitizers' frames are several times larger.
#if LLMSERVE_EMU_BIG_STACKS
constexpr size_t kStackBytes = 1024 * 1024;
#else
constexpr size_t kStackBytes = 256 * 1024;
#endif
// Each fiber's frames start at its own offset below its stack's top (fiber.h says why): steps of
// 17 cache lines cover all 64 sets of a 4 KiB L1 way for 64 consecutive fibers, and the range
// spreads a block's fibers over most of a 2 MiB L2's sets.
constexpr size_t kStackOffsetStep = 17 * 64;
constexpr size_t kStackOffsetRange = 96 * 1024;
size_t StackOffset(int index) { return index * kStackOffsetStep % kStackOffsetRange; }

// Happens-before edges for ThreadSanitizer (fiber switches give none).
void HappensBefore([[maybe_unused]] const void* sync) {
#if LLMSERVE_EMU_TSAN
  __tsan_release(const_cast<void*>(sync));
#endif
}
void HappensAfter([[maybe_unused]] const void* sync) {
#if LLMSERVE_EMU_TSAN
  __tsan_acquire(const_cast<void*>(sync));
#endif
}

enum class State { kRunnable, kAtBarrier, kAtWarpOp, kExited };

const char* WarpOpName(WarpOp op) {
  switch (op) {
    case WarpOp::kSync:
      return "__syncwarp";
    case WarpOp::kShuffleIndex:
      return "__shfl_sync";
    case WarpOp::kShuffleUp:
      return "__shfl_up_sync";
    case WarpOp::kShuffleDown:
      return "__shfl_down_sync";
    case WarpOp::kShuffleXor:
      return "__shfl_xor_sync";
  }
  return "?";
}

void FiberMain();

// One CUDA thread of the running block.
struct Thread {
  explicit Thread(int index)
      : context(kStackBytes + kStackOffsetRange, &FiberMain, StackOffset(index)) {}
  Context context;
  ThreadBuiltins builtins;
  int linear = 0;
  State state = State::kRunnable;
  // Its fiber waits at the end of FiberMain's loop, ready to run the next block's thread without
  // a restart (false: it never ran, or a fault abandoned it in the middle of the kernel).
  bool parked = false;
  uint64_t barrier_generation = 0;
  // The warp operation it waits in (its value and argument are in the warp's arrays).
  WarpOp op = WarpOp::kSync;
  unsigned mask = 0;
  int width = 32;
  uint64_t op_generation = 0;
};

struct Warp {
  uint32_t live = 0;      // lanes that exist and have not exited
  uint32_t waiting = 0;   // lanes waiting in a warp operation
  uint32_t runnable = 0;  // lanes in State::kRunnable (the running one among them)
  // Every waiting lane is in an operation of this kind, mask and width (the fast path of
  // CompleteWarpOp); false when the lanes differ, which the general path sorts out.
  bool uniform = false;
  WarpOp op = WarpOp::kSync;
  unsigned mask = 0;
  int width = 32;
  uint64_t generation = 0;
  char sync[2];  // TSan sync objects, alternating by generation
  // Per lane: the shuffle's value and argument, and its result.
  int arg[32];
  uint64_t value[32];
  uint64_t result[32];
};

// The launch in progress (one at a time, under g_launch_mutex).
struct Launch {
  const LaunchConfig* config = nullptr;
  absl::FunctionRef<void()>* body = nullptr;
  std::vector<Thread*> threads;  // of the block that runs
  std::vector<Warp> warps;
  int live = 0;
  int at_barrier = 0;
  uint64_t barrier_generation = 0;
  char barrier_sync[2];
  char start_sync, exit_sync;
  std::vector<unsigned char> dynamic_shared;
  Context host;
  Thread* current = nullptr;
  bool reverse = false;  // this block runs its threads last to first
  bool failed = false;
  std::string fault;
};

std::mutex g_launch_mutex;
// Guarded by g_launch_mutex.
Launch* g_launch = nullptr;
std::vector<std::unique_ptr<Thread>>* g_pool = nullptr;
const void* g_pool_thread = nullptr;  // identifies the OS thread the pool's fibers parked on

std::mutex g_state_mutex;  // guards the rest
cudaError_t g_launch_error = cudaSuccess;
cudaError_t g_fault = cudaSuccess;
std::string g_diagnostic;
std::unordered_map<const void*, size_t>* g_max_dynamic_shared = nullptr;

void Report(cudaError_t* slot, cudaError_t error, const std::string& message) {
  std::fprintf(stderr, "cuda_emu: %s\n", message.c_str());
  std::lock_guard<std::mutex> lock(g_state_mutex);
  *slot = error;
  g_diagnostic = message;
}

std::string BlockName(const Launch& launch) {
  const uint3 b = launch.current != nullptr ? launch.current->builtins.block_idx
                                            : launch.threads.front()->builtins.block_idx;
  return absl::StrFormat("kernel %s, block (%u,%u,%u)", launch.config->kernel_name, b.x, b.y, b.z);
}

std::string ThreadName(const Thread& t) {
  return absl::StrFormat("thread (%u,%u,%u) (warp %d lane %d)", t.builtins.thread_idx.x,
                         t.builtins.thread_idx.y, t.builtins.thread_idx.z, t.linear / 32,
                         t.linear % 32);
}

// The first runnable thread in the block's order from warp `w` on (cyclically), or null: the
// lowest runnable lane of the first warp that has one (the highest, and warps downwards, in a
// reversed block).
Thread* FirstRunnableFrom(const Launch& launch, int w) {
  const int num_warps = static_cast<int>(launch.warps.size());
  for (int k = 0; k < num_warps; ++k) {
    const int v = launch.reverse ? (w - k + num_warps) % num_warps : (w + k) % num_warps;
    const uint32_t r = launch.warps[v].runnable;
    if (r != 0) {
      return launch.threads[v * 32 + (launch.reverse ? 31 - __builtin_clz(r) : __builtin_ctz(r))];
    }
  }
  return nullptr;
}

// The runnable lane of `runnable` that follows `lane` in the block's order (cyclically within
// the warp), or -1.
int NextLane(uint32_t runnable, int lane, bool reverse) {
  if (runnable == 0) return -1;
  if (!reverse) {
    const uint32_t after = lane == 31 ? 0 : runnable & (~0u << (lane + 1));
    return __builtin_ctz(after != 0 ? after : runnable);
  }
  const uint32_t before = runnable & ((1u << lane) - 1);
  return 31 - __builtin_clz(before != 0 ? before : runnable);
}

// Gives the OS thread to the next runnable thread, or back to the executor when there is none
// (the block is done, or deadlocked). The next is the following runnable lane of the caller's
// own warp, and only when none is left the first runnable thread of the next warps in the block's
// order: a warp runs until all its lanes wait at a barrier or have exited, so the fibers that
// switch among each other are the 32 of one warp, whose stacks stay in the caches (cycling
// through a whole block's stacks at every warp operation made most switches cache misses).
// Switching fiber to fiber, never through the executor, keeps it one switch per lane and warp
// operation.
inline __attribute__((always_inline)) void SwitchAway(Thread& self, bool finished = false) {
  Launch& launch = *g_launch;
  // Everything a thread did is ordered before the executor's next look at the block (another
  // thread gets no ordering from this: it acquires only barriers).
  HappensBefore(&launch.exit_sync);
  const int w = self.linear / 32;
  const int lane = NextLane(launch.warps[w].runnable, self.linear % 32, launch.reverse);
  Thread* next = lane >= 0 ? launch.threads[w * 32 + lane] : FirstRunnableFrom(launch, w);
  if (next == nullptr) {
    Context::Switch(self.context, launch.host, finished);
  } else {
    launch.current = next;
    t_builtins = &next->builtins;
    Context::Switch(self.context, next->context, finished);
  }
  // Resumed: whoever switched here set current and the built-ins.
}

// Ends the block with a fault; never returns to the calling thread.
[[noreturn]] void Fault(const std::string& what) {
  Launch& launch = *g_launch;
  launch.failed = true;
  launch.fault = absl::StrCat(BlockName(launch), ": ", what);
  HappensBefore(&launch.exit_sync);
  Context::Switch(launch.current->context, launch.host, /*from_finished=*/true);
  __builtin_unreachable();
}

void ReleaseBarrier() {
  Launch& launch = *g_launch;
  for (Thread* t : launch.threads) {
    if (t->state == State::kAtBarrier) {
      t->state = State::kRunnable;
      launch.warps[t->linear / 32].runnable |= 1u << (t->linear % 32);
    }
  }
  launch.at_barrier = 0;
  ++launch.barrier_generation;
}

bool ValidWidth(int width) { return width > 0 && width <= 32 && (width & (width - 1)) == 0; }

// The lane whose value `lane` reads in `op` with `arg` (`width` valid).
inline int SourceLane(WarpOp op, int arg, int width, int lane) {
  const int first = lane & ~(width - 1), last = first + width - 1;
  switch (op) {
    case WarpOp::kSync:
      return lane;
    case WarpOp::kShuffleIndex:
      return first + (arg & (width - 1));
    case WarpOp::kShuffleUp:
      return lane - arg >= first ? lane - arg : lane;
    case WarpOp::kShuffleDown:
      return lane + arg <= last ? lane + arg : lane;
    case WarpOp::kShuffleXor: {
      const int source = lane ^ arg;
      return source <= last ? source : lane;  // PTX shfl.bfly: past the segment, one's own
    }
  }
  return lane;
}

// Completes the operation of a full warp whose 32 lanes all wait in it with one kind, mask and
// width: no lane can read outside the mask, so nothing to check; one pass over the warp's arrays.
void CompleteFullWarpOp(Warp& warp, Thread** lanes) {
  const WarpOp op = warp.op;
  const int width = warp.width;
  for (int l = 0; l < 32; ++l) {
    warp.result[l] = warp.value[SourceLane(op, warp.arg[l], width, l)];
  }
  for (int l = 0; l < 32; ++l) lanes[l]->state = State::kRunnable;
  warp.waiting = 0;
  warp.runnable = ~0u;
  ++warp.generation;
}

// Completes the warp operation that lane `l` of warp `w` waits in if every lane its mask names
// (and has not exited) waits in one with the same mask; false if some have yet to come. Faults
// end the block.
bool TryCompleteWarpOp(int w, int l) {
  Launch& launch = *g_launch;
  Warp& warp = launch.warps[w];
  Thread** lanes = launch.threads.data() + w * 32;
  const Thread& first = *lanes[l];
  const uint32_t needed = first.mask & warp.live;
  if ((needed & ~warp.waiting) != 0) return false;  // lanes of its mask still to come
  for (uint32_t rest = needed; rest != 0; rest &= rest - 1) {
    // A lane in another operation's mask: a deadlock if nothing else completes; reported then.
    if (lanes[__builtin_ctz(rest)]->mask != first.mask) return false;
  }
  for (uint32_t rest = needed; rest != 0; rest &= rest - 1) {
    const int m = __builtin_ctz(rest);
    Thread& t = *lanes[m];
    if (t.op != first.op) {
      Fault(absl::StrFormat("warp %d: lanes %d and %d meet in different warp operations (%s, %s)",
                            w, l, m, WarpOpName(first.op), WarpOpName(t.op)));
    }
    if (!ValidWidth(t.width)) {
      Fault(absl::StrFormat("%s: %s width %d is not a power of two <= 32", ThreadName(t),
                            WarpOpName(t.op), t.width));
    }
    const int source = SourceLane(t.op, warp.arg[m], t.width, m);
    if ((needed >> source & 1) == 0) {
      Fault(absl::StrFormat(
          "%s: %s (mask 0x%08x) reads lane %d, which %s: the value is undefined", ThreadName(t),
          WarpOpName(t.op), t.mask, source,
          (warp.live >> source & 1) == 0 ? "has exited or does not exist" : "is not in the mask"));
    }
    warp.result[m] = warp.value[source];
  }
  for (uint32_t rest = needed; rest != 0; rest &= rest - 1) {
    lanes[__builtin_ctz(rest)]->state = State::kRunnable;
  }
  warp.waiting &= ~needed;
  warp.runnable |= needed;
  // Lanes still waiting are in other operations: the general path completes theirs.
  if (warp.waiting != 0) warp.uniform = false;
  ++warp.generation;
  return true;
}

// After a lane of warp `w` exited: completes what waited only for it.
void TryCompleteWarp(int w) {
  const Warp& warp = g_launch->warps[w];
  for (int l = 0; l < 32 && warp.waiting != 0; ++l) {
    if ((warp.waiting >> l & 1) != 0) TryCompleteWarpOp(w, l);
  }
}

// Where every thread of a deadlocked block waits.
std::string DeadlockReport(const Launch& launch) {
  std::string report = absl::StrFormat("deadlock: %d of %d live threads wait at __syncthreads",
                                       launch.at_barrier, launch.live);
  std::vector<const Thread*> missing;
  for (const Thread* t : launch.threads) {
    if (t->state == State::kAtWarpOp ||
        (launch.at_barrier > 0 && t->state != State::kAtBarrier && t->state != State::kExited)) {
      missing.push_back(t);
    }
  }
  int shown = 0;
  for (const Thread* t : missing) {
    if (++shown > 8) {
      absl::StrAppend(&report, "; ... ", missing.size() - 8, " more");
      break;
    }
    if (t->state == State::kAtWarpOp) {
      const Warp& warp = launch.warps[t->linear / 32];
      absl::StrAppendFormat(
          &report, "; %s waits in %s (mask 0x%08x) for lanes 0x%08x that never came",
          ThreadName(*t), WarpOpName(t->op), t->mask, t->mask & warp.live & ~warp.waiting);
    } else {
      absl::StrAppendFormat(&report, "; %s never reaches the barrier", ThreadName(*t));
    }
  }
  return report;
}

// Every fiber starts here: runs the kernel for the thread the executor switched to, then exits.
// A fiber runs one thread of one block per turn of its loop: after its exit it parks, and the
// next block (of this launch or a later one on the same OS thread) continues it from there, which
// saves restarting every fiber of every block (a third of a thread's start).
void FiberMain() {
  while (true) {
    Launch& launch = *g_launch;
    Thread& self = *launch.current;
    self.parked = false;
    t_builtins = &self.builtins;
    HappensAfter(&launch.start_sync);
    (*launch.body)();
    // Exit: leave the barrier and the warp, which may complete what waits for this thread.
    Launch& after = *g_launch;
    self.state = State::kExited;
    --after.live;
    Warp& warp = after.warps[self.linear / 32];
    warp.live &= ~(1u << (self.linear % 32));
    warp.runnable &= ~(1u << (self.linear % 32));
    if (after.at_barrier > 0 && after.at_barrier == after.live) ReleaseBarrier();
    TryCompleteWarp(self.linear / 32);
    self.parked = true;
    SwitchAway(self);
  }
}

// Runs one block; false after a fault (launch.fault says which).
bool RunBlock(Launch& launch, uint3 block_idx, bool reverse) {
  const LaunchConfig& config = *launch.config;
  const int n = static_cast<int>(config.block.x * config.block.y * config.block.z);
  launch.reverse = reverse;
  launch.live = n;
  launch.at_barrier = 0;
  for (Warp& warp : launch.warps) {
    warp.live = warp.waiting = warp.runnable = 0;
    warp.uniform = false;
    warp.generation = 0;
  }
  for (int i = 0; i < n; ++i) {
    Thread& t = *launch.threads[i];
    if (!t.parked) t.context.Restart();
    t.state = State::kRunnable;
    t.builtins.block_idx = block_idx;  // the rest is the launch's (RunKernel)
    launch.warps[i / 32].live |= 1u << (i % 32);
    launch.warps[i / 32].runnable |= 1u << (i % 32);
  }
  if (!launch.dynamic_shared.empty()) {
    std::memset(launch.dynamic_shared.data(), 0xff, launch.dynamic_shared.size());
  }
  HappensBefore(&launch.start_sync);
  const int first_warp = reverse ? static_cast<int>(launch.warps.size()) - 1 : 0;
  // The threads switch among themselves and come back here when none can run.
  while (Thread* t = FirstRunnableFrom(launch, first_warp)) {
    launch.current = t;
    t_builtins = &t->builtins;
    Context::Switch(launch.host, t->context);
    launch.current = nullptr;
    HappensAfter(&launch.exit_sync);
    if (launch.failed) return false;
  }
  if (launch.live > 0) {
    launch.current = launch.threads.front();
    launch.failed = true;
    launch.fault = absl::StrCat(BlockName(launch), ": ", DeadlockReport(launch));
    return false;
  }
  return true;
}

std::string CheckConfig(const LaunchConfig& c) {
  const uint64_t threads = uint64_t{c.block.x} * c.block.y * c.block.z;
  if (threads == 0 || threads > kMaxThreadsPerBlock || c.block.z > 64) {
    return absl::StrFormat("block (%u,%u,%u): %d threads at most, block.z <= 64", c.block.x,
                           c.block.y, c.block.z, kMaxThreadsPerBlock);
  }
  if (c.grid.x == 0 || c.grid.y == 0 || c.grid.z == 0 || c.grid.x > 0x7fffffffu ||
      c.grid.y > 65535 || c.grid.z > 65535) {
    return absl::StrFormat("grid (%u,%u,%u) is empty or past the device's limits", c.grid.x,
                           c.grid.y, c.grid.z);
  }
  size_t allowed = kDefaultSharedBytes;
  {
    std::lock_guard<std::mutex> lock(g_state_mutex);
    if (g_max_dynamic_shared != nullptr) {
      auto it = g_max_dynamic_shared->find(c.kernel);
      if (it != g_max_dynamic_shared->end()) allowed = it->second;
    }
  }
  if (c.shared_bytes > allowed) {
    return absl::StrFormat(
        "%zu bytes of dynamic shared memory asked, %zu allowed (48 KiB unless "
        "cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize) raised it)",
        c.shared_bytes, allowed);
  }
  return "";
}

}  // namespace

void RunKernel(const LaunchConfig& config, absl::FunctionRef<void()> thread_body) {
  const std::string bad = CheckConfig(config);
  if (!bad.empty()) {
    Report(&g_launch_error, cudaErrorInvalidConfiguration,
           absl::StrCat("kernel ", config.kernel_name, ": invalid launch: ", bad));
    return;
  }
  std::lock_guard<std::mutex> lock(g_launch_mutex);
  if (g_pool == nullptr) g_pool = new std::vector<std::unique_ptr<Thread>>();
  const int n = static_cast<int>(config.block.x * config.block.y * config.block.z);
  while (static_cast<int>(g_pool->size()) < n) {
    g_pool->push_back(std::make_unique<Thread>(static_cast<int>(g_pool->size())));
  }
  Launch launch;
  launch.config = &config;
  launch.body = &thread_body;
  // A parked fiber continues on the OS thread it parked on only: code compiled for one thread may
  // keep the address of a thread_local (t_builtins) across the switch it parked in.
  static thread_local const void* pool_owner = nullptr;
  if (g_pool_thread != &pool_owner) {
    for (auto& t : *g_pool) t->parked = false;
    g_pool_thread = &pool_owner;
  }
  for (int i = 0; i < n; ++i) {
    Thread& t = *(*g_pool)[i];
    t.linear = i;
    t.builtins = {
        .thread_idx = {unsigned(i) % config.block.x, unsigned(i) / config.block.x % config.block.y,
                       unsigned(i) / (config.block.x * config.block.y)},
        .block_idx = {0, 0, 0},
        .block_dim = config.block,
        .grid_dim = config.grid};
    launch.threads.push_back(&t);
  }
  launch.warps.resize((n + 31) / 32);
  launch.dynamic_shared.resize(config.shared_bytes);
  g_launch = &launch;
  const ThreadBuiltins* saved = t_builtins;
  uint64_t linear_block = 0;
  for (unsigned z = 0; z < config.grid.z && !launch.failed; ++z) {
    for (unsigned y = 0; y < config.grid.y && !launch.failed; ++y) {
      for (unsigned x = 0; x < config.grid.x && !launch.failed; ++x) {
        RunBlock(launch, {x, y, z}, (linear_block++ & 1) != 0);
      }
    }
  }
  t_builtins = saved;
  g_launch = nullptr;
  if (launch.failed) Report(&g_fault, cudaErrorLaunchFailure, launch.fault);
}

void SyncThreads() {
  Launch& launch = *g_launch;
  Thread& self = *launch.current;
  HappensBefore(&launch.barrier_sync[launch.barrier_generation % 2]);
  self.barrier_generation = launch.barrier_generation;
  self.state = State::kAtBarrier;
  launch.warps[self.linear / 32].runnable &= ~(1u << (self.linear % 32));
  if (++launch.at_barrier == launch.live) {
    ReleaseBarrier();  // the last to arrive goes on
  } else {
    SwitchAway(self);
  }
  HappensAfter(&launch.barrier_sync[self.barrier_generation % 2]);
}

uint64_t WarpExchange(WarpOp op, unsigned mask, uint64_t value, int arg, int width) {
  Launch& launch = *g_launch;
  Thread& self = *launch.current;
  const int w = self.linear / 32, lane = self.linear % 32;
  if ((mask >> lane & 1) == 0) {
    Fault(absl::StrFormat("%s calls %s with mask 0x%08x, which leaves it out", ThreadName(self),
                          WarpOpName(op), mask));
  }
  Warp& warp = launch.warps[w];
  // Only __syncwarp orders memory between lanes; a shuffle moves its value and nothing else (as
  // in CUDA's memory model), so TSan still sees a shared-memory race hidden behind one.
  const bool orders = op == WarpOp::kSync;
  if (orders) HappensBefore(&warp.sync[warp.generation % 2]);
  self.op_generation = warp.generation;
  self.op = op;
  self.mask = mask;
  self.width = width;
  self.state = State::kAtWarpOp;
  warp.value[lane] = value;
  warp.arg[lane] = arg;
  if (warp.waiting == 0) {
    warp.uniform = true;
    warp.op = op;
    warp.mask = mask;
    warp.width = width;
  } else if (op != warp.op || mask != warp.mask || width != warp.width) {
    warp.uniform = false;
  }
  warp.waiting |= 1u << lane;
  warp.runnable &= ~(1u << lane);
  // Only the last lane of the mask to come completes the operation; the others just wait.
  if ((mask & warp.live & ~warp.waiting) != 0) {
    SwitchAway(self);
  } else if (warp.uniform && warp.waiting == ~0u && mask == ~0u && ValidWidth(width)) {
    CompleteFullWarpOp(warp, launch.threads.data() + w * 32);
  } else if (!TryCompleteWarpOp(w, lane)) {
    SwitchAway(self);
  }
  if (orders) HappensAfter(&warp.sync[self.op_generation % 2]);
  return op == WarpOp::kSync ? value : warp.result[lane];
}

void* DynamicShared() {
  return g_launch->dynamic_shared.empty() ? nullptr : g_launch->dynamic_shared.data();
}

cudaError_t TakeLaunchError() {
  std::lock_guard<std::mutex> lock(g_state_mutex);
  const cudaError_t error = g_launch_error;
  g_launch_error = cudaSuccess;
  return error;
}

cudaError_t TakeFault() {
  std::lock_guard<std::mutex> lock(g_state_mutex);
  const cudaError_t error = g_fault;
  g_fault = cudaSuccess;
  return error;
}

std::string LastDiagnostic() {
  std::lock_guard<std::mutex> lock(g_state_mutex);
  return g_diagnostic;
}

void SetMaxDynamicShared(const void* kernel, size_t bytes) {
  std::lock_guard<std::mutex> lock(g_state_mutex);
  if (g_max_dynamic_shared == nullptr) {
    g_max_dynamic_shared = new std::unordered_map<const void*, size_t>();
  }
  (*g_max_dynamic_shared)[kernel] = bytes;
}

}  // namespace llmserve::cuda_emu
