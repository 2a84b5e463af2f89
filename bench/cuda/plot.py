#!/usr/bin/env python3
"""TFLOP/s vs sequence length per (head_dim, causal) case: ours (best tile per shape) against
the peers measured in the same run. Reads a results folder written by bench_issue.sh
(ours.jsonl, peers.jsonl, optional jax.jsonl), or one written by paired.py (paired.jsonl: the
default key and the SDPA peers row by row over passes; plotted as the medians over passes, the
numbers its ratios come from), and writes flash_fwd_tflops.png into it. Window
rows (GQA + causal window + softcap, EJK_BENCH_WINDOW) get a panel of their own against
FlexAttention, whose TFLOP/s count the same visible pairs as ours.

  python3 bench/cuda/plot.py out/bench/cuda/issue
  python3 bench/cuda/plot.py out/bench/cuda/issue/paired
"""
import json, os, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt


def rows(path):
    return [json.loads(l) for l in open(path) if l.startswith("{")] if os.path.exists(path) else []


def paired(folder):
    """best and peers as main() builds them, from paired.py's rows: medians over the passes."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from paired import PEERS, medians
    med = medians(rows(os.path.join(folder, "paired.jsonl")))
    best = {key: m["ours"] for key, (_, m) in med.items()}
    peers = {key: {name: {"tflops": m[name]} for name in PEERS} for key, (_, m) in med.items()}
    return best, peers


def main(folder):
    if os.path.exists(os.path.join(folder, "paired.jsonl")):
        best, peers = paired(folder)
        return draw(folder, best, peers, {}, {})
    best, window = {}, {}
    for r in rows(os.path.join(folder, "ours.jsonl")):
        if "window" in r:  # TFLOP/s and the FLOPs behind them (for the peer's rate)
            if r["tflops"] > window.get(r["s"], (0.0, 0.0))[0]:
                window[r["s"]] = (r["tflops"], r["tflops"] * r["ms"])
            continue
        key = (r["d"], r["causal"], r["s"])
        best[key] = max(best.get(key, 0.0), r["tflops"])
    peer_rows = rows(os.path.join(folder, "peers.jsonl"))
    peers = {(r["d"], r["causal"], r["s"]): r for r in peer_rows if "d" in r}
    flex = {r["s"]: r["ms"] for r in peer_rows if r.get("peer") == "torch_flex"}
    return draw(folder, best, peers, window, flex)


def draw(folder, best, peers, window, flex):
    jax = {}
    for r in rows(os.path.join(folder, "jax.jsonl")):
        jax[(128, r["causal"] == "--causal", r["s"])] = r["row"]["fwd_tflops"]
    cases = sorted({(d, c) for d, c, _ in best})
    fig, axes = plt.subplots(2, 4, figsize=(20, 8), sharex=True)
    for ax, (d, causal) in zip(axes.T.flat, cases):
        ss = sorted(s for dd, cc, s in best if (dd, cc) == (d, causal))
        ax.plot(ss, [best[(d, causal, s)] for s in ss], "o-", label="ejkernel")
        for name, label in (("cudnn", "PyTorch SDPA cuDNN"), ("flash2", "PyTorch SDPA FlashAttention-2")):
            pts = [(s, peers[(d, causal, s)][name]["tflops"]) for s in ss
                   if (d, causal, s) in peers and "tflops" in peers[(d, causal, s)].get(name, {})]
            if pts:
                ax.plot(*zip(*pts), "s--", label=label)
        jpts = [(s, jax[(d, causal, s)]) for s in ss if (d, causal, s) in jax]
        if jpts:
            ax.plot(*zip(*jpts), "^:", label="JAX cuDNN")
        ax.set_xscale("log", base=2)
        ax.set_title(f"bf16 D={d} {'causal' if causal else 'full'}  (B*S=16k, H*D=2048)")
        ax.set_xlabel("sequence length")
        ax.set_ylabel("TFLOP/s")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    ax = axes.T.flat[len(cases)]
    if window:
        ss = sorted(window)
        ax.plot(ss, [window[s][0] for s in ss], "o-", label="ejkernel")
        pts = [(s, window[s][1] / flex[s]) for s in ss if s in flex]
        if pts:
            ax.plot(*zip(*pts), "s--", label="FlexAttention")
        ax.set_xscale("log", base=2)
        ax.set_title("bf16 D=64 GQA 32:8, causal window 1024, softcap 30")
        ax.set_xlabel("sequence length")
        ax.set_ylabel("TFLOP/s (visible pairs)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    else:
        ax.axis("off")
    for extra in list(axes.T.flat)[len(cases) + 1:]:
        extra.axis("off")
    fig.tight_layout()
    out = os.path.join(folder, "flash_fwd_tflops.png")
    fig.savefig(out, dpi=90)
    print(out)


if __name__ == "__main__":
    main(sys.argv[1])
