#include "ejk/core/pattern.h"

#include <fmt/format.h>

#include <algorithm>

#include "ejk/core/error.h"

namespace ejk {
namespace {

using Inst = Pattern::Inst;
// A piece of program whose targets are indices into itself; size() means "what follows".
using Frag = std::vector<Inst>;

void add_byte(Inst& i, unsigned char c) { i.set[c >> 6] |= uint64_t{1} << (c & 63); }
void add_range(Inst& i, unsigned char lo, unsigned char hi) {
  for (int c = lo; c <= hi; ++c) add_byte(i, static_cast<unsigned char>(c));
}
bool has_byte(const Inst& i, unsigned char c) { return (i.set[c >> 6] >> (c & 63)) & 1; }
void invert(Inst& i) {
  for (uint64_t& w : i.set) w = ~w;
}

void shift(Frag& f, int by) {
  for (Inst& i : f)
    if (i.op == Inst::kSplit || i.op == Inst::kJump) i.x += by, i.y += by;
}

void append(Frag& a, Frag b) {
  shift(b, int(a.size()));
  a.insert(a.end(), b.begin(), b.end());
}

Inst split(int x, int y) {
  Inst i;
  i.op = Inst::kSplit, i.x = x, i.y = y;
  return i;
}
Inst jump(int x) {
  Inst i;
  i.op = Inst::kJump, i.x = x;
  return i;
}

// Recursive descent over the pattern, depth bounded by Pattern::kMaxDepth groups.
class Parser {
 public:
  Parser(std::string_view p, std::string_view what) : p_(p), what_(what) {}

  Frag parse() {
    Frag f = alternation(0);
    if (i_ < p_.size()) fail("unmatched ')'");
    return f;
  }

 private:
  [[noreturn]] void fail(std::string_view why) const {
    std::string shown(p_.substr(0, 60));
    if (p_.size() > 60) shown += "...";
    throw InvalidArgument(fmt::format("{}: '{}' is not a valid pattern: {} at position {}", what_, shown, why,
                                      std::min(i_, p_.size()) + 1));
  }
  bool at(char c) const { return i_ < p_.size() && p_[i_] == c; }
  void check_size(size_t n) const {
    if (n > Pattern::kMaxProgram) fail(fmt::format("it expands past {} instructions", Pattern::kMaxProgram));
  }

  Frag alternation(int depth) {
    Frag a = concatenation(depth);
    while (at('|')) {
      ++i_;
      Frag b = concatenation(depth);
      check_size(a.size() + b.size() + 2);
      Frag f{split(1, int(a.size()) + 2)};
      append(f, std::move(a));
      f.push_back(jump(int(f.size() + b.size() + 1)));
      append(f, std::move(b));
      a = std::move(f);
    }
    return a;
  }

  Frag concatenation(int depth) {
    Frag f;
    while (i_ < p_.size() && !at('|') && !at(')')) {
      append(f, repetition(depth));
      check_size(f.size());
    }
    return f;
  }

  Frag repetition(int depth) {
    Frag a = atom(depth);
    bool quantified = false;
    while (at('*') || at('+') || at('?') || at('{')) {
      if (quantified) {
        if (at('?')) {  // lazy: the same set of matches, and search only asks whether one exists
          ++i_;
          continue;
        }
        fail("a quantifier after a quantifier");
      }
      quantified = true;
      const char q = p_[i_];
      if (q == '{') {
        a = counted(std::move(a));
        continue;
      }
      ++i_;
      a = q == '*' ? star(std::move(a)) : q == '+' ? plus(std::move(a)) : optional(std::move(a));
    }
    return a;
  }

  static Frag star(Frag a) {
    Frag f{split(1, int(a.size()) + 2)};
    append(f, std::move(a));
    f.push_back(jump(0));
    return f;
  }
  static Frag plus(Frag a) {
    const int n = int(a.size());
    a.push_back(split(0, n + 1));
    return a;
  }
  static Frag optional(Frag a) {
    Frag f{split(1, int(a.size()) + 1)};
    append(f, std::move(a));
    return f;
  }

  int64_t count() {
    const size_t start = i_;
    int64_t v = 0;
    while (i_ < p_.size() && p_[i_] >= '0' && p_[i_] <= '9') {
      v = v * 10 + (p_[i_++] - '0');
      if (v > 1000) fail("a repeat count above 1000");
    }
    if (i_ == start) fail("expected a repeat count");
    return v;
  }

  // {m}, {m,} or {m,n}: m copies, then n - m optional ones (or a star).
  Frag counted(Frag a) {
    ++i_;  // '{'
    const int64_t m = count();
    int64_t n = m;
    bool unbounded = false;
    if (at(',')) {
      ++i_;
      if (at('}')) unbounded = true;
      else n = count();
    }
    if (!at('}')) fail("expected '}'");
    ++i_;
    if (n < m) fail("a repeat {m,n} with n < m");
    check_size(a.size() * size_t(std::max<int64_t>(n, m + 1) + 1));
    Frag f;
    for (int64_t k = 0; k < m; ++k) append(f, a);
    if (unbounded) append(f, star(a));
    else
      for (int64_t k = m; k < n; ++k) append(f, optional(a));
    return f;
  }

  Frag atom(int depth) {
    Inst chars;
    chars.op = Inst::kChars;
    const char c = p_[i_];
    switch (c) {
      case '(': {
        if (depth + 1 > Pattern::kMaxDepth) fail(fmt::format("groups nested deeper than {}", Pattern::kMaxDepth));
        ++i_;
        if (at('?')) {
          if (p_.substr(i_, 2) != "?:") fail("only (?:...) groups are supported");
          i_ += 2;
        }
        Frag f = alternation(depth + 1);
        if (!at(')')) fail("unmatched '('");
        ++i_;
        return f;
      }
      case '*': case '+': case '?': case '{': fail(fmt::format("nothing to repeat before '{}'", c));
      case '^': case '$': {
        ++i_;
        Inst a;
        a.op = c == '^' ? Inst::kBegin : Inst::kEnd;
        return {a};
      }
      case '.':
        ++i_;
        add_range(chars, 0, 255);
        chars.set['\n' >> 6] &= ~(uint64_t{1} << ('\n' & 63));
        return {chars};
      case '[': ++i_; bracket(chars); return {chars};
      case '\\': ++i_; escape(chars); return {chars};
      default:
        ++i_;
        add_byte(chars, static_cast<unsigned char>(c));
        return {chars};
    }
  }

  // After a '\': a class (\d \w \s and their complements) or a punctuation character itself.
  // Returns the byte for a single character (ranges need it), or -1 for a class.
  int escape(Inst& into) {
    if (i_ >= p_.size()) fail("a trailing '\\'");
    const char c = p_[i_++];
    Inst cls;
    switch (c) {
      case 'd': case 'D': add_range(cls, '0', '9'); break;
      case 'w': case 'W': add_range(cls, '0', '9'), add_range(cls, 'a', 'z'), add_range(cls, 'A', 'Z'), add_byte(cls, '_'); break;
      case 's': case 'S': for (char s : {' ', '\t', '\n', '\r', '\f', '\v'}) add_byte(cls, static_cast<unsigned char>(s)); break;
      case 'n': add_byte(into, '\n'); return '\n';
      case 't': add_byte(into, '\t'); return '\t';
      default:
        if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
          fail(fmt::format("the escape '\\{}' is not supported", c));
        add_byte(into, static_cast<unsigned char>(c));
        return static_cast<unsigned char>(c);
    }
    if (c == 'D' || c == 'W' || c == 'S') invert(cls);
    for (int w = 0; w < 4; ++w) into.set[w] |= cls.set[w];
    return -1;
  }

  void bracket(Inst& into) {
    const bool negated = at('^');
    if (negated) ++i_;
    bool first = true;
    for (;;) {
      if (i_ >= p_.size()) fail("unmatched '['");
      if (at(']') && !first) break;
      first = false;
      int lo;
      if (at('\\')) {
        ++i_;
        lo = escape(into);
      } else {
        lo = static_cast<unsigned char>(p_[i_++]);
        add_byte(into, static_cast<unsigned char>(lo));
      }
      if (lo >= 0 && at('-') && i_ + 1 < p_.size() && p_[i_ + 1] != ']') {
        ++i_;
        int hi;
        if (at('\\')) {
          ++i_;
          Inst tmp;
          hi = escape(tmp);
          if (hi < 0) fail("a class as the end of a range");
        } else {
          hi = static_cast<unsigned char>(p_[i_++]);
        }
        if (hi < lo) fail("a range whose end is before its start");
        add_range(into, static_cast<unsigned char>(lo), static_cast<unsigned char>(hi));
      }
    }
    ++i_;  // ']'
    if (negated) invert(into);
  }

  std::string_view p_, what_;
  size_t i_ = 0;
};

// The threads alive at one position: each program counter once, in insertion order.
class ThreadSet {
 public:
  explicit ThreadSet(size_t n) : dense_(n), sparse_(n) {}
  bool contains(int pc) const { return sparse_[size_t(pc)] < size_ && dense_[sparse_[size_t(pc)]] == pc; }
  void insert(int pc) {
    sparse_[size_t(pc)] = size_;
    dense_[size_++] = pc;
  }
  void clear() { size_ = 0; }
  size_t size() const { return size_; }
  int operator[](size_t i) const { return dense_[i]; }

 private:
  std::vector<int> dense_;
  std::vector<size_t> sparse_;
  size_t size_ = 0;
};

}  // namespace

Pattern::Pattern(std::string_view pattern, std::string_view what) {
  prog_ = Parser(pattern, what).parse();
  prog_.push_back(Inst{});  // kMatch
}

bool Pattern::search(std::string_view text) const {
  const size_t n = prog_.size();
  ThreadSet cur(n), next(n);
  std::vector<int> stack;
  // Follows splits, jumps and assertions from `pc` at `pos` (an explicit stack: the program
  // may be long); returns true when the match instruction is reached.
  auto add = [&](ThreadSet& set, int pc0, size_t pos) {
    stack.assign(1, pc0);
    while (!stack.empty()) {
      const int pc = stack.back();
      stack.pop_back();
      if (set.contains(pc)) continue;
      set.insert(pc);
      const Inst& i = prog_[size_t(pc)];
      switch (i.op) {
        case Inst::kMatch: return true;
        case Inst::kJump: stack.push_back(i.x); break;
        case Inst::kSplit: stack.push_back(i.y), stack.push_back(i.x); break;
        case Inst::kBegin: if (pos == 0) stack.push_back(pc + 1); break;
        case Inst::kEnd: if (pos == text.size()) stack.push_back(pc + 1); break;
        case Inst::kChars: break;
      }
    }
    return false;
  };
  for (size_t pos = 0;; ++pos) {
    if (add(cur, 0, pos)) return true;  // a match may start at every position
    if (pos == text.size()) return false;
    next.clear();
    const auto c = static_cast<unsigned char>(text[pos]);
    for (size_t t = 0; t < cur.size(); ++t) {
      const Inst& i = prog_[size_t(cur[t])];
      if (i.op == Inst::kChars && has_byte(i, c) && add(next, cur[t] + 1, pos + 1)) return true;
    }
    std::swap(cur, next);
  }
}

}  // namespace ejk
