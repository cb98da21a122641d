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
#include "common/chat_template/builtins_util.h"
#include "common/chat_template/py_string.h"
#include "common/status/status_macros.h"

namespace llmserve::common::builtins {
namespace {

using internal::Args;
using internal::GetAttribute;
using internal::GetAttributePath;
using internal::Iterate;
using internal::Order;
using internal::SplitLines;
using internal::TypeError;
using internal::UndefinedError;

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

}  // namespace

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
    return CallMethod(Value::String(ToPythonStr(value)), "replace", args, kwargs);
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
    return CallMethod(value, "items", {}, {});
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

}  // namespace llmserve::common::builtins
