// The values a chat template computes with: Python's None/bool/int/str/list/dict as Jinja sees
// them, plus Jinja's Undefined, namespace() objects and the few callables templates use.
//
// Lists and dicts are immutable and shared (copying a Value is cheap), as in HF's
// ImmutableSandboxedEnvironment; only a namespace is mutable, through `{% set ns.x = ... %}`,
// and it is shared by reference like a Python object.
//
// Thread-safety: a Value is not synchronized; values live inside one Render call.
#ifndef LLMSERVE_COMMON_CHAT_TEMPLATE_VALUE_H_
#define LLMSERVE_COMMON_CHAT_TEMPLATE_VALUE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"

namespace llmserve::common {

namespace ast {
struct Stmt;
}  // namespace ast

class Value;
using ValueList = std::vector<Value>;

// A dict with string keys in insertion order (Python dicts keep it; tojson and printing show it).
// Chat-template dicts are small, so lookups are linear.
class ValueDict {
 public:
  const Value* Find(const std::string& key) const;
  void Set(const std::string& key, Value value);
  // Adds a key known not to be present (no search: for building from a map).
  void Append(std::string key, Value value);
  const std::vector<std::pair<std::string, Value>>& items() const { return items_; }

  // Python dicts may have integer keys ({0: 'a'}); they are stored under an encoded string
  // that no JSON or template string key collides with in practice. EncodeKey gives the stored
  // key of a str/int/bool (nullopt for other types); KeyValue turns a stored key back into the
  // Value a template sees.
  static std::optional<std::string> EncodeKey(const Value& key);
  static Value KeyValue(const std::string& stored);

 private:
  std::vector<std::pair<std::string, Value>> items_;
};

class Value {
 public:
  enum class Kind {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kString,
    kList,
    kDict,
    kNamespace,
    kFunction,
    kFloat
  };

  // Undefined. `hint` says what was missing ("'foo' is undefined"), for the error raised when
  // the template uses it in a way Jinja refuses (arithmetic, attribute access, calls).
  Value() : data_(Undefined{}) {}
  static Value MakeUndefined(std::string hint) { return Value(Undefined{std::move(hint)}); }
  static Value None() { return Value(NoneTag{}); }
  static Value Bool(bool b) { return Value(b); }
  static Value Int(int64_t i) { return Value(i); }
  static Value Float(double d) { return Value(d); }
  static Value String(std::string s) { return Value(std::move(s)); }
  // A markupsafe.Markup string (`x | safe`, `x | escape`): a plain string that, added with +
  // to another string, HTML-escapes the other one (Markup.__add__/__radd__). Everything else
  // treats it as a string.
  static Value SafeString(std::string s) {
    Value v(std::move(s));
    v.safe_ = true;
    return v;
  }
  static Value List(ValueList items);
  // A Python tuple: a list that prints as (a, b). Templates only iterate, index and print them.
  static Value Tuple(ValueList items);
  static Value Dict(ValueDict dict);
  static Value Namespace(ValueDict attrs);
  // A global callable (raise_exception, namespace, range, ...) looked up by name.
  static Value Function(std::string name) { return Value(FunctionTag{std::move(name)}); }
  // A {% macro %}: its definition (the parsed tree outlives every render) and, for a macro
  // defined inside a loop or another macro, the variables it saw there (jinja2 closures).
  static Value Macro(const ast::Stmt* definition, std::shared_ptr<const ValueDict> closure);
  // The `caller` of a {% call %} block: an id the renderer resolves while the block runs (the
  // value may outlive the block; calling it then is an error, not a dangling reference).
  static Value Caller(int64_t frame);

  Kind kind() const { return static_cast<Kind>(data_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_int() const { return kind() == Kind::kInt; }
  bool is_bool() const { return kind() == Kind::kBool; }
  bool is_list() const { return kind() == Kind::kList; }
  bool is_tuple() const { return tuple_; }
  bool is_safe() const { return safe_; }
  bool is_dict() const { return kind() == Kind::kDict; }
  bool is_namespace() const { return kind() == Kind::kNamespace; }
  bool is_function() const { return kind() == Kind::kFunction; }
  bool is_float() const { return kind() == Kind::kFloat; }
  // int, bool or float: what Python arithmetic accepts.
  bool is_number() const { return is_int() || is_bool() || is_float(); }

  // Accessors; each requires the matching kind.
  const std::string& undefined_hint() const { return std::get<Undefined>(data_).hint; }
  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const { return std::get<int64_t>(data_); }
  const std::string& as_string() const { return std::get<std::string>(data_); }
  const ValueList& as_list() const { return *std::get<std::shared_ptr<const ValueList>>(data_); }
  const ValueDict& as_dict() const { return *std::get<std::shared_ptr<const ValueDict>>(data_); }
  // The namespace's attributes; mutable through a const Value because a namespace is a shared
  // object (assigning through one copy is seen by all).
  ValueDict& namespace_attrs() const { return *std::get<NamespacePtr>(data_).attrs; }
  double as_float() const { return std::get<double>(data_); }
  // A number as a double (int, bool or float).
  double ToDouble() const;
  const std::string& function_name() const { return std::get<FunctionTag>(data_).name; }
  // For Macro values: the definition and closure; null otherwise.
  const ast::Stmt* macro() const { return std::get<FunctionTag>(data_).macro; }
  const std::shared_ptr<const ValueDict>& macro_closure() const {
    return std::get<FunctionTag>(data_).closure;
  }
  // For Caller values: the frame id; -1 otherwise.
  int64_t caller_frame() const { return std::get<FunctionTag>(data_).frame; }

  // How deeply lists and dicts nest in this value (0 for a scalar, 1 for a flat list; a
  // namespace counts 1). The renderer bounds it so that printing, comparing and destroying a
  // value never recurses deeply.
  int depth() const { return depth_; }

  // Python's truth value: empty strings/lists/dicts, 0, None, False and Undefined are false.
  bool Truthy() const;

  // Python's type name as Jinja's errors show it ("str", "int", "list", "dict", ...).
  const char* TypeName() const;

 private:
  struct Undefined {
    std::string hint;
  };
  struct NoneTag {};
  struct NamespacePtr {
    std::shared_ptr<ValueDict> attrs;
  };
  struct FunctionTag {
    std::string name;
    const ast::Stmt* macro = nullptr;
    std::shared_ptr<const ValueDict> closure;
    int64_t frame = -1;
  };
  // Order matches Kind.
  using Data =
      std::variant<Undefined, NoneTag, bool, int64_t, std::string, std::shared_ptr<const ValueList>,
                   std::shared_ptr<const ValueDict>, NamespacePtr, FunctionTag, double>;
  template <typename T>
  explicit Value(T data) : data_(std::move(data)) {}

  Data data_;
  int depth_ = 0;
  bool tuple_ = false;
  bool safe_ = false;
};

// markupsafe.escape(s): & < > " ' as HTML entities.
std::string HtmlEscape(const std::string& s);

// Python's `==` for the kinds above (True == 1 as in Python; Undefined equals only Undefined).
bool ValuesEqual(const Value& a, const Value& b);

// Python's str(value), which is what `{{ value }}` prints: None -> "None", True -> "True",
// lists and dicts in repr form (['a', 1]). Undefined prints as "".
std::string ToPythonStr(const Value& value);

// Python's repr(value) (strings quoted as Python quotes them).
std::string ToPythonRepr(const Value& value);

// Python's repr(float): the shortest digits that round-trip, "1.0", "1e+16", "inf", "nan".
std::string FloatRepr(double d);

// json.dumps's arguments as transformers' `tojson` filter passes them.
struct JsonOptions {
  int indent = -1;  // < 0: None (one line)
  bool ensure_ascii = false;
  bool sort_keys = false;
  // Unset: ", " and ": " without an indent, "," and ": " with one (Python's defaults).
  std::optional<std::string> item_separator;
  std::optional<std::string> key_separator;
};

// json.dumps(value, ...) as HF's `tojson` filter calls it. Undefined, namespaces and functions
// are not JSON serializable: INVALID_ARGUMENT.
absl::StatusOr<std::string> ToJson(const Value& value, const JsonOptions& options);
absl::StatusOr<std::string> ToJson(const Value& value, int indent);

}  // namespace llmserve::common

#endif  // LLMSERVE_COMMON_CHAT_TEMPLATE_VALUE_H_
