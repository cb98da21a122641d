#include "common/chat_template/renderer.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/chat_template/builtins.h"
#include "common/chat_template/builtins_util.h"
#include "common/chat_template/globals.h"
#include "common/chat_template/parser.h"
#include "common/chat_template/py_string.h"
#include "common/status/status_macros.h"

namespace llmserve::common {
namespace {

using ast::Body;
using ast::Expr;
using ast::ExprKind;
using ast::Stmt;
using ast::StmtKind;

// Values nest this deep at most (a nested list built in a loop would otherwise make printing
// and destroying it recurse without bound).
constexpr int kMaxValueDepth = 64;

enum class Flow { kNormal, kBreak, kContinue };

// Macro and caller() calls nest this deep at most: a recursive macro must fail, not overflow
// the stack (each level costs a few recursive evaluation frames).
constexpr int kMaxCallDepth = 64;

constexpr const char* kGlobalFunctions[] = {"raise_exception", "namespace", "range", "dict",
                                            "strftime_now"};

absl::Status AtPos(SourcePos pos, const absl::Status& status) {
  return absl::Status(status.code(), TemplateErrorMessage(pos, std::string(status.message())));
}

absl::Status ErrorAt(SourcePos pos, const std::string& message) {
  return absl::InvalidArgumentError(TemplateErrorMessage(pos, message));
}

absl::Status UndefinedErrorAt(SourcePos pos, const Value& value) {
  return ErrorAt(pos,
                 value.undefined_hint().empty() ? "value is undefined" : value.undefined_hint());
}

std::string OperandTypes(const char* op, const Value& a, const Value& b) {
  return absl::StrCat("unsupported operand type(s) for ", op, ": '", a.TypeName(), "' and '",
                      b.TypeName(), "'");
}

// Python's floor division and modulo.
int64_t FloorDiv(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
int64_t FloorMod(int64_t a, int64_t b) {
  const int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

bool IsNumber(const Value& v) { return v.is_int() || v.is_bool(); }
int64_t AsNumber(const Value& v) { return v.is_int() ? v.as_int() : v.as_bool(); }

// Bytes a value holds, for the allocation budget (capped to avoid overflow).
int64_t ApproxSize(const Value& v) {
  if (v.is_string()) return static_cast<int64_t>(v.as_string().size()) + 16;
  if (v.is_list()) {
    int64_t total = 16;
    for (const Value& item : v.as_list()) {
      total += ApproxSize(item);
      if (total > (int64_t{1} << 40)) return total;
    }
    return total;
  }
  return 16;
}

class Renderer {
 public:
  Renderer(const ValueDict& globals, const RenderLimits& limits, absl::Time now)
      : limits_(limits), now_(now) {
    PushScope();
    for (const auto& [name, value] : globals.items()) (*chain_.back())[name] = value;
    for (const char* function : kGlobalFunctions) {
      (*chain_.back())[function] = Value::Function(function);
    }
    PushScope();  // the template's own top-level variables
  }

  absl::StatusOr<std::string> Run(const Body& body) {
    absl::StatusOr<Flow> flow = ExecBody(body);
    if (!flow.ok()) return flow.status();
    return std::move(out_);
  }

 private:
  using Scope = absl::flat_hash_map<std::string, Value>;

  // Scopes live in storage_ (pushed and popped in nesting order); chain_ is what the code
  // running now sees, innermost last. A macro runs with a chain of its own (globals, the
  // template's top level, its closure, its locals) and a caller() body with its call site's.
  void PushScope() {
    storage_.emplace_back();
    chain_.push_back(&storage_.back());
  }
  void PopScope() {
    chain_.pop_back();
    storage_.pop_back();
  }
  class ScopeGuard {
   public:
    explicit ScopeGuard(Renderer* r) : r_(r) { r_->PushScope(); }
    ~ScopeGuard() { r_->PopScope(); }

   private:
    Renderer* r_;
  };
  // Runs with `chain` as the visible scopes, restoring the current chain afterwards.
  class ChainSwap {
   public:
    ChainSwap(Renderer* r, std::vector<Scope*> chain) : r_(r), saved_(std::move(r->chain_)) {
      r_->chain_ = std::move(chain);
    }
    ~ChainSwap() { r_->chain_ = std::move(saved_); }

   private:
    Renderer* r_;
    std::vector<Scope*> saved_;
  };

  // Counts `n` steps (copying n variables costs n, so that closures cannot multiply work).
  absl::Status Step(SourcePos pos, int64_t n = 1) {
    steps_ += n;
    if (steps_ > limits_.max_steps) {
      return absl::OutOfRangeError(TemplateErrorMessage(
          pos, absl::StrCat("rendering exceeded ", limits_.max_steps, " evaluation steps")));
    }
    return absl::OkStatus();
  }

  absl::Status Charge(SourcePos pos, int64_t bytes) {
    allocated_ += bytes;
    if (allocated_ > limits_.max_allocated_bytes) {
      return absl::OutOfRangeError(
          TemplateErrorMessage(pos, absl::StrCat("rendering built more than ",
                                                 limits_.max_allocated_bytes, " bytes of values")));
    }
    return absl::OkStatus();
  }

  // Bounds on every value an expression produces.
  absl::Status CheckValue(SourcePos pos, const Value& v) {
    if (v.depth() > kMaxValueDepth) return ErrorAt(pos, "value nested too deeply");
    if (v.is_string() && v.as_string().size() > limits_.max_output_bytes) {
      return absl::OutOfRangeError(TemplateErrorMessage(
          pos, absl::StrCat("a string exceeded ", limits_.max_output_bytes, " bytes")));
    }
    if (v.is_list() && v.as_list().size() > limits_.max_output_bytes) {
      return absl::OutOfRangeError(TemplateErrorMessage(pos, "a list grew too long"));
    }
    return absl::OkStatus();
  }

  absl::Status Emit(SourcePos pos, const std::string& text) {
    if (out_.size() + text.size() > limits_.max_output_bytes) {
      return absl::OutOfRangeError(TemplateErrorMessage(
          pos, absl::StrCat("rendered prompt exceeds ", limits_.max_output_bytes, " bytes")));
    }
    out_.append(text);
    return absl::OkStatus();
  }

  const Value* Lookup(const std::string& name) const {
    for (auto it = chain_.rbegin(); it != chain_.rend(); ++it) {
      const auto found = (*it)->find(name);
      if (found != (*it)->end()) return &found->second;
    }
    return nullptr;
  }

  // ---- statements ----

  absl::StatusOr<Flow> ExecBody(const Body& body) {
    for (const auto& stmt : body) {
      absl::StatusOr<Flow> flow = Exec(*stmt);
      if (!flow.ok() || *flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  absl::StatusOr<Flow> Exec(const Stmt& stmt) {
    LLMSERVE_RETURN_IF_ERROR(Step(stmt.pos));
    switch (stmt.kind) {
      case StmtKind::kText:
        LLMSERVE_RETURN_IF_ERROR(Emit(stmt.pos, stmt.text));
        return Flow::kNormal;
      case StmtKind::kOutput: {
        absl::StatusOr<Value> v = Eval(*stmt.expr);
        if (!v.ok()) return v.status();
        LLMSERVE_RETURN_IF_ERROR(Emit(stmt.pos, ToPythonStr(*v)));
        return Flow::kNormal;
      }
      case StmtKind::kIf:
        for (const auto& [cond, body] : stmt.branches) {
          absl::StatusOr<Value> c = Eval(*cond);
          if (!c.ok()) return c.status();
          if (c->Truthy()) return ExecBody(body);
        }
        return ExecBody(stmt.else_body);
      case StmtKind::kFor:
        return ExecFor(stmt);
      case StmtKind::kSet:
        return ExecSet(stmt);
      case StmtKind::kSetBlock: {
        const size_t start = out_.size();
        absl::StatusOr<Flow> flow = ExecBody(stmt.body);
        if (!flow.ok()) return flow;
        Value captured = Value::String(out_.substr(start));
        out_.resize(start);
        (*chain_.back())[stmt.targets[0]] = std::move(captured);
        return *flow;
      }
      case StmtKind::kMacro: {
        absl::StatusOr<std::shared_ptr<const ValueDict>> closure = Closure(stmt.pos);
        if (!closure.ok()) return closure.status();
        (*chain_.back())[stmt.text] = Value::Macro(&stmt, *std::move(closure));
        return Flow::kNormal;
      }
      case StmtKind::kCallBlock: {
        absl::StatusOr<Value> result = ExecCallBlock(stmt);
        if (!result.ok()) return result.status();
        LLMSERVE_RETURN_IF_ERROR(Emit(stmt.pos, ToPythonStr(*result)));
        return Flow::kNormal;
      }
      case StmtKind::kFilterBlock: {
        const size_t start = out_.size();
        absl::StatusOr<Flow> flow = ExecBody(stmt.body);
        if (!flow.ok()) return flow;
        Value captured = Value::String(out_.substr(start));
        out_.resize(start);
        ScopeGuard scope(this);
        (*chain_.back())[ast::kFilterBlockInput] = std::move(captured);
        absl::StatusOr<Value> filtered = Eval(*stmt.expr);
        if (!filtered.ok()) return filtered.status();
        LLMSERVE_RETURN_IF_ERROR(Emit(stmt.pos, ToPythonStr(*filtered)));
        return *flow;
      }
      case StmtKind::kBreak:
        return Flow::kBreak;
      case StmtKind::kContinue:
        return Flow::kContinue;
      case StmtKind::kBlock:
        return ExecBody(stmt.body);
    }
    return Flow::kNormal;
  }

  absl::StatusOr<Flow> ExecSet(const Stmt& stmt) {
    absl::StatusOr<Value> v = Eval(*stmt.expr);
    if (!v.ok()) return v.status();
    if (stmt.attr.empty()) {
      (*chain_.back())[stmt.targets[0]] = *std::move(v);
      return Flow::kNormal;
    }
    const Value* target = Lookup(stmt.targets[0]);
    if (target == nullptr || !target->is_namespace()) {
      return ErrorAt(stmt.pos, absl::StrCat("cannot assign attribute '", stmt.attr,
                                            "' on non-namespace object '", stmt.targets[0], "'"));
    }
    // A namespace inside a namespace could form a cycle; no chat template needs one.
    // A macro's closure may hold this very namespace: storing the macro would form a cycle.
    if (v->is_namespace() || v->depth() > kMaxValueDepth / 2 ||
        (v->is_function() && v->macro_closure() != nullptr)) {
      return ErrorAt(stmt.pos,
                     "a namespace attribute cannot hold a namespace, a nested macro or a deep "
                     "value");
    }
    target->namespace_attrs().Set(stmt.attr, *std::move(v));
    return Flow::kNormal;
  }

  absl::StatusOr<ValueList> Iterable(SourcePos pos, const Value& v) {
    switch (v.kind()) {
      case Value::Kind::kUndefined:
        return ValueList{};
      case Value::Kind::kList:
        return v.as_list();
      case Value::Kind::kDict: {
        ValueList keys;
        for (const auto& item : v.as_dict().items()) {
          keys.push_back(ValueDict::KeyValue(item.first));
        }
        return keys;
      }
      case Value::Kind::kString: {
        ValueList chars;
        for (std::string_view cp : py_string::CodePoints(v.as_string())) {
          chars.push_back(Value::String(std::string(cp)));
        }
        return chars;
      }
      default:
        return ErrorAt(pos, absl::StrCat("'", v.TypeName(), "' object is not iterable"));
    }
  }

  absl::Status Bind(const Stmt& stmt, const Value& item, Scope* scope) {
    if (stmt.targets.size() == 1) {
      (*scope)[stmt.targets[0]] = item;
      return absl::OkStatus();
    }
    if (!item.is_list() || item.as_list().size() != stmt.targets.size()) {
      return ErrorAt(stmt.pos, absl::StrCat("cannot unpack a ", item.TypeName(), " into ",
                                            stmt.targets.size(), " loop variables"));
    }
    for (size_t i = 0; i < stmt.targets.size(); ++i) {
      (*scope)[stmt.targets[i]] = item.as_list()[i];
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Flow> ExecFor(const Stmt& stmt) {
    absl::StatusOr<Value> iterable = Eval(*stmt.expr);
    if (!iterable.ok()) return iterable.status();
    absl::StatusOr<ValueList> all = Iterable(stmt.expr->pos, *iterable);
    if (!all.ok()) return all.status();
    ValueList items;
    if (stmt.filter == nullptr) {
      items = *std::move(all);
    } else {
      // `for x in xs if cond`: filtered before the loop, so loop.length counts what passes.
      for (const Value& item : *all) {
        LLMSERVE_RETURN_IF_ERROR(Step(stmt.pos));
        PushScope();
        absl::Status bound = Bind(stmt, item, chain_.back());
        absl::StatusOr<Value> keep = bound.ok() ? Eval(*stmt.filter) : bound;
        PopScope();
        if (!keep.ok()) return keep.status();
        if (keep->Truthy()) items.push_back(item);
      }
    }
    if (items.empty()) return ExecBody(stmt.else_body);
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      LLMSERVE_RETURN_IF_ERROR(Step(stmt.pos));
      PushScope();
      absl::Status bound = Bind(stmt, items[static_cast<size_t>(i)], chain_.back());
      if (!bound.ok()) {
        PopScope();
        return bound;
      }
      ValueDict loop;
      loop.Set("index", Value::Int(i + 1));
      loop.Set("index0", Value::Int(i));
      loop.Set("revindex", Value::Int(n - i));
      loop.Set("revindex0", Value::Int(n - i - 1));
      loop.Set("first", Value::Bool(i == 0));
      loop.Set("last", Value::Bool(i == n - 1));
      loop.Set("length", Value::Int(n));
      if (i > 0) loop.Set("previtem", items[static_cast<size_t>(i - 1)]);
      if (i + 1 < n) loop.Set("nextitem", items[static_cast<size_t>(i + 1)]);
      loop.Set("cycle", Value::Function("loop.cycle"));
      (*chain_.back())["loop"] = Value::Dict(std::move(loop));
      absl::StatusOr<Flow> flow = ExecBody(stmt.body);
      PopScope();
      if (!flow.ok()) return flow;
      if (*flow == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  // ---- expressions ----

  absl::StatusOr<Value> Eval(const Expr& e) {
    LLMSERVE_RETURN_IF_ERROR(Step(e.pos));
    absl::StatusOr<Value> v = EvalUnchecked(e);
    if (v.ok()) {
      LLMSERVE_RETURN_IF_ERROR(CheckValue(e.pos, *v));
    }
    return v;
  }

  absl::StatusOr<std::vector<Value>> EvalAll(const std::vector<ast::ExprPtr>& exprs, size_t from) {
    std::vector<Value> values;
    for (size_t i = from; i < exprs.size(); ++i) {
      const bool unpack = exprs[i]->kind == ExprKind::kUnpack;
      absl::StatusOr<Value> v = Eval(unpack ? *exprs[i]->args[0] : *exprs[i]);
      if (!v.ok()) return v.status();
      if (!unpack) {
        values.push_back(*std::move(v));
        continue;
      }
      // *list: what iterating it gives (list items, dict keys, a string's characters).
      absl::StatusOr<ValueList> items = builtins::internal::Iterate(*v, "argument after *");
      if (!items.ok()) return AtPos(exprs[i]->pos, items.status());
      for (Value& item : *items) values.push_back(std::move(item));
    }
    return values;
  }

  absl::StatusOr<builtins::Kwargs> EvalKwargs(const Expr& e) {
    builtins::Kwargs kwargs;
    for (const auto& [name, expr] : e.kwargs) {
      const bool unpack = expr->kind == ExprKind::kUnpack;
      absl::StatusOr<Value> v = Eval(unpack ? *expr->args[0] : *expr);
      if (!v.ok()) return v.status();
      if (!unpack) {
        kwargs.emplace_back(name, *std::move(v));
        continue;
      }
      if (!v->is_dict()) {
        return ErrorAt(expr->pos,
                       absl::StrCat("argument after ** must be a mapping, not ", v->TypeName()));
      }
      for (const auto& [key, item] : v->as_dict().items()) {
        const Value key_value = ValueDict::KeyValue(key);
        if (!key_value.is_string()) {
          return ErrorAt(expr->pos, "keywords must be strings");
        }
        for (const auto& [seen, unused] : kwargs) {
          if (seen == key_value.as_string()) {
            return ErrorAt(expr->pos,
                           absl::StrCat("got multiple values for keyword argument '", seen, "'"));
          }
        }
        kwargs.emplace_back(key_value.as_string(), item);
      }
    }
    return kwargs;
  }

  absl::StatusOr<Value> EvalUnchecked(const Expr& e) {
    switch (e.kind) {
      case ExprKind::kLiteral:
        return e.literal;
      case ExprKind::kName: {
        const Value* v = Lookup(e.name);
        if (v != nullptr) return *v;
        return Value::MakeUndefined(absl::StrCat("'", e.name, "' is undefined"));
      }
      case ExprKind::kList: {
        absl::StatusOr<std::vector<Value>> items = EvalAll(e.args, 0);
        if (!items.ok()) return items.status();
        if (e.name == "tuple") return Value::Tuple(*std::move(items));
        return Value::List(*std::move(items));
      }
      case ExprKind::kDict: {
        ValueDict dict;
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          absl::StatusOr<Value> key = Eval(*e.args[i]);
          if (!key.ok()) return key.status();
          const std::optional<std::string> stored = ValueDict::EncodeKey(*key);
          if (!stored.has_value()) {
            return ErrorAt(e.args[i]->pos, "dict keys must be strings or integers");
          }
          absl::StatusOr<Value> value = Eval(*e.args[i + 1]);
          if (!value.ok()) return value.status();
          dict.Set(*stored, *std::move(value));
        }
        return Value::Dict(std::move(dict));
      }
      case ExprKind::kAttr: {
        absl::StatusOr<Value> object = Eval(*e.args[0]);
        if (!object.ok()) return object.status();
        return GetAttr(e.pos, *object, e.name);
      }
      case ExprKind::kItem: {
        absl::StatusOr<Value> object = Eval(*e.args[0]);
        if (!object.ok()) return object.status();
        absl::StatusOr<Value> key = Eval(*e.args[1]);
        if (!key.ok()) return key.status();
        return GetItem(e.pos, *object, *key);
      }
      case ExprKind::kSlice:
        return EvalSlice(e);
      case ExprKind::kCall:
        return EvalCall(e);
      case ExprKind::kFilter: {
        absl::StatusOr<Value> operand = Eval(*e.args[0]);
        if (!operand.ok()) return operand.status();
        absl::StatusOr<std::vector<Value>> args = EvalAll(e.args, 1);
        if (!args.ok()) return args.status();
        absl::StatusOr<builtins::Kwargs> kwargs = EvalKwargs(e);
        if (!kwargs.ok()) return kwargs.status();
        absl::StatusOr<Value> result = builtins::ApplyFilter(e.name, *operand, *args, *kwargs);
        if (!result.ok()) return AtPos(e.pos, result.status());
        LLMSERVE_RETURN_IF_ERROR(Charge(e.pos, ApproxSize(*result)));
        return result;
      }
      case ExprKind::kTest: {
        absl::StatusOr<Value> operand = Eval(*e.args[0]);
        if (!operand.ok()) return operand.status();
        absl::StatusOr<std::vector<Value>> args = EvalAll(e.args, 1);
        if (!args.ok()) return args.status();
        absl::StatusOr<bool> result = builtins::ApplyTest(e.name, *operand, *args);
        if (!result.ok()) return AtPos(e.pos, result.status());
        return Value::Bool(*result != e.negated);
      }
      case ExprKind::kUnary: {
        absl::StatusOr<Value> operand = Eval(*e.args[0]);
        if (!operand.ok()) return operand.status();
        if (e.name == "not") return Value::Bool(!operand->Truthy());
        if (operand->is_undefined()) return UndefinedErrorAt(e.pos, *operand);
        if (operand->is_float()) {
          return Value::Float(e.name == "-" ? -operand->as_float() : operand->as_float());
        }
        if (!IsNumber(*operand)) {
          return ErrorAt(e.pos, absl::StrCat("bad operand type for unary ", e.name, ": '",
                                             operand->TypeName(), "'"));
        }
        const int64_t x = AsNumber(*operand);
        if (e.name == "+") return Value::Int(x);
        if (x == std::numeric_limits<int64_t>::min()) return ErrorAt(e.pos, "integer overflow");
        return Value::Int(-x);
      }
      case ExprKind::kBinary:
        return EvalBinary(e);
      case ExprKind::kCompare:
        return EvalCompare(e);
      case ExprKind::kUnpack:
        // The parser makes them only in argument lists, which EvalAll and EvalKwargs expand.
        return ErrorAt(e.pos, absl::StrCat("unexpected ", e.name));
      case ExprKind::kCond: {
        absl::StatusOr<Value> cond = Eval(*e.args[1]);
        if (!cond.ok()) return cond.status();
        if (cond->Truthy()) return Eval(*e.args[0]);
        if (e.args[2] == nullptr) {
          return Value::MakeUndefined(
              "the inline if expression evaluated to false and no else "
              "section was defined");
        }
        return Eval(*e.args[2]);
      }
    }
    return ErrorAt(e.pos, "unknown expression");
  }

  static absl::StatusOr<Value> GetAttr(SourcePos pos, const Value& object,
                                       const std::string& name) {
    if (object.is_undefined()) return UndefinedErrorAt(pos, object);
    // jinja2 tries Python's getattr first: methods of str and dict win over dict keys.
    if (builtins::HasMethod(object, name)) {
      return Value::Function(absl::StrCat(object.TypeName(), ".", name));
    }
    const ValueDict* attrs = object.is_dict()        ? &object.as_dict()
                             : object.is_namespace() ? &object.namespace_attrs()
                                                     : nullptr;
    if (attrs != nullptr) {
      if (const Value* found = attrs->Find(name)) return *found;
    }
    return Value::MakeUndefined(
        absl::StrCat("'", object.TypeName(), " object' has no attribute '", name, "'"));
  }

  static absl::StatusOr<Value> GetItem(SourcePos pos, const Value& object, const Value& key) {
    if (object.is_undefined()) return UndefinedErrorAt(pos, object);
    if (key.is_string()) {
      const ValueDict* attrs = object.is_dict()        ? &object.as_dict()
                               : object.is_namespace() ? &object.namespace_attrs()
                                                       : nullptr;
      if (attrs != nullptr) {
        if (const Value* found = attrs->Find(key.as_string())) return *found;
      }
      return Value::MakeUndefined(absl::StrCat(
          "'", object.TypeName(), " object' has no attribute '", key.as_string(), "'"));
    }
    if (object.is_dict() && (key.is_int() || key.is_bool())) {
      if (const Value* found = object.as_dict().Find(*ValueDict::EncodeKey(key))) return *found;
    }
    if (IsNumber(key) && (object.is_list() || object.is_string())) {
      int64_t i = AsNumber(key);
      if (object.is_list()) {
        const int64_t n = static_cast<int64_t>(object.as_list().size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) return object.as_list()[static_cast<size_t>(i)];
      } else {
        const std::vector<std::string_view> cps = py_string::CodePoints(object.as_string());
        const int64_t n = static_cast<int64_t>(cps.size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) return Value::String(std::string(cps[static_cast<size_t>(i)]));
      }
    }
    return Value::MakeUndefined(
        absl::StrCat("'", object.TypeName(), " object' has no item ", ToPythonRepr(key)));
  }

  absl::StatusOr<Value> EvalSlice(const Expr& e) {
    absl::StatusOr<Value> object = Eval(*e.args[0]);
    if (!object.ok()) return object.status();
    if (object->is_undefined()) return UndefinedErrorAt(e.pos, *object);
    int64_t bounds[3] = {0, 0, 1};
    bool given[3] = {false, false, false};
    for (int i = 0; i < 3; ++i) {
      if (e.args[static_cast<size_t>(i) + 1] == nullptr) continue;
      absl::StatusOr<Value> b = Eval(*e.args[static_cast<size_t>(i) + 1]);
      if (!b.ok()) return b.status();
      if (b->is_none()) continue;
      if (!IsNumber(*b)) return ErrorAt(e.pos, "slice indices must be integers or None");
      bounds[i] = AsNumber(*b);
      given[i] = true;
    }
    const int64_t step = given[2] ? bounds[2] : 1;
    if (step == 0) return ErrorAt(e.pos, "slice step cannot be zero");
    std::vector<std::string_view> cps;
    int64_t n = 0;
    if (object->is_list()) {
      n = static_cast<int64_t>(object->as_list().size());
    } else if (object->is_string()) {
      cps = py_string::CodePoints(object->as_string());
      n = static_cast<int64_t>(cps.size());
    } else {
      return ErrorAt(e.pos, absl::StrCat("'", object->TypeName(), "' object is not subscriptable"));
    }
    // Python's slice.indices().
    auto clamp = [&](int64_t v, bool is_given, int64_t fallback) {
      if (!is_given) return fallback;
      if (v < 0) v = std::max<int64_t>(v + n, step < 0 ? -1 : 0);
      return std::min<int64_t>(v, step < 0 ? n - 1 : n);
    };
    const int64_t start = clamp(bounds[0], given[0], step < 0 ? n - 1 : 0);
    const int64_t stop = clamp(bounds[1], given[1], step < 0 ? -1 : n);
    ValueList items;
    std::string text;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (object->is_list()) {
        items.push_back(object->as_list()[static_cast<size_t>(i)]);
      } else {
        text.append(cps[static_cast<size_t>(i)]);
      }
    }
    if (object->is_string()) return Value::String(std::move(text));
    return Value::List(std::move(items));
  }

  // A call; `caller`, when given, is passed as the keyword argument caller= (a call block).
  absl::StatusOr<Value> EvalCall(const Expr& e, const Value* caller = nullptr) {
    const Expr& callee = *e.args[0];
    Value function;
    Value self;
    if (callee.kind == ExprKind::kAttr) {
      absl::StatusOr<Value> object = Eval(*callee.args[0]);
      if (!object.ok()) return object.status();
      if (builtins::HasMethod(*object, callee.name)) {
        absl::StatusOr<std::vector<Value>> args = EvalAll(e.args, 1);
        if (!args.ok()) return args.status();
        absl::StatusOr<builtins::Kwargs> kwargs = EvalKwargs(e);
        if (!kwargs.ok()) return kwargs.status();
        absl::StatusOr<Value> result = builtins::CallMethod(*object, callee.name, *args, *kwargs);
        if (!result.ok()) return AtPos(e.pos, result.status());
        LLMSERVE_RETURN_IF_ERROR(Charge(e.pos, ApproxSize(*result)));
        return result;
      }
      absl::StatusOr<Value> attr = GetAttr(callee.pos, *object, callee.name);
      if (!attr.ok()) return attr.status();
      function = *std::move(attr);
      self = *std::move(object);
    } else {
      absl::StatusOr<Value> f = Eval(callee);
      if (!f.ok()) return f.status();
      function = *std::move(f);
    }
    if (function.is_undefined()) return UndefinedErrorAt(e.pos, function);
    if (!function.is_function()) {
      return ErrorAt(e.pos, absl::StrCat("'", function.TypeName(), "' object is not callable"));
    }
    absl::StatusOr<std::vector<Value>> args = EvalAll(e.args, 1);
    if (!args.ok()) return args.status();
    absl::StatusOr<builtins::Kwargs> kwargs = EvalKwargs(e);
    if (!kwargs.ok()) return kwargs.status();
    if (caller != nullptr) kwargs->emplace_back("caller", *caller);
    absl::StatusOr<Value> result = CallFunction(e.pos, function, self, *args, *kwargs);
    if (result.ok()) LLMSERVE_RETURN_IF_ERROR(Charge(e.pos, ApproxSize(*result)));
    return result;
  }

  absl::StatusOr<Value> CallFunction(SourcePos pos, const Value& function, const Value& self,
                                     const std::vector<Value>& args,
                                     const builtins::Kwargs& kwargs) {
    if (function.macro() != nullptr) {
      return CallMacro(pos, *function.macro(), function.macro()->text,
                       function.macro_closure().get(), {chain_[0], chain_[1]}, args, kwargs);
    }
    const std::string& name = function.function_name();
    if (name == "caller") {
      for (const CallerFrame& frame : caller_frames_) {
        if (frame.id == function.caller_frame()) {
          return CallMacro(pos, *frame.block, "caller", nullptr, frame.chain, args, kwargs);
        }
      }
      return ErrorAt(pos, "caller() called after its {% call %} block ended");
    }
    if (name == "raise_exception") {
      if (args.size() != 1 || !kwargs.empty()) {
        return ErrorAt(pos, "raise_exception takes one argument");
      }
      return ErrorAt(pos, ToPythonStr(args[0]));
    }
    if (name == "namespace") {
      ValueDict attrs;
      for (const Value& arg : args) {
        if (!arg.is_dict()) return ErrorAt(pos, "namespace() takes a dict or keyword arguments");
        for (const auto& [k, v] : arg.as_dict().items()) attrs.Set(k, v);
      }
      for (const auto& [k, v] : kwargs) {
        if (v.is_namespace()) return ErrorAt(pos, "a namespace cannot hold a namespace");
        attrs.Set(k, v);
      }
      return Value::Namespace(std::move(attrs));
    }
    if (name == "loop.cycle") {
      // loop.cycle(a, b, ...): the argument at loop.index0 modulo their number.
      if (args.empty()) return ErrorAt(pos, "no items for cycling given");
      const Value* index = self.is_dict() ? self.as_dict().Find("index0") : nullptr;
      if (index == nullptr || !index->is_int()) return ErrorAt(pos, "loop.cycle outside a loop");
      return args[static_cast<size_t>(index->as_int() % static_cast<int64_t>(args.size()))];
    }
    absl::StatusOr<Value> result = globals::CallGlobal(name, args, kwargs, now_);
    if (!result.ok()) return AtPos(pos, result.status());
    return result;
  }

  // Runs a macro (or a call block's caller) the way jinja2 binds its arguments: positional
  // first, then keywords for the parameters not given positionally, defaults (evaluated in the
  // macro's scope) for the rest; extra arguments land in varargs/kwargs when the body uses
  // them and are an error otherwise. The body's output is the result.
  absl::StatusOr<Value> CallMacro(SourcePos pos, const Stmt& def, const std::string& name,
                                  const ValueDict* closure, std::vector<Scope*> base_chain,
                                  const std::vector<Value>& args, const builtins::Kwargs& kwargs) {
    if (call_depth_ >= kMaxCallDepth) {
      return absl::OutOfRangeError(TemplateErrorMessage(
          pos, absl::StrCat("macro calls nested deeper than ", kMaxCallDepth)));
    }
    const size_t n = def.targets.size();
    std::vector<std::optional<Value>> bound(n);
    for (size_t i = 0; i < std::min(n, args.size()); ++i) bound[i] = args[i];
    builtins::Kwargs rest = kwargs;
    auto take = [&rest](const std::string& key) -> std::optional<Value> {
      for (auto it = rest.begin(); it != rest.end(); ++it) {
        if (it->first == key) {
          Value v = std::move(it->second);
          rest.erase(it);
          return v;
        }
      }
      return std::nullopt;
    };
    bool found_caller = false;
    if (args.size() < n) {
      for (size_t i = args.size(); i < n; ++i) {
        bound[i] = take(def.targets[i]);
        if (def.targets[i] == "caller") found_caller = true;
      }
    } else {
      found_caller =
          std::find(def.targets.begin(), def.targets.end(), "caller") != def.targets.end();
    }
    std::optional<Value> caller;
    if (def.uses_caller && !found_caller) {
      caller = take("caller");
      if (!caller.has_value()) caller = Value::MakeUndefined("No caller defined");
    }
    ValueDict extra_kwargs;
    if (def.uses_kwargs) {
      for (auto& [k, v] : rest) extra_kwargs.Set(k, std::move(v));
    } else if (!rest.empty()) {
      if (take("caller").has_value()) {
        return ErrorAt(pos, absl::StrCat("macro '", name,
                                         "' was invoked with two values for the special caller "
                                         "argument"));
      }
      return ErrorAt(pos, absl::StrCat("macro '", name, "' takes no keyword argument '",
                                       rest.front().first, "'"));
    }
    if (!def.uses_varargs && args.size() > n) {
      return ErrorAt(pos,
                     absl::StrCat("macro '", name, "' takes not more than ", n, " argument(s)"));
    }

    ++call_depth_;
    struct DepthRelease {
      int* depth;
      ~DepthRelease() { --*depth; }
    } release{&call_depth_};
    ChainSwap swap(this, std::move(base_chain));
    std::optional<ScopeGuard> closure_scope;
    if (closure != nullptr) {
      LLMSERVE_RETURN_IF_ERROR(Step(pos, static_cast<int64_t>(closure->items().size())));
      closure_scope.emplace(this);
      for (const auto& [k, v] : closure->items()) (*chain_.back())[k] = v;
    }
    ScopeGuard local(this);
    Scope& locals = *chain_.back();
    for (size_t i = 0; i < n; ++i) {
      if (bound[i].has_value()) locals[def.targets[i]] = *bound[i];
    }
    for (size_t i = 0; i < n; ++i) {
      if (bound[i].has_value()) continue;
      if (def.defaults[i] != nullptr) {
        absl::StatusOr<Value> v = Eval(*def.defaults[i]);
        if (!v.ok()) return v.status();
        locals[def.targets[i]] = *std::move(v);
      } else {
        locals[def.targets[i]] =
            Value::MakeUndefined(absl::StrCat("parameter '", def.targets[i], "' was not provided"));
      }
    }
    if (def.uses_varargs) {
      ValueList extra;
      for (size_t i = n; i < args.size(); ++i) extra.push_back(args[i]);
      locals["varargs"] = Value::Tuple(std::move(extra));
    }
    if (def.uses_kwargs) locals["kwargs"] = Value::Dict(std::move(extra_kwargs));
    if (caller.has_value()) locals["caller"] = *std::move(caller);

    const size_t start = out_.size();
    absl::StatusOr<Flow> flow = ExecBody(def.body);
    std::string captured = out_.substr(start);
    out_.resize(start);
    if (!flow.ok()) return flow.status();
    return Value::String(std::move(captured));
  }

  // {% call(params) macro(args) %}body{% endcall %}: calls the macro with caller= the body.
  absl::StatusOr<Value> ExecCallBlock(const Stmt& stmt) {
    const int64_t id = next_caller_id_++;
    caller_frames_.push_back(CallerFrame{id, &stmt, chain_});
    const Value caller = Value::Caller(id);
    absl::StatusOr<Value> result = EvalCall(*stmt.expr, &caller);
    caller_frames_.pop_back();
    return result;
  }

  // The variables a macro defined here sees besides globals and the top level: those of the
  // enclosing loops and macros, as they are now (jinja2 closures).
  absl::StatusOr<std::shared_ptr<const ValueDict>> Closure(SourcePos pos) {
    if (chain_.size() <= 2) return nullptr;
    Scope merged;
    for (size_t i = 2; i < chain_.size(); ++i) {
      LLMSERVE_RETURN_IF_ERROR(Step(pos, static_cast<int64_t>(chain_[i]->size())));
      for (const auto& [k, v] : *chain_[i]) merged[k] = v;
    }
    auto closure = std::make_shared<ValueDict>();
    for (auto& [k, v] : merged) closure->Append(k, std::move(v));
    return closure;
  }

  absl::StatusOr<Value> EvalBinary(const Expr& e) {
    absl::StatusOr<Value> left = Eval(*e.args[0]);
    if (!left.ok()) return left;
    // and/or return an operand, as in Python, and short-circuit.
    if (e.name == "and") return left->Truthy() ? Eval(*e.args[1]) : left;
    if (e.name == "or") return left->Truthy() ? left : Eval(*e.args[1]);
    absl::StatusOr<Value> right = Eval(*e.args[1]);
    if (!right.ok()) return right;
    const Value& a = *left;
    const Value& b = *right;
    if (e.name == "~") {
      std::string s = ToPythonStr(a) + ToPythonStr(b);
      if (absl::Status st = Charge(e.pos, static_cast<int64_t>(s.size())); !st.ok()) return st;
      return Value::String(std::move(s));
    }
    if (a.is_undefined()) return UndefinedErrorAt(e.pos, a);
    if (b.is_undefined()) return UndefinedErrorAt(e.pos, b);
    const char* op = e.name.c_str();
    if (a.is_number() && b.is_number()) {
      if (a.is_float() || b.is_float() || e.name == "/") {
        return FloatOp(e.pos, e.name, a.ToDouble(), b.ToDouble());
      }
      return IntOp(e.pos, e.name, AsNumber(a), AsNumber(b));
    }
    if (e.name == "+") {
      if (a.is_string() && b.is_string()) {
        if (absl::Status st =
                Charge(e.pos, static_cast<int64_t>(a.as_string().size() + b.as_string().size()));
            !st.ok()) {
          return st;
        }
        if (a.is_safe() || b.is_safe()) {
          return Value::SafeString((a.is_safe() ? a.as_string() : HtmlEscape(a.as_string())) +
                                   (b.is_safe() ? b.as_string() : HtmlEscape(b.as_string())));
        }
        return Value::String(a.as_string() + b.as_string());
      }
      if (a.is_list() && b.is_list()) {
        if (absl::Status st = Charge(e.pos, ApproxSize(a) + ApproxSize(b)); !st.ok()) return st;
        ValueList items = a.as_list();
        items.insert(items.end(), b.as_list().begin(), b.as_list().end());
        return Value::List(std::move(items));
      }
    }
    if (e.name == "%" && a.is_string()) {
      absl::StatusOr<Value> formatted = builtins::PercentFormat(a.as_string(), b);
      if (!formatted.ok()) return AtPos(e.pos, formatted.status());
      LLMSERVE_RETURN_IF_ERROR(Charge(e.pos, ApproxSize(*formatted)));
      return formatted;
    }
    if (e.name == "*" && (a.is_string() || a.is_list() || b.is_string() || b.is_list()) &&
        (IsNumber(a) || IsNumber(b))) {
      const Value& seq = IsNumber(a) ? b : a;
      const int64_t times = std::max<int64_t>(0, AsNumber(IsNumber(a) ? a : b));
      const int64_t unit =
          seq.is_string() ? static_cast<int64_t>(seq.as_string().size()) : ApproxSize(seq);
      if (times > 0 && unit > 0 &&
          (times > limits_.max_allocated_bytes / unit ||
           (seq.is_string() && unit * times > static_cast<int64_t>(limits_.max_output_bytes)))) {
        return absl::OutOfRangeError(TemplateErrorMessage(e.pos, "repetition result too large"));
      }
      if (absl::Status st = Charge(e.pos, unit * times); !st.ok()) return st;
      if (seq.is_string()) {
        std::string s;
        for (int64_t i = 0; i < times; ++i) s += seq.as_string();
        return Value::String(std::move(s));
      }
      ValueList items;
      for (int64_t i = 0; i < times; ++i) {
        items.insert(items.end(), seq.as_list().begin(), seq.as_list().end());
      }
      return Value::List(std::move(items));
    }
    return ErrorAt(e.pos, OperandTypes(op, a, b));
  }

  // Python's float arithmetic.
  static absl::StatusOr<Value> FloatOp(SourcePos pos, const std::string& op, double x, double y) {
    if (op == "+") return Value::Float(x + y);
    if (op == "-") return Value::Float(x - y);
    if (op == "*") return Value::Float(x * y);
    if (op == "**") return Value::Float(std::pow(x, y));
    if (y == 0) return ErrorAt(pos, "float division by zero");
    if (op == "/") return Value::Float(x / y);
    double mod = std::fmod(x, y);
    if (mod != 0 && ((y < 0) != (mod < 0))) mod += y;
    if (op == "%") return Value::Float(mod);
    if (op == "//") return Value::Float(std::floor((x - mod) / y + 0.5));
    return ErrorAt(pos, absl::StrCat("operator '", op, "' is not supported"));
  }

  static absl::StatusOr<Value> IntOp(SourcePos pos, const std::string& op, int64_t x, int64_t y) {
    int64_t r = 0;
    if (op == "+") {
      if (__builtin_add_overflow(x, y, &r)) return ErrorAt(pos, "integer overflow");
    } else if (op == "-") {
      if (__builtin_sub_overflow(x, y, &r)) return ErrorAt(pos, "integer overflow");
    } else if (op == "*") {
      if (__builtin_mul_overflow(x, y, &r)) return ErrorAt(pos, "integer overflow");
    } else if (op == "//" || op == "%") {
      if (y == 0) return ErrorAt(pos, "integer division or modulo by zero");
      if (x == std::numeric_limits<int64_t>::min() && y == -1) {
        if (op == "%") return Value::Int(0);
        return ErrorAt(pos, "integer overflow");
      }
      r = op == "//" ? FloorDiv(x, y) : FloorMod(x, y);
    } else if (op == "**") {
      if (y < 0) return Value::Float(std::pow(static_cast<double>(x), static_cast<double>(y)));
      r = 1;
      for (int64_t i = 0; i < y; ++i) {
        if (__builtin_mul_overflow(r, x, &r)) return ErrorAt(pos, "integer overflow");
        if (r == 0 || r == 1) break;
        if (r == -1) {
          r = (y - i - 1) % 2 == 0 ? -1 : 1;
          break;
        }
      }
    } else {
      return ErrorAt(pos, absl::StrCat("operator '", op, "' is not supported"));
    }
    return Value::Int(r);
  }

  absl::StatusOr<Value> EvalCompare(const Expr& e) {
    absl::StatusOr<Value> left = Eval(*e.args[0]);
    if (!left.ok()) return left;
    for (size_t i = 0; i < e.ops.size(); ++i) {
      absl::StatusOr<Value> right = Eval(*e.args[i + 1]);
      if (!right.ok()) return right;
      absl::StatusOr<bool> result = Compare(e.args[i + 1]->pos, e.ops[i], *left, *right);
      if (!result.ok()) return result.status();
      if (!*result) return Value::Bool(false);
      left = std::move(right);
    }
    return Value::Bool(true);
  }

  static absl::StatusOr<bool> Compare(SourcePos pos, const std::string& op, const Value& a,
                                      const Value& b) {
    if (op == "==") return ValuesEqual(a, b);
    if (op == "!=") return !ValuesEqual(a, b);
    if (op == "in" || op == "not in") {
      if (!b.is_string() && !b.is_list() && !b.is_dict() && !b.is_undefined()) {
        return ErrorAt(pos, absl::StrCat("argument of type '", b.TypeName(), "' is not iterable"));
      }
      absl::StatusOr<bool> in = builtins::ApplyTest("in", a, {b});
      if (!in.ok()) return AtPos(pos, in.status());
      return *in == (op == "in");
    }
    if (a.is_undefined()) return UndefinedErrorAt(pos, a);
    if (b.is_undefined()) return UndefinedErrorAt(pos, b);
    int cmp = 0;
    if (a.is_float() || b.is_float()) {
      if (!a.is_number() || !b.is_number()) {
        return ErrorAt(pos, absl::StrCat("'", op, "' not supported between instances of '",
                                         a.TypeName(), "' and '", b.TypeName(), "'"));
      }
      const double x = a.ToDouble();
      const double y = b.ToDouble();
      if (op == "<") return x < y;
      if (op == ">") return x > y;
      if (op == "<=") return x <= y;
      return x >= y;
    } else if (IsNumber(a) && IsNumber(b)) {
      cmp = AsNumber(a) < AsNumber(b) ? -1 : AsNumber(a) > AsNumber(b) ? 1 : 0;
    } else if (a.is_string() && b.is_string()) {
      // Byte order of UTF-8 is code point order, as Python compares.
      cmp = a.as_string().compare(b.as_string());
    } else {
      return ErrorAt(pos, absl::StrCat("'", op, "' not supported between instances of '",
                                       a.TypeName(), "' and '", b.TypeName(), "'"));
    }
    if (op == "<") return cmp < 0;
    if (op == ">") return cmp > 0;
    if (op == "<=") return cmp <= 0;
    return cmp >= 0;
  }

  const RenderLimits& limits_;
  const absl::Time now_;
  std::deque<Scope> storage_;
  std::vector<Scope*> chain_;
  // One per {% call %} block run so far; `caller` values refer to them by index.
  // The {% call %} blocks running now, innermost last; `caller` values name them by id (a
  // caller value that outlives its block finds nothing rather than a dangling frame).
  struct CallerFrame {
    int64_t id;
    const Stmt* block;
    std::vector<Scope*> chain;
  };
  std::vector<CallerFrame> caller_frames_;
  int64_t next_caller_id_ = 0;
  int call_depth_ = 0;
  std::string out_;
  int64_t steps_ = 0;
  int64_t allocated_ = 0;
};

}  // namespace

absl::StatusOr<std::string> RenderTemplate(const ast::Body& body, const ValueDict& globals,
                                           const RenderLimits& limits, absl::Time now) {
  return Renderer(globals, limits, now).Run(body);
}

}  // namespace llmserve::common
