// Key targets of the CUDA kernel families, spelled as in the key (templates render {{target}}
// into Arch::sm80 / ::sm90a).
#pragma once

namespace ejk::cuda {

enum class Arch { sm80, sm90a };

}  // namespace ejk::cuda
