#include "common/chat_template/parser.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/chat_template/builtins.h"
#include "common/status/status_macros.h"

namespace llmserve::common {
namespace {

using ast::Body;
using ast::Expr;
using ast::ExprKind;
using ast::ExprPtr;
using ast::Stmt;
using ast::StmtKind;
using ast::StmtPtr;

// Deep nesting would overflow the stack of this recursive-descent parser and of the renderer
// walking its tree; real templates nest a handful of levels.
constexpr int kMaxDepth = 128;

std::string Describe(const Token& token) {
  switch (token.type) {
    case TokenType::kText:
      return "template text";
    case TokenType::kVarBegin:
      return "'{{'";
    case TokenType::kVarEnd:
      return "'}}'";
    case TokenType::kBlockBegin:
      return "'{%'";
    case TokenType::kBlockEnd:
      return "'%}'";
    case TokenType::kString:
      return "string literal";
    case TokenType::kInt:
      return "integer literal";
    case TokenType::kFloat:
      return "float literal";
    case TokenType::kEof:
      return "end of template";
    default:
      return absl::StrCat("'", token.text, "'");
  }
}

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : tokens_(tokens) {}

  absl::StatusOr<Body> Run() {
    std::string stopped_at;
    absl::StatusOr<Body> body = ParseBody({}, &stopped_at);
    if (!body.ok()) return body.status();
    return body;
  }

 private:
  // Counts recursion and fails past kMaxDepth.
  class DepthGuard {
   public:
    explicit DepthGuard(int* depth) : depth_(depth) { ++*depth_; }
    ~DepthGuard() { --*depth_; }
    bool exceeded() const { return *depth_ > kMaxDepth; }

   private:
    int* depth_;
  };

  const Token& Peek(size_t ahead = 0) const {
    const size_t i = index_ + ahead;
    return i < tokens_.size() ? tokens_[i] : tokens_.back();
  }
  const Token& Next() {
    const Token& token = Peek();
    if (index_ < tokens_.size() - 1) ++index_;
    return token;
  }
  bool IsOp(const char* op, size_t ahead = 0) const {
    return Peek(ahead).type == TokenType::kOp && Peek(ahead).text == op;
  }
  bool IsName(const char* name, size_t ahead = 0) const {
    return Peek(ahead).type == TokenType::kName && Peek(ahead).text == name;
  }

  absl::Status Error(SourcePos pos, const std::string& message) const {
    return absl::InvalidArgumentError(TemplateErrorMessage(pos, message));
  }
  absl::Status Unexpected(const std::string& expected) const {
    return Error(Peek().pos, absl::StrCat("expected ", expected, ", found ", Describe(Peek())));
  }
  absl::Status Expect(TokenType type, const char* what) {
    if (Peek().type != type) return Unexpected(what);
    Next();
    return absl::OkStatus();
  }
  absl::Status ExpectOp(const char* op) {
    if (!IsOp(op)) return Unexpected(absl::StrCat("'", op, "'"));
    Next();
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> ExpectName() {
    if (Peek().type != TokenType::kName) return Unexpected("a name");
    return Next().text;
  }

  static ExprPtr MakeExpr(ExprKind kind, SourcePos pos, std::string name = "") {
    auto expr = std::make_unique<Expr>();
    expr->kind = kind;
    expr->pos = pos;
    expr->name = std::move(name);
    return expr;
  }
  static StmtPtr MakeStmt(StmtKind kind, SourcePos pos) {
    auto stmt = std::make_unique<Stmt>();
    stmt->kind = kind;
    stmt->pos = pos;
    return stmt;
  }

  // Statements until a block tag whose name is in `stop` (consumed with its `{%`, the rest of
  // the tag left to the caller) or the end of the template when `stop` is empty.
  absl::StatusOr<Body> ParseBody(const std::vector<std::string>& stop, std::string* stopped_at) {
    DepthGuard guard(&depth_);
    if (guard.exceeded()) return Error(Peek().pos, "blocks nested too deeply");
    Body body;
    while (true) {
      const Token& token = Peek();
      switch (token.type) {
        case TokenType::kText: {
          StmtPtr stmt = MakeStmt(StmtKind::kText, token.pos);
          stmt->text = Next().text;
          body.push_back(std::move(stmt));
          break;
        }
        case TokenType::kVarBegin: {
          StmtPtr stmt = MakeStmt(StmtKind::kOutput, Next().pos);
          LLMSERVE_ASSIGN_OR_RETURN(stmt->expr, ParseTupleOrExpr());
          LLMSERVE_RETURN_IF_ERROR(Expect(TokenType::kVarEnd, "'}}'"));
          body.push_back(std::move(stmt));
          break;
        }
        case TokenType::kBlockBegin: {
          const Token& name = Peek(1);
          if (name.type != TokenType::kName) {
            Next();
            return Unexpected("a statement name");
          }
          for (const std::string& s : stop) {
            if (name.text == s) {
              Next();
              Next();
              *stopped_at = s;
              return body;
            }
          }
          Next();
          absl::StatusOr<StmtPtr> stmt = ParseStatement();
          if (!stmt.ok()) return stmt.status();
          body.push_back(*std::move(stmt));
          break;
        }
        case TokenType::kEof:
          if (!stop.empty()) {
            return Error(token.pos, absl::StrCat("unexpected end of template, expected '{% ",
                                                 stop.back(), " %}'"));
          }
          return body;
        default:
          return Unexpected("template text or a tag");
      }
    }
  }

  absl::StatusOr<StmtPtr> ParseStatement() {
    const Token& name = Next();
    const std::string& n = name.text;
    if (n == "if") return ParseIf(name.pos);
    if (n == "for") return ParseFor(name.pos);
    if (n == "set") return ParseSet(name.pos);
    if (n == "break" || n == "continue") {
      if (loop_depth_ == 0) return Error(name.pos, absl::StrCat("'", n, "' outside a for loop"));
      LLMSERVE_RETURN_IF_ERROR(Expect(TokenType::kBlockEnd, "'%}'"));
      return MakeStmt(n == "break" ? StmtKind::kBreak : StmtKind::kContinue, name.pos);
    }
    if (n == "generation") {
      // transformers' AssistantTracker tag: renders its body unchanged.
      LLMSERVE_RETURN_IF_ERROR(Expect(TokenType::kBlockEnd, "'%}'"));
      StmtPtr stmt = MakeStmt(StmtKind::kBlock, name.pos);
      std::string stopped_at;
      LLMSERVE_ASSIGN_OR_RETURN(stmt->body, ParseBody({"endgeneration"}, &stopped_at));
      LLMSERVE_RETURN_IF_ERROR(Expect(TokenType::kBlockEnd, "'%}'"));
      return stmt;
    }
    if (n == "macro") return ParseMacro(name.pos);
    if (n == "call") return ParseCallBlock(name.pos);
    if (n == "filter") return ParseFilterBlock(name.pos);
    static const char* const kUnsupported[] = {"raw",   "include",    "import", "from",
                                               "block", "extends",    "with",   "do",
                                               "trans", "autoescape", "print"};
    for (const char* unsupported : kUnsupported) {
      if (n == unsupported) {
        return Error(name.pos, absl::StrCat("the '", n, "' statement is not supported"));
      }
    }
    return Error(name.pos, absl::StrCat("unexpected statement '", n, "'"));
  }

  // `(a, b=default, ...)` of a macro or call block.
  absl::Status ParseParams(Stmt* stmt) {
    LLMSERVE_RETURN_IF_ERROR(ExpectOp("("));
    while (!IsOp(")")) {
      if (!stmt->targets.empty()) {
        LLMSERVE_RETURN_IF_ERROR(ExpectOp(","));
        if (IsOp(")")) break;
      }
      const SourcePos pos = Peek().pos;
      absl::StatusOr<std::string> param = ExpectName();
      if (!param.ok()) return param.status();
      for (const std::string& existing : stmt->targets) {
        if (existing == *param)
          return Error(pos, absl::StrCat("duplicate argument '", *param, "'"));
      }
      ExprPtr fallback;
      if (IsOp("=")) {
        Next();
        LLMSERVE_ASSIGN_OR_RETURN(fallback, ParseExpr(true));
      } else if (!stmt->defaults.empty() && stmt->defaults.back() != nullptr) {
        return Error(pos, "non-default argument follows default argument");
      }
      if (*param == "caller" && fallback == nullptr) {
        return Error(pos,
                     "When defining macros or call blocks the special \"caller\" argument must "
                     "be omitted or be given a default.");
      }
      stmt->targets.push_back(*std::move(param));
      stmt->defaults.push_back(std::move(fallback));
    }
    Next();
    return absl::OkStatus();
  }

  // The body of a macro or call block: its own function, so break/continue of an enclosing
  // loop do not reach into it.
  absl::Status ParseFunctionBody(Stmt* stmt, const char* end) {
    const int saved_loop_depth = loop_depth_;
    loop_depth_ = 0;
    open_functions_.push_back(stmt);
    std::string stopped_at;
    absl::StatusOr<Body> body;
    {
      SoftScope soft(&soft_, /*reset=*/true);
      body = ParseBody({end}, &stopped_at);
    }
    open_functions_.pop_back();
    loop_depth_ = saved_loop_depth;
    if (!body.ok()) return body.status();
    stmt->body = *std::move(body);
    return Expect(TokenType::kBlockEnd, "'%}'");
  }

  absl::StatusOr<StmtPtr> ParseMacro(SourcePos pos) {
    StmtPtr stmt = MakeStmt(StmtKind::kMacro, pos);
    LLMSERVE_ASSIGN_OR_RETURN(stmt->text, ExpectName());
    LLMSERVE_RETURN_IF_ERROR(ParseParams(stmt.get()));
    LLMSERVE_RETURN_IF_ERROR(Expect(TokenType::kBlockEnd, "'%}'"));
    LLMSERVE_RETURN_IF_ERROR(ParseFunctionBody(stmt.get(), "endmacro"));
    return stmt;
  }

  absl::StatusOr<StmtPtr> ParseCallBlock(SourcePos pos) {
    StmtPtr stmt = MakeStmt(StmtKind::kCallBlock, pos);
    stmt->text = "caller";
    if (IsOp("(")) LLMSERVE_RETURN_IF_ERROR(ParseParams(stmt.get()));
    const SourcePos call_pos = Peek().pos;
    LLMSERVE_ASSIGN_OR_RETURN(stmt->expr, ParseExpr(true));
    if (stmt->expr->kind != ExprKind::kCall) return Error(call_pos, "expected a call");
    LLMSERVE_RETURN_IF_ERROR(Expect(TokenType::kBlockEnd, "'%}'"));
    LLMSERVE_RETURN_IF_ERROR(ParseFunctionBody(stmt.get(), "endcall"));
    return stmt;
  }

  absl::StatusOr<StmtPtr> ParseFilterBlock(SourcePos pos) {
    StmtPtr stmt = MakeStmt(StmtKind::kFilterBlock, pos);
    LLMSERVE_ASSIGN_OR_RETURN(
        stmt->expr, ParseOneFilter(MakeExpr(ExprKind::kName, pos, ast::kFilterBlockInput)));
    while (IsOp("|")) {
      Next();
      LLMSERVE_ASSIGN_OR_RETURN(stmt->expr, ParseOneFilter(std::move(stmt->expr)));
    }
    LLMSERVE_RETURN_IF_ERROR(Expect(TokenType::kBlockEnd, "'%}'"));
    std::string stopped_at;
    LLMSERVE_ASSIGN_OR_RETURN(stmt->body, ParseBody({"endfilter"}, &stopped_at));
    LLMSERVE_RETURN_IF_ERROR(Expect(TokenType::kBlockEnd, "'%}'"));
    return stmt;
  }

  // Counts the if statements / inline ifs being parsed in the current function or loop body
  // (jinja2's "soft frame"); a for loop or macro body starts a frame that is not soft.
  class SoftScope {
   public:
    SoftScope(int* soft, bool reset) : soft_(soft), saved_(*soft) {
      if (reset) {
        *soft_ = 0;
      } else {
        ++*soft_;
      }
    }
    ~SoftScope() { *soft_ = saved_; }

   private:
    int* soft_;
    int saved_;
  };

  absl::StatusOr<StmtPtr> ParseIf(SourcePos pos) {
    SoftScope soft(&soft_, /*reset=*/false);
    StmtPtr stmt = MakeStmt(StmtKind::kIf, pos);
    while (true) {
      absl::StatusOr<ExprPtr> cond = ParseTupleOrExpr();
      if (!cond.ok()) return cond.status();
      LLMSERVE_RETURN_IF_ERROR(Expect(TokenType::kBlockEnd, "'%}'"));
      std::string stopped_at;
      absl::StatusOr<Body> body = ParseBody({"elif", "else", "endif"}, &stopped_at);
      if (!body.ok()) return body.status();
      stmt->branches.emplace_back(*std::move(cond), *std::move(body));
      if (stopped_at == "elif") continue;
      if (stopped_at == "else") {
        LLMSERVE_RETURN_IF_ERROR(Expect(TokenType::kBlockEnd, "'%}'"));
        LLMSERVE_ASSIGN_OR_RETURN(stmt->else_body, ParseBody({"endif"}, &stopped_at));
      }
      LLMSERVE_RETURN_IF_ERROR(Expect(TokenType::kBlockEnd, "'%}'"));
      return stmt;
    }
  }

  absl::StatusOr<StmtPtr> ParseFor(SourcePos pos) {
    StmtPtr stmt = MakeStmt(StmtKind::kFor, pos);
    const bool parenthesized = IsOp("(");
    if (parenthesized) Next();
    do {
      absl::StatusOr<std::string> target = ExpectName();
      if (!target.ok()) return target.status();
      stmt->targets.push_back(*std::move(target));
    } while (IsOp(",") && (Next(), true));
    if (parenthesized) {
      LLMSERVE_RETURN_IF_ERROR(ExpectOp(")"));
    }
    if (!IsName("in")) return Unexpected("'in'");
    Next();
    LLMSERVE_ASSIGN_OR_RETURN(stmt->expr, ParseExpr(/*with_condexpr=*/false));
    if (IsName("if")) {
      Next();
      LLMSERVE_ASSIGN_OR_RETURN(stmt->filter, ParseExpr(/*with_condexpr=*/false));
    }
    if (IsName("recursive")) return Error(Peek().pos, "recursive loops are not supported");
    LLMSERVE_RETURN_IF_ERROR(Expect(TokenType::kBlockEnd, "'%}'"));
    std::string stopped_at;
    ++loop_depth_;
    absl::StatusOr<Body> body;
    {
      SoftScope soft(&soft_, /*reset=*/true);
      body = ParseBody({"else", "endfor"}, &stopped_at);
    }
    --loop_depth_;
    if (!body.ok()) return body.status();
    stmt->body = *std::move(body);
    if (stopped_at == "else") {
      LLMSERVE_RETURN_IF_ERROR(Expect(TokenType::kBlockEnd, "'%}'"));
      LLMSERVE_ASSIGN_OR_RETURN(stmt->else_body, ParseBody({"endfor"}, &stopped_at));
    }
    LLMSERVE_RETURN_IF_ERROR(Expect(TokenType::kBlockEnd, "'%}'"));
    return stmt;
  }

  absl::StatusOr<StmtPtr> ParseSet(SourcePos pos) {
    StmtPtr stmt = MakeStmt(StmtKind::kSet, pos);
    absl::StatusOr<std::string> target = ExpectName();
    if (!target.ok()) return target.status();
    stmt->targets.push_back(*std::move(target));
    if (IsOp(".")) {
      Next();
      LLMSERVE_ASSIGN_OR_RETURN(stmt->attr, ExpectName());
    } else if (IsOp(",")) {
      return Error(Peek().pos, "assigning to several names at once is not supported");
    }
    if (Peek().type == TokenType::kBlockEnd && stmt->attr.empty()) {
      Next();
      stmt->kind = StmtKind::kSetBlock;
      std::string stopped_at;
      LLMSERVE_ASSIGN_OR_RETURN(stmt->body, ParseBody({"endset"}, &stopped_at));
      LLMSERVE_RETURN_IF_ERROR(Expect(TokenType::kBlockEnd, "'%}'"));
      return stmt;
    }
    LLMSERVE_RETURN_IF_ERROR(ExpectOp("="));
    LLMSERVE_ASSIGN_OR_RETURN(stmt->expr, ParseTupleOrExpr());
    LLMSERVE_RETURN_IF_ERROR(Expect(TokenType::kBlockEnd, "'%}'"));
    return stmt;
  }

  // jinja2's parse_tuple without parentheses: `a, b` is a tuple (a list here).
  absl::StatusOr<ExprPtr> ParseTupleOrExpr() {
    const SourcePos pos = Peek().pos;
    absl::StatusOr<ExprPtr> first = ParseExpr(true);
    if (!first.ok() || !IsOp(",")) return first;
    ExprPtr list = MakeExpr(ExprKind::kList, pos, "tuple");
    list->args.push_back(*std::move(first));
    while (IsOp(",")) {
      Next();
      if (Peek().type == TokenType::kVarEnd || Peek().type == TokenType::kBlockEnd) break;
      absl::StatusOr<ExprPtr> item = ParseExpr(true);
      if (!item.ok()) return item.status();
      list->args.push_back(*std::move(item));
    }
    return list;
  }

  absl::StatusOr<ExprPtr> ParseExpr(bool with_condexpr) {
    DepthGuard guard(&depth_);
    if (guard.exceeded()) return Error(Peek().pos, "expression nested too deeply");
    absl::StatusOr<ExprPtr> expr = ParseOr();
    if (!expr.ok() || !with_condexpr) return expr;
    while (IsName("if")) {
      // Soft in jinja2 as a whole; an unknown filter in the value part before `if` (parsed
      // above) is still refused at parse time, a difference no real template shows.
      SoftScope soft(&soft_, /*reset=*/false);
      const SourcePos pos = Next().pos;
      ExprPtr cond = MakeExpr(ExprKind::kCond, pos);
      absl::StatusOr<ExprPtr> test = ParseOr();
      if (!test.ok()) return test.status();
      cond->args.push_back(*std::move(expr));
      cond->args.push_back(*std::move(test));
      if (IsName("else")) {
        Next();
        absl::StatusOr<ExprPtr> otherwise = ParseExpr(true);
        if (!otherwise.ok()) return otherwise.status();
        cond->args.push_back(*std::move(otherwise));
      } else {
        cond->args.push_back(nullptr);
      }
      expr = std::move(cond);
    }
    return expr;
  }

  absl::StatusOr<ExprPtr> ParseBinaryLeft(const std::vector<const char*>& ops, bool names,
                                          absl::StatusOr<ExprPtr> (Parser::*operand)()) {
    absl::StatusOr<ExprPtr> left = (this->*operand)();
    if (!left.ok()) return left;
    while (true) {
      const char* matched = nullptr;
      for (const char* op : ops) {
        if (names ? IsName(op) : IsOp(op)) matched = op;
      }
      if (matched == nullptr) return left;
      const SourcePos pos = Next().pos;
      absl::StatusOr<ExprPtr> right = (this->*operand)();
      if (!right.ok()) return right;
      ExprPtr node = MakeExpr(ExprKind::kBinary, pos, matched);
      node->args.push_back(*std::move(left));
      node->args.push_back(*std::move(right));
      left = std::move(node);
    }
  }

  absl::StatusOr<ExprPtr> ParseOr() { return ParseBinaryLeft({"or"}, true, &Parser::ParseAnd); }
  absl::StatusOr<ExprPtr> ParseAnd() { return ParseBinaryLeft({"and"}, true, &Parser::ParseNot); }

  absl::StatusOr<ExprPtr> ParseNot() {
    if (!IsName("not")) return ParseCompare();
    DepthGuard guard(&depth_);
    if (guard.exceeded()) return Error(Peek().pos, "expression nested too deeply");
    ExprPtr node = MakeExpr(ExprKind::kUnary, Next().pos, "not");
    absl::StatusOr<ExprPtr> operand = ParseNot();
    if (!operand.ok()) return operand;
    node->args.push_back(*std::move(operand));
    return node;
  }

  absl::StatusOr<ExprPtr> ParseCompare() {
    const SourcePos pos = Peek().pos;
    absl::StatusOr<ExprPtr> first = ParseMath1();
    if (!first.ok()) return first;
    ExprPtr node = MakeExpr(ExprKind::kCompare, pos);
    node->args.push_back(*std::move(first));
    while (true) {
      std::string op;
      if (Peek().type == TokenType::kOp &&
          (Peek().text == "==" || Peek().text == "!=" || Peek().text == "<" || Peek().text == ">" ||
           Peek().text == "<=" || Peek().text == ">=")) {
        op = Next().text;
      } else if (IsName("in")) {
        Next();
        op = "in";
      } else if (IsName("not") && IsName("in", 1)) {
        Next();
        Next();
        op = "not in";
      } else {
        break;
      }
      absl::StatusOr<ExprPtr> right = ParseMath1();
      if (!right.ok()) return right;
      node->ops.push_back(std::move(op));
      node->args.push_back(*std::move(right));
    }
    if (node->ops.empty()) return std::move(node->args[0]);
    return node;
  }

  absl::StatusOr<ExprPtr> ParseMath1() {
    return ParseBinaryLeft({"+", "-"}, false, &Parser::ParseConcat);
  }
  absl::StatusOr<ExprPtr> ParseConcat() {
    return ParseBinaryLeft({"~"}, false, &Parser::ParseMath2);
  }
  absl::StatusOr<ExprPtr> ParseMath2() {
    return ParseBinaryLeft({"*", "/", "//", "%"}, false, &Parser::ParsePow);
  }
  absl::StatusOr<ExprPtr> ParsePow() {
    return ParseBinaryLeft({"**"}, false, &Parser::ParseUnaryWithFilters);
  }
  absl::StatusOr<ExprPtr> ParseUnaryWithFilters() { return ParseUnary(true); }

  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter) {
    DepthGuard guard(&depth_);
    if (guard.exceeded()) return Error(Peek().pos, "expression nested too deeply");
    absl::StatusOr<ExprPtr> node;
    if (IsOp("-") || IsOp("+")) {
      const Token& op = Next();
      ExprPtr unary = MakeExpr(ExprKind::kUnary, op.pos, op.text);
      absl::StatusOr<ExprPtr> operand = ParseUnary(false);
      if (!operand.ok()) return operand;
      unary->args.push_back(*std::move(operand));
      node = std::move(unary);
    } else {
      node = ParsePrimary();
      if (!node.ok()) return node;
      node = ParsePostfix(*std::move(node));
    }
    if (!node.ok() || !with_filter) return node;
    return ParseFilters(*std::move(node));
  }

  absl::StatusOr<ExprPtr> ParsePrimary() {
    const Token& token = Peek();
    switch (token.type) {
      case TokenType::kName: {
        Next();
        const std::string& n = token.text;
        ExprPtr literal = MakeExpr(ExprKind::kLiteral, token.pos);
        if (n == "true" || n == "True") {
          literal->literal = Value::Bool(true);
        } else if (n == "false" || n == "False") {
          literal->literal = Value::Bool(false);
        } else if (n == "none" || n == "None") {
          literal->literal = Value::None();
        } else {
          // jinja2 binds these in a macro only when its body mentions them.
          for (Stmt* function : open_functions_) {
            if (n == "varargs") function->uses_varargs = true;
            if (n == "kwargs") function->uses_kwargs = true;
            if (n == "caller") function->uses_caller = true;
          }
          return MakeExpr(ExprKind::kName, token.pos, n);
        }
        return literal;
      }
      case TokenType::kString: {
        ExprPtr literal = MakeExpr(ExprKind::kLiteral, token.pos);
        std::string value;
        // Adjacent literals concatenate, as in Python.
        while (Peek().type == TokenType::kString) value += Next().text;
        literal->literal = Value::String(std::move(value));
        return literal;
      }
      case TokenType::kInt: {
        ExprPtr literal = MakeExpr(ExprKind::kLiteral, token.pos);
        literal->literal = Value::Int(Next().int_value);
        return literal;
      }
      case TokenType::kFloat: {
        ExprPtr literal = MakeExpr(ExprKind::kLiteral, token.pos);
        literal->literal = Value::Float(Next().float_value);
        return literal;
      }
      case TokenType::kOp:
        if (token.text == "(") return ParseParenthesized();
        if (token.text == "[") return ParseList();
        if (token.text == "{") return ParseDict();
        break;
      default:
        break;
    }
    return Unexpected("an expression");
  }

  absl::StatusOr<ExprPtr> ParseParenthesized() {
    const SourcePos pos = Next().pos;
    if (IsOp(")")) {
      Next();
      return MakeExpr(ExprKind::kList, pos, "tuple");
    }
    absl::StatusOr<ExprPtr> first = ParseExpr(true);
    if (!first.ok()) return first;
    if (IsOp(")")) {
      Next();
      return first;
    }
    ExprPtr tuple = MakeExpr(ExprKind::kList, pos, "tuple");
    tuple->args.push_back(*std::move(first));
    while (IsOp(",")) {
      Next();
      if (IsOp(")")) break;
      absl::StatusOr<ExprPtr> item = ParseExpr(true);
      if (!item.ok()) return item;
      tuple->args.push_back(*std::move(item));
    }
    LLMSERVE_RETURN_IF_ERROR(ExpectOp(")"));
    return tuple;
  }

  absl::StatusOr<ExprPtr> ParseList() {
    ExprPtr list = MakeExpr(ExprKind::kList, Next().pos);
    while (!IsOp("]")) {
      if (!list->args.empty()) {
        LLMSERVE_RETURN_IF_ERROR(ExpectOp(","));
        if (IsOp("]")) break;
      }
      absl::StatusOr<ExprPtr> item = ParseExpr(true);
      if (!item.ok()) return item;
      list->args.push_back(*std::move(item));
    }
    Next();
    return list;
  }

  absl::StatusOr<ExprPtr> ParseDict() {
    ExprPtr dict = MakeExpr(ExprKind::kDict, Next().pos);
    while (!IsOp("}")) {
      if (!dict->args.empty()) {
        LLMSERVE_RETURN_IF_ERROR(ExpectOp(","));
        if (IsOp("}")) break;
      }
      absl::StatusOr<ExprPtr> key = ParseExpr(true);
      if (!key.ok()) return key;
      LLMSERVE_RETURN_IF_ERROR(ExpectOp(":"));
      absl::StatusOr<ExprPtr> value = ParseExpr(true);
      if (!value.ok()) return value;
      dict->args.push_back(*std::move(key));
      dict->args.push_back(*std::move(value));
    }
    Next();
    return dict;
  }

  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node) {
    while (true) {
      if (IsOp(".")) {
        const SourcePos pos = Next().pos;
        if (Peek().type == TokenType::kInt) {  // foo.0 is foo[0]
          ExprPtr item = MakeExpr(ExprKind::kItem, pos);
          ExprPtr index = MakeExpr(ExprKind::kLiteral, Peek().pos);
          index->literal = Value::Int(Next().int_value);
          item->args.push_back(std::move(node));
          item->args.push_back(std::move(index));
          node = std::move(item);
          continue;
        }
        absl::StatusOr<std::string> name = ExpectName();
        if (!name.ok()) return name.status();
        ExprPtr attr = MakeExpr(ExprKind::kAttr, pos, *std::move(name));
        attr->args.push_back(std::move(node));
        node = std::move(attr);
      } else if (IsOp("[")) {
        absl::StatusOr<ExprPtr> sub = ParseSubscript(std::move(node));
        if (!sub.ok()) return sub;
        node = *std::move(sub);
      } else if (IsOp("(")) {
        absl::StatusOr<ExprPtr> call = ParseCall(std::move(node));
        if (!call.ok()) return call;
        node = *std::move(call);
      } else {
        return node;
      }
    }
  }

  absl::StatusOr<ExprPtr> ParseSubscript(ExprPtr object) {
    const SourcePos pos = Next().pos;
    ExprPtr bounds[3];
    int colons = 0;
    while (!IsOp("]")) {
      if (IsOp(":")) {
        if (++colons > 2) return Unexpected("']'");
        Next();
        continue;
      }
      if (bounds[colons] != nullptr) return Unexpected("':' or ']'");
      absl::StatusOr<ExprPtr> bound = ParseExpr(true);
      if (!bound.ok()) return bound;
      bounds[colons] = *std::move(bound);
    }
    Next();
    if (colons == 0) {
      if (bounds[0] == nullptr) return Error(pos, "empty subscript");
      ExprPtr item = MakeExpr(ExprKind::kItem, pos);
      item->args.push_back(std::move(object));
      item->args.push_back(std::move(bounds[0]));
      return item;
    }
    ExprPtr slice = MakeExpr(ExprKind::kSlice, pos);
    slice->args.push_back(std::move(object));
    for (ExprPtr& bound : bounds) slice->args.push_back(std::move(bound));
    return slice;
  }

  // `(` args `)` after a callee or a filter/test name: positional, then name=value.
  // Arguments as jinja2 parses them: positional, then keyword; `*list` (at most once, after the
  // positional ones) adds its items as positional arguments and `**dict` (at most once, last) its
  // items as keyword arguments. They are kept as args / kwargs entries marked kUnpackList (an
  // argument named "*") / kUnpackDict (a keyword argument named "**"), expanded at evaluation.
  absl::Status ParseArgList(Expr* node) {
    Next();
    bool unpacked_list = false;
    bool unpacked_dict = false;
    for (int count = 0; !IsOp(")"); ++count) {
      if (count > 0) {
        LLMSERVE_RETURN_IF_ERROR(ExpectOp(","));
        if (IsOp(")")) break;
      }
      if (IsOp("*") || IsOp("**")) {
        const bool dict = IsOp("**");
        const SourcePos pos = Next().pos;
        if (unpacked_dict || (!dict && unpacked_list)) {
          return Error(pos, dict ? "only one **dict argument is allowed"
                                 : "*list must come once, before any **dict argument");
        }
        absl::StatusOr<ExprPtr> value = ParseExpr(true);
        if (!value.ok()) return value.status();
        ExprPtr unpack = MakeExpr(ExprKind::kUnpack, pos, dict ? "**" : "*");
        unpack->args.push_back(*std::move(value));
        if (dict) {
          unpacked_dict = true;
          node->kwargs.emplace_back("**", std::move(unpack));
        } else {
          unpacked_list = true;
          node->args.push_back(std::move(unpack));
        }
      } else if (Peek().type == TokenType::kName && IsOp("=", 1)) {
        if (unpacked_dict) return Error(Peek().pos, "keyword argument after **dict");
        std::string key = Next().text;
        Next();
        absl::StatusOr<ExprPtr> value = ParseExpr(true);
        if (!value.ok()) return value.status();
        node->kwargs.emplace_back(std::move(key), *std::move(value));
      } else {
        if (!node->kwargs.empty() || unpacked_list) {
          return Error(Peek().pos, unpacked_list ? "positional argument after *list"
                                                 : "positional argument after keyword argument");
        }
        absl::StatusOr<ExprPtr> value = ParseExpr(true);
        if (!value.ok()) return value.status();
        node->args.push_back(*std::move(value));
      }
    }
    Next();
    return absl::OkStatus();
  }

  absl::StatusOr<ExprPtr> ParseCall(ExprPtr callee) {
    // Errors of the call (raise_exception's among them) point at the callee's name.
    ExprPtr call = MakeExpr(ExprKind::kCall, callee->pos);
    call->args.push_back(std::move(callee));
    LLMSERVE_RETURN_IF_ERROR(ParseArgList(call.get()));
    return call;
  }

  // `name[(args)]` applied to `node`, the `|` already consumed.
  absl::StatusOr<ExprPtr> ParseOneFilter(ExprPtr node) {
    const SourcePos pos = Peek().pos;
    absl::StatusOr<std::string> name = ExpectName();
    if (!name.ok()) return name.status();
    // jinja2 refuses an unknown filter when compiling, except inside an if statement or an
    // inline if, where it fails only if evaluated.
    if (!builtins::IsFilter(*name) && soft_ == 0) {
      return Error(pos, absl::StrCat("unsupported filter '", *name, "'"));
    }
    ExprPtr filter = MakeExpr(ExprKind::kFilter, pos, *std::move(name));
    filter->args.push_back(std::move(node));
    if (IsOp("(")) {
      LLMSERVE_RETURN_IF_ERROR(ParseArgList(filter.get()));
    }
    return filter;
  }

  absl::StatusOr<ExprPtr> ParseFilters(ExprPtr node) {
    while (true) {
      if (IsOp("|")) {
        Next();
        absl::StatusOr<ExprPtr> filter = ParseOneFilter(std::move(node));
        if (!filter.ok()) return filter;
        node = *std::move(filter);
      } else if (IsName("is")) {
        Next();
        ExprPtr test = MakeExpr(ExprKind::kTest, Peek().pos);
        if (IsName("not")) {
          Next();
          test->negated = true;
        }
        const SourcePos pos = Peek().pos;
        absl::StatusOr<std::string> name = ExpectName();
        if (!name.ok()) return name.status();
        if (!builtins::IsTest(*name) && soft_ == 0) {
          return Error(pos, absl::StrCat("unsupported test '", *name, "'"));
        }
        test->name = *std::move(name);
        test->args.push_back(std::move(node));
        if (IsOp("(")) {
          LLMSERVE_RETURN_IF_ERROR(ParseArgList(test.get()));
        } else if ((Peek().type == TokenType::kName || Peek().type == TokenType::kString ||
                    Peek().type == TokenType::kInt || Peek().type == TokenType::kFloat ||
                    IsOp("[") || IsOp("{")) &&
                   !IsName("else") && !IsName("or") && !IsName("and")) {
          // jinja2 takes one argument without parentheses: `x is divisibleby 3`.
          if (IsName("is")) return Error(Peek().pos, "tests cannot be chained with 'is'");
          absl::StatusOr<ExprPtr> arg = ParsePrimary();
          if (!arg.ok()) return arg;
          arg = ParsePostfix(*std::move(arg));
          if (!arg.ok()) return arg;
          test->args.push_back(*std::move(arg));
        }
        node = std::move(test);
      } else if (IsOp("(")) {
        absl::StatusOr<ExprPtr> call = ParseCall(std::move(node));
        if (!call.ok()) return call;
        node = *std::move(call);
      } else {
        return node;
      }
    }
  }

  const std::vector<Token>& tokens_;
  size_t index_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  int soft_ = 0;
  // The macros and call blocks being parsed, innermost last.
  std::vector<Stmt*> open_functions_;
};

}  // namespace

std::string TemplateErrorMessage(SourcePos pos, const std::string& message) {
  return absl::StrCat("chat template: line ", pos.line, ", column ", pos.column, ": ", message);
}

absl::StatusOr<ast::Body> ParseTemplate(const std::vector<Token>& tokens) {
  if (tokens.empty() || tokens.back().type != TokenType::kEof) {
    return absl::InvalidArgumentError("chat template: token stream without end");
  }
  return Parser(tokens).Run();
}

}  // namespace llmserve::common
