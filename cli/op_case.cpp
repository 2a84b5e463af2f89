#include "op_case.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <stdexcept>

#include "ejk/core/error.h"

namespace ejk::cli {

namespace {

struct CaseRegistry {
  std::mutex mu;
  std::vector<OpCase* (*)()> factories;
};

CaseRegistry& registry() {
  static CaseRegistry r;
  return r;
}

}  // namespace

CaseRegistrar::CaseRegistrar(OpCase* (*make)()) {
  CaseRegistry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.factories.push_back(make);
}

const std::vector<OpCase*>& op_cases() {
  static const std::vector<OpCase*> cases = [] {
    CaseRegistry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    std::vector<OpCase*> v;
    for (auto make : r.factories) v.push_back(make());
    std::sort(v.begin(), v.end(), [](const OpCase* a, const OpCase* b) { return std::strcmp(a->op(), b->op()) < 0; });
    for (size_t i = 1; i < v.size(); ++i)
      if (std::strcmp(v[i]->op(), v[i - 1]->op()) == 0)
        throw std::logic_error(fmt::format("CLI case {} is registered twice", v[i]->op()));
    return v;
  }();
  return cases;
}

void OpCase::fill(const std::string& name, Tensor& t, std::mt19937_64& rng) const {
  if (!is_floating(t.dtype()))
    throw InvalidArgument(fmt::format("{}: no random values for {} ({}): the op's CLI case must fill it", op(), name,
                                      dtype_name(t.dtype())));
  fill_normal(t, rng);
}

}  // namespace ejk::cli
