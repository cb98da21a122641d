// Helpers shared by the filters and tests (builtins.cc) and the methods (methods.cc): argument
// binding, iteration and attribute lookup with jinja2's rules. Internal to common/chat_template.
//
// Thread-safety: pure functions; an Args lives within one call.
#ifndef LLMSERVE_COMMON_CHAT_TEMPLATE_BUILTINS_UTIL_H_
#define LLMSERVE_COMMON_CHAT_TEMPLATE_BUILTINS_UTIL_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/chat_template/builtins.h"
#include "common/chat_template/value.h"

namespace llmserve::common::builtins::internal {

// The arguments of one call, bound to parameter names the way Python binds them.
class Args {
 public:
  Args(std::string what, const std::vector<Value>& args, const Kwargs& kwargs)
      : what_(std::move(what)), args_(args), kwargs_(kwargs) {}

  // Binds parameters in order; fails for too many positional or unknown keyword arguments.
  absl::Status Bind(const std::vector<std::string>& params) {
    if (args_.size() > params.size()) {
      return absl::InvalidArgumentError(absl::StrCat(what_, " takes at most ", params.size(),
                                                     " arguments (", args_.size(), " given)"));
    }
    bound_.assign(params.size(), nullptr);
    for (size_t i = 0; i < args_.size(); ++i) bound_[i] = &args_[i];
    for (const auto& [key, value] : kwargs_) {
      const auto it = std::find(params.begin(), params.end(), key);
      if (it == params.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat(what_, " got an unexpected keyword argument '", key, "'"));
      }
      bound_[static_cast<size_t>(it - params.begin())] = &value;
    }
    return absl::OkStatus();
  }

  // The i-th parameter, or null when not given (None counts as not given).
  const Value* Get(size_t i) const {
    return i < bound_.size() && bound_[i] != nullptr && !bound_[i]->is_none() ? bound_[i] : nullptr;
  }
  const Value* GetRaw(size_t i) const { return i < bound_.size() ? bound_[i] : nullptr; }

  absl::StatusOr<const Value*> Required(size_t i, const char* name) const {
    if (GetRaw(i) == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(what_, " missing required argument '", name, "'"));
    }
    return GetRaw(i);
  }

  absl::StatusOr<const std::string*> OptString(size_t i, const char* name) const {
    const Value* v = Get(i);
    if (v == nullptr) return nullptr;
    if (!v->is_string()) return TypeError(name, "a string", *v);
    return &v->as_string();
  }

  absl::StatusOr<int64_t> OptInt(size_t i, const char* name, int64_t fallback) const {
    const Value* v = Get(i);
    if (v == nullptr) return fallback;
    if (!v->is_int() && !v->is_bool()) return TypeError(name, "an integer", *v);
    return v->is_int() ? v->as_int() : static_cast<int64_t>(v->as_bool());
  }

  absl::Status TypeError(const char* name, const char* expected, const Value& got) const {
    return absl::InvalidArgumentError(absl::StrCat(what_, ": argument '", name, "' must be ",
                                                   expected, ", not ", got.TypeName()));
  }

 private:
  std::string what_;
  const std::vector<Value>& args_;
  const Kwargs& kwargs_;
  std::vector<const Value*> bound_;
};

// "<what> is not supported for a value of type <type>".
absl::Status TypeError(const std::string& what, const Value& value);
// The error of using an Undefined value.
absl::Status UndefinedError(const Value& value);
// Python's iter(value) as a list: list items, dict keys, string code points; Undefined is empty.
absl::StatusOr<ValueList> Iterate(const Value& value, const std::string& what);
// Jinja's environment.getattr/getitem for select/map's `attribute`: dict key, else Undefined.
Value GetAttribute(const Value& value, const std::string& name);
// attribute="a.b" or "0" as jinja2's make_attrgetter resolves it (dict keys, list indexes).
Value GetAttributePath(const Value& value, const std::string& path);
// Python's ordering of two values as sort() sees them (numbers with numbers, strings with
// strings, sequences item by item); strings compare case-insensitively unless case_sensitive,
// as jinja2's sort/dictsort/unique/min/max do by default.
absl::StatusOr<int> Order(const Value& a, const Value& b, bool case_sensitive);
// str.splitlines() (the line boundaries Python knows, not only \n).
std::vector<std::string> SplitLines(const std::string& s);

}  // namespace llmserve::common::builtins::internal

#endif  // LLMSERVE_COMMON_CHAT_TEMPLATE_BUILTINS_UTIL_H_
