// Execution contexts with their own stacks (fibers) for the CUDA emulator: every CUDA thread of a
// block is one fiber, all on the OS thread that launched the kernel, switched only at barriers,
// warp operations and exit. Fibers rather than OS threads because a block's threads meet at a
// barrier or a shuffle every few instructions: on two cores 128 OS threads took tens of
// microseconds per meeting (the kernel tests would run for hours), a fiber switch takes
// nanoseconds.
//
// ThreadSanitizer and AddressSanitizer are told about every switch: TSan sees each fiber as a
// thread of its own and gets no ordering from a switch (the emulator's barriers say what is
// ordered, so a missing __syncthreads is a reported race); ASan learns the stack in use.
//
// Not thread-safe: a fiber runs on, and switches from, one OS thread at a time.

#ifndef LLMSERVE_TESTS_CUDA_EMU_FIBER_H_
#define LLMSERVE_TESTS_CUDA_EMU_FIBER_H_

#include <cstddef>

namespace llmserve::cuda_emu {

// A saved execution context: a fiber's, or the OS thread's own (default-constructed).
class Context {
 public:
  Context() = default;
  // A context that starts at entry() on a fresh stack of `stack_bytes`, its first frame
  // `top_offset` bytes below the top; entry must never return (it switches away for the last
  // time instead). Fibers that switch among each other want different offsets: stacks are
  // mmapped at page-aligned, equally spaced addresses, so equal offsets put every fiber's hot
  // frames into the same cache sets, and the first pops after a switch missed the caches
  // (two-thirds of the switch's time before the offsets).
  Context(size_t stack_bytes, void (*entry)(), size_t top_offset = 0);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // Makes the next switch to this context start entry() from the top of its stack again; what
  // its previous run left on the stack is abandoned (no destructors run).
  void Restart();

  // Saves the running context into `from` and continues `to`. `from_finished`: `from` will never
  // be continued (lets ASan release its bookkeeping).
  static void Switch(Context& from, Context& to, bool from_finished = false);

 private:
  // The first function a fresh context runs (through fiber.cc's trampoline).
  static void Start(Context* self);
  // The sanitizer bookkeeping once running again (`self` null: a fiber's first start).
  static void FinishSwitch(Context* self);

  void* sp_ = nullptr;  // the saved stack pointer
  char* stack_ = nullptr;
  size_t stack_bytes_ = 0;
  size_t top_offset_ = 0;
  void (*entry_)() = nullptr;
  void* tsan_fiber_ = nullptr;
  // ASan: the fake stack of the context switched away from, and the stack of a thread context.
  [[maybe_unused]] void* asan_fake_stack_ = nullptr;
  [[maybe_unused]] const void* asan_bottom_ = nullptr;
  [[maybe_unused]] size_t asan_size_ = 0;
};

}  // namespace llmserve::cuda_emu

#endif  // LLMSERVE_TESTS_CUDA_EMU_FIBER_H_
