// Variant filters a user types (--variants, EJK_VARIANTS, ejk-gen list): a regular expression
// matched in time linear in the text (a Thompson NFA, no backtracking), so no pattern can hang
// a build, and parsed with bounded nesting, so none can overflow the stack. std::regex does
// neither (and its instantiations must stay out of libejk).
//
// Syntax (ECMAScript's common subset, searched anywhere in the text unless anchored):
//   literals, '.', '^', '$', '|', groups '(...)' and '(?:...)', '*', '+', '?', '{m}', '{m,}',
//   '{m,n}', classes '[abc]', '[a-z]', '[^...]', escapes '\d \w \s \D \W \S' and '\' before
//   any punctuation (a lazy quantifier is taken as the greedy one: search asks only whether a
//   match exists). Anything else (backreferences, lookaround, \b) is refused.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ejk {

class Pattern {
 public:
  static constexpr int kMaxDepth = 64;            // nested groups
  static constexpr size_t kMaxProgram = 1 << 16;  // instructions, after counted repeats expand

  // InvalidArgument "<what>: '<pattern>' is not a valid pattern: <reason at position>".
  Pattern(std::string_view pattern, std::string_view what);
  // True when some substring of `text` matches.
  bool search(std::string_view text) const;

  struct Inst {
    enum Op : uint8_t { kChars, kSplit, kJump, kBegin, kEnd, kMatch } op = kMatch;
    int x = 0, y = 0;        // targets (split: both; jump: x)
    uint64_t set[4] = {};    // kChars: the bytes it takes
  };

 private:
  std::vector<Inst> prog_;
};

}  // namespace ejk
