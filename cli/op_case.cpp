#include "op_case.h"

#include <fmt/format.h>

#include "ejk/core/error.h"

namespace ejk::cli {

OpCase* flash_attention_case();
OpCase* merge_attention_states_case();
OpCase* mean_pooling_case();
OpCase* mean_pooling_backward_case();
OpCase* recurrent_attention_case(bool backward);

const std::vector<OpCase*>& op_cases() {
  static const std::vector<OpCase*> cases = {flash_attention_case(), merge_attention_states_case(), mean_pooling_case(),
                                             mean_pooling_backward_case(),
                                             recurrent_attention_case(false), recurrent_attention_case(true)};
  return cases;
}

void OpCase::fill(const std::string& name, Tensor& t, std::mt19937_64& rng) const {
  if (!is_floating(t.dtype()))
    throw InvalidArgument(fmt::format("{}: no random values for {} ({}): the op's CLI case must fill it", op(), name,
                                      dtype_name(t.dtype())));
  fill_normal(t, rng);
}

}  // namespace ejk::cli
