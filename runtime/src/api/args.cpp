// ejk::Args (ejk/op.h): named arguments, plain containers with no engine behind them (the C ABI's
// argument reader and its fuzz target use them alone).
#include <algorithm>

#include "ejk/op.h"

namespace ejk {
namespace {

template <class T>
T* find_named(std::vector<std::pair<std::string, T>>& v, std::string_view name) {
  auto it = std::find_if(v.begin(), v.end(), [&](const auto& e) { return e.first == name; });
  return it == v.end() ? nullptr : &it->second;
}

}  // namespace

Args& Args::set(std::string_view name, const TensorView& t) {
  if (TensorView* v = find_named(tensors_, name)) *v = t;
  else tensors_.emplace_back(std::string(name), t);
  return *this;
}

Args& Args::set(std::string_view name, Scalar s) {
  if (Scalar* v = find_named(scalars_, name)) *v = s;
  else scalars_.emplace_back(std::string(name), s);
  return *this;
}

Args& Args::tune(std::string_view axis, int64_t value) {
  if (int64_t* v = find_named(tuning_, axis)) *v = value;
  else tuning_.emplace_back(std::string(axis), value);
  return *this;
}

const TensorView* Args::tensor(std::string_view name) const {
  return find_named(const_cast<std::vector<std::pair<std::string, TensorView>>&>(tensors_), name);
}

const Scalar* Args::scalar(std::string_view name) const {
  return find_named(const_cast<std::vector<std::pair<std::string, Scalar>>&>(scalars_), name);
}

}  // namespace ejk
