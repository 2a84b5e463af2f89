"""ring_attention, with ``ejkernel.modules.ring_attention``'s signature (0.0.80.3), and
zigzag_ring_attention (ours): attention over a sequence split across devices. Each device keeps
its query shard; the key/value shards travel around the ring, one hop per step, and every step
runs ejkernel's flash_attention on the local queries against the visiting shard, merged by
log-sum-exp (merge_attention_states, in float32). The backward runs flash_attention_backward per
step with the final output and log-sum-exp, and the key/value gradients travel with their shard.

This file holds what both frameworks share: the argument checks, the static schedule (which
block of which step is computed, with which mask, or skipped) and the ring loops. The
communication and the custom gradient are the framework's: ``_ring/jax_ring.py`` (shard_map,
ppermute, custom_vjp) and ``_ring/torch_ring.py`` (torch.distributed P2P, autograd.Function).
``docs/design/ring_attention.md`` explains the schedule."""
import math
from typing import NamedTuple

from .. import _kit


class Call(NamedTuple):
    """One flash call of a step: local query rows [q0, q0 + nq) against the visiting shard's
    keys [k0, k0 + nk), with the kernel's own mask (causal, or a window (left, right) >= 0)."""
    q0: int
    nq: int
    k0: int
    nk: int
    causal: bool
    window: tuple


def _clip(lo, hi, nq, nk):
    """The band lo <= j - i <= hi of an nq x nk block, clipped to the offsets the block has, or
    None where no pair of it is visible."""
    lo, hi = max(lo, -(nq - 1)), min(hi, nk - 1)
    return None if lo > hi else (lo, hi)


def _call(q0, nq, k0, nk, lo, hi):
    """The band [lo, hi] of a block as one kernel call. The kernel's masks are bands containing
    the diagonal (top-left aligned), so a band above it drops the leading keys no query sees, and
    one below it the leading queries that see no key; what remains contains the diagonal."""
    lo, hi = _clip(lo, hi, nq, nk)
    if lo > 0:
        k0, nk, hi, lo = k0 + lo, nk - lo, hi - lo, 0
    elif hi < 0:
        q0, nq, lo, hi = q0 - hi, nq + hi, lo - hi, 0
    left, right = -lo, hi
    # Trailing rows past every visible key, and trailing keys past every row, need no kernel.
    # (int: an infinite side makes these floats under torch.compile's tracing.)
    nq, nk = int(min(nq, nk + left)), int(min(nk, nq + right))
    if left >= nq - 1 and right >= nk - 1:
        return Call(q0, nq, k0, nk, False, None)
    if left >= nq - 1 and right == 0:
        return Call(q0, nq, k0, nk, True, None)
    return Call(q0, nq, k0, nk, False, (int(left), int(right)))


def chunks(layout, n, device):
    """The global chunks a device holds, in local order: plain: its one chunk; zigzag: chunks
    device and 2n - 1 - device of 2n (each device gets one early and one late chunk)."""
    return (device,) if layout == "plain" else (device, 2 * n - 1 - device)


def plan(layout, n, device, step, sq, sk, band):
    """The calls of `device` at `step` (its queries against the shard of device - step), a tuple
    of Calls; () where the whole block is masked. sq, sk: local lengths; band: the visible
    global offsets key - query, (lo, hi), infinite where unbounded."""
    qc, kc = chunks(layout, n, device), chunks(layout, n, (device - step) % n)
    cq, ck = sq // len(qc), sk // len(kc)
    bands = {(a, b): (band[0] - (kj * ck - qi * cq), band[1] - (kj * ck - qi * cq))
             for a, qi in enumerate(qc) for b, kj in enumerate(kc)}
    clipped = {pair: _clip(*bd, cq, ck) for pair, bd in bands.items()}
    live = sorted(pair for pair, c in clipped.items() if c is not None)
    if not live:
        return ()
    a0, a1 = live[0][0], live[-1][0]
    b0, b1 = min(b for _, b in live), max(b for _, b in live)
    box = [(a, b) for a in range(a0, a1 + 1) for b in range(b0, b1 + 1)]

    def offset(a, b):  # key - query offset of chunk pair (a, b) in the merged block
        return (b - b0) * ck - (a - a0) * cq

    # One call for the bounding block where one band in its local offsets gives every chunk
    # pair's mask (the plain layout always; zigzag's own shard: local causal); else one per pair.
    for a, b in live:
        lo, hi = bands[a, b][0] + offset(a, b), bands[a, b][1] + offset(a, b)
        if all(_clip(lo - offset(x, y), hi - offset(x, y), cq, ck) == clipped[x, y] for x, y in box):
            return (_call(a0 * cq, (a1 - a0 + 1) * cq, b0 * ck, (b1 - b0 + 1) * ck, lo, hi),)
    return tuple(_call(a * cq, cq, b * ck, ck, *bands[a, b]) for a, b in live)


def global_band(causal, sliding_window):
    """The visible offsets key - query of the gathered sequence, (lo, hi), infinite where
    unbounded: causal caps hi at 0, a window (left, right) gives [-left, right]."""
    lo, hi = -math.inf, math.inf
    if sliding_window is not None:
        left, right = _kit.scalar("sliding_window", sliding_window, "i64[2]")
        if left < 0 or right < 0:
            raise ValueError(f"sliding_window: expected bounds >= 0, got {(left, right)}")
        lo, hi = -left, right
    if causal:
        hi = min(hi, 0)
    return lo, hi


def check_lengths(layout, q, k):
    """The local lengths a layout can split: zigzag's two chunks per device need even ones."""
    if layout != "zigzag":
        return
    for name, x in (("query", q), ("key", k)):
        if x.shape[1] % 2:
            raise ValueError(f"zigzag_ring_attention: {name}: the local sequence length must be even (two chunks "
                             f"per device), got {x.shape[1]}")


class Schedule(NamedTuple):
    """Everything static about one ring: its size, layout, local lengths, band and the kernels'
    scalars."""
    n: int
    layout: str
    sq: int
    sk: int
    band: tuple
    scalars: tuple  # (name, value) of flash_attention's scalars

    def plans(self, step):
        """Each device's calls at `step`, in device order."""
        return [plan(self.layout, self.n, d, step, self.sq, self.sk, self.band) for d in range(self.n)]


# --- the ring loops, on a framework's backend (see _ring/jax_ring.py Backend) ---------------------------

def _covers(c, q, k):
    """Whether call c spans every local query row and every key of the visiting shard."""
    return c.q0 == 0 and c.nq == q.shape[1] and c.k0 == 0 and c.nk == k.shape[1]


def call_args(be, step, local, kv, c):
    """flash_attention's extra tensors for call c at `step`: the segment ids of its query rows and
    of the visiting keys (which travel with their shard as kv[2]), and the block of the bias
    (local[1], this device's rows against every shard's keys) for those rows and keys."""
    q_ids, bias = local
    args = {}
    if q_ids is not None:
        args.update(q_segment_ids=q_ids[:, c.q0:c.q0 + c.nq], kv_segment_ids=kv[2][:, c.k0:c.k0 + c.nk])
    if bias is not None:
        args["bias"] = be.bias_block(bias, be.shard_start(step) + c.k0, c)
    return args


def _f32(be, xs):
    """The accumulators in float32 (a no-op where they are): merges and sums run in float32."""
    return tuple(be.f32(x) for x in xs)


def _forward_calls(be, step, calls, q, local, kv, acc):
    for c in calls:
        o, l = be.flash(q[:, c.q0:c.q0 + c.nq], kv[0][:, c.k0:c.k0 + c.nk], kv[1][:, c.k0:c.k0 + c.nk], c,
                        call_args(be, step, local, kv, c))
        if acc is None and _covers(c, q, kv[0]):  # nothing to merge with: the kernel's result as it is
            acc = o, l
            continue
        out, lse = _f32(be, acc if acc is not None else (be.zeros_like(q), be.empty_lse(q)))
        o, l = be.merge(out[:, c.q0:c.q0 + c.nq], lse[:, :, c.q0:c.q0 + c.nq], be.f32(o), l)
        acc = be.put(out, 1, c.q0, o), be.put(lse, 2, c.q0, l)
    return acc


def forward(be, q, k, v, q_ids=None, kv_ids=None, bias=None):
    """(out, lse) of the local queries against every shard: one step per device, the next
    shard's transfer started before this step's kernels. The accumulator starts as the first
    kernel's result where that spans every row, so a ring of one is one flash_attention call;
    merges run in float32. It is materialized first where devices run different calls (a JAX
    lax.switch needs one state type for every branch). Segment ids, where given, travel with
    their key/value shard; the bias (this device's rows, every shard's keys) stays."""
    acc, kv = None, (k, v) if kv_ids is None else (k, v, kv_ids)
    for step in range(be.n):
        if acc is None and not be.same_calls(step):
            acc = be.zeros_like(q), be.empty_lse(q)
        pending = be.send_next(kv) if step + 1 < be.n else None
        acc = be.step(step, lambda calls, acc, kv: _forward_calls(be, step, calls, q, (q_ids, bias), kv, acc), acc,
                      kv)
        if be.n > 1 and acc is not None:
            acc = _f32(be, acc)
        kv = pending.wait() if pending is not None else None
    return acc if acc is not None else (be.zeros_like(q), be.empty_lse(q))


def _sum(be, acc, like, start, x):
    """acc + x at rows [start, start + len(x)) along axis 1; acc None: x itself where it spans
    every row of `like` (in its own dtype), else zeros first; sums in float32."""
    if acc is None and start == 0 and x.shape[1] == like.shape[1]:
        return x
    return be.add(be.f32(acc) if acc is not None else be.zeros_like(like), 1, start, be.f32(x))


def _sum_bias(be, acc, bias, col, c, g):
    """acc + g at rows [c.q0, c.q0 + c.nq) and key columns [col, col + c.nk) of the bias; acc
    None: g itself where it spans the whole bias (a ring of one), else zeros first; float32."""
    if acc is None and c.nq == bias.shape[2] and c.nk == bias.shape[3]:
        return g
    return be.add_bias_block(be.f32(acc) if acc is not None else be.zeros_like(bias), col, c, be.f32(g))


def _backward_calls(be, step, calls, q, local, kv, saved, grads):
    out, lse, d_out = saved
    dq, dk, dv, dbias = grads
    bias = local[1]
    for c in calls:
        rows, keys = slice(c.q0, c.q0 + c.nq), slice(c.k0, c.k0 + c.nk)
        g = be.flash_backward(q[:, rows], kv[0][:, keys], kv[1][:, keys], out[:, rows], lse[:, :, rows],
                              d_out[:, rows], c, call_args(be, step, local, kv, c))
        dq, dk, dv = _sum(be, dq, q, c.q0, g[0]), _sum(be, dk, kv[0], c.k0, g[1]), _sum(be, dv, kv[1], c.k0, g[2])
        if bias is not None:
            dbias = _sum_bias(be, dbias, bias, be.shard_start(step) + c.k0, c, g[3])
    return dq, dk, dv, dbias


def _zeros_for_none(be, grads, like):
    return tuple(be.zeros_like(x) if g is None and x is not None else g for g, x in zip(grads, like))


def backward(be, q, k, v, out, lse, d_out, q_ids=None, kv_ids=None, bias=None):
    """(dq, dk, dv, dbias): each step's flash backward with the final out and lse (so each is
    exact); a shard's dk, dv accumulate as they travel with it, and reach their owner after the
    last step; dq and dbias (this device's rows) stay. The accumulator coming in is added after
    this step's kernels (its transfer overlaps them). As in the forward, the first kernels'
    results start the sums (a ring of one adds nothing). dbias is None without a bias."""
    saved, local, like = (out, lse, d_out), (q_ids, bias), (q, k, v, bias)
    dq, dbias, kv, incoming = None, None, (k, v) if kv_ids is None else (k, v, kv_ids), None
    for step in range(be.n):
        pending = be.send_next(kv) if step + 1 < be.n else None
        grads = (dq, None, None, dbias)
        if not be.same_calls(step):
            grads = _zeros_for_none(be, grads, like)
        dq, dk, dv, dbias = be.step(
            step, lambda calls, g, kv: _backward_calls(be, step, calls, q, local, kv, saved, g), grads, kv)
        dq, dk, dv, dbias = _zeros_for_none(be, (dq, dk, dv, dbias), like)
        if be.n > 1:
            dq, dk, dv = _f32(be, (dq, dk, dv))
            if incoming is not None:
                got = incoming.wait()
                dk, dv = dk + got[0], dv + got[1]
            incoming = be.send_next((dk, dv))
        kv = pending.wait() if pending is not None else None
    return (dq,) + (incoming.wait() if incoming is not None else (dk, dv)) + (dbias,)


# --- the public wrappers ---------------------------------------------------------------------

def _check_ids(where, ids, q, k):
    for name, x, n in (("q_segment_ids", ids[0], q.shape[1]), ("kv_segment_ids", ids[1], k.shape[1])):
        if tuple(x.shape) != (q.shape[0], n):
            raise ValueError(f"{where}{name}: expected [{q.shape[0]}, {n}] (batch, this device's shard), got "
                             f"{tuple(x.shape)}")


def _given_ids(fw, ids, q, k):
    """q_segment_ids and kv_segment_ids as given (this device's shards), or None."""
    if all(x is None for x in ids):
        return None
    if any(x is None for x in ids):
        raise ValueError("q_segment_ids, kv_segment_ids: expected both or neither, got one")
    ids = tuple(fw.array(name, x) for name, x in zip(("q_segment_ids", "kv_segment_ids"), ids))
    for name, x in zip(("q_segment_ids", "kv_segment_ids"), ids):
        if fw.dtype_name(x) != "int32":
            raise ValueError(f"{name}: expected int32, got {fw.dtype_name(x)}")
    _check_ids("", ids, q, k)
    return ids


def _segments(fw, mask_info, given, q, k, sharding):
    """The segment ids of this device's query and key shards, from mask_info or given as
    q_segment_ids / kv_segment_ids, or None; a mask beyond segment ids has no per-shard form here."""
    if mask_info is not None and any(x is not None for x in given):
        raise ValueError("q_segment_ids, kv_segment_ids: not with mask_info (it gives the segment ids)")
    if (mask_info is not None or any(x is not None for x in given)) and any(x is not None for x in sharding):
        raise NotImplementedError("mask_info, q_segment_ids, kv_segment_ids: not with mesh/in_specs/out_specs in "
                                  "ejkernel (C++); call ring_attention inside your own shard_map with the local "
                                  "shards' segment ids")
    if mask_info is None:
        return _given_ids(fw, given, q, k)
    lowered = _kit.lower_mask_info(mask_info)
    if lowered.band != (None, None) or lowered.attention_mask is not None:
        raise NotImplementedError("mask_info: only segment ids in ring_attention in ejkernel (C++): give a causal or "
                                  "windowed mask as causal= / sliding_window= (global positions)")
    if lowered.q_segment_ids is None:
        return None
    ids = fw.adopt(lowered.q_segment_ids, q), fw.adopt(lowered.kv_segment_ids, q)
    _check_ids("mask_info: ", ids, q, k)
    return ids


def bias_rows(bias, q, k, n):
    """Checks bias's shape on a ring of n devices and says which query rows it holds: "local"
    ([B|1, Hq|1, Sq, n Sk]: this device's) or "ring" ([B|1, Hq|1, n Sq, n Sk]: every device's, in
    device order, of which this device's are taken, as the seed's replicated bias is read)."""
    b, sq, hq, sk = q.shape[0], q.shape[1], q.shape[2], k.shape[1]
    shape = tuple(bias.shape)
    if (len(shape) != 4 or shape[0] not in (1, b) or shape[1] not in (1, hq) or shape[2] not in (sq, n * sq)
            or shape[3] != n * sk):
        raise ValueError(f"bias: expected [B|1, Hq|1, Sq, N Sk] (this device's query rows) or [B|1, Hq|1, N Sq, N Sk] "
                         f"(every device's), the keys of all N shards: B={b}, Hq={hq}, Sq={sq}, Sk={sk} (this "
                         f"device's shards), N={n}; got {shape}")
    return "local" if shape[2] == sq else "ring"


def _run(fw, layout, query, key, value, softmax_aux, bias, options, axis_name, platform, sharding, mask_info=None,
         given_ids=(None, None)):
    if fw.name == "jax":
        from ._ring import jax_ring as ring
    else:
        from ._ring import torch_ring as ring
    q, k, v = fw.array("query", query), fw.array("key", key), fw.array("value", value)
    fw.on_platform("ring_attention", _kit.platform(platform), q)
    aux = fw.array("softmax_aux", softmax_aux)
    if aux is not None:
        aux = fw.cast_float(aux, "float32")
    for name, x in (("query", q), ("key", k), ("value", v)):
        if len(x.shape) != 4:
            raise ValueError(f"ring_attention: {name}: expected [B, S, H, D], got shape {tuple(x.shape)}")
    bias = fw.array("bias", bias)
    if bias is not None:  # as flash_attention takes it: in query's dtype (the cast's gradient is the caller's)
        bias = fw.cast_float(bias, fw.dtype_name(q))
    band = global_band(fw.scalar("causal", options["causal"], "bool"), options["sliding_window"])
    scalars = {"softmax_scale": options["softmax_scale"], "logits_soft_cap": options["logits_soft_cap"]}
    if scalars["softmax_scale"] is None:
        scalars["softmax_scale"] = q.shape[-1] ** -0.5
    head_dim = q.shape[-1]
    tile = fw.head_dim_multiple(q)
    if head_dim % tile:  # zero columns change no logit and give zero outputs: exact
        width = -(-head_dim // tile) * tile
        q, k, v = (fw.pad_last(x, width) for x in (q, k, v))
    ids = _segments(fw, mask_info, given_ids, q, k, sharding)
    out = ring.run(fw, layout, q, k, v, aux, bias, band, scalars, axis_name, sharding, ids)
    # A query row whose segment id is negative gives 0, as flash_attention's.
    return out[..., :head_dim] if ids is None else fw.zero_rows(out[..., :head_dim], ids[0])


_COMMON_DOC = """
    Under jax.shard_map (or with mesh, in_specs and out_specs) each device holds a shard of the
    sequence axis of query, key and value, and `axis_name` names the mesh axis they are split
    over, in device order along it (SHARDS){torch_axis}.
    Without an axis_name the call is flash_attention on the arrays given. The result is exactly
    flash_attention on the gathered sequence (the same masks, scale, soft cap, bias and sinks), as
    the shard of the output that goes with the local queries.

    Each of axis_size steps runs flash_attention on the local queries against the visiting
    key/value shard (offsets global: causal and sliding_window count positions in the whole
    sequence); a step whose block is fully masked runs no kernel. The next shard's transfer starts
    before a step's kernels. Partial results are merged by log-sum-exp in float32.
    Differentiable: the backward runs flash_attention_backward per step with the final output
    and log-sum-exp, and the key/value gradients travel back around the ring.

    Args:
      query: [B, Sq, Hq, D], the local shard; key, value: [B, Sk, Hkv, D], Hq a multiple of Hkv
        (GQA/MQA). float32, bfloat16 or float16, all three alike.
      softmax_aux: sinks, [S] shared by every head or [Hq, S] (cast to float32): logits that join
        the softmax denominator once per query row, as in flash_attention over the whole
        sequence (the seed's XLA ring adds them at every step, so its result differs there).
      bias: added to the scaled logits, as the seed's: the local queries' rows against the keys
        of all N devices, [B|1, Hq|1, Sq, N Sk], or every device's rows, [B|1, Hq|1, N Sq, N Sk]
        (the seed reads a replicated bias so; the local rows are used). Cast to query's dtype;
        each step adds the block of the visiting shard's keys. With logits_soft_cap the cap
        applies to the biased logits, as in flash_attention (the seed's XLA ring caps first,
        then adds the bias). Differentiable (the seed's ring gives it no gradient): the local
        rows' gradient stays on the device; for the N Sq form it is the whole gradient
        {bias_sum}.
        Rows and keys are in device order: KEY_ORDER.
      causal: key j is visible from query i only if j <= i, in global positions.
      sliding_window: int w, meaning (w, w), or (left, right): keys in [i - left, i + right],
        global positions.
      logits_soft_cap: cap > 0: logits become cap * tanh(logits / cap).
      softmax_scale: multiplies q.k (default 1/sqrt(D)).
      axis_name: {axis_name_doc}
      platform: None or "auto" (where the arrays are), "cpu", "cuda"; the seed's "xla" is "auto".
UNSUPPORTED{sharding}

    Returns:
      out [B, Sq, Hq, D]: the local queries' rows, query's dtype."""


def ring_attention(fw, query, key, value, softmax_aux=None, bias=None, /, *, mask_info=None, q_segment_ids=None,
                   kv_segment_ids=None, mask_builder=None, sliding_window=None, chunk_size=None, causal=False,
                   logits_soft_cap=None, softmax_scale=None, axis_name=None, fused_backward=False, platform=None,
                   cfg=None, mesh=None, in_specs=None, out_specs=None):
    fw.refuse("ring_attention", mask_builder=mask_builder is not None, chunk_size=chunk_size is not None,
              cfg=cfg is not None)
    options = dict(causal=causal, sliding_window=sliding_window, logits_soft_cap=logits_soft_cap,
                   softmax_scale=softmax_scale)
    return _run(fw, "plain", query, key, value, softmax_aux, bias, options, axis_name, platform,
                (mesh, in_specs, out_specs), mask_info, (q_segment_ids, kv_segment_ids))


def zigzag_ring_attention(fw, query, key, value, softmax_aux=None, bias=None, /, *, mask_info=None,
                          q_segment_ids=None, kv_segment_ids=None, sliding_window=None, causal=False,
                          logits_soft_cap=None, softmax_scale=None, axis_name=None, platform=None, mesh=None,
                          in_specs=None, out_specs=None):
    options = dict(causal=causal, sliding_window=sliding_window, logits_soft_cap=logits_soft_cap,
                   softmax_scale=softmax_scale)
    return _run(fw, "zigzag", query, key, value, softmax_aux, bias, options, axis_name, platform,
                (mesh, in_specs, out_specs), mask_info, (q_segment_ids, kv_segment_ids))


_MASK_INFO_DOC = """\
      mask_info: segment ids only (a MaskInfo of this device's query and key shards, in the
        layout's order; they travel with their shard); a query row whose id is negative gives 0.
        Any other mask, or mask_info with mesh/in_specs/out_specs: NotImplementedError.
      q_segment_ids, kv_segment_ids: ours, the same without a MaskInfo (which needs JAX):
        int32 [B, Sq] and [B, Sk], this device's shards, given together, not with mask_info (nor
        with mesh/in_specs/out_specs); a query sees only keys of its own segment, -1 is padding.
"""


def _doc(head, shards, unsupported=""):
    """A wrapper's docstring: its head, then the common text with its layout's shards and its
    refused arguments (the framework's parts are filled in by _kit.bind)."""
    return head + _COMMON_DOC.replace("SHARDS", shards).replace("UNSUPPORTED", _MASK_INFO_DOC + unsupported)


ring_attention.__doc__ = _doc("""Ring attention, as ``ejkernel.modules.ring_attention``{on}: the sequence split in
    one contiguous shard per device.
""", "the shard of device i is the i-th of the sequence", """\
      mask_builder, chunk_size, cfg: not supported (NotImplementedError).
      fused_backward: any; there is one backward (flash_attention_backward per step).
""").replace("KEY_ORDER", "the sequence's order")

zigzag_ring_attention.__doc__ = _doc("""ring_attention{on} with the zigzag layout, which balances causal
    work: the gathered sequence is cut in 2N chunks and device i holds chunks i and 2N - 1 - i, in
    this order (its local shard is their concatenation); with causal every step after the first
    computes half a block on every device. A sequence x [B, S, ...] goes to this layout as
    x[:, order] with order = concatenate([arange(i c, (i + 1) c), arange((2N - 1 - i) c, (2N - i) c)]
    for i in range(N)), c = S / 2N; the output comes back in the same order. Local lengths even.
""", "device i holds chunks i and 2N - 1 - i").replace("KEY_ORDER", """the layout's, so a bias b of the
        gathered sequence goes to it as b[:, :, order][..., key_order] (key_order: the keys'
        order)""")

WRAPPERS = (ring_attention, zigzag_ring_attention)

_JAX_SHARDING = """\
      mesh, in_specs, out_specs: given all three, the call runs under jax.shard_map over mesh:
        in_specs a PartitionSpec for each of query, key, value, softmax_aux (None: replicated or
        not given), then bias's as in the seed (None or left out: not given; its query axis split
        over axis_name, or not split for the every-device rows form; its key axis whole),
        out_specs query's. axis_name must then be the mesh axis that splits the sequence axis
        (axis 1) of query, key and value."""
_TORCH_SHARDING = "      mesh, in_specs, out_specs: None only (NotImplementedError)."
DOCS = {"jax": {"sharding": _JAX_SHARDING, "torch_axis": "",
                "bias_sum": "(shard_map sums a replicated input's over the devices)",
                "axis_name_doc": "the mesh axis the sequence is split over (None: one device)."},
        "torch": {"on": ", on torch tensors", "sharding": _TORCH_SHARDING,
                  "bias_sum": "(summed over the ranks by an all_reduce, as the sinks')",
                  "torch_axis": " (in ejk.torch: each rank of a torch.distributed process group holds its "
                                "shard, in rank order, and axis_name is that group)",
                  "axis_name_doc": "a torch.distributed ProcessGroup (e.g. torch.distributed.group.WORLD), "
                                   "initialized; None: one device, no communication."}}
