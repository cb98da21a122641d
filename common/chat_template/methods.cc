// Methods of str and dict values (`s.strip()`, `d.items()`, ...), str.format and `%`
// formatting, with Python's semantics.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/chat_template/builtins.h"
#include "common/chat_template/builtins_util.h"
#include "common/chat_template/py_string.h"
#include "common/status/status_macros.h"

namespace llmserve::common::builtins {
namespace {

using internal::Args;
using internal::Iterate;
using internal::SplitLines;

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
  if (name == "split" || name == "rsplit") {
    if (absl::Status st = a.Bind({"sep", "maxsplit"}); !st.ok()) return st;
    absl::StatusOr<const std::string*> sep = a.OptString(0, "sep");
    if (!sep.ok()) return sep.status();
    if (*sep != nullptr && (*sep)->empty()) return absl::InvalidArgumentError("empty separator");
    absl::StatusOr<int64_t> maxsplit = a.OptInt(1, "maxsplit", -1);
    if (!maxsplit.ok()) return maxsplit.status();
    ValueList parts;
    for (std::string& part : name == "split" ? py_string::Split(s, *sep, *maxsplit)
                                             : py_string::RSplit(s, *sep, *maxsplit)) {
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
