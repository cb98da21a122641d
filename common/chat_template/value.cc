#include "common/chat_template/value.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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

bool Value::Truthy() const {
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return as_bool();
    case Kind::kInt:
      return as_int() != 0;
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
      return a.function_name() == b.function_name();
    default:
      return false;
  }
}

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
        absl::StrAppend(&out, py_string::Repr(k), ": ", ToPythonRepr(v));
      }
      out.append(value.is_dict() ? "}" : "}>");
      return out;
    }
    case Value::Kind::kFunction:
      return absl::StrCat("<function ", value.function_name(), ">");
  }
  return "";
}

namespace {

void AppendJsonString(const std::string& s, std::string* out) {
  out->push_back('"');
  for (const char c : s) {
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
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out->append(absl::StrFormat("\\u%04x", static_cast<unsigned char>(c)));
        } else {
          out->push_back(c);
        }
    }
  }
  out->push_back('"');
}

// Python's json encoder: with an indent, items go on their own lines and the item separator is
// "," (no trailing space); without, everything is on one line with ", " and ": ".
absl::Status AppendJson(const Value& value, int indent, int depth, std::string* out) {
  if (depth > 64) return absl::InvalidArgumentError("tojson: value nested too deeply");
  auto newline = [&](int level) {
    if (indent < 0) return;
    out->push_back('\n');
    out->append(static_cast<size_t>(indent) * static_cast<size_t>(level), ' ');
  };
  const char* item_sep = indent < 0 ? ", " : ",";
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
    case Value::Kind::kString:
      AppendJsonString(value.as_string(), out);
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
        LLMSERVE_RETURN_IF_ERROR(AppendJson(items[i], indent, depth + 1, out));
      }
      newline(depth);
      out->push_back(']');
      return absl::OkStatus();
    }
    case Value::Kind::kDict: {
      const auto& items = value.as_dict().items();
      if (items.empty()) {
        out->append("{}");
        return absl::OkStatus();
      }
      out->push_back('{');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out->append(item_sep);
        newline(depth + 1);
        AppendJsonString(items[i].first, out);
        out->append(": ");
        LLMSERVE_RETURN_IF_ERROR(AppendJson(items[i].second, indent, depth + 1, out));
      }
      newline(depth);
      out->push_back('}');
      return absl::OkStatus();
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("tojson: object of type ", value.TypeName(), " is not JSON serializable"));
  }
}

}  // namespace

absl::StatusOr<std::string> ToJson(const Value& value, int indent) {
  std::string out;
  LLMSERVE_RETURN_IF_ERROR(AppendJson(value, indent, 0, &out));
  return out;
}

}  // namespace llmserve::common
