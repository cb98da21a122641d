// Executes a parsed chat template with jinja2's semantics: Python truthiness and operators,
// jinja2's default Undefined (prints as "", fails on arithmetic, attribute access and calls),
// a fresh scope per loop iteration (so `set` in a loop does not leak out; namespace() objects
// carry state across iterations), the `loop` variable, and macros (called with jinja2's
// argument binding, each call with its own scope; recursion bounded).
//
// Every render is bounded: evaluation steps, output size, the size of the strings and lists it
// builds, and how deeply values nest, so no template or input can hang or exhaust memory.
//
// Thread-safety: RenderTemplate only reads the tree; concurrent renders of one tree are safe.
#ifndef LLMSERVE_COMMON_CHAT_TEMPLATE_RENDERER_H_
#define LLMSERVE_COMMON_CHAT_TEMPLATE_RENDERER_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/chat_template/ast.h"
#include "common/chat_template/value.h"

namespace llmserve::common {

struct RenderLimits {
  // The rendered prompt, and any one string built on the way, may not exceed this.
  size_t max_output_bytes = 4 << 20;
  // Statements, expressions and loop iterations evaluated.
  int64_t max_steps = 10'000'000;
  // Bytes of strings and list items built in total (concatenation in a loop is quadratic).
  int64_t max_allocated_bytes = 256 << 20;
};

// Renders `body` with the variables in `globals` plus the global functions raise_exception,
// namespace, range, dict and strftime_now (which formats `now`, in UTC).
// INVALID_ARGUMENT "chat template: line L, column C: ..." for raise_exception and for
// operations Jinja refuses; OUT_OF_RANGE when a limit is exceeded.
absl::StatusOr<std::string> RenderTemplate(const ast::Body& body, const ValueDict& globals,
                                           const RenderLimits& limits, absl::Time now);

}  // namespace llmserve::common

#endif  // LLMSERVE_COMMON_CHAT_TEMPLATE_RENDERER_H_
