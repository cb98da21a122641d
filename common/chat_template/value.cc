#include "common/chat_template/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/chat_template/ast.h"
#include "common/chat_template/py_string.h"
#include "common/status/status_macros.h"

namespace llmserve::common {

const Value* ValueDict::Find(const std::string& key) const {
  for (const auto& [k, v] : items_) {
    if (k == key) return &v;
  }
  return nullptr;
}

void ValueDict::Set(const std::string& key, Value value) {
  for (auto& [k, v] : items_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  items_.emplace_back(key, std::move(value));
}

namespace {
constexpr char kIntKeyPrefix[] = "\x1f\x1fint:";
}  // namespace

std::optional<std::string> ValueDict::EncodeKey(const Value& key) {
  if (key.is_string()) return key.as_string();
  if (key.is_int()) return absl::StrCat(kIntKeyPrefix, key.as_int());
  if (key.is_bool()) return absl::StrCat(kIntKeyPrefix, key.as_bool() ? 1 : 0);
  return std::nullopt;
}

Value ValueDict::KeyValue(const std::string& stored) {
  int64_t i;
  if (absl::StartsWith(stored, kIntKeyPrefix) &&
      absl::SimpleAtoi(absl::string_view(stored).substr(sizeof(kIntKeyPrefix) - 1), &i)) {
    return Value::Int(i);
  }
  return Value::String(stored);
}

void ValueDict::Append(std::string key, Value value) {
  items_.emplace_back(std::move(key), std::move(value));
}

Value Value::List(ValueList items) {
  int depth = 0;
  for (const Value& item : items) depth = std::max(depth, item.depth());
  Value value(std::shared_ptr<const ValueList>(std::make_shared<ValueList>(std::move(items))));
  value.depth_ = depth + 1;
  return value;
}

Value Value::Tuple(ValueList items) {
  Value value = List(std::move(items));
  value.tuple_ = true;
  return value;
}

Value Value::Dict(ValueDict dict) {
  int depth = 0;
  for (const auto& item : dict.items()) depth = std::max(depth, item.second.depth());
  Value value(std::shared_ptr<const ValueDict>(std::make_shared<ValueDict>(std::move(dict))));
  value.depth_ = depth + 1;
  return value;
}

Value Value::Namespace(ValueDict attrs) {
  Value value(NamespacePtr{std::make_shared<ValueDict>(std::move(attrs))});
  value.depth_ = 1;
  return value;
}

Value Value::Macro(const ast::Stmt* definition, std::shared_ptr<const ValueDict> closure) {
  FunctionTag tag;
  tag.name = "macro";
  tag.macro = definition;
  tag.closure = std::move(closure);
  Value value(std::move(tag));
  value.depth_ = 1;
  return value;
}

Value Value::Caller(int64_t frame) {
  FunctionTag tag;
  tag.name = "caller";
  tag.frame = frame;
  return Value(std::move(tag));
}

double Value::ToDouble() const {
  if (is_float()) return as_float();
  if (is_int()) return static_cast<double>(as_int());
  if (is_bool()) return as_bool() ? 1.0 : 0.0;
  return 0.0;
}

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

std::string FloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // The shortest round-trip digits in scientific form, re-laid out the way Python's repr does:
  // positional when -4 <= exponent < 16, else d.ddde+XX.
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  if (ec != std::errc()) return "nan";
  std::string sci(buf, end);
  const size_t e_pos = sci.find('e');
  const int exponent = std::atoi(sci.c_str() + e_pos + 1);
  std::string mantissa = sci.substr(0, e_pos);
  const bool negative = !mantissa.empty() && mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits.push_back(c);
  }
  std::string out = negative ? "-" : "";
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out += "0.";
      out.append(static_cast<size_t>(-exponent - 1), '0');
      out += digits;
    } else if (static_cast<size_t>(exponent) + 1 >= digits.size()) {
      out += digits;
      out.append(static_cast<size_t>(exponent) + 1 - digits.size(), '0');
      out += ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(exponent) + 1);
      out += ".";
      out += digits.substr(static_cast<size_t>(exponent) + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) {
    out += ".";
    out += digits.substr(1);
  }
  absl::StrAppend(&out, "e", exponent < 0 ? "-" : "+", exponent < 10 && exponent > -10 ? "0" : "",
                  std::abs(exponent));
  return out;
}

bool Value::Truthy() const {
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return as_bool();
    case Kind::kInt:
      return as_int() != 0;
    case Kind::kFloat:
      return as_float() != 0.0;
    case Kind::kString:
      return !as_string().empty();
    case Kind::kList:
      return !as_list().empty();
    case Kind::kDict:
      return !as_dict().items().empty();
    case Kind::kNamespace:
    case Kind::kFunction:
      return true;
  }
  return false;
}

const char* Value::TypeName() const {
  switch (kind()) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return "list";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kFunction:
      return "function";
  }
  return "?";
}

bool ValuesEqual(const Value& a, const Value& b) {
  using Kind = Value::Kind;
  const bool a_num = a.is_int() || a.is_bool();
  const bool b_num = b.is_int() || b.is_bool();
  if (a.is_float() || b.is_float()) {
    return a.is_number() && b.is_number() && a.ToDouble() == b.ToDouble();
  }
  if (a_num && b_num) {
    const int64_t x = a.is_int() ? a.as_int() : a.as_bool();
    const int64_t y = b.is_int() ? b.as_int() : b.as_bool();
    return x == y;
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return a.as_string() == b.as_string();
    case Kind::kList: {
      const ValueList& x = a.as_list();
      const ValueList& y = b.as_list();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!ValuesEqual(x[i], y[i])) return false;
      }
      return true;
    }
    case Kind::kDict: {
      const auto& x = a.as_dict().items();
      if (x.size() != b.as_dict().items().size()) return false;
      for (const auto& [k, v] : x) {
        const Value* other = b.as_dict().Find(k);
        if (other == nullptr || !ValuesEqual(v, *other)) return false;
      }
      return true;
    }
    case Kind::kNamespace:
      return &a.namespace_attrs() == &b.namespace_attrs();
    case Kind::kFunction:
      return a.function_name() == b.function_name() && a.macro() == b.macro() &&
             a.caller_frame() == b.caller_frame();
    default:
      return false;
  }
}

namespace {
std::string MacroName(const Value& value) { return value.macro()->text; }
}  // namespace

std::string ToPythonStr(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kString:
      return value.as_string();
    default:
      return ToPythonRepr(value);
  }
}

std::string ToPythonRepr(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return value.as_bool() ? "True" : "False";
    case Value::Kind::kInt:
      return absl::StrCat(value.as_int());
    case Value::Kind::kFloat:
      return FloatRepr(value.as_float());
    case Value::Kind::kString:
      return py_string::Repr(value.as_string());
    case Value::Kind::kList: {
      std::string out = value.is_tuple() ? "(" : "[";
      const ValueList& items = value.as_list();
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out.append(", ");
        out.append(ToPythonRepr(items[i]));
      }
      if (value.is_tuple() && items.size() == 1) out.push_back(',');
      out.push_back(value.is_tuple() ? ')' : ']');
      return out;
    }
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: {
      const ValueDict& dict = value.is_dict()
                                  ? value.as_dict()
                                  : static_cast<const ValueDict&>(value.namespace_attrs());
      std::string out = value.is_dict() ? "{" : "<Namespace {";
      bool first = true;
      for (const auto& [k, v] : dict.items()) {
        if (!first) out.append(", ");
        first = false;
        absl::StrAppend(&out, ToPythonRepr(ValueDict::KeyValue(k)), ": ", ToPythonRepr(v));
      }
      out.append(value.is_dict() ? "}" : "}>");
      return out;
    }
    case Value::Kind::kFunction:
      if (value.macro() != nullptr) return absl::StrCat("<Macro '", MacroName(value), "'>");
      return absl::StrCat("<function ", value.function_name(), ">");
  }
  return "";
}

namespace {

void AppendJsonString(const std::string& s, bool ensure_ascii, std::string* out) {
  out->push_back('"');
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      case '\b':
        out->append("\\b");
        break;
      case '\f':
        out->append("\\f");
        break;
      default: {
        const unsigned char u = static_cast<unsigned char>(c);
        if (u < 0x20 || (ensure_ascii && u == 0x7f)) {
          out->append(absl::StrFormat("\\u%04x", u));
        } else if (ensure_ascii && u >= 0x80) {
          // One code point as \uXXXX (a surrogate pair above U+FFFF); an invalid byte as itself
          // escaped, as Python would see it after surrogateescape.
          std::string_view rest(s.data() + i, s.size() - i);
          const std::vector<std::string_view> cps = py_string::CodePoints(rest.substr(0, 4));
          const std::string_view cp = cps.empty() ? rest.substr(0, 1) : cps[0];
          uint32_t code = u;
          if (cp.size() == 2) {
            code = ((u & 0x1f) << 6) | (cp[1] & 0x3f);
          } else if (cp.size() == 3) {
            code = ((u & 0x0f) << 12) | ((cp[1] & 0x3f) << 6) | (cp[2] & 0x3f);
          } else if (cp.size() == 4) {
            code = ((u & 0x07) << 18) | ((cp[1] & 0x3f) << 12) | ((cp[2] & 0x3f) << 6) |
                   (cp[3] & 0x3f);
          }
          if (code >= 0x10000) {
            code -= 0x10000;
            out->append(
                absl::StrFormat("\\u%04x\\u%04x", 0xd800 + (code >> 10), 0xdc00 + (code & 0x3ff)));
          } else {
            out->append(absl::StrFormat("\\u%04x", code));
          }
          i += cp.size() - 1;
        } else {
          out->push_back(c);
        }
      }
    }
  }
  out->push_back('"');
}

// Python's json encoder: with an indent, items go on their own lines and the item separator is
// "," (no trailing space); without, everything is on one line with ", " and ": ".
absl::Status AppendJson(const Value& value, const JsonOptions& options, int depth,
                        std::string* out) {
  if (depth > 64) return absl::InvalidArgumentError("tojson: value nested too deeply");
  const int indent = options.indent;
  auto newline = [&](int level) {
    if (indent < 0) return;
    out->push_back('\n');
    out->append(static_cast<size_t>(indent) * static_cast<size_t>(level), ' ');
  };
  const std::string item_sep =
      options.item_separator.value_or(indent < 0 ? std::string(", ") : std::string(","));
  const std::string key_sep = options.key_separator.value_or(": ");
  switch (value.kind()) {
    case Value::Kind::kNone:
      out->append("null");
      return absl::OkStatus();
    case Value::Kind::kBool:
      out->append(value.as_bool() ? "true" : "false");
      return absl::OkStatus();
    case Value::Kind::kInt:
      absl::StrAppend(out, value.as_int());
      return absl::OkStatus();
    case Value::Kind::kFloat: {
      // json.dumps writes float.__repr__, and Infinity/NaN for the non-finite.
      const double d = value.as_float();
      if (std::isnan(d)) {
        out->append("NaN");
      } else if (std::isinf(d)) {
        out->append(d > 0 ? "Infinity" : "-Infinity");
      } else {
        out->append(FloatRepr(d));
      }
      return absl::OkStatus();
    }
    case Value::Kind::kString:
      AppendJsonString(value.as_string(), options.ensure_ascii, out);
      return absl::OkStatus();
    case Value::Kind::kList: {
      const ValueList& items = value.as_list();
      if (items.empty()) {
        out->append("[]");
        return absl::OkStatus();
      }
      out->push_back('[');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out->append(item_sep);
        newline(depth + 1);
        LLMSERVE_RETURN_IF_ERROR(AppendJson(items[i], options, depth + 1, out));
      }
      newline(depth);
      out->push_back(']');
      return absl::OkStatus();
    }
    case Value::Kind::kDict: {
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& item : value.as_dict().items()) items.push_back(&item);
      if (items.empty()) {
        out->append("{}");
        return absl::OkStatus();
      }
      if (options.sort_keys) {
        std::stable_sort(items.begin(), items.end(),
                         [](const auto* a, const auto* b) { return a->first < b->first; });
      }
      out->push_back('{');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out->append(item_sep);
        newline(depth + 1);
        // json.dumps writes integer keys as strings.
        AppendJsonString(ToPythonStr(ValueDict::KeyValue(items[i]->first)), options.ensure_ascii,
                         out);
        out->append(key_sep);
        LLMSERVE_RETURN_IF_ERROR(AppendJson(items[i]->second, options, depth + 1, out));
      }
      newline(depth);
      out->push_back('}');
      return absl::OkStatus();
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("Object of type ", value.TypeName(), " is not JSON serializable"));
  }
}

}  // namespace

absl::StatusOr<std::string> ToJson(const Value& value, const JsonOptions& options) {
  std::string out;
  LLMSERVE_RETURN_IF_ERROR(AppendJson(value, options, 0, &out));
  return out;
}

absl::StatusOr<std::string> ToJson(const Value& value, int indent) {
  JsonOptions options;
  options.indent = indent;
  return ToJson(value, options);
}

}  // namespace llmserve::common
