#include "common/chat_template/builtins.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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
      for (const auto& item : value.as_dict().items()) {
        keys.push_back(ValueDict::KeyValue(item.first));
      }
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

// attribute="a.b" or "0" as jinja2's make_attrgetter resolves it (dict keys, list indexes).
Value GetAttributePath(const Value& value, const std::string& path) {
  Value current = value;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? dot : dot - start);
    int64_t index;
    if (current.is_list() && absl::SimpleAtoi(part, &index) && index >= 0 &&
        static_cast<size_t>(index) < current.as_list().size()) {
      current = current.as_list()[static_cast<size_t>(index)];
    } else {
      current = GetAttribute(current, part);
    }
    if (dot == std::string::npos) return current;
    start = dot + 1;
  }
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
  JsonOptions options;
  options.ensure_ascii = a.Get(0) != nullptr && a.Get(0)->Truthy();
  options.sort_keys = a.Get(3) != nullptr && a.Get(3)->Truthy();
  absl::StatusOr<int64_t> indent = a.OptInt(1, "indent", -1);
  if (!indent.ok()) return indent.status();
  if (*indent > 64) return absl::InvalidArgumentError("tojson: indent too large");
  options.indent = static_cast<int>(*indent);
  if (const Value* separators = a.Get(2)) {
    if (!separators->is_list() || separators->as_list().size() != 2 ||
        !separators->as_list()[0].is_string() || !separators->as_list()[1].is_string()) {
      return absl::InvalidArgumentError("tojson: separators must be a (item, key) pair");
    }
    options.item_separator = separators->as_list()[0].as_string();
    options.key_separator = separators->as_list()[1].as_string();
  }
  absl::StatusOr<std::string> json = ToJson(value, options);
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
  // jinja2 iterates only a truthy value: None | select(...) is empty.
  absl::StatusOr<ValueList> items = value.Truthy() ? Iterate(value, name) : ValueList{};
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

// map(attribute='a.b', default=x) or map('filter', args...).
absl::StatusOr<Value> Map(const Value& value, const std::vector<Value>& args,
                          const Kwargs& kwargs) {
  absl::StatusOr<ValueList> items = value.Truthy() ? Iterate(value, "map") : ValueList{};
  if (!items.ok()) return items.status();
  ValueList out;
  if (args.empty()) {
    const Value* attribute = nullptr;
    const Value* fallback = nullptr;
    for (const auto& [k, v] : kwargs) {
      if (k == "attribute") {
        attribute = &v;
      } else if (k == "default") {
        fallback = &v;
      } else {
        return absl::InvalidArgumentError(absl::StrCat("Unexpected keyword argument '", k, "'"));
      }
    }
    if (attribute == nullptr || !attribute->is_string()) {
      return absl::InvalidArgumentError("map requires a filter argument");
    }
    for (const Value& item : *items) {
      Value v = GetAttributePath(item, attribute->as_string());
      if (v.is_undefined() && fallback != nullptr) v = *fallback;
      out.push_back(std::move(v));
    }
    return Value::List(std::move(out));
  }
  if (!args[0].is_string() || !IsFilter(args[0].as_string()) || args[0].as_string() == "map") {
    return absl::InvalidArgumentError("map: unsupported filter");
  }
  const std::vector<Value> rest(args.begin() + 1, args.end());
  for (const Value& item : *items) {
    absl::StatusOr<Value> v = ApplyFilter(args[0].as_string(), item, rest, kwargs);
    if (!v.ok()) return v.status();
    out.push_back(*std::move(v));
  }
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
  // jinja2: int(value), else int(float(value)); out-of-range floats fall back to the default.
  auto from_double = [](double d, int64_t* out) {
    if (!(d > -9.2e18 && d < 9.2e18)) return false;
    *out = static_cast<int64_t>(d);
    return true;
  };
  int64_t parsed;
  if (value.is_float() && from_double(value.as_float(), &parsed)) return Value::Int(parsed);
  double d;
  if (value.is_string()) {
    const std::string text = py_string::Strip(value.as_string(), nullptr, true, true);
    if (absl::SimpleAtoi(text, &parsed)) return Value::Int(parsed);
    if (absl::SimpleAtod(text, &d) && from_double(d, &parsed)) return Value::Int(parsed);
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

absl::StatusOr<Value> PyStrFormat(const std::string& s, const std::vector<Value>& args,
                                  const Kwargs& kwargs);
int64_t CodePointIndex(const std::string& s, size_t byte_offset);
std::vector<std::string> SplitLines(const std::string& s);

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
  if (name == "format") return PyStrFormat(s, args, kwargs);
  if (name == "find" || name == "rfind" || name == "count" || name == "index" || name == "rindex") {
    if (absl::Status st = a.Bind({"sub"}); !st.ok()) return st;
    absl::StatusOr<const std::string*> sub = a.OptString(0, "sub");
    if (!sub.ok()) return sub.status();
    if (*sub == nullptr)
      return absl::InvalidArgumentError(absl::StrCat("str.", name, " needs sub"));
    const std::string& x = **sub;
    if (name == "count") {
      if (x.empty()) return Value::Int(static_cast<int64_t>(py_string::Length(s)) + 1);
      int64_t n = 0;
      for (size_t at = s.find(x); at != std::string::npos; at = s.find(x, at + x.size())) ++n;
      return Value::Int(n);
    }
    const size_t at = (name == "find" || name == "index") ? s.find(x) : s.rfind(x);
    if (at == std::string::npos) {
      if (name == "index" || name == "rindex") {
        return absl::InvalidArgumentError("substring not found");
      }
      return Value::Int(-1);
    }
    return Value::Int(CodePointIndex(s, at));
  }
  if (name == "splitlines") {
    if (absl::Status st = a.Bind({}); !st.ok()) return st;
    ValueList parts;
    for (std::string& line : SplitLines(s)) parts.push_back(Value::String(std::move(line)));
    return Value::List(std::move(parts));
  }
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" ||
      name == "islower" || name == "isupper" || name == "isnumeric" || name == "isdecimal") {
    if (absl::Status st = a.Bind({}); !st.ok()) return st;
    if (name == "islower" || name == "isupper") {
      const bool has_cased = py_string::Lower(s) != py_string::Upper(s);
      return Value::Bool(has_cased &&
                         (name == "islower" ? py_string::Lower(s) == s : py_string::Upper(s) == s));
    }
    if (s.empty()) return Value::Bool(false);
    for (const std::string_view cp : py_string::CodePoints(s)) {
      // ASCII classes (chat templates test role names and numbers with these).
      const char c = cp.size() == 1 ? cp[0] : '\0';
      const bool digit = c >= '0' && c <= '9';
      const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
      bool ok;
      if (name == "isspace") {
        char32_t code = static_cast<unsigned char>(cp[0]);
        ok = cp.size() == 1 && py_string::IsSpace(code);
      } else if (name == "isalpha") {
        ok = alpha;
      } else if (name == "isalnum") {
        ok = alpha || digit;
      } else {
        ok = digit;
      }
      if (!ok) return Value::Bool(false);
    }
    return Value::Bool(true);
  }
  if (name == "removeprefix" || name == "removesuffix") {
    if (absl::Status st = a.Bind({"affix"}); !st.ok()) return st;
    absl::StatusOr<const std::string*> affix = a.OptString(0, "affix");
    if (!affix.ok()) return affix.status();
    if (*affix == nullptr) return a.TypeError("affix", "a string", Value::None());
    const std::string& x = **affix;
    if (name == "removeprefix" && s.compare(0, x.size(), x) == 0) {
      return Value::String(s.substr(x.size()));
    }
    if (name == "removesuffix" && !x.empty() && x.size() <= s.size() &&
        s.compare(s.size() - x.size(), x.size(), x) == 0) {
      return Value::String(s.substr(0, s.size() - x.size()));
    }
    return Value::String(s);
  }
  if (name == "rsplit") {
    if (absl::Status st = a.Bind({"sep", "maxsplit"}); !st.ok()) return st;
    absl::StatusOr<const std::string*> sep = a.OptString(0, "sep");
    if (!sep.ok()) return sep.status();
    if (*sep != nullptr && (*sep)->empty()) return absl::InvalidArgumentError("empty separator");
    absl::StatusOr<int64_t> maxsplit = a.OptInt(1, "maxsplit", -1);
    if (!maxsplit.ok()) return maxsplit.status();
    ValueList parts;
    for (std::string& part : py_string::RSplit(s, *sep, *maxsplit)) {
      parts.push_back(Value::String(std::move(part)));
    }
    return Value::List(std::move(parts));
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
    if (const std::optional<std::string> stored = ValueDict::EncodeKey(**key)) {
      if (const Value* found = dict.Find(*stored)) return *found;
    }
    return a.GetRaw(1) != nullptr ? *a.GetRaw(1) : Value::None();
  }
  if (absl::Status st = a.Bind({}); !st.ok()) return st;
  ValueList out;
  for (const auto& [k, v] : dict.items()) {
    if (name == "keys") {
      out.push_back(ValueDict::KeyValue(k));
    } else if (name == "values") {
      out.push_back(v);
    } else {
      out.push_back(Value::Tuple({ValueDict::KeyValue(k), v}));
    }
  }
  return Value::List(std::move(out));
}

// Python's ordering of two values as sort() sees them (numbers with numbers, strings with
// strings, sequences item by item); strings compare case-insensitively unless case_sensitive,
// as jinja2's sort/dictsort/unique/min/max do by default.
absl::StatusOr<int> Order(const Value& a, const Value& b, bool case_sensitive) {
  if (a.is_number() && b.is_number()) {
    const double x = a.ToDouble();
    const double y = b.ToDouble();
    if (!a.is_float() && !b.is_float()) {
      const int64_t i = a.is_int() ? a.as_int() : a.as_bool();
      const int64_t j = b.is_int() ? b.as_int() : b.as_bool();
      return i < j ? -1 : i > j ? 1 : 0;
    }
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    const int c = case_sensitive
                      ? a.as_string().compare(b.as_string())
                      : py_string::Lower(a.as_string()).compare(py_string::Lower(b.as_string()));
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list()) {
    const ValueList& x = a.as_list();
    const ValueList& y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (ValuesEqual(x[i], y[i])) continue;
      return Order(x[i], y[i], case_sensitive);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  return absl::InvalidArgumentError(absl::StrCat("'<' not supported between instances of '",
                                                 a.TypeName(), "' and '", b.TypeName(), "'"));
}

// A stable sort by Order() that reports the first comparison Python would refuse.
absl::Status SortValues(std::vector<std::pair<Value, Value>>* keyed, bool case_sensitive,
                        bool reverse) {
  absl::Status error;
  std::stable_sort(keyed->begin(), keyed->end(), [&](const auto& x, const auto& y) {
    if (!error.ok()) return false;
    absl::StatusOr<int> c = Order(x.first, y.first, case_sensitive);
    if (!c.ok()) {
      error = c.status();
      return false;
    }
    return reverse ? *c > 0 : *c < 0;
  });
  return error;
}

absl::StatusOr<Value> Sort(const Value& value, const std::vector<Value>& args,
                           const Kwargs& kwargs) {
  Args a("sort", args, kwargs);
  LLMSERVE_RETURN_IF_ERROR(a.Bind({"reverse", "case_sensitive", "attribute"}));
  const bool reverse = a.Get(0) != nullptr && a.Get(0)->Truthy();
  const bool case_sensitive = a.Get(1) != nullptr && a.Get(1)->Truthy();
  absl::StatusOr<const std::string*> attribute = a.OptString(2, "attribute");
  if (!attribute.ok()) return attribute.status();
  absl::StatusOr<ValueList> items = Iterate(value, "sort");
  if (!items.ok()) return items.status();
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& item : *items) {
    keyed.emplace_back(*attribute == nullptr ? item : GetAttributePath(item, **attribute), item);
  }
  LLMSERVE_RETURN_IF_ERROR(SortValues(&keyed, case_sensitive, reverse));
  ValueList out;
  for (auto& [key, item] : keyed) out.push_back(std::move(item));
  return Value::List(std::move(out));
}

absl::StatusOr<Value> DictSort(const Value& value, const std::vector<Value>& args,
                               const Kwargs& kwargs) {
  Args a("dictsort", args, kwargs);
  LLMSERVE_RETURN_IF_ERROR(a.Bind({"case_sensitive", "by", "reverse"}));
  const bool case_sensitive = a.Get(0) != nullptr && a.Get(0)->Truthy();
  absl::StatusOr<const std::string*> by = a.OptString(1, "by");
  if (!by.ok()) return by.status();
  const bool by_value = *by != nullptr && **by == "value";
  if (*by != nullptr && !by_value && **by != "key") {
    return absl::InvalidArgumentError("You can only sort by either \"key\" or \"value\"");
  }
  const bool reverse = a.Get(2) != nullptr && a.Get(2)->Truthy();
  if (!value.is_dict()) return TypeError("dictsort", value);
  std::vector<std::pair<Value, Value>> keyed;
  for (const auto& [k, v] : value.as_dict().items()) {
    const Value key = ValueDict::KeyValue(k);
    keyed.emplace_back(by_value ? v : key, Value::Tuple({key, v}));
  }
  LLMSERVE_RETURN_IF_ERROR(SortValues(&keyed, case_sensitive, reverse));
  ValueList out;
  for (auto& [key, item] : keyed) out.push_back(std::move(item));
  return Value::List(std::move(out));
}

absl::StatusOr<Value> Unique(const Value& value, const std::vector<Value>& args,
                             const Kwargs& kwargs) {
  Args a("unique", args, kwargs);
  LLMSERVE_RETURN_IF_ERROR(a.Bind({"case_sensitive", "attribute"}));
  const bool case_sensitive = a.Get(0) != nullptr && a.Get(0)->Truthy();
  absl::StatusOr<const std::string*> attribute = a.OptString(1, "attribute");
  if (!attribute.ok()) return attribute.status();
  absl::StatusOr<ValueList> items = Iterate(value, "unique");
  if (!items.ok()) return items.status();
  ValueList out;
  ValueList seen;
  for (const Value& item : *items) {
    Value key = *attribute == nullptr ? item : GetAttributePath(item, **attribute);
    if (!case_sensitive && key.is_string()) key = Value::String(py_string::Lower(key.as_string()));
    bool dup = false;
    for (const Value& s : seen) {
      if (ValuesEqual(s, key)) {
        dup = true;
        break;
      }
    }
    if (dup) continue;
    seen.push_back(std::move(key));
    out.push_back(item);
  }
  return Value::List(std::move(out));
}

absl::StatusOr<Value> MinMax(const std::string& name, const Value& value,
                             const std::vector<Value>& args, const Kwargs& kwargs) {
  Args a(name, args, kwargs);
  LLMSERVE_RETURN_IF_ERROR(a.Bind({"case_sensitive", "attribute"}));
  const bool case_sensitive = a.Get(0) != nullptr && a.Get(0)->Truthy();
  absl::StatusOr<const std::string*> attribute = a.OptString(1, "attribute");
  if (!attribute.ok()) return attribute.status();
  absl::StatusOr<ValueList> items = Iterate(value, name);
  if (!items.ok()) return items.status();
  if (items->empty()) return Value::MakeUndefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  for (size_t i = 1; i < items->size(); ++i) {
    const Value x =
        *attribute == nullptr ? (*items)[i] : GetAttributePath((*items)[i], **attribute);
    const Value y =
        *attribute == nullptr ? (*items)[best] : GetAttributePath((*items)[best], **attribute);
    absl::StatusOr<int> c = Order(x, y, case_sensitive);
    if (!c.ok()) return c.status();
    if (name == "min" ? *c < 0 : *c > 0) best = i;
  }
  return (*items)[best];
}

// str.splitlines() (the line boundaries Python knows, not only \n).
std::vector<std::string> SplitLines(const std::string& s) {
  std::vector<std::string> lines;
  std::string current;
  size_t i = 0;
  auto flush = [&]() {
    lines.push_back(current);
    current.clear();
  };
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\r') {
      flush();
      i += (i + 1 < s.size() && s[i + 1] == '\n') ? 2 : 1;
    } else if (c == '\n' || c == 0x0b || c == 0x0c || c == 0x1c || c == 0x1d || c == 0x1e) {
      flush();
      ++i;
    } else if (c == 0xc2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x85) {
      flush();
      i += 2;
    } else if (c == 0xe2 && i + 2 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x80 &&
               (static_cast<unsigned char>(s[i + 2]) == 0xa8 ||
                static_cast<unsigned char>(s[i + 2]) == 0xa9)) {
      flush();
      i += 3;
    } else {
      current.push_back(s[i]);
      ++i;
    }
  }
  if (!current.empty()) flush();
  return lines;
}

// jinja2 3.1's indent(width=4, first=False, blank=False); width may be a string.
absl::StatusOr<Value> Indent(const Value& value, const std::vector<Value>& args,
                             const Kwargs& kwargs) {
  Args a("indent", args, kwargs);
  LLMSERVE_RETURN_IF_ERROR(a.Bind({"width", "first", "blank"}));
  std::string indention = "    ";
  if (const Value* width = a.Get(0)) {
    if (width->is_string()) {
      indention = width->as_string();
    } else if (width->is_int() || width->is_bool()) {
      const int64_t n = width->is_int() ? width->as_int() : width->as_bool();
      if (n > (int64_t{1} << 20)) return absl::InvalidArgumentError("indent: result too large");
      indention = std::string(static_cast<size_t>(std::max<int64_t>(n, 0)), ' ');
    } else {
      return a.TypeError("width", "an integer or a string", *width);
    }
  }
  const bool first = a.Get(1) != nullptr && a.Get(1)->Truthy();
  const bool blank = a.Get(2) != nullptr && a.Get(2)->Truthy();
  // jinja2 appends "\n" to the value first, which only a string survives.
  if (value.is_undefined()) return UndefinedError(value);
  if (!value.is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported operand type(s) for +=: '", value.TypeName(), "' and 'str'"));
  }
  const std::vector<std::string> lines = SplitLines(value.as_string() + "\n");
  // Every line may get the indentation: refuse before building what the renderer would refuse.
  if ((lines.size() + 1) * indention.size() > (size_t{16} << 20)) {
    return absl::InvalidArgumentError("indent: result too large");
  }
  std::string rv;
  if (blank) {
    rv = absl::StrJoin(lines, "\n" + indention);
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      rv += "\n";
      if (!lines[i].empty()) rv += indention;
      rv += lines[i];
    }
  }
  if (first) rv = indention + rv;
  return Value::String(std::move(rv));
}

absl::StatusOr<Value> FloatFilter(const Value& value, const std::vector<Value>& args,
                                  const Kwargs& kwargs) {
  Args a("float", args, kwargs);
  LLMSERVE_RETURN_IF_ERROR(a.Bind({"default"}));
  if (value.is_number()) return Value::Float(value.ToDouble());
  double parsed;
  if (value.is_string() &&
      absl::SimpleAtod(py_string::Strip(value.as_string(), nullptr, true, true), &parsed)) {
    return Value::Float(parsed);
  }
  const Value* fallback = a.Get(0);
  return fallback != nullptr ? *fallback : Value::Float(0.0);
}

absl::StatusOr<Value> Round(const Value& value, const std::vector<Value>& args,
                            const Kwargs& kwargs) {
  Args a("round", args, kwargs);
  LLMSERVE_RETURN_IF_ERROR(a.Bind({"precision", "method"}));
  absl::StatusOr<int64_t> precision = a.OptInt(0, "precision", 0);
  if (!precision.ok()) return precision.status();
  if (*precision < 0 || *precision > 20) {
    return absl::InvalidArgumentError("round: precision must be between 0 and 20");
  }
  absl::StatusOr<const std::string*> method = a.OptString(1, "method");
  if (!method.ok()) return method.status();
  const std::string m = *method == nullptr ? "common" : **method;
  if (!value.is_number()) return TypeError("round", value);
  if (m != "common" && m != "ceil" && m != "floor") {
    return absl::InvalidArgumentError("method must be common, ceil or floor");
  }
  // Python's round(int, n) is the int itself.
  if (m == "common" && !value.is_float())
    return Value::Int(value.is_int() ? value.as_int() : value.as_bool());
  const double x = value.ToDouble();
  if (m == "common") {
    // Python's round(x, n) rounds the exact binary value to n decimals, ties to even: so does
    // glibc's printf.
    char buf[400];
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(*precision), x);
    return Value::Float(std::strtod(buf, nullptr));
  }
  const double scale = std::pow(10.0, static_cast<double>(*precision));
  return Value::Float((m == "ceil" ? std::ceil(x * scale) : std::floor(x * scale)) / scale);
}

// str.format(*args, **kwargs) for the replacement fields templates write: {}, {0}, {name},
// {name.attr} / {name[key]} are not supported; {{ and }} escape braces. A format spec is
// refused.
absl::StatusOr<Value> PyStrFormat(const std::string& s, const std::vector<Value>& args,
                                  const Kwargs& kwargs) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '}') {
      if (i + 1 < s.size() && s[i + 1] == '}') {
        out.push_back('}');
        ++i;
        continue;
      }
      return absl::InvalidArgumentError("Single '}' encountered in format string");
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < s.size() && s[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    const size_t close = s.find('}', i);
    if (close == std::string::npos) {
      return absl::InvalidArgumentError("Single '{' encountered in format string");
    }
    const std::string field = s.substr(i + 1, close - i - 1);
    if (field.find_first_of(":!.[") != std::string::npos) {
      return absl::InvalidArgumentError("str.format: format specs are not supported");
    }
    const Value* v = nullptr;
    int64_t index;
    if (field.empty()) {
      if (auto_index >= args.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("Replacement index ", auto_index, " out of range"));
      }
      v = &args[auto_index++];
    } else if (absl::SimpleAtoi(field, &index)) {
      if (index < 0 || static_cast<size_t>(index) >= args.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("Replacement index ", index, " out of range"));
      }
      v = &args[static_cast<size_t>(index)];
    } else {
      for (const auto& [k, kv] : kwargs) {
        if (k == field) v = &kv;
      }
      if (v == nullptr) return absl::InvalidArgumentError(absl::StrCat("KeyError: '", field, "'"));
    }
    out += ToPythonStr(*v);
    i = close;
  }
  return Value::String(std::move(out));
}

// Python's str.find / rfind / count over code points.
int64_t CodePointIndex(const std::string& s, size_t byte_offset) {
  return static_cast<int64_t>(py_string::Length(std::string_view(s).substr(0, byte_offset)));
}

}  // namespace

absl::StatusOr<Value> PercentFormat(const std::string& format, const Value& args) {
  const ValueList single{args};
  const bool is_tuple = args.is_list() && args.is_tuple();
  const ValueList& values = is_tuple ? args.as_list() : single;
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out.push_back(format[i]);
      continue;
    }
    if (++i >= format.size()) return absl::InvalidArgumentError("incomplete format");
    const Value* v = nullptr;
    if (format[i] == '(') {
      const size_t close = format.find(')', i);
      if (close == std::string::npos) return absl::InvalidArgumentError("incomplete format key");
      if (!args.is_dict()) return absl::InvalidArgumentError("format requires a mapping");
      v = args.as_dict().Find(format.substr(i + 1, close - i - 1));
      if (v == nullptr) return absl::InvalidArgumentError("format key not found");
      i = close + 1;
    }
    std::string flags;
    while (i < format.size() && std::string_view("-0+ #").find(format[i]) != std::string::npos) {
      flags.push_back(format[i++]);
    }
    int width = 0;
    while (i < format.size() && format[i] >= '0' && format[i] <= '9' && width < 1000) {
      width = width * 10 + (format[i++] - '0');
    }
    int precision = -1;
    if (i < format.size() && format[i] == '.') {
      ++i;
      precision = 0;
      while (i < format.size() && format[i] >= '0' && format[i] <= '9' && precision < 100) {
        precision = precision * 10 + (format[i++] - '0');
      }
    }
    if (i >= format.size()) return absl::InvalidArgumentError("incomplete format");
    const char conv = format[i];
    if (conv == '%') {
      out.push_back('%');
      continue;
    }
    if (v == nullptr) {
      if (args.is_dict() && !is_tuple) {
        v = &args;
      } else {
        if (next >= values.size()) {
          return absl::InvalidArgumentError("not enough arguments for format string");
        }
        v = &values[next++];
      }
    }
    std::string piece;
    const bool left = flags.find('-') != std::string::npos;
    const bool zero = flags.find('0') != std::string::npos && !left;
    const char sign = flags.find('+') != std::string::npos   ? '+'
                      : flags.find(' ') != std::string::npos ? ' '
                                                             : 0;
    switch (conv) {
      case 's':
      case 'r':
      case 'a':
        piece = conv == 's' ? ToPythonStr(*v) : ToPythonRepr(*v);
        if (precision >= 0) {
          const std::vector<std::string_view> cps = py_string::CodePoints(piece);
          if (cps.size() > static_cast<size_t>(precision)) {
            std::string cut;
            for (int k = 0; k < precision; ++k) cut.append(cps[static_cast<size_t>(k)]);
            piece = cut;
          }
        }
        break;
      case 'd':
      case 'i':
      case 'x':
      case 'X':
      case 'o': {
        if (!v->is_number()) {
          return absl::InvalidArgumentError(absl::StrCat("%", std::string(1, conv),
                                                         " format: a real number is required, not ",
                                                         v->TypeName()));
        }
        const int64_t n = v->is_float() ? static_cast<int64_t>(v->as_float())
                          : v->is_int() ? v->as_int()
                                        : v->as_bool();
        const uint64_t mag = n < 0 ? 0 - static_cast<uint64_t>(n) : static_cast<uint64_t>(n);
        std::string digits = conv == 'x'   ? absl::StrFormat("%x", mag)
                             : conv == 'X' ? absl::StrFormat("%X", mag)
                             : conv == 'o' ? absl::StrFormat("%o", mag)
                                           : absl::StrCat(mag);
        piece = (n < 0 ? "-" : sign ? std::string(1, sign) : "") + digits;
        break;
      }
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G': {
        if (!v->is_number()) {
          return absl::InvalidArgumentError(
              absl::StrCat("must be real number, not ", v->TypeName()));
        }
        const std::string spec = absl::StrCat("%", sign ? std::string(1, sign) : "", ".",
                                              precision < 0 ? 6 : precision, std::string(1, conv));
        char buf[512];
        std::snprintf(buf, sizeof(buf), spec.c_str(), v->ToDouble());
        piece = buf;
        break;
      }
      case 'c':
        piece = v->is_string() ? v->as_string() : ToPythonStr(*v);
        break;
      default:
        return absl::InvalidArgumentError(
            absl::StrCat("unsupported format character '", std::string(1, conv), "'"));
    }
    const size_t len = py_string::Length(piece);
    if (static_cast<size_t>(width) > len) {
      const size_t pad = static_cast<size_t>(width) - len;
      if (left) {
        piece.append(pad, ' ');
      } else if (zero && conv != 's' && conv != 'r') {
        const size_t at = (!piece.empty() && (piece[0] == '-' || piece[0] == '+')) ? 1 : 0;
        piece.insert(at, pad, '0');
      } else {
        piece.insert(0, pad, ' ');
      }
    }
    out += piece;
  }
  if (is_tuple && next < values.size()) {
    return absl::InvalidArgumentError("not all arguments converted during string formatting");
  }
  if (!is_tuple && !args.is_dict() && next == 0 && !values.empty()) {
    return absl::InvalidArgumentError("not all arguments converted during string formatting");
  }
  return Value::String(std::move(out));
}

bool IsFilter(const std::string& name) {
  static const char* const kFilters[] = {
      "trim",       "length",  "count",  "upper",    "lower",  "capitalize", "title",  "tojson",
      "join",       "default", "d",      "first",    "last",   "string",     "int",    "list",
      "replace",    "safe",    "items",  "reverse",  "abs",    "select",     "reject", "selectattr",
      "rejectattr", "map",     "indent", "dictsort", "sort",   "unique",     "min",    "max",
      "float",      "round",   "sum",    "e",        "escape", "format"};
  return std::find(std::begin(kFilters), std::end(kFilters), name) != std::end(kFilters);
}

bool IsTest(const std::string& name) {
  static const char* const kTests[] = {
      "defined", "undefined", "none",        "string",      "number",   "integer",
      "boolean", "mapping",   "iterable",    "sequence",    "even",     "odd",
      "true",    "false",     "divisibleby", "equalto",     "eq",       "ne",
      "in",      "lower",     "upper",       "float",       "callable", "gt",
      "ge",      "lt",        "le",          "greaterthan", "lessthan", "sameas"};
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
  if (name == "indent") return Indent(value, args, kwargs);
  if (name == "dictsort") return DictSort(value, args, kwargs);
  if (name == "sort") return Sort(value, args, kwargs);
  if (name == "unique") return Unique(value, args, kwargs);
  if (name == "min" || name == "max") return MinMax(name, value, args, kwargs);
  if (name == "float") return FloatFilter(value, args, kwargs);
  if (name == "round") return Round(value, args, kwargs);
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
  if (name == "sum") {
    Args a(name, args, kwargs);
    LLMSERVE_RETURN_IF_ERROR(a.Bind({"attribute", "start"}));
    absl::StatusOr<const std::string*> attribute = a.OptString(0, "attribute");
    if (!attribute.ok()) return attribute.status();
    Value total = a.Get(1) != nullptr ? *a.Get(1) : Value::Int(0);
    absl::StatusOr<ValueList> items = Iterate(value, "sum");
    if (!items.ok()) return items.status();
    for (const Value& item : *items) {
      const Value x = *attribute == nullptr ? item : GetAttributePath(item, **attribute);
      if (!x.is_number() || !total.is_number()) return TypeError("sum", x);
      if (x.is_float() || total.is_float()) {
        total = Value::Float(total.ToDouble() + x.ToDouble());
      } else {
        int64_t r;
        if (__builtin_add_overflow(total.is_int() ? total.as_int() : total.as_bool(),
                                   x.is_int() ? x.as_int() : x.as_bool(), &r)) {
          return absl::InvalidArgumentError("integer overflow");
        }
        total = Value::Int(r);
      }
    }
    return total;
  }
  if (name == "format") {
    if (!kwargs.empty()) return absl::InvalidArgumentError("format: no keyword arguments");
    return PercentFormat(ToPythonStr(value),
                         args.size() == 1 ? args[0] : Value::Tuple(ValueList(args)));
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
  if (name == "safe") return value.is_safe() ? value : Value::SafeString(ToPythonStr(value));
  if (name == "e" || name == "escape") {
    if (value.is_safe()) return value;
    return Value::SafeString(HtmlEscape(ToPythonStr(value)));
  }
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
  const bool ordering = name == "gt" || name == "ge" || name == "lt" || name == "le" ||
                        name == "greaterthan" || name == "lessthan";
  const size_t want = (name == "divisibleby" || name == "equalto" || name == "eq" || name == "ne" ||
                       name == "in" || name == "sameas" || ordering)
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
  if (name == "number") return k == Kind::kInt || k == Kind::kBool || k == Kind::kFloat;
  if (name == "float") return k == Kind::kFloat;
  if (name == "callable") return k == Kind::kFunction;
  if (name == "sameas") {
    // Python's `is`: certain only for the singletons None, True and False.
    const Value& other = args[0];
    if (k == Kind::kNone || k == Kind::kBool || other.is_none() || other.is_bool()) {
      return k == other.kind() && (k == Kind::kNone || value.as_bool() == other.as_bool());
    }
    return false;
  }
  if (ordering) {
    if (value.is_undefined() || args[0].is_undefined()) {
      return UndefinedError(value.is_undefined() ? value : args[0]);
    }
    absl::StatusOr<int> c = Order(value, args[0], /*case_sensitive=*/true);
    if (!c.ok()) return c.status();
    if (name == "gt" || name == "greaterthan") return *c > 0;
    if (name == "ge") return *c >= 0;
    if (name == "lt" || name == "lessthan") return *c < 0;
    return *c <= 0;
  }
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
    static const char* const kMethods[] = {
        "strip",   "lstrip",     "rstrip",    "upper",     "lower",        "capitalize",
        "title",   "startswith", "endswith",  "split",     "rsplit",       "replace",
        "join",    "format",     "find",      "rfind",     "count",        "index",
        "rindex",  "splitlines", "isdigit",   "isalpha",   "isalnum",      "isspace",
        "islower", "isupper",    "isnumeric", "isdecimal", "removeprefix", "removesuffix"};
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
