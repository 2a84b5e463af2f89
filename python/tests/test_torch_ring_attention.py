"""ejk.torch.ring_attention and zigzag_ring_attention over a gloo process group of 2, 3 and 4
CPU processes (torch.multiprocessing spawn): every rank's output shard and its gradients of
query, key, value, sinks and bias against torch's float64 autograd of
flash_grad_reference.attention on the gathered sequence, and against ejk.torch's flash
attention there; causal, windows, soft cap, GQA, sinks once (their gradient summed over the
ranks), a bias (the rank's rows, or every rank's with the gradient summed), segment ids
(q_segment_ids / kv_segment_ids), bfloat16, a padded head_dim, both layouts, and a ring over a
subgroup whose ranks are not the global ones. The ring runs in a fresh process (this module as
a script) that spawns the ranks."""
import json
import math
import os
import socket
import subprocess
import sys
import tempfile

import numpy as np
import pytest

from ring_errors import assert_within
from torch_support import import_torch, no_cpu_jit

torch = import_torch()  # skips the module where torch or ejk.torch is missing
import ejk.torch as ejk_torch  # noqa: E402

LOCAL, B, HQ, HKV = 8, 2, 4, 2

# name: (layout, dtype, options, sinks shape, head_dim); each group runs on one process group.
# Options beyond the ring's: compiled (under torch.compile), bias ((batch, heads), rows: "local",
# the rank's, or "ring", every rank's), segments (q_segment_ids / kv_segment_ids).
GROUPS = {
    2: {"plain_causal_sinks": ("plain", "float32", dict(causal=True), (4, 2), 16),
        # under torch.compile: causal leaves a side of the band infinite, which tracing turned into float slices
        "zigzag_causal_compiled": ("zigzag", "float32", dict(causal=True, compiled=True), None, 16),
        "zigzag_causal": ("zigzag", "float32", dict(causal=True), None, 16),
        "plain_bias_segments": ("plain", "float32", dict(bias=((2, 4), "local"), segments=True), None, 16),
        "zigzag_window_bias_every_row": ("zigzag", "float32", dict(sliding_window=(5, 3), bias=((1, 4), "ring")),
                                         (4, 2), 16)},
    3: {"plain_causal_window": ("plain", "float32", dict(causal=True, sliding_window=(5, 0)), None, 16),
        "zigzag_window_softcap": ("zigzag", "float32", dict(sliding_window=(7, 2), logits_soft_cap=2.5), None, 16),
        "plain_full_padded": ("plain", "float32", dict(softmax_scale=0.3), None, 12),
        "zigzag_causal_bias_segments": ("zigzag", "float32", dict(causal=True, bias=((1, 4), "local"), segments=True),
                                        None, 16),
        "plain_causal_bias_every_row": ("plain", "float32", dict(causal=True, bias=((2, 1), "ring")), None, 16)},
    4: {"zigzag_causal_window_sinks": ("zigzag", "float32", dict(causal=True, sliding_window=(6, 0)), (3,), 16),
        "plain_causal_bf16": ("plain", "bfloat16", dict(causal=True), None, 16),
        "zigzag_bias_bf16": ("zigzag", "bfloat16", dict(bias=((2, 4), "local")), None, 16)},
}
CASES = {name: n for n, cases in GROUPS.items() for name in cases}
# A ring over a subgroup of the 4 processes (ranks 1 and 3): group ranks are not global ranks.
SUBGROUP = [1, 3]
SUBGROUP_CASE = ("zigzag", "float32", dict(causal=True, sliding_window=(5, 0)), (4, 2), 16)
CASES["zigzag_subgroup_of_4"] = len(SUBGROUP)


def zigzag_order(n, length):
    c = length // (2 * n)
    return np.concatenate([np.r_[i * c:(i + 1) * c, (2 * n - 1 - i) * c:(2 * n - i) * c] for i in range(n)])


def rel_l2(got, want):
    got, want = got.detach().double(), want.detach().double()
    if torch.isnan(got).any():
        return math.inf
    return float((got - want).norm() / max(float(want.norm()), 1e-30))


def segment_ids(length):
    """[B, length] int32 ids in runs of random length, the second row's last 3 positions padding."""
    ids = np.sort(np.random.default_rng(length).integers(0, 3, (B, length)), axis=1).astype(np.int32)
    ids[1, -3:] = -1
    return torch.from_numpy(ids)


def run_case(rank, n, spec, group=None):
    """This rank's errors (its rank in `group`, default the world): its rows of the output and
    of dq, dk, dv, and the gradients of the sinks and the bias (the rank's rows of the bias, or
    the whole bias where every rank holds it)."""
    import torch.distributed as dist
    import flash_grad_reference as ref
    group = dist.group.WORLD if group is None else group
    layout, dtype, opts, sinks, d = spec
    opts = dict(opts)
    compiled = opts.pop("compiled", False)
    bias_shape, bias_rows = opts.pop("bias", (None, None))
    ids = (segment_ids(LOCAL * n), segment_ids(LOCAL * n)) if opts.pop("segments", False) else None
    g = torch.Generator().manual_seed(1234)  # the same inputs on every rank
    s = LOCAL * n
    dt = getattr(torch, dtype)
    x = [torch.randn(B, s, h, d, generator=g).to(dt) for h in (HQ, HKV, HKV)]
    names = ["dq", "dk", "dv"]
    x.append(torch.randn(*sinks, generator=g) if sinks is not None else None)
    x.append(torch.randn(*bias_shape, s, s, generator=g) if bias_shape is not None else None)
    names += ["dsinks", "dbias"]
    w = torch.randn(B, s, HQ, d, generator=g)
    order = zigzag_order(n, s) if layout == "zigzag" else np.arange(s)
    mine = torch.as_tensor(order[rank * LOCAL:(rank + 1) * LOCAL])

    def laid_bias(b):  # rows and keys in the layout's order; the rank's rows, or all
        b = b[:, :, order][..., order]
        return b[:, :, rank * LOCAL:(rank + 1) * LOCAL] if bias_rows == "local" else b

    local = [y[:, mine] for y in x[:3]] + [x[3], None if x[4] is None else laid_bias(x[4])]
    local = [None if y is None else y.clone().requires_grad_() for y in local]
    seg = {} if ids is None else dict(q_segment_ids=ids[0][:, mine], kv_segment_ids=ids[1][:, mine])
    fn = ejk_torch.ring_attention if layout == "plain" else ejk_torch.zigzag_ring_attention
    if compiled:
        fn = torch.compile(fn)
    out = fn(*local, axis_name=group, **seg, **opts)
    (out.float() * w[:, mine]).sum().backward()

    whole = [None if y is None else y.clone().requires_grad_() for y in x]
    flash_seg = {} if ids is None else dict(q_segment_ids=ids[0], kv_segment_ids=ids[1])
    flash, _ = ejk_torch.flash_attention_with_lse(whole[0], whole[1], whole[2], whole[4], None, None, whole[3],
                                                  **flash_seg, **opts)
    (flash.float() * w).sum().backward()

    x64 = [None if y is None else y.double().requires_grad_() for y in x]
    vis = ref.visible_mask(torch, s, s, causal=opts.get("causal", False), window=opts.get("sliding_window"),
                           q_seg=None if ids is None else ids[0], kv_seg=None if ids is None else ids[1])
    bias64 = x64[4] if x64[4] is None or dtype == "float32" else x64[4].to(dt).double()  # as the ring casts it
    want, _ = ref.attention(torch, x64[0], x64[1], x64[2], vis, bias=bias64, sinks=x64[3],
                            scale=opts.get("softmax_scale"), softcap=opts.get("logits_soft_cap"))
    (want * w.double()).sum().backward()

    def rows(t, i):  # a gathered tensor's rows for this rank (the sinks are not split; the bias as given)
        return t[:, mine] if i < 3 else laid_bias(t) if i == 4 else t

    def errors(ring_out, full_out, full):
        pairs = [("out", rel_l2(ring_out, full_out))]
        pairs += [(nm, rel_l2(a.grad, rows(b.grad, i))) for i, (nm, a, b) in enumerate(zip(names, local, full))
                  if a is not None]
        return dict(pairs)
    return {"reference": errors(out, want[:, mine], x64), "flash": errors(out, flash[:, mine], whole),
            "dtype": dtype}


def worker(rank, n, port, outdir):
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=n)
    try:
        results = {name: run_case(rank, n, spec) for name, spec in GROUPS[n].items()}
        if n == 4:
            sub = dist.new_group(SUBGROUP)  # every process takes part in making it
            if rank in SUBGROUP:
                results["zigzag_subgroup_of_4"] = run_case(SUBGROUP.index(rank), len(SUBGROUP), SUBGROUP_CASE, sub)
    finally:
        dist.destroy_process_group()
    with open(os.path.join(outdir, f"{n}-{rank}.json"), "w") as f:
        json.dump(results, f)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ring_results():
    if no_cpu_jit():
        pytest.skip(f"CPU variants outside the built-in set: {no_cpu_jit()}")
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(ejk_torch.__file__)))
    env = dict(os.environ, EJK_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(filter(None, [package_root, os.path.dirname(__file__),
                                                        os.environ.get("PYTHONPATH")])))
    with tempfile.TemporaryDirectory() as outdir:
        r = subprocess.run([sys.executable, os.path.abspath(__file__), outdir], env=env, capture_output=True,
                           text=True, timeout=1200)
        assert r.returncode == 0, (r.stdout + r.stderr)[-6000:]
        results = {}
        for n in GROUPS:
            for rank in range(n):
                with open(os.path.join(outdir, f"{n}-{rank}.json")) as f:
                    for name, result in json.load(f).items():
                        results.setdefault(name, []).append(result)
    return results


@pytest.mark.parametrize("name", sorted(CASES))
def test_ring_equals_attention_on_the_gathered_sequence(ring_results, name):
    per_rank = ring_results[name]
    assert len(per_rank) == CASES[name]
    for rank, result in enumerate(per_rank):
        assert_within(f"{name}, rank {rank}", result)


def test_arguments_are_checked_by_name():
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 8, 2, 16, generator=g)
    with pytest.raises(TypeError, match="axis_name: expected a torch.distributed ProcessGroup"):
        ejk_torch.ring_attention(q, q, q, axis_name="sp")
    with pytest.raises(NotImplementedError, match="ring_attention: mesh is not supported"):
        ejk_torch.ring_attention(q, q, q, mesh=object())
    with pytest.raises(ValueError, match=r"bias: expected \[B\|1, Hq\|1, Sq, N Sk\].*got \(1, 2, 8, 7\)"):
        ejk_torch.ring_attention(q, q, q, None, torch.zeros(1, 2, 8, 7))
    ids = torch.zeros(1, 8, dtype=torch.int32)
    with pytest.raises(ValueError, match="q_segment_ids, kv_segment_ids: expected both or neither"):
        ejk_torch.ring_attention(q, q, q, kv_segment_ids=ids)
    with pytest.raises(ValueError, match="kv_segment_ids: expected int32, got int64"):
        ejk_torch.ring_attention(q, q, q, q_segment_ids=ids, kv_segment_ids=ids.long())
    with pytest.raises(ValueError, match=r"q_segment_ids: expected \[1, 8\]"):
        ejk_torch.ring_attention(q, q, q, q_segment_ids=ids[:, :4], kv_segment_ids=ids)
    with pytest.raises(ValueError, match="zigzag_ring_attention: key: the local sequence length must be even"):
        ejk_torch.zigzag_ring_attention(q, q[:, :7], q[:, :7])


def test_without_a_group_it_is_flash_attention():
    """Output and gradients (the bias's too) against the float64 reference, with a bias and
    segment ids given as q_segment_ids / kv_segment_ids."""
    import flash_grad_reference as ref
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, 12, h, 16, generator=g, requires_grad=True) for h in (4, 2, 2))
    bias = torch.randn(1, 4, 12, 12, generator=g, requires_grad=True)
    ids = segment_ids(12)
    out = ejk_torch.ring_attention(q, k, v, None, bias, q_segment_ids=ids, kv_segment_ids=ids, causal=True,
                                   sliding_window=(4, 0))
    out.sum().backward()
    x64 = [t.detach().double().requires_grad_() for t in (q, k, v, bias)]
    vis = ref.visible_mask(torch, 12, 12, causal=True, window=(4, 0), q_seg=ids, kv_seg=ids)
    want, _ = ref.attention(torch, *x64[:3], vis, bias=x64[3])
    want.sum().backward()
    for got, exp in zip((out, q.grad, k.grad, v.grad, bias.grad), (want, *(t.grad for t in x64))):
        assert rel_l2(got, exp) <= 1e-5


if __name__ == "__main__":
    import torch.multiprocessing as mp
    for size in GROUPS:
        mp.spawn(worker, args=(size, free_port(), sys.argv[1]), nprocs=size)
