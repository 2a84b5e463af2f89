#!/usr/bin/env python3
"""Ratios of our CUDA flash forward to the peers on the same shapes and the same timing rule.

  bench_vs_peers.py ours.jsonl peers.jsonl

ours.jsonl: check_flash bench output. For every (S, D, causal) in it, times PyTorch SDPA's
FlashAttention-2 and cuDNN backends with peers.py's timer (do_bench median) and FLOP count,
writes their rows to peers.jsonl, and prints one table row per shape: our best tile config,
its TFLOP/s, the peers' TFLOP/s and speed ratios (peer time / our time: > 1 means we are faster),
then the same for the variant the spec's heuristic picks on sm90a (what `ejk` runs by default;
the best may be a tuning variant no key builds: another schedule, no ping-pong).
Rows with a window (check_flash's EJK_BENCH_WINDOW rows: GQA, causal window, softcap) are timed
against FlexAttention instead, each of our variants on its own line.
"""
import json, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
import peers

PEERS = (("flash2", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION))


def time_peers(s, d, causal):
    b, h = 16384 // s, 2048 // d
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    pairs = s * (s + 1) // 2 if causal else s * s
    flops = 4.0 * b * h * pairs * d
    rows = {}
    for name, be in PEERS:
        def f(be=be):
            with sdpa_kernel([be]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        try:
            f(); t = peers.ms(f); rows[name] = {"ms": t, "tflops": flops / t / 1e9}
        except Exception as e:  # a backend that cannot run this shape says so
            rows[name] = {"error": str(e).strip().splitlines()[0][:120]}
    return rows


def time_flex(r):
    """FlexAttention (peers.flex_fn) on a window row's shape."""
    b, hq, hkv, s, d = r["b"], r["h"], r.get("hkv", r["h"]), r["s"], r["d"]
    q = torch.randn(b, hq, s, d, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(b, hkv, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    f = peers.flex_fn(q, k, v, r["causal"], tuple(r["window"]), r.get("softcap"))
    f()
    return peers.ms(f)


def window_rows(rows, out):
    print(f"{'S':>6} {'Hq:Hkv':>7} {'window':>9} {'cap':>4} | {'ours ms':>8} {'variant':<40} | {'flex ms':>8} | {'x flex':>6}")
    flex = {}
    for r in sorted(rows, key=lambda r: (r["s"], r["variant"])):
        if r["s"] not in flex:
            flex[r["s"]] = time_flex(r)
            out.write(json.dumps({"s": r["s"], "peer": "torch_flex", "ms": flex[r["s"]]}) + "\n")
        w = f"{r['window'][0]},{r['window'][1]}"
        print(f"{r['s']:>6} {r['h']:>3}:{r.get('hkv', r['h']):<3} {w:>9} {r.get('softcap', 0):>4g} | {r['ms']:8.4f} "
              f"{r['variant']:<40} | {flex[r['s']]:8.4f} | {flex[r['s']] / r['ms']:6.2f}", flush=True)


SPEC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../specs/flash_attention.yaml")


def default_config(s, d, causal):
    """The config the spec's sm90a heuristic chooses (block_q, block_k, maybe per_item): its `when`
    expressions evaluated here."""
    import yaml
    rules = yaml.safe_load(open(SPEC))["backends"]["cuda"]["heuristic"]
    env = {"sm": 90, "head_dim": d, "seqlen_q": s, "seqlen_k": s, "causal": int(causal), "dtype_bytes": 2,
           "extras": 0}
    for rule in rules:
        when = rule.get("when")
        if when is None or eval(when.replace("&&", " and ").replace("||", " or "), {}, env):
            return rule["choose"]


def default_name(s, d, causal):
    """check_flash's name of the variant the heuristic picks for this shape, its schedule
    (`.per_item` where the heuristic sets the tuning flag) included."""
    c = default_config(s, d, causal)
    return (f"bf16.d{d}.bq{c['block_q']}.bk{c['block_k']}" + (".causal" if causal else "") + ".wgmma" +
            (".per_item" if c.get("per_item") else ""))


def default_row(ours, s, d, causal):
    name = default_name(s, d, causal)
    rows = [r for r in ours if (r["s"], r["d"], r["causal"]) == (s, d, causal) and r["variant"] == name]
    return rows[0] if rows else None


def main():
    rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
    ours = [r for r in rows if "window" not in r]
    out = open(sys.argv[2], "w")
    if len(ours) < len(rows):
        window_rows([r for r in rows if "window" in r], out)
    best = {}
    for r in ours:
        key = (r["s"], r["d"], r["causal"])
        if key not in best or r["ms"] < best[key]["ms"]:
            best[key] = r
    print(f"{'D':>4} {'S':>6} {'causal':>6} | {'ours':>6} {'variant':<28} | {'fa2':>6} {'cudnn':>6} | {'x fa2':>6} {'x cudnn':>7}"
          f" | {'default':>7} {'x fa2':>6} {'x cudnn':>7}")
    for (s, d, causal), r in sorted(best.items(), key=lambda kv: (kv[0][1], kv[0][2], kv[0][0])):
        p = time_peers(s, d, causal)
        out.write(json.dumps({"s": s, "d": d, "causal": causal, **p}) + "\n")
        def tf(n): return f"{p[n]['tflops']:6.1f}" if "ms" in p[n] else "   n/a"
        def ratio(n): return f"{p[n]['ms'] / r['ms']:6.2f}" if "ms" in p[n] else "   n/a"
        dr = default_row(ours, s, d, causal)
        def dratio(n): return f"{p[n]['ms'] / dr['ms']:6.2f}" if dr and "ms" in p[n] else "   n/a"
        dcell = f"{dr['tflops']:7.1f}" if dr else "    n/a"
        print(f"{d:>4} {s:>6} {str(causal):>6} | {r['tflops']:6.1f} {r['variant']:<28} | {tf('flash2')} {tf('cudnn')} | {ratio('flash2')} {ratio('cudnn'):>7}"
              f" | {dcell} {dratio('flash2')} {dratio('cudnn'):>7}", flush=True)


if __name__ == "__main__":
    main()
