#include "tests/cuda_emu/fiber.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LLMSERVE_EMU_ASAN 1
#endif
#endif
// ThreadSanitizer builds compile this file uninstrumented (its bookkeeping is shared by all the
// fibers of a block, which TSan would report) and define LLMSERVE_EMU_TSAN for the annotations.
#if defined(__SANITIZE_ADDRESS__)
#define LLMSERVE_EMU_ASAN 1
#endif

#if LLMSERVE_EMU_TSAN
#include <sanitizer/tsan_interface.h>
#endif
#if LLMSERVE_EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#if !defined(__x86_64__)
#error "the CUDA emulator's fiber switch is written for x86-64 (tests/cuda_emu/fiber.cc)"
#endif

// Saves the callee-saved registers on the running stack, stores its stack pointer in *save_sp,
// loads `to_sp` and restores the registers saved there (System V x86-64: rbx, rbp, r12-r15; the
// SSE and x87 control words are shared by all fibers and never changed).
extern "C" void llmserve_cuda_emu_switch(void** save_sp, void* to_sp);
asm(R"(
  .text
  .globl llmserve_cuda_emu_switch
  .type llmserve_cuda_emu_switch, @function
llmserve_cuda_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size llmserve_cuda_emu_switch, .-llmserve_cuda_emu_switch
)");

// Where a fresh context's first switch returns to: calls *r12 (Context::Start) with rbx (the
// context) as its argument, both restored from the frame Restart wrote; a jump, so that Start
// begins with the stack pointer at 8 mod 16 and a null return address, as after a call.
extern "C" void llmserve_cuda_emu_trampoline();
asm(R"(
  .text
  .globl llmserve_cuda_emu_trampoline
  .type llmserve_cuda_emu_trampoline, @function
llmserve_cuda_emu_trampoline:
  movq %rbx, %rdi
  jmp *%r12
  .size llmserve_cuda_emu_trampoline, .-llmserve_cuda_emu_trampoline
)");

namespace llmserve::cuda_emu {

Context::Context(size_t stack_bytes, void (*entry)(), size_t top_offset)
    : stack_bytes_(stack_bytes), top_offset_(top_offset), entry_(entry) {
  if (top_offset >= stack_bytes / 2) {
    std::fprintf(stderr, "cuda_emu: stack offset %zu of a %zu-byte stack\n", top_offset,
                 stack_bytes);
    std::abort();
  }
  void* stack = mmap(nullptr, stack_bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (stack == MAP_FAILED) {
    std::fprintf(stderr, "cuda_emu: mmap of a %zu-byte fiber stack failed\n", stack_bytes);
    std::abort();
  }
  stack_ = static_cast<char*>(stack);
#if LLMSERVE_EMU_TSAN
  tsan_fiber_ = __tsan_create_fiber(0);
#endif
  Restart();
}

Context::~Context() {
#if LLMSERVE_EMU_TSAN
  // A thread's own context holds the thread's TSan fiber, which is not ours to destroy.
  if (tsan_fiber_ != nullptr && stack_ != nullptr) __tsan_destroy_fiber(tsan_fiber_);
#endif
  if (stack_ != nullptr) munmap(stack_, stack_bytes_);
}

void Context::Restart() {
#if LLMSERVE_EMU_ASAN
  // An abandoned run may have left poisoned redzones of its frames behind.
  __asan_unpoison_memory_region(stack_, stack_bytes_);
#endif
  // The frame llmserve_cuda_emu_switch pops: six registers (r12 = Start, rbx = this for the
  // trampoline), then the trampoline as the return address, then a null fake return address of
  // Start itself.
  auto* top = reinterpret_cast<uintptr_t*>(
      (reinterpret_cast<uintptr_t>(stack_ + stack_bytes_ - top_offset_) & ~uintptr_t{15}));
  top[-1] = 0;
  top[-2] = reinterpret_cast<uintptr_t>(&llmserve_cuda_emu_trampoline);
  for (int i = 3; i <= 8; ++i) top[-i] = 0;
  top[-4] = reinterpret_cast<uintptr_t>(this);                                              // rbx
  top[-5] = reinterpret_cast<uintptr_t>(static_cast<void (*)(Context*)>(&Context::Start));  // r12
  sp_ = top - 8;
}

#if LLMSERVE_EMU_ASAN
namespace {
// The context the switch in progress on this OS thread leaves (FinishSwitch needs it).
thread_local Context* t_switch_from = nullptr;
}  // namespace
#endif

void Context::Start(Context* self) {
  FinishSwitch(nullptr);
  self->entry_();
  std::fprintf(stderr, "cuda_emu: a fiber's entry returned\n");
  std::abort();
}

void Context::FinishSwitch(Context* self) {
#if LLMSERVE_EMU_ASAN
  const void* bottom = nullptr;
  size_t size = 0;
  __sanitizer_finish_switch_fiber(self != nullptr ? self->asan_fake_stack_ : nullptr, &bottom,
                                  &size);
  // Switching back to a thread's own context needs its stack, known only from here.
  if (t_switch_from != nullptr && t_switch_from->stack_ == nullptr) {
    t_switch_from->asan_bottom_ = bottom;
    t_switch_from->asan_size_ = size;
  }
#else
  (void)self;
#endif
}

void Context::Switch(Context& from, Context& to, bool from_finished) {
#if LLMSERVE_EMU_TSAN
  if (from.tsan_fiber_ == nullptr) from.tsan_fiber_ = __tsan_get_current_fiber();
  __tsan_switch_to_fiber(to.tsan_fiber_, __tsan_switch_to_fiber_no_sync);
#endif
#if LLMSERVE_EMU_ASAN
  const void* bottom = to.stack_ != nullptr ? static_cast<const void*>(to.stack_) : to.asan_bottom_;
  const size_t size = to.stack_ != nullptr ? to.stack_bytes_ : to.asan_size_;
  __sanitizer_start_switch_fiber(from_finished ? nullptr : &from.asan_fake_stack_, bottom, size);
  t_switch_from = &from;
#else
  (void)from_finished;
#endif
  llmserve_cuda_emu_switch(&from.sp_, to.sp_);
  FinishSwitch(&from);
}

}  // namespace llmserve::cuda_emu
