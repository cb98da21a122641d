// The filters, tests and methods a chat template may call (filters and tests in builtins.cc,
// str/dict methods and formatting in methods.cc), with Python's and
// jinja2's semantics. Errors carry no position: the renderer adds the one of the call.
//
// Thread-safety: pure functions.
#ifndef LLMSERVE_COMMON_CHAT_TEMPLATE_BUILTINS_H_
#define LLMSERVE_COMMON_CHAT_TEMPLATE_BUILTINS_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/chat_template/value.h"

namespace llmserve::common::builtins {

using Kwargs = std::vector<std::pair<std::string, Value>>;

// Whether `name` is a filter / test this renderer implements (checked at parse time).
bool IsFilter(const std::string& name);
bool IsTest(const std::string& name);

// value | name(args, kwargs). INVALID_ARGUMENT for a wrong type or arity.
absl::StatusOr<Value> ApplyFilter(const std::string& name, const Value& value,
                                  const std::vector<Value>& args, const Kwargs& kwargs);

// value is name(args).
absl::StatusOr<bool> ApplyTest(const std::string& name, const Value& value,
                               const std::vector<Value>& args);

// Python's `format % args` (args a tuple for several values, a dict for %(name)s): the
// directives s r d i f F x X o c and %, with flags -, 0, +, space, a width and a precision.
absl::StatusOr<Value> PercentFormat(const std::string& format, const Value& args);

// Whether `object.name(...)` is a method this renderer implements for the object's type
// (str.strip, dict.items, ...).
bool HasMethod(const Value& object, const std::string& name);

// object.name(args, kwargs), for HasMethod(object, name).
absl::StatusOr<Value> CallMethod(const Value& object, const std::string& name,
                                 const std::vector<Value>& args, const Kwargs& kwargs);

}  // namespace llmserve::common::builtins

#endif  // LLMSERVE_COMMON_CHAT_TEMPLATE_BUILTINS_H_
