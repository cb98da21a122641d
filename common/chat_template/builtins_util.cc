#include "common/chat_template/builtins_util.h"

#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/chat_template/py_string.h"

namespace llmserve::common::builtins::internal {

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

}  // namespace llmserve::common::builtins::internal
