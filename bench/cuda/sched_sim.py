#!/usr/bin/env python3
"""Static balance of the sm90a persistent causal order (flash_fwd_sm90_schedule.cuh sm90_causal_order,
sm90_item, sm90_block), item cost = key tiles (in 128-key units) + 1 for the per-item overhead.
Prints max block load / mean block load per grid shape and L2 budget (NOTES.md v12).
With --per-item: the one-block-per-item causal kernels (d256 128 x 80, d128 128 x 192), whose
blocks the hardware hands to SMs in grid order as they free up (list scheduling), each pair's q
blocks in turn (before v57) against the grouped order per budget (NOTES.md session 15); cost
in tiles of block_k + 2 per item.

  python3 bench/cuda/sched_sim.py [budget_mib ...]     (default: 1048576 (no groups), 48, 24, 12)
  python3 bench/cuda/sched_sim.py --per-item [budget_mib ...]   (default: 8, 16, 32)
"""
import heapq
import math
import sys

GRID = 132  # H100 / H200 SMs


def group_size(pairs, ratio, seqlen_k, head_dim, budget, persistent=True):
    kv_heads = max(1, (budget >> 8) // max(1, seqlen_k * head_dim // 64))
    g = min(pairs, kv_heads * ratio)
    # the rule (persistent grids only): groups only below 4 items/pair in flight
    return pairs if persistent and 4 * pairs <= GRID else g


def loads(pairs, q_blocks, group, cost, grid=GRID):
    rounds = -(-group * q_blocks // grid)
    full, rest = divmod(pairs, group)
    total = (full * rounds + -(-rest * q_blocks // grid)) * grid
    load = [0.0] * grid
    for n in range(total // grid):
        for b in range(grid):
            item = n * grid + (grid - 1 - b if n & 1 else b)  # sm90_item: snake
            c, local = divmod(item, rounds * grid)               # sm90_block: group, padding
            pairs_c = min(group, pairs - c * group)
            if local >= pairs_c * q_blocks:
                continue
            load[b] += cost(q_blocks - 1 - local // pairs_c)
    return load


def list_schedule(costs, grid=GRID):
    """Finish time of the last SM when blocks go, in order, to the first free SM."""
    free = [0.0] * grid
    for c in costs:
        heapq.heappush(free, heapq.heappop(free) + c)
    return max(free)


def per_item(budgets_mib):
    for D, bq, bk in [(256, 128, 80), (128, 128, 192)]:
        for S in [1024, 2048, 4096, 8192, 16384]:
            pairs, q_blocks = 16384 // S * (2048 // D), S // bq
            cost = lambda qb: math.ceil((qb + 1) * bq / bk) + 2  # q block qb (0 = first)
            heavy_first = range(q_blocks - 1, -1, -1)
            in_turn = [cost(qb) for _ in range(pairs) for qb in heavy_first]
            ideal = sum(in_turn) / GRID
            out = [f"in turn {list_schedule(in_turn) / ideal:.3f}"]
            for mib in budgets_mib:
                g = group_size(pairs, 1, S, D, mib << 20, persistent=False)
                # the short group (pairs % g) first, as sm90_decode takes it
                sizes = ([pairs % g] if pairs % g else []) + [g] * (pairs // g)
                grouped = [cost(qb) for n in sizes for qb in heavy_first for _ in range(n)]
                out.append(f"{mib} MiB G={g:3d} {list_schedule(grouped) / ideal:.3f}")
            print(f"D={D:3d} bk={bk} S={S:5d} pairs={pairs:4d} | " + " | ".join(out))


def main():
    if sys.argv[1:2] == ["--per-item"]:
        return per_item([int(a) for a in sys.argv[2:]] or [8, 16, 32])
    budgets = [int(float(a) * 2**20) for a in sys.argv[1:]] or [2**40, 48 << 20, 24 << 20, 12 << 20]
    for D, bq, bk in [(64, 128, 128), (64, 192, 128), (128, 128, 128), (256, 128, 64)]:
        for S in [1024, 2048, 4096, 8192, 16384]:
            B, H = 16384 // S, 2048 // D
            pairs, q_blocks = B * H, math.ceil(S / bq)
            cost = lambda qb: math.ceil(min((qb + 1) * bq, S) / bk) * bk / 128 + 1
            out = []
            for budget in budgets:
                g = group_size(pairs, 1, S, D, budget)
                l = loads(pairs, q_blocks, g, cost)
                out.append(f"G={g:4d} {max(l) / (sum(l) / GRID):.3f}")
            print(f"D={D:3d} bq={bq} S={S:5d} pairs={pairs:4d} | " + " | ".join(out))


if __name__ == "__main__":
    main()
