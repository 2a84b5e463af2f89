#!/usr/bin/env python3
"""Writes the wgmma.mma_async wrappers of the sm_90a flash kernel: kernels/ejk/kernels/cuda/
wgmma.cuh (the class templates, WgmmaSs and WgmmaRs) and one header per element type and N under
wgmma/ (their specializations), plus wgmma/all.cuh. Inline PTX needs one operand per
accumulator register (N / 2 of them), which is too long to write by hand and too regular to get
wrong by generating.

  python3 scripts/gen_wgmma.py   (from the repository root)

A key's NVRTC compile parses only the two headers its template includes (wgmma/n<block_k> and
n<head_dim>): the specializations of every N in one header cost ~4% of a d128 key's compile
once each held group forms (docs/design/flash_fwd_cuda.md, "NVRTC compile time"). WgmmaSs (S = Q K^T, both operands
in shared memory) exists at N = block_k of a valid sm_90a geometry, WgmmaRs (A from registers)
at N = head_dim (O += P V; also where the tiles are padded to a multiple of 64: the B operand
then ends inside a swizzle atom) and at N = block_k (S = Q K^T with Q's fragments in registers,
q_in_registers). The block_k set is read from the geometry itself (flash_fwd_traits.cuh,
compiled here by the host compiler, $CXX or g++), so the headers follow
FlashFwdSm90Geometry::valid().
"""
import os, subprocess, sys, tempfile

HEAD_DIMS = tuple(range(16, 257, 16))  # the sm_90a family: head_dim a multiple of 16 in [16, 256]
BLOCK_QS = (64, 128, 192)
TYPES = (("bf16", "bf16"), ("f16", "f16"))

ENUMERATE = r"""
#include <cstdio>
#include "ejk/kernels/cuda/flash_fwd_traits.cuh"
int main() {
  const int ds[] = {%s}, bqs[] = {%s};
  for (int bk = 8; bk <= 256; bk += 8) {
    bool used = false, q_regs = false;
    for (int d : ds)
      for (int bq : bqs) {
        const ejk::cuda::FlashFwdSm90Geometry g{d, bq, bk};
        used = used || g.valid();
        q_regs = q_regs || (g.valid() && g.q_in_registers());
      }
    if (used) std::printf("%%d %%d\n", bk, q_regs ? 1 : 0);
  }
}
"""


def block_ks():
    """(block_k, whether some geometry with it holds Q in registers) of every valid sm_90a
    geometry (head_dim 16..256, block_q 64/128/192)."""
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = os.path.join(tmp, "enum.cpp"), os.path.join(tmp, "enum")
        with open(src, "w") as f:
            f.write(ENUMERATE % (", ".join(map(str, HEAD_DIMS)), ", ".join(map(str, BLOCK_QS))))
        cxx = os.environ.get("CXX", "g++")
        subprocess.run([cxx, "-std=c++20", "-I", os.path.join(root, "kernels"), src, "-o", exe],
                       check=True)
        out = subprocess.run([exe], check=True, capture_output=True, text=True).stdout
    return tuple((int(bk), q == "1") for bk, q in (line.split() for line in out.splitlines()))


def acc_list(n):
    """Macro body: the accumulators as tied asm operands %0 .. %(n / 2 - 1)."""
    return ", ".join(f'"+f"(d[{i}])' for i in range(n // 2))


def regs(first, count):
    return "{" + ", ".join(f"%{i}" for i in range(first, first + count)) + "}"


# Group forms issue 4 or 8 k steps of one GEMM as one asm statement: NVVM and ptxas spend time
# per statement and per tied operand more than per instruction (docs/design/flash_fwd_cuda.md,
# "NVRTC compile time"). A group starts at a k step that is a multiple of 4, whose descriptors the caller passes
# (for eight steps also those of step + 4: the next 64-column block of a K-major operand); the
# steps inside a 4-step block advance them by immediates (16-byte units).
CLOSE = '"}\\n"'


SS_TEMPS = ".reg .b64 da, db;\\n.reg .b32 lo, hi;\\n"  # a group's descriptors (advance)
RS_TEMPS = ".reg .b64 db;\\n.reg .b32 lo, hi;\\n"


def open_scope(temps):
    """The statement's scope: the scale-d predicate, and the descriptor temporaries a group's
    steps need (none for one step)."""
    return f'"{{\\n.reg .pred p;\\n{temps}setp.ne.b32 p, 1, 0;\\n"'


def advance(dst, src, off):
    """dst = src + off on the descriptor's low word (the 14-bit start address: a tile's steps
    never carry out of it). A 64-bit add there became UIADD3.64 before each HGMMA, where single
    statements let ptxas add on the low word alone (head_dim 128 non-causal -1..-2%)."""
    return f'"mov.b64 {{lo, hi}}, {src};\\nadd.u32 lo, lo, {off};\\nmov.b64 {dst}, {{lo, hi}};\\n"'


def step(n, ptx, a, b, tail):
    return (f'"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ptx}.{ptx} " EJK_WGMMA_REGS '
            f'", {a}, {b}, p, 1, 1, {tail};\\n"')


def asm(lines, inputs, temps=""):
    joined = "\n        ".join([open_scope(temps)] + lines + [CLOSE])
    return f"""    asm volatile(
        {joined}
        : EJK_WGMMA_ACC
        : {inputs});"""


def ss(n, elem, ptx):
    """WgmmaSs<n, elem>: run1 / run4 / run8, A and B K-major in shared memory."""
    k = n // 2
    forms = []
    for steps in (1, 4, 8):
        bases = (steps + 3) // 4  # descriptors per operand: one per 4-step block
        lines = []
        for i in range(steps):
            blk, j = divmod(i, 4)
            a, b = f"%{k + blk}", f"%{k + bases + blk}"
            if j:  # 32 bytes (2 units) per k step inside a 64-column block
                lines += [advance("da", a, 2 * j), advance("db", b, 2 * j)]
                a, b = "da", "db"
            lines.append(step(n, ptx, a, b, "0, 0"))
        params = ", ".join([f"u64 a{i}" for i in range(bases)] + [f"u64 b{i}" for i in range(bases)])
        inputs = ", ".join([f'"l"(a{i})' for i in range(bases)] + [f'"l"(b{i})' for i in range(bases)])
        forms.append(f"""  static __device__ __forceinline__ void run{steps}(float* d, {params}) {{
{asm(lines, inputs, SS_TEMPS if steps > 1 else "")}
  }}""")
    return f"template <>\nstruct WgmmaSs<{n}, Elem::{elem}> {{\n" + "\n".join(forms) + "\n};\n"


def rs(n, elem, ptx):
    """WgmmaRs<n, elem>: run1 / run4 / run8, A fragments from registers, B in shared memory
    (kTransB: MN-major, else K-major)."""
    k = n // 2
    forms = []
    for steps in (1, 4, 8):
        bases = (steps + 3) // 4  # B descriptors: one per 4-step block
        b0 = k + 4 * steps  # first B descriptor
        offs = b0 + bases   # the 3 step offsets (groups)
        trans = offs + (3 if steps > 1 else 0)
        lines = []
        for i in range(steps):
            blk, j = divmod(i, 4)
            b = f"%{b0 + blk}"
            if j:
                lines.append(advance("db", b, f"%{offs + j - 1}"))
                b = "db"
            lines.append(step(n, ptx, regs(k + 4 * i, 4), b, f"%{trans}"))
        descs = ", ".join(f'"l"(b{i})' for i in range(bases))
        params = ", ".join(f"u64 b{i}" for i in range(bases))
        if steps == 1:
            frags = ", ".join(f'"r"(a[{r}])' for r in range(4))
            forms.append(f"""  template <bool kTransB>
  static __device__ __forceinline__ void run1(float* d, const u32 (&a)[4], {params}) {{
{asm(lines, f'{frags}, {descs}, "n"(int(kTransB))')}
  }}""")
        else:
            forms.append(f"""  // k steps kFirst .. kFirst + {steps - 1} of the caller's fragments.
  template <bool kTransB, int kFirst, int M>
  static __device__ __forceinline__ void run{steps}(float* d, const u32 (&a)[M][4], {params}) {{
    constexpr int kStep = kTransB ? 128 : 2;  // 16 rows (MN-major) or 32 bytes (K-major)
{asm(lines, f'EJK_WGMMA_FRAGS{steps}, {descs}, "n"(kStep), "n"(2 * kStep), "n"(3 * kStep), "n"(int(kTransB))', RS_TEMPS)}
  }}""")
    return f"template <>\nstruct WgmmaRs<{n}, Elem::{elem}> {{\n" + "\n".join(forms) + "\n};\n"


BASE = '''// Generated by scripts/gen_wgmma.py. Do not edit.
// wgmma.mma_async (sm_90a) for D(64 x N, f32) += A(64 x 16 K) * B(16 K x N) in K k steps of 16:
//   WgmmaSs<N, E>::run1(d, desc_a, desc_b)     A and B from shared memory, both K-major
//   WgmmaRs<N, E>::run1<kTransB>(d, a, desc_b)  A from registers (mma A-fragment layout), B K-major
//                                              (kTransB false: S = Q K^T, Q held in registers)
//                                              or MN-major (true: O += P V)
//   run4 / run8: 4 or 8 k steps in one asm statement (flash_fwd_sm90_steps.cuh issues whole
//     GEMMs through them: the compile's time goes per statement)
// d holds the warpgroup's accumulator fragment: N / 2 floats per thread, laid out per warp as
// an m16n8 C fragment for each 8-column tile (d[4 * t + i]). scale-d is 1 (accumulate);
// zero the accumulators first. Callers fence, commit and wait (ptx.cuh: wgmma_fence, ...).
// The specializations live in wgmma/n<N>.cuh: a variant's template includes those of its
// block_k and head_dim, code that instantiates many variants wgmma/all.cuh.
#pragma once
#include "ejk/kernels/cuda/ptx.cuh"

namespace ejk::cuda {

// One class per (N, E) and A operand: the PTX immediates must be constants, and function
// templates cannot be partially specialized.
template <int N, Elem E> struct WgmmaSs;
template <int N, Elem E> struct WgmmaRs;

}  // namespace ejk::cuda
'''


def shape_header(n, with_ss):
    frags = {s: ", ".join(f'"r"(a[kFirst + {i}][{r}])' for i in range(s) for r in range(4)) for s in (4, 8)}
    acc_regs = "{" + ", ".join(f"%{i}" for i in range(n // 2)) + "}"
    parts = [f"""// Generated by scripts/gen_wgmma.py. Do not edit.
// wgmma.cuh's wrappers at N = {n}: {"WgmmaSs and " if with_ss else ""}WgmmaRs, bf16 and f16.
#pragma once
#include "ejk/kernels/cuda/wgmma.cuh"

namespace ejk::cuda {{

// This header's accumulator operands and registers, spelled once for every form.
#define EJK_WGMMA_ACC {acc_list(n)}
#define EJK_WGMMA_REGS "{acc_regs}"
#define EJK_WGMMA_FRAGS4 {frags[4]}
#define EJK_WGMMA_FRAGS8 {frags[8]}
"""]
    for elem, ptx in TYPES:
        if with_ss:
            parts.append(ss(n, elem, ptx))
        parts.append(rs(n, elem, ptx))
    parts.append("""#undef EJK_WGMMA_ACC
#undef EJK_WGMMA_REGS
#undef EJK_WGMMA_FRAGS4
#undef EJK_WGMMA_FRAGS8

}  // namespace ejk::cuda
""")
    return "\n".join(parts)


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "kernels", "ejk",
                        "kernels", "cuda")
    ks = block_ks()
    ss_ns = {bk for bk, _ in ks}
    rs_ns = {bk for bk, q_regs in ks if q_regs} | set(HEAD_DIMS)
    os.makedirs(os.path.join(root, "wgmma"), exist_ok=True)
    with open(os.path.join(root, "wgmma.cuh"), "w") as f:
        f.write(BASE)
    names = []
    for n in sorted(ss_ns | rs_ns):
        names.append(f"n{n}.cuh")
        with open(os.path.join(root, "wgmma", names[-1]), "w") as f:
            f.write(shape_header(n, n in ss_ns))
    with open(os.path.join(root, "wgmma", "all.cuh"), "w") as f:
        f.write("// Generated by scripts/gen_wgmma.py. Do not edit.\n"
                "// Every wgmma wrapper (code that instantiates many flash variants).\n#pragma once\n" +
                "".join(f'#include "ejk/kernels/cuda/wgmma/{n}"\n' for n in names))


if __name__ == "__main__":
    main()
