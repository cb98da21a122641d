// The global functions a chat template calls besides raise_exception and namespace (which the
// renderer handles): range(), dict() and transformers' strftime_now(). Errors carry no
// position: the renderer adds the one of the call.
//
// Thread-safety: pure functions.
#ifndef LLMSERVE_COMMON_CHAT_TEMPLATE_GLOBALS_H_
#define LLMSERVE_COMMON_CHAT_TEMPLATE_GLOBALS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/chat_template/builtins.h"
#include "common/chat_template/value.h"

namespace llmserve::common::globals {

// jinja2's sandbox refuses ranges longer than this (MAX_RANGE); so do we, with its message.
inline constexpr int64_t kMaxRange = 100'000;

// name(args, kwargs) for name in {range, dict, strftime_now}. range() returns a list (jinja2
// returns a range object, which prints as "range(0, 3)"; templates only iterate it).
// INVALID_ARGUMENT for a wrong arity or type, OUT_OF_RANGE for a range over kMaxRange items.
absl::StatusOr<Value> CallGlobal(const std::string& name, const std::vector<Value>& args,
                                 const builtins::Kwargs& kwargs, absl::Time now);

// Python's datetime.strftime(format) for `now` as a naive UTC datetime (what transformers'
// strftime_now gives on a UTC machine): %a %A %b %B %d %m %Y %y %H %I %M %S %p %j %e %u %w %%,
// the C locale's %c %x %X and %D %T %R %F, the
// glibc no-padding forms %-d %-m %-H %-I %-M %-S %-j, %Z and %z (empty for a naive datetime);
// other directives are copied as they are.
std::string Strftime(const std::string& format, absl::Time now);

}  // namespace llmserve::common::globals

#endif  // LLMSERVE_COMMON_CHAT_TEMPLATE_GLOBALS_H_
