#!/usr/bin/env bash
# Builds the sm_90a cubins of a few flash forward keys from two trees and compares each
# kernel's machine code (the ELF .text sections): a refactor of the kernels that leaves the
# code identical cannot change their speed. Needs nvcc only (no GPU).
#   bench/cuda/sass_diff.sh OLD_TREE NEW_TREE OUT_DIR [KEY_SPEC ...]
# KEY_SPEC: D,BQ,BK,causal,per_item (0/1), e.g. 128,128,128,1,0. Default: the bf16 grid's keys.
# With NVDISASM set (an nvdisasm binary), a kernel whose code differs also gets the number of
# instructions that differ once addresses and label numbers are set aside (a diff in OUT_DIR).
set -euo pipefail
old=$(cd "$1" && pwd); new=$(cd "$2" && pwd); out=$3; shift 3
specs=("$@")
[[ ${#specs[@]} -gt 0 ]] || specs=(64,128,128,1,0 64,192,128,0,0 64,192,128,1,0 64,192,128,1,1
  128,128,128,0,0 128,128,128,1,0 128,128,192,1,0 256,128,80,0,0 256,128,80,1,0)
mkdir -p "$out"
tu() {  # the generator's template, rendered for one key
  local d=$1 bq=$2 bk=$3 c=$4 it=$5 b=false i=false
  [[ $c == 1 ]] && b=true
  [[ $it == 1 ]] && i=true
  cat <<TU
#include "ejk/kernels/cuda/flash_fwd.cuh"
#include "ejk/kernels/cuda/wgmma/n$bk.cuh"
#include "ejk/kernels/cuda/wgmma/n$d.cuh"
namespace {
using Kernel = ejk::cuda::FlashFwdKernel<ejk::cuda::Arch::sm90a, ejk::cuda::Elem::bf16, $d, $bq, $bk,
    ejk::cuda::FlashFlags{.causal = $b, .window = false, .segments = false, .softcap = false,
                          .sinks = false, .bias = false, .per_item = $i}>;
}
extern "C" __global__ void __launch_bounds__(Kernel::kThreads, 1)
    flash_kernel(const __grid_constant__ ejk::FlashFwdParams params,
                 const __grid_constant__ ejk::cuda::FlashFwdTensorMaps maps) {
  Kernel::run(params, maps);
}
TU
}
for s in "${specs[@]}"; do
  IFS=, read -r d bq bk c it <<<"$s"
  name=d$d.bq$bq.bk$bk.c$c.i$it
  for side in old new; do
    tree=$old; [[ $side == new ]] && tree=$new
    tu "$d" "$bq" "$bk" "$c" "$it" > "$out/$name.$side.cu"
    [[ -f $out/$name.$side.cubin && $side == old ]] && continue  # the base does not change
    nvcc -cubin -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++20 -I"$tree/kernels" \
      -Xptxas -v -o "$out/$name.$side.cubin" "$out/$name.$side.cu" 2> "$out/$name.$side.ptxas"
  done
  python3 - "$out/$name.old.cubin" "$out/$name.new.cubin" "$name" <<'PY'
import sys
def text(path):  # the .text.* sections of an ELF64 cubin
    b = open(path, "rb").read()
    shoff = int.from_bytes(b[0x28:0x30], "little"); shentsize, shnum, shstrndx = (
        int.from_bytes(b[o:o + 2], "little") for o in (0x3a, 0x3c, 0x3e))
    sh = [b[shoff + i * shentsize: shoff + (i + 1) * shentsize] for i in range(shnum)]
    off = lambda s: int.from_bytes(s[0x18:0x20], "little")
    size = lambda s: int.from_bytes(s[0x20:0x28], "little")
    strtab = b[off(sh[shstrndx]): off(sh[shstrndx]) + size(sh[shstrndx])]
    name = lambda s: strtab[int.from_bytes(s[0:4], "little"):].split(b"\0")[0].decode()
    return {name(s): b[off(s): off(s) + size(s)] for s in sh if name(s).startswith(".text")}
a, b = text(sys.argv[1]), text(sys.argv[2])
same = a == b
sizes = {k: len(v) for k, v in b.items()}
print(f"{sys.argv[3]}: {'identical' if same else 'DIFFERENT'} machine code {sizes}")
PY
  if [[ -n ${NVDISASM:-} ]] && ! cmp -s "$out/$name.old.cubin" "$out/$name.new.cubin"; then
    for side in old new; do
      "$NVDISASM" -c "$out/$name.$side.cubin" | sed -E 's#/\*[0-9a-f]{4,}\*/##; s#\.L_x_[0-9]+#L#g' |
        grep -v '^\s*$' > "$out/$name.$side.sass"
    done
    diff "$out/$name.old.sass" "$out/$name.new.sass" > "$out/$name.sass.diff" || true
    echo "  $name: $(grep -c '^>' "$out/$name.sass.diff") of $(wc -l < "$out/$name.new.sass") instructions differ"
  fi
done
