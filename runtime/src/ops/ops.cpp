// The ops of this library: adding an op adds one line here (and its folder under ops/).
#include "engine/op_def.h"
#include "ops/flash_attention/flash_op.h"
#include "ops/merge_attention_states/merge_op.h"
#include "ops/mean_pooling/mean_pooling_op.h"
#include "ops/recurrent_attention/recurrent_op.h"

namespace ejk::engine {

const std::vector<const OpDef*>& all_ops() {
  static const std::vector<const OpDef*> ops = {
      &ops::flash_attention_op(),
      &ops::merge_attention_states_op(),
      &ops::mean_pooling_op(), &ops::mean_pooling_backward_op(),
      &ops::recurrent_attention_op(), &ops::recurrent_attention_backward_op(),
  };
  return ops;
}

}  // namespace ejk::engine
