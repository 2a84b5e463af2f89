#!/usr/bin/env python3
"""The linear-attention family on one GPU against flash-linear-attention's Triton kernels, forward:
ejk.torch.gated_delta_rule vs fla.ops.gated_delta_rule.chunk_gated_delta_rule,
ejk.torch.lightning_attention vs fla.ops.lightning_attn.chunk_lightning_attn and
ejk.torch.recurrent_attention (a per-head g_gamma) vs fla.ops.simple_gla.chunk_simple_gla, on
the family's benchmark shapes (B T = 32k, H 16 and 32, K = V = 128, bf16). Per row: CUDA events
around --reps calls back to back (median of 5 batches), both libraries' milliseconds, the ratio
(FLA / ejk: above 1 means ejk is faster) and the rel-L2 between the two outputs (both take the same inputs; the gated delta
rule's q and k are L2-normalized inside both kernels).

FLA comes as wheels (pip download --no-deps flash-linear-attention fla-core einops) unzipped to a
folder on PYTHONPATH, from the repository root with ejk's library built:

  mkdir -p /tmp/fla && for w in .carry/wheels/*.whl; do python -m zipfile -e "$w" /tmp/fla; done
  EJK_LIBRARY_DIR=$PWD/build/runtime PYTHONPATH=$PWD/python:/tmp/fla \\
    python bench/python/linear_attention_gpu.py [--ops gdn,lightning,simple_gla] [--json FILE]

A missing FLA op is reported and skipped; Triton must be importable (it comes with torch).
"""
import argparse
import json

import torch

import ejk.torch as et
from bench_torch import device_s  # CUDA events around calls back to back, median of batches

SHAPES = ((1, 32768, 16), (2, 16384, 16), (4, 8192, 16), (8, 4096, 16), (16, 2048, 16), (1, 32768, 32),
          (4, 8192, 32))
D = 128


def rel_l2(a, b):
    a, b = a.float(), b.float()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def inputs(b, t, h, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v = (torch.randn(b, t, h, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
    beta = torch.rand(b, t, h, device="cuda", generator=g).to(torch.bfloat16)
    # log decays as models make them (a log-sigmoid, most near 0)
    decay = torch.nn.functional.logsigmoid(torch.randn(b, t, h, device="cuda", generator=g) + 3).to(torch.bfloat16)
    return q, k, v, beta, decay


def gdn_pair(fla, b, t, h):
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    q, k, v, beta, decay = inputs(b, t, h, 1)
    ours = lambda: et.gated_delta_rule(q, k, v, beta, decay, use_qk_l2norm=True)  # noqa: E731
    theirs = lambda: chunk_gated_delta_rule(q, k, v, decay.float(), beta, use_qk_l2norm_in_kernel=True)[0]  # noqa: E731
    return ours, theirs


def lightning_pair(fla, b, t, h):
    from fla.ops.lightning_attn import chunk_lightning_attn
    q, k, v, _, _ = inputs(b, t, h, 2)
    ours = lambda: et.lightning_attention(q, k, v, layer_idx=3, num_layers=8)  # noqa: E731
    theirs = lambda: chunk_lightning_attn(q, k, v, layer_idx=3, num_layers=8)[0]  # noqa: E731
    return ours, theirs


def simple_gla_pair(fla, b, t, h):
    from fla.ops.simple_gla import chunk_simple_gla
    q, k, v, _, _ = inputs(b, t, h, 3)
    g_gamma = -torch.linspace(0.01, 0.5, h, device="cuda")
    ours = lambda: et.recurrent_attention(q, k, v, None, g_gamma)  # noqa: E731
    theirs = lambda: chunk_simple_gla(q, k, v, g_gamma=g_gamma)[0]  # noqa: E731
    return ours, theirs


PAIRS = {"gdn": gdn_pair, "lightning": lightning_pair, "simple_gla": simple_gla_pair}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ops", default="gdn,lightning,simple_gla")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args()
    import fla  # noqa: F401  (fails here, with the reason, when the wheels are not on PYTHONPATH)
    rows = []
    print(f"{'op':<11} {'B':>3} {'T':>6} {'H':>3} {'ejk ms':>9} {'fla ms':>9} {'fla/ejk':>8} {'rel_l2':>9}")
    for op in args.ops.split(","):
        for b, t, h in SHAPES:
            try:
                ours, theirs = PAIRS[op](fla, b, t, h)
                err = rel_l2(ours(), theirs())
                mo, mt = device_s(ours, (), args.reps) * 1e3, device_s(theirs, (), args.reps) * 1e3
            except (ImportError, AttributeError, RuntimeError, NotImplementedError, ValueError) as e:
                print(f"{op:<11} {b:>3} {t:>6} {h:>3} skipped: {type(e).__name__}: {e}")
                rows.append({"op": op, "B": b, "T": t, "H": h, "skipped": f"{type(e).__name__}: {e}"})
                torch.cuda.empty_cache()
                continue
            print(f"{op:<11} {b:>3} {t:>6} {h:>3} {mo:>9.3f} {mt:>9.3f} {mt / mo:>8.2f} {err:>9.2e}")
            rows.append({"op": op, "B": b, "T": t, "H": h, "ejk_ms": mo, "fla_ms": mt, "ratio": mt / mo,
                         "rel_l2": err})
            torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
