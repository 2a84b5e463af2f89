// The spec expression language: a recursive-descent parser to a small tree, then an
// evaluator over it. Parsing and evaluation are separate so that the spec loader can list an
// expression's identifiers (to reject typos) without values for them.
#include "ejk/core/expr.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <memory>
#include <vector>

#include "ejk/core/error.h"

namespace ejk {
namespace {

// Parsing, evaluation and destruction of the tree recurse; these bounds keep a hostile spec
// (10,000 nested parentheses, 50,000 '!') from overflowing the stack: a SpecError instead.
constexpr int kMaxNesting = 256;  // parentheses and unary operators inside each other
constexpr int kMaxHeight = 1024;  // operators on the longest path of the tree ("1+1+...+1")

struct Node {
  enum class Kind { Number, Ident, Unary, Binary } kind = Kind::Number;
  int64_t number = 0;
  int height = 1;    // nodes on the longest path down from here
  std::string text;  // Ident: the name; Unary/Binary: the operator spelling
  std::unique_ptr<Node> lhs, rhs;
};
using NodePtr = std::unique_ptr<Node>;

// The expression as messages quote it: long ones shortened, so an error stays one line.
std::string excerpt(std::string_view src) {
  constexpr size_t kMaxQuoted = 80;
  if (src.size() <= kMaxQuoted) return std::string(src);
  return fmt::format("{}... ({} characters)", src.substr(0, kMaxQuoted), src.size());
}

enum class Tok { Number, Ident, Op, LParen, RParen, End };

struct Token {
  Tok kind = Tok::End;
  std::string text;
  size_t column = 0;  // 1-based, for messages
};

class Lexer {
 public:
  Lexer(std::string_view src, std::string_view where) : src_(src), where_(where) {}

  std::vector<Token> run() {
    std::vector<Token> out;
    while (true) {
      while (pos_ < src_.size() && std::isspace(static_cast<unsigned char>(src_[pos_]))) ++pos_;
      if (pos_ >= src_.size()) break;
      out.push_back(next());
    }
    out.push_back(Token{Tok::End, "", src_.size() + 1});
    return out;
  }

 private:
  Token next() {
    const size_t start = pos_;
    const char c = src_[pos_];
    if (std::isdigit(static_cast<unsigned char>(c))) {
      while (pos_ < src_.size() && std::isalnum(static_cast<unsigned char>(src_[pos_]))) ++pos_;
      return {Tok::Number, std::string(src_.substr(start, pos_ - start)), start + 1};
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      while (pos_ < src_.size() &&
             (std::isalnum(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_'))
        ++pos_;
      return {Tok::Ident, std::string(src_.substr(start, pos_ - start)), start + 1};
    }
    if (c == '(' || c == ')') {
      ++pos_;
      return {c == '(' ? Tok::LParen : Tok::RParen, std::string(1, c), start + 1};
    }
    // Two-character operators first, so "<=" is not read as "<" followed by "=".
    static constexpr std::string_view kTwo[] = {"==", "!=", "<=", ">=", "&&", "||"};
    for (std::string_view op : kTwo)
      if (src_.substr(pos_, 2) == op) {
        pos_ += 2;
        return {Tok::Op, std::string(op), start + 1};
      }
    static constexpr std::string_view kOne = "+-*/%<>!";
    if (kOne.find(c) != std::string_view::npos) {
      ++pos_;
      return {Tok::Op, std::string(1, c), start + 1};
    }
    throw SpecError(fmt::format("{}: unexpected character '{}' at column {} in '{}'", where_, c,
                                start + 1, excerpt(src_)));
  }

  std::string_view src_, where_;
  size_t pos_ = 0;
};

// Binary operator levels, loosest first; each level is left-associative.
const std::vector<std::vector<std::string_view>>& binary_levels() {
  static const std::vector<std::vector<std::string_view>> levels = {
      {"||"}, {"&&"}, {"==", "!="}, {"<", "<=", ">", ">="}, {"+", "-"}, {"*", "/", "%"}};
  return levels;
}

class Parser {
 public:
  Parser(std::string_view src, std::string_view where)
      : src_(src), where_(where), toks_(Lexer(src, where).run()) {}

  NodePtr parse() {
    if (toks_.front().kind == Tok::End) fail(toks_.front(), "empty expression");
    NodePtr n = binary(0);
    if (peek().kind != Tok::End) fail(peek(), fmt::format("unexpected '{}'", peek().text));
    return n;
  }

 private:
  const Token& peek() const { return toks_[i_]; }

  [[noreturn]] void fail(const Token& t, const std::string& what) const {
    throw SpecError(fmt::format("{}: {} at column {} in '{}'", where_, what, t.column, excerpt(src_)));
  }

  // Counts one level of parentheses or unary operators for as long as it lives.
  class Nest {
   public:
    Nest(Parser& p) : p_(p) {
      if (++p_.nesting_ > kMaxNesting)
        p_.fail(p_.peek(), fmt::format("expression nests deeper than {} levels of parentheses "
                                       "and unary operators", kMaxNesting));
    }
    ~Nest() { --p_.nesting_; }
    Nest(const Nest&) = delete;
    Nest& operator=(const Nest&) = delete;

   private:
    Parser& p_;
  };

  // Gives `n` its height from its children; refuses trees taller than kMaxHeight.
  NodePtr with_height(NodePtr n, const Token& at) const {
    n->height = 1 + std::max(n->lhs ? n->lhs->height : 0, n->rhs ? n->rhs->height : 0);
    if (n->height > kMaxHeight)
      fail(at, fmt::format("expression has more than {} operators in a chain", kMaxHeight));
    return n;
  }

  NodePtr binary(size_t level) {
    if (level == binary_levels().size()) return unary();
    NodePtr lhs = binary(level + 1);
    while (peek().kind == Tok::Op && is_op_at(level, peek().text)) {
      const Token& op = toks_[i_++];
      auto n = std::make_unique<Node>();
      n->kind = Node::Kind::Binary;
      n->text = op.text;
      n->lhs = std::move(lhs);
      n->rhs = binary(level + 1);
      lhs = with_height(std::move(n), op);
    }
    return lhs;
  }

  static bool is_op_at(size_t level, std::string_view op) {
    for (std::string_view o : binary_levels()[level])
      if (o == op) return true;
    return false;
  }

  NodePtr unary() {
    if (peek().kind == Tok::Op && (peek().text == "!" || peek().text == "-" || peek().text == "+")) {
      Nest nest(*this);
      const Token& op = toks_[i_++];
      auto n = std::make_unique<Node>();
      n->kind = Node::Kind::Unary;
      n->text = op.text;
      n->lhs = unary();
      return with_height(std::move(n), op);
    }
    return primary();
  }

  NodePtr primary() {
    const Token& t = peek();
    auto n = std::make_unique<Node>();
    switch (t.kind) {
      case Tok::Number: n->number = parse_number(t); break;
      case Tok::Ident:
        if (t.text == "true" || t.text == "false") {
          n->number = t.text == "true" ? 1 : 0;
        } else {
          n->kind = Node::Kind::Ident;
          n->text = t.text;
        }
        break;
      case Tok::LParen: {
        Nest nest(*this);
        ++i_;
        NodePtr inner = binary(0);
        if (peek().kind != Tok::RParen) fail(peek(), "expected ')'");
        ++i_;
        return inner;
      }
      case Tok::End: fail(t, "expression ends early");
      default: fail(t, fmt::format("unexpected '{}'", t.text));
    }
    ++i_;
    return n;
  }

  int64_t parse_number(const Token& t) const {
    int64_t v = 0;
    for (char c : t.text) {
      if (!std::isdigit(static_cast<unsigned char>(c)))
        fail(t, fmt::format("malformed integer '{}'", t.text));
      if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, c - '0', &v))
        fail(t, fmt::format("integer '{}' does not fit in 64 bits", t.text));
    }
    return v;
  }

  std::string_view src_, where_;
  std::vector<Token> toks_;
  size_t i_ = 0;
  int nesting_ = 0;
};

class Evaluator {
 public:
  Evaluator(const std::map<std::string, int64_t>& vars, std::string_view src,
            std::string_view where)
      : vars_(vars), src_(src), where_(where) {}

  int64_t eval(const Node& n) const {
    switch (n.kind) {
      case Node::Kind::Number: return n.number;
      case Node::Kind::Ident: return lookup(n.text);
      case Node::Kind::Unary: return unary(n.text, eval(*n.lhs));
      case Node::Kind::Binary: return binary(n);
    }
    return 0;
  }

 private:
  int64_t lookup(const std::string& name) const {
    auto it = vars_.find(name);
    if (it == vars_.end()) {
      std::string known;
      for (const auto& [k, v] : vars_) known += (known.empty() ? "" : ", ") + k;
      fail(fmt::format("unknown identifier '{}' (known: {})", name, known));
    }
    return it->second;
  }

  int64_t unary(const std::string& op, int64_t v) const {
    if (op == "!") return v == 0 ? 1 : 0;
    if (op == "+") return v;
    int64_t r = 0;
    if (__builtin_sub_overflow(int64_t{0}, v, &r)) fail("integer overflow in negation");
    return r;
  }

  int64_t binary(const Node& n) const {
    const std::string& op = n.text;
    // && and || short-circuit, so "b != 0 && a / b > 1" is safe.
    if (op == "&&") return eval(*n.lhs) != 0 && eval(*n.rhs) != 0 ? 1 : 0;
    if (op == "||") return eval(*n.lhs) != 0 || eval(*n.rhs) != 0 ? 1 : 0;
    const int64_t a = eval(*n.lhs), b = eval(*n.rhs);
    int64_t r = 0;
    if (op == "+") {
      if (__builtin_add_overflow(a, b, &r)) fail("integer overflow in '+'");
    } else if (op == "-") {
      if (__builtin_sub_overflow(a, b, &r)) fail("integer overflow in '-'");
    } else if (op == "*") {
      if (__builtin_mul_overflow(a, b, &r)) fail("integer overflow in '*'");
    } else if (op == "/" || op == "%") {
      if (b == 0) fail(fmt::format("division by zero in '{}'", op));
      if (a == INT64_MIN && b == -1) fail(fmt::format("integer overflow in '{}'", op));
      r = op == "/" ? a / b : a % b;
    } else {
      r = compare(op, a, b) ? 1 : 0;
    }
    return r;
  }

  static bool compare(const std::string& op, int64_t a, int64_t b) {
    if (op == "==") return a == b;
    if (op == "!=") return a != b;
    if (op == "<") return a < b;
    if (op == "<=") return a <= b;
    if (op == ">") return a > b;
    return a >= b;  // the parser admits no other operator
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw SpecError(fmt::format("{}: {} in '{}'", where_, what, excerpt(src_)));
  }

  const std::map<std::string, int64_t>& vars_;
  std::string_view src_, where_;
};

void collect_identifiers(const Node& n, std::set<std::string>& out) {
  if (n.kind == Node::Kind::Ident) out.insert(n.text);
  if (n.lhs) collect_identifiers(*n.lhs, out);
  if (n.rhs) collect_identifiers(*n.rhs, out);
}

}  // namespace

int64_t eval_expr(std::string_view expr, const std::map<std::string, int64_t>& vars,
                  std::string_view where) {
  NodePtr root = Parser(expr, where).parse();
  return Evaluator(vars, expr, where).eval(*root);
}

std::set<std::string> expr_identifiers(std::string_view expr, std::string_view where) {
  NodePtr root = Parser(expr, where).parse();
  std::set<std::string> out;
  collect_identifiers(*root, out);
  return out;
}

}  // namespace ejk
