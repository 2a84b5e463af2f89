// An op's arguments as its spec declares them: tensors with symbolic layouts, scalars, modes
// and the heuristic's problem variables. The runtime's argument binder reads these, so the
// spec is the one description of an op's signature (docs, checks, CLI and bindings).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ejk {

// One dimension of a layout. Spelled in the spec as
//   Sq     a size symbol: every tensor that names it has the same size there
//   1      a literal size
//   B|1    the symbol's size, or 1 (broadcast)
//   N+1    the symbol plus a constant (the symbol is bound to size - 1)
//   X?     a leading dimension that may be absent (X any of the above)
//   ...    any number of leading dimensions, the same in every tensor that has them
struct LayoutDim {
  enum class Kind : uint8_t { Symbol, Literal, Ellipsis };
  Kind kind = Kind::Symbol;
  int symbol = -1;         // index into OpSchema::symbols() (Symbol)
  int64_t value = 0;       // Literal: the size; Symbol: the constant added ("N+1": 1)
  bool broadcast = false;  // "X|1"
  bool optional = false;   // "X?"
};

struct Layout {
  std::vector<LayoutDim> dims;
  std::string text;  // as the spec spells it, "[B, Sq, Hq, D]", for messages
  // Dimensions that are always present (neither optional nor an ellipsis).
  int required_rank() const;
  bool has_ellipsis() const;
};

struct TensorArgDef {
  std::string name;
  Layout layout;                               // outside every mode
  std::map<std::string, Layout> mode_layouts;  // mode name -> the layout in that mode
  std::string like;                 // outputs: the shape of this input instead of a layout
  std::vector<std::string> dtypes;  // dtype names, or an enum axis name: "the variant's value"
  bool optional = false;
  bool output = false;              // written by the op
  bool contiguous = false;          // the whole tensor must be contiguous (else: its last dim)
  std::string sets_flag;            // flag axis that is on when this tensor is given, or ""
  std::vector<std::string> in_place;  // outputs: inputs it may be (the same memory and view)
  std::string doc;
  int line = 0;

  const Layout& layout_in(const std::string& mode) const;  // the mode's layout, else `layout`
};

enum class ScalarType : uint8_t { f32, f64, i64, boolean, i64x2 };

struct ScalarArgDef {
  std::string name, type_name;
  ScalarType type = ScalarType::f32;
  std::string default_value;  // as documented: a literal, "none" (absent), or a formula
  std::string sets_flag;      // flag axis that is on when this scalar is set (and not false)
  int binds = -1;             // i64: the layout symbol whose size it gives (for outputs whose
                              // sizes no input has, e.g. a backward's token count), or -1
  // Value ranges the binder enforces (i64[2]: each element). f32 values are checked as the
  // f32 the kernels receive, so a double that overflows or flushes to 0 in f32 is caught.
  bool has_min = false, has_max = false;
  double min = 0, max = 0;
  bool finite = false;    // floats: no NaN or infinity
  bool positive = false;  // > 0
  // i64[2]: the C++ struct of the pair and its two field names (e.g. SlidingWindow, left and
  // right); empty: std::array<int64_t, 2> and the fields 0 and 1.
  std::string pair_struct;
  std::vector<std::string> pair_fields;
  std::string doc;
  int line = 0;

  // "none" or an expression: the argument may be absent (std::optional, a has_ flag in C).
  bool default_is_absent() const;
};

// A mode is on when its `when` tensor is given; it selects the tensors' mode layouts and
// states which other arguments it needs or excludes.
struct ModeDef {
  std::string name, when, doc;
  std::vector<std::string> requires_args, forbids_args;
  int line = 0;
};

// A variable the heuristic reads. Its value comes from one source:
//  - the key's axis of the same name (before the heuristic chooses),
//  - `expr`, an expression over axis values (and enum constants), or
//  - the op at run time (sizes), and `default` where there is no problem (`ejk compile`).
struct ProblemVarDef {
  std::string name, doc;
  std::string expr;
  bool has_default = false;
  int64_t default_value = 0;
  int line = 0;
};

}  // namespace ejk
