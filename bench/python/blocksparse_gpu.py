#!/usr/bin/env python3
"""Block-sparse attention forward through ejk.torch against PyTorch's FlexAttention with the same
block mask, on the GPU, row by row.

  blocksparse_gpu.py [--s 4096,8192] [--density 0.1,0.2,0.3,0.5] [--h 16] [--d 128]
                     [--block 128,128] [--causal 0|1] [--per-head 0|1] [--out out/bench/python]

bf16, B = 1, [B, H, S, D] tensors. A random layout [1, H|1, S/bq, S/bk] of about `density` of the
blocks (seeded) is given to both: to ejk.torch.blocksparse_attention as qkv_layouts with
chunk_size (bq, bk), to FlexAttention as the block mask create_block_mask builds from a mask_mod
reading the same layout, with BLOCK_SIZE (bq, bk) (flex_attention under torch.compile). Per row:
device time per call from CUDA events around N calls back to back (after a warm-up; median of 5
batches), each one's TFLOP/s over the listed blocks (4 * bq * bk * D per listed block and head,
causal blocks counted whole), the ratio FlexAttention / ejk (> 1: ejk faster), and the rel-L2 of
the two outputs (they compute the same masked softmax). Prints a table; writes OUT/blocksparse.json.
Run from the repository root with ejk importable (pip install, or PYTHONPATH=python
EJK_LIBRARY_DIR=BUILD/runtime).
"""
import argparse
import json
import os

import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

from bench_torch import device_s  # CUDA events around calls back to back, median of batches
from ejk.torch import blocksparse_attention


def ints(text):
    return [int(x) for x in text.split(",") if x]


def floats(text):
    return [float(x) for x in text.split(",") if x]


def random_layout(h, nq, nk, bq, bk, density, causal, seed):
    g = torch.Generator().manual_seed(seed)
    layout = torch.rand(1, h, nq, nk, generator=g) < density
    if causal:  # blocks wholly above the diagonal are masked anyway: list only those with a visible pair
        first_key = torch.arange(nk)[None, :] * bk
        last_query = torch.arange(nq)[:, None] * bq + bq - 1
        layout &= first_key <= last_query
    return layout.cuda()


def row(s, h, d, bq, bk, density, causal, per_head, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v = (torch.randn(1, h, s, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
    nq, nk = s // bq, s // bk
    layout = random_layout(h if per_head else 1, nq, nk, bq, bk, density, causal, seed)
    listed = int(layout.sum().item()) * (1 if per_head else h)

    def mask_mod(b, hh, qi, kj):
        visible = layout[0, hh if per_head else 0, qi // bq, kj // bk]
        return visible & (kj <= qi) if causal else visible

    block_mask = create_block_mask(mask_mod, 1, h if per_head else None, s, s, device="cuda", BLOCK_SIZE=(bq, bk))
    flex = torch.compile(flex_attention)

    def ejk_call():
        return blocksparse_attention(q, k, v, qkv_layouts=layout, chunk_size=(bq, bk), causal=causal)

    def flex_call():
        return flex(q, k, v, block_mask=block_mask)

    with torch.no_grad():
        out_e, out_f = ejk_call().float(), flex_call().float()
        rel = ((out_e - out_f).norm() / out_f.norm().clamp_min(1e-30)).item()
        nan = bool(torch.isnan(out_e).any().item())
        ms_e, ms_f = device_s(ejk_call, (), 20) * 1e3, device_s(flex_call, (), 20) * 1e3
    work = 4.0 * bq * bk * d * listed
    return {"s": s, "h": h, "d": d, "block": [bq, bk], "density": density,
            "listed_fraction": listed / (h * nq * nk), "causal": causal, "per_head": per_head,
            "ejk_ms": ms_e, "flex_ms": ms_f, "ejk_tflops": work / ms_e / 1e9, "flex_tflops": work / ms_f / 1e9,
            "flex_over_ejk": ms_f / ms_e, "rel_l2": rel, "ejk_nan": nan}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--s", default="4096,8192")
    ap.add_argument("--density", default="0.1,0.2,0.3,0.5")
    ap.add_argument("--h", type=int, default=16)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--block", default="128,128", help="layout block sizes bq,bk (FlexAttention's BLOCK_SIZE)")
    ap.add_argument("--causal", type=int, default=0)
    ap.add_argument("--per-head", type=int, default=1)
    ap.add_argument("--out", default="out/bench/python")
    a = ap.parse_args()
    bq, bk = ints(a.block)
    rows = []
    print(f"{'S':>6} {'dens':>5} {'listed':>6} {'ejk ms':>8} {'flex ms':>8} {'ejk TF/s':>8} {'flex TF/s':>9} "
          f"{'flex/ejk':>8} {'rel_l2':>9}")
    for s in ints(a.s):
        for density in floats(a.density):
            r = row(s, a.h, a.d, bq, bk, density, bool(a.causal), bool(a.per_head))
            rows.append(r)
            print(f"{s:>6} {density:>5.2f} {r['listed_fraction']:>6.3f} {r['ejk_ms']:>8.3f} {r['flex_ms']:>8.3f} "
                  f"{r['ejk_tflops']:>8.1f} {r['flex_tflops']:>9.1f} {r['flex_over_ejk']:>8.2f} {r['rel_l2']:>9.2e}"
                  f"{'  NaN' if r['ejk_nan'] else ''}")
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "blocksparse.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
