#include "common/chat_template/builtins.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/chat_template/py_string.h"
#include "common/status/status_macros.h"

namespace llmserve::common::builtins {
namespace {

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

absl::Status TypeError(const std::string& what, const Value& value) {
  return absl::InvalidArgumentError(
      absl::StrCat(what, " is not supported for a value of type ", value.TypeName()));
}

absl::Status UndefinedError(const Value& value) {
  return absl::InvalidArgumentError(value.undefined_hint().empty() ? "value is undefined"
                                                                   : value.undefined_hint());
}

// Python's iter(value) as a list: list items, dict keys, string code points; Undefined is empty.
absl::StatusOr<ValueList> Iterate(const Value& value, const std::string& what) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return ValueList{};
    case Value::Kind::kList:
      return value.as_list();
    case Value::Kind::kDict: {
      ValueList keys;
      for (const auto& item : value.as_dict().items()) keys.push_back(Value::String(item.first));
      return keys;
    }
    case Value::Kind::kString: {
      ValueList chars;
      for (std::string_view cp : py_string::CodePoints(value.as_string())) {
        chars.push_back(Value::String(std::string(cp)));
      }
      return chars;
    }
    default:
      return TypeError(what, value);
  }
}

// Jinja's environment.getattr/getitem for select/map's `attribute`: dict key, else Undefined.
Value GetAttribute(const Value& value, const std::string& name) {
  if (value.is_dict()) {
    if (const Value* found = value.as_dict().Find(name)) return *found;
  }
  return Value::MakeUndefined(
      absl::StrCat("'", value.TypeName(), " object' has no attribute '", name, "'"));
}

absl::StatusOr<Value> Length(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return Value::Int(0);
    case Value::Kind::kString:
      return Value::Int(static_cast<int64_t>(py_string::Length(value.as_string())));
    case Value::Kind::kList:
      return Value::Int(static_cast<int64_t>(value.as_list().size()));
    case Value::Kind::kDict:
      return Value::Int(static_cast<int64_t>(value.as_dict().items().size()));
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("object of type '", value.TypeName(), "' has no len()"));
  }
}

absl::StatusOr<Value> Join(const Value& value, const std::vector<Value>& args,
                           const Kwargs& kwargs) {
  Args a("join", args, kwargs);
  LLMSERVE_RETURN_IF_ERROR(a.Bind({"d", "attribute"}));
  absl::StatusOr<const std::string*> sep = a.OptString(0, "d");
  if (!sep.ok()) return sep.status();
  absl::StatusOr<const std::string*> attribute = a.OptString(1, "attribute");
  if (!attribute.ok()) return attribute.status();
  absl::StatusOr<ValueList> items = Iterate(value, "join");
  if (!items.ok()) return items.status();
  std::vector<std::string> parts;
  for (const Value& item : *items) {
    parts.push_back(ToPythonStr(*attribute == nullptr ? item : GetAttribute(item, **attribute)));
  }
  return Value::String(absl::StrJoin(parts, *sep == nullptr ? "" : **sep));
}

absl::StatusOr<Value> ToJsonFilter(const Value& value, const std::vector<Value>& args,
                                   const Kwargs& kwargs) {
  // transformers' tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
  Args a("tojson", args, kwargs);
  LLMSERVE_RETURN_IF_ERROR(a.Bind({"ensure_ascii", "indent", "separators", "sort_keys"}));
  if (a.Get(0) != nullptr && a.Get(0)->Truthy()) {
    return absl::InvalidArgumentError("tojson: ensure_ascii=True is not supported");
  }
  if (a.Get(2) != nullptr || (a.Get(3) != nullptr && a.Get(3)->Truthy())) {
    return absl::InvalidArgumentError("tojson: separators and sort_keys are not supported");
  }
  absl::StatusOr<int64_t> indent = a.OptInt(1, "indent", -1);
  if (!indent.ok()) return indent.status();
  if (*indent > 64) return absl::InvalidArgumentError("tojson: indent too large");
  absl::StatusOr<std::string> json = ToJson(value, static_cast<int>(*indent));
  if (!json.ok()) return json.status();
  return Value::String(*std::move(json));
}

// select/reject/selectattr/rejectattr: keep the items whose test (default: truthiness) passes.
absl::StatusOr<Value> Select(const std::string& name, const Value& value,
                             const std::vector<Value>& args, const Kwargs& kwargs) {
  if (!kwargs.empty()) return absl::InvalidArgumentError(name + " takes no keyword arguments");
  const bool by_attr = name == "selectattr" || name == "rejectattr";
  const bool keep_if = name == "select" || name == "selectattr";
  size_t next = 0;
  std::string attribute;
  if (by_attr) {
    if (args.empty() || !args[0].is_string()) {
      return absl::InvalidArgumentError(name + " needs an attribute name");
    }
    attribute = args[0].as_string();
    next = 1;
  }
  std::string test;
  if (next < args.size()) {
    if (!args[next].is_string() || !IsTest(args[next].as_string())) {
      return absl::InvalidArgumentError(name + ": unsupported test");
    }
    test = args[next].as_string();
    ++next;
  }
  const std::vector<Value> test_args(args.begin() + static_cast<ptrdiff_t>(next), args.end());
  absl::StatusOr<ValueList> items = Iterate(value, name);
  if (!items.ok()) return items.status();
  ValueList kept;
  for (const Value& item : *items) {
    const Value subject = by_attr ? GetAttribute(item, attribute) : item;
    bool pass = subject.Truthy();
    if (!test.empty()) {
      absl::StatusOr<bool> result = ApplyTest(test, subject, test_args);
      if (!result.ok()) return result.status();
      pass = *result;
    }
    if (pass == keep_if) kept.push_back(item);
  }
  return Value::List(std::move(kept));
}

absl::StatusOr<Value> Map(const Value& value, const std::vector<Value>& args,
                          const Kwargs& kwargs) {
  if (!args.empty() || kwargs.size() != 1 || kwargs[0].first != "attribute" ||
      !kwargs[0].second.is_string()) {
    return absl::InvalidArgumentError("map: only map(attribute='name') is supported");
  }
  absl::StatusOr<ValueList> items = Iterate(value, "map");
  if (!items.ok()) return items.status();
  ValueList out;
  for (const Value& item : *items) out.push_back(GetAttribute(item, kwargs[0].second.as_string()));
  return Value::List(std::move(out));
}

absl::StatusOr<Value> IntFilter(const Value& value, const std::vector<Value>& args,
                                const Kwargs& kwargs) {
  Args a("int", args, kwargs);
  LLMSERVE_RETURN_IF_ERROR(a.Bind({"default"}));
  absl::StatusOr<int64_t> fallback = a.OptInt(0, "default", 0);
  if (!fallback.ok()) return fallback.status();
  if (value.is_int()) return value;
  if (value.is_bool()) return Value::Int(value.as_bool());
  int64_t parsed;
  if (value.is_string() &&
      absl::SimpleAtoi(py_string::Strip(value.as_string(), nullptr, true, true), &parsed)) {
    return Value::Int(parsed);
  }
  return Value::Int(*fallback);
}

absl::StatusOr<Value> Reverse(const Value& value) {
  if (value.is_string()) {
    std::vector<std::string_view> cps = py_string::CodePoints(value.as_string());
    std::string out;
    for (auto it = cps.rbegin(); it != cps.rend(); ++it) out.append(*it);
    return Value::String(std::move(out));
  }
  absl::StatusOr<ValueList> items = Iterate(value, "reverse");
  if (!items.ok()) return items.status();
  std::reverse(items->begin(), items->end());
  return Value::List(*std::move(items));
}

absl::StatusOr<Value> FirstOrLast(const Value& value, bool first) {
  absl::StatusOr<ValueList> items = Iterate(value, first ? "first" : "last");
  if (!items.ok()) return items.status();
  if (items->empty()) return Value::MakeUndefined("No first item, sequence was empty.");
  return first ? items->front() : items->back();
}

absl::StatusOr<Value> StringMethod(const std::string& s, const std::string& name,
                                   const std::vector<Value>& args, const Kwargs& kwargs) {
  Args a("str." + name, args, kwargs);
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    if (absl::Status st = a.Bind({"chars"}); !st.ok()) return st;
    absl::StatusOr<const std::string*> chars = a.OptString(0, "chars");
    if (!chars.ok()) return chars.status();
    return Value::String(py_string::Strip(s, *chars, name != "rstrip", name != "lstrip"));
  }
  if (name == "upper" || name == "lower" || name == "capitalize" || name == "title") {
    if (absl::Status st = a.Bind({}); !st.ok()) return st;
    if (name == "upper") return Value::String(py_string::Upper(s));
    if (name == "lower") return Value::String(py_string::Lower(s));
    if (name == "capitalize") return Value::String(py_string::Capitalize(s));
    return Value::String(py_string::Title(s));
  }
  if (name == "startswith" || name == "endswith") {
    if (absl::Status st = a.Bind({"prefix"}); !st.ok()) return st;
    absl::StatusOr<const Value*> arg = a.Required(0, "prefix");
    if (!arg.ok()) return arg.status();
    // A tuple of candidates is a list here.
    const ValueList candidates = (*arg)->is_list() ? (*arg)->as_list() : ValueList{**arg};
    for (const Value& c : candidates) {
      if (!c.is_string()) return a.TypeError("prefix", "a string", c);
      const std::string& x = c.as_string();
      const bool hit = x.size() <= s.size() &&
                       (name == "startswith" ? s.compare(0, x.size(), x) == 0
                                             : s.compare(s.size() - x.size(), x.size(), x) == 0);
      if (hit) return Value::Bool(true);
    }
    return Value::Bool(false);
  }
  if (name == "split") {
    if (absl::Status st = a.Bind({"sep", "maxsplit"}); !st.ok()) return st;
    absl::StatusOr<const std::string*> sep = a.OptString(0, "sep");
    if (!sep.ok()) return sep.status();
    if (*sep != nullptr && (*sep)->empty()) return absl::InvalidArgumentError("empty separator");
    absl::StatusOr<int64_t> maxsplit = a.OptInt(1, "maxsplit", -1);
    if (!maxsplit.ok()) return maxsplit.status();
    ValueList parts;
    for (std::string& part : py_string::Split(s, *sep, *maxsplit)) {
      parts.push_back(Value::String(std::move(part)));
    }
    return Value::List(std::move(parts));
  }
  if (name == "replace") {
    if (absl::Status st = a.Bind({"old", "new", "count"}); !st.ok()) return st;
    absl::StatusOr<const std::string*> from = a.OptString(0, "old");
    absl::StatusOr<const std::string*> to = a.OptString(1, "new");
    if (!from.ok()) return from.status();
    if (!to.ok()) return to.status();
    if (*from == nullptr || *to == nullptr) {
      return absl::InvalidArgumentError("str.replace needs 'old' and 'new'");
    }
    absl::StatusOr<int64_t> count = a.OptInt(2, "count", -1);
    if (!count.ok()) return count.status();
    return Value::String(py_string::Replace(s, **from, **to, *count));
  }
  if (name == "join") {
    if (absl::Status st = a.Bind({"iterable"}); !st.ok()) return st;
    absl::StatusOr<const Value*> arg = a.Required(0, "iterable");
    if (!arg.ok()) return arg.status();
    absl::StatusOr<ValueList> items = Iterate(**arg, "str.join");
    if (!items.ok()) return items.status();
    std::vector<std::string> parts;
    for (const Value& item : *items) {
      if (!item.is_string()) return a.TypeError("iterable", "strings", item);
      parts.push_back(item.as_string());
    }
    return Value::String(absl::StrJoin(parts, s));
  }
  return absl::InvalidArgumentError(absl::StrCat("'str' object has no attribute '", name, "'"));
}

absl::StatusOr<Value> DictMethod(const ValueDict& dict, const std::string& name,
                                 const std::vector<Value>& args, const Kwargs& kwargs) {
  Args a("dict." + name, args, kwargs);
  if (name == "get") {
    if (absl::Status st = a.Bind({"key", "default"}); !st.ok()) return st;
    absl::StatusOr<const Value*> key = a.Required(0, "key");
    if (!key.ok()) return key.status();
    if ((*key)->is_string()) {
      if (const Value* found = dict.Find((*key)->as_string())) return *found;
    }
    return a.GetRaw(1) != nullptr ? *a.GetRaw(1) : Value::None();
  }
  if (absl::Status st = a.Bind({}); !st.ok()) return st;
  ValueList out;
  for (const auto& [k, v] : dict.items()) {
    if (name == "keys") {
      out.push_back(Value::String(k));
    } else if (name == "values") {
      out.push_back(v);
    } else {
      out.push_back(Value::Tuple({Value::String(k), v}));
    }
  }
  return Value::List(std::move(out));
}

}  // namespace

bool IsFilter(const std::string& name) {
  static const char* const kFilters[] = {
      "trim",   "length", "count",      "upper",      "lower", "capitalize", "title",
      "tojson", "join",   "default",    "d",          "first", "last",       "string",
      "int",    "list",   "replace",    "safe",       "items", "reverse",    "abs",
      "select", "reject", "selectattr", "rejectattr", "map"};
  return std::find(std::begin(kFilters), std::end(kFilters), name) != std::end(kFilters);
}

bool IsTest(const std::string& name) {
  static const char* const kTests[] = {
      "defined",     "undefined", "none",     "string", "number", "integer", "boolean",
      "mapping",     "iterable",  "sequence", "even",   "odd",    "true",    "false",
      "divisibleby", "equalto",   "eq",       "ne",     "in",     "lower",   "upper"};
  return std::find(std::begin(kTests), std::end(kTests), name) != std::end(kTests);
}

absl::StatusOr<Value> ApplyFilter(const std::string& name, const Value& value,
                                  const std::vector<Value>& args, const Kwargs& kwargs) {
  if (name == "join") return Join(value, args, kwargs);
  if (name == "tojson") return ToJsonFilter(value, args, kwargs);
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
    return Select(name, value, args, kwargs);
  }
  if (name == "map") return Map(value, args, kwargs);
  if (name == "int") return IntFilter(value, args, kwargs);
  if (name == "default" || name == "d") {
    Args a(name, args, kwargs);
    LLMSERVE_RETURN_IF_ERROR(a.Bind({"default_value", "boolean"}));
    const Value* fallback = a.GetRaw(0);
    const bool boolean = a.Get(1) != nullptr && a.Get(1)->Truthy();
    if (value.is_undefined() || (boolean && !value.Truthy())) {
      return fallback != nullptr ? *fallback : Value::String("");
    }
    return value;
  }
  if (name == "replace") {
    if (!value.is_string() && value.is_undefined()) return Value::String("");
    return StringMethod(ToPythonStr(value), "replace", args, kwargs);
  }
  Args a(name, args, kwargs);
  LLMSERVE_RETURN_IF_ERROR(a.Bind({}));
  if (name == "trim")
    return Value::String(py_string::Strip(ToPythonStr(value), nullptr, true, true));
  if (name == "upper") return Value::String(py_string::Upper(ToPythonStr(value)));
  if (name == "lower") return Value::String(py_string::Lower(ToPythonStr(value)));
  if (name == "capitalize") return Value::String(py_string::Capitalize(ToPythonStr(value)));
  if (name == "title") return Value::String(py_string::Title(ToPythonStr(value)));
  if (name == "string") return Value::String(ToPythonStr(value));
  if (name == "safe") return value;
  if (name == "length" || name == "count") return Length(value);
  if (name == "first" || name == "last") return FirstOrLast(value, name == "first");
  if (name == "reverse") return Reverse(value);
  if (name == "list") {
    absl::StatusOr<ValueList> items = Iterate(value, "list");
    if (!items.ok()) return items.status();
    return Value::List(*std::move(items));
  }
  if (name == "items") {
    if (value.is_undefined()) return Value::List({});
    if (!value.is_dict()) return TypeError("items", value);
    return DictMethod(value.as_dict(), "items", {}, {});
  }
  if (name == "abs") {
    if (value.is_undefined()) return UndefinedError(value);
    if (!value.is_int()) return TypeError("abs", value);
    if (value.as_int() == INT64_MIN) return absl::InvalidArgumentError("integer overflow");
    return Value::Int(std::abs(value.as_int()));
  }
  return absl::InvalidArgumentError(absl::StrCat("unsupported filter '", name, "'"));
}

absl::StatusOr<bool> ApplyTest(const std::string& name, const Value& value,
                               const std::vector<Value>& args) {
  using Kind = Value::Kind;
  const Kind k = value.kind();
  const size_t want =
      (name == "divisibleby" || name == "equalto" || name == "eq" || name == "ne" || name == "in")
          ? 1
          : 0;
  if (args.size() != want) {
    return absl::InvalidArgumentError(
        absl::StrCat("test '", name, "' takes ", want, " argument(s), ", args.size(), " given"));
  }
  if (name == "defined") return k != Kind::kUndefined;
  if (name == "undefined") return k == Kind::kUndefined;
  if (name == "none") return k == Kind::kNone;
  if (name == "string") return k == Kind::kString;
  if (name == "number") return k == Kind::kInt || k == Kind::kBool;
  if (name == "integer") return k == Kind::kInt;
  if (name == "boolean") return k == Kind::kBool;
  if (name == "true") return k == Kind::kBool && value.as_bool();
  if (name == "false") return k == Kind::kBool && !value.as_bool();
  if (name == "mapping") return k == Kind::kDict;
  if (name == "iterable") {
    return k == Kind::kList || k == Kind::kDict || k == Kind::kString || k == Kind::kUndefined;
  }
  if (name == "sequence") return k == Kind::kList || k == Kind::kDict || k == Kind::kString;
  if (name == "lower" || name == "upper") {
    if (k != Kind::kString) return false;
    const std::string& s = value.as_string();
    return name == "lower" ? py_string::Lower(s) == s && py_string::Upper(s) != s
                           : py_string::Upper(s) == s && py_string::Lower(s) != s;
  }
  if (name == "even" || name == "odd" || name == "divisibleby") {
    if (k != Kind::kInt && k != Kind::kBool) return TypeError("test '" + name + "'", value);
    const int64_t x = k == Kind::kInt ? value.as_int() : value.as_bool();
    if (name == "even") return x % 2 == 0;
    if (name == "odd") return x % 2 != 0;
    if (!args[0].is_int() || args[0].as_int() == 0) {
      return absl::InvalidArgumentError("divisibleby needs a non-zero integer");
    }
    return args[0].as_int() == -1 || x % args[0].as_int() == 0;
  }
  if (name == "equalto" || name == "eq") return ValuesEqual(value, args[0]);
  if (name == "ne") return !ValuesEqual(value, args[0]);
  if (name == "in") {
    const Value& container = args[0];
    if (container.is_string()) {
      if (!value.is_string()) return TypeError("'in <string>'", value);
      return container.as_string().find(value.as_string()) != std::string::npos;
    }
    absl::StatusOr<ValueList> items = Iterate(container, "in");
    if (!items.ok()) return items.status();
    for (const Value& item : *items) {
      if (ValuesEqual(item, value)) return true;
    }
    return false;
  }
  return absl::InvalidArgumentError(absl::StrCat("unsupported test '", name, "'"));
}

bool HasMethod(const Value& object, const std::string& name) {
  if (object.is_string()) {
    static const char* const kMethods[] = {"strip",    "lstrip",     "rstrip",  "upper",
                                           "lower",    "capitalize", "title",   "startswith",
                                           "endswith", "split",      "replace", "join"};
    return std::find(std::begin(kMethods), std::end(kMethods), name) != std::end(kMethods);
  }
  if (object.is_dict()) {
    // As in jinja2, `d.items` finds the method before a key named "items" (getattr first).
    return name == "items" || name == "keys" || name == "values" || name == "get";
  }
  return false;
}

absl::StatusOr<Value> CallMethod(const Value& object, const std::string& name,
                                 const std::vector<Value>& args, const Kwargs& kwargs) {
  if (object.is_string()) return StringMethod(object.as_string(), name, args, kwargs);
  if (object.is_dict()) return DictMethod(object.as_dict(), name, args, kwargs);
  return absl::InvalidArgumentError(
      absl::StrCat("'", object.TypeName(), "' object has no method '", name, "'"));
}

}  // namespace llmserve::common::builtins
