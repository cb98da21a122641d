// The parsed form of a chat template: statements (text, output, if, for, set, ...) holding
// expressions. Built by the parser, read by the renderer; immutable after parsing.
#ifndef LLMSERVE_COMMON_CHAT_TEMPLATE_AST_H_
#define LLMSERVE_COMMON_CHAT_TEMPLATE_AST_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/chat_template/lexer.h"
#include "common/chat_template/value.h"

namespace llmserve::common::ast {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind {
  kLiteral,  // literal
  kName,     // name
  kList,     // args: the items; name "tuple" for a tuple
  kDict,     // args: key0, value0, key1, value1, ...
  kAttr,     // args[0].name
  kItem,     // args[0][args[1]]
  kSlice,    // args[0][args[1]:args[2]:args[3]], each bound may be null
  kCall,     // args[0](args[1:], kwargs)
  kFilter,   // args[0] | name(args[1:], kwargs)
  kTest,     // args[0] is [not] name(args[1:]); `negated`
  kUnary,    // name in {"not", "-", "+"} applied to args[0]
  kBinary,  // args[0] name args[1]; name in {"and", "or", "+", "-", "*", "/", "//", "%", "**", "~"}
  kCompare,  // args[0] ops[0] args[1] ops[1] args[2] ... (chained like Python)
  kCond,     // args[0] if args[1] else args[2] (args[2] null: else Undefined)
  kUnpack,   // *args[0] (name "*") or **args[0] (name "**"): only in a call's argument list
};

struct Expr {
  ExprKind kind;
  SourcePos pos;
  std::string name;
  Value literal;
  bool negated = false;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class StmtKind {
  kText,      // text
  kOutput,    // {{ expr }}
  kIf,        // branches (cond, body); else_body
  kFor,       // {% for targets in expr [if filter] %} body [{% else %} else_body]
  kSet,       // {% set target = expr %}; target is a name, or ns.attr when `attr` is set
  kSetBlock,  // {% set target %}body{% endset %}
  kBreak,
  kContinue,
  kBlock,  // a plain body ({% generation %} ... {% endgeneration %})
  // {% macro text(targets[i] [= defaults[i]], ...) %} body {% endmacro %}
  kMacro,
  // {% call(targets [= defaults]) expr %} body {% endcall %}: expr is the macro call; the body
  // is the `caller` macro it receives (targets are caller's parameters).
  kCallBlock,
  // {% filter f(...) | g %} body {% endfilter %}: expr applies the filters to the kName
  // kFilterBlockInput, bound to the body's output.
  kFilterBlock,
};

// The name the body of a {% filter %} block is bound to; no template can spell it.
inline constexpr char kFilterBlockInput[] = " filter block input";

struct Stmt {
  StmtKind kind;
  SourcePos pos;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;
  std::vector<std::string> targets;  // for: loop variables; set: the name(s)
  std::string attr;                  // set ns.attr
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  // macro / call block: one default per target (null: none), and whether the body refers to
  // `varargs`, `kwargs` or `caller` (jinja2 binds those only then, and refuses extra
  // positional or keyword arguments otherwise).
  std::vector<ExprPtr> defaults;
  bool uses_varargs = false;
  bool uses_kwargs = false;
  bool uses_caller = false;
};

}  // namespace llmserve::common::ast

#endif  // LLMSERVE_COMMON_CHAT_TEMPLATE_AST_H_
