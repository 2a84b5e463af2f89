"""MaskInfo's structure and every method that builds or composes it, for any array library: a
subclass names its array operations as ``xp`` (mask.py: JAX, ejk.types.torch: PyTorch), so both
MaskInfos are one implementation.

The seed keeps one dense [B, H|1, Q, K] mask and ANDs every constraint into it. Here a mask is
kept as its structure: a segment term (query and key labels: equal labels see each other, -1 is
padding), a band of visible key offsets (k - q in [-left, right], either side unbounded), a chunk
size, and a dense term only where nothing else expresses it (a 3-D/4-D mask, a per-batch offset,
the decode/prefill slices, a union of token types). The dense mask (``attention_mask``) is their
AND, made only when asked for; ``flash_attention(mask_info=...)`` lowers the structure to what its
kernel takes (segment ids, causal, sliding_window) through ``lower()``, without a dense mask.
"""
import dataclasses
from typing import NamedTuple

import numpy as np

from .mask_views import MaskViews

_NO_BAND = (None, None)
INT32_MAX = int(np.iinfo(np.int32).max)


class Lowered(NamedTuple):
    """What flash attention's kernel takes for a MaskInfo: labels (None: no segment term), the
    band (left, right) of visible k - q offsets, None on a side for unbounded, and the dense term
    no labels express (bool [B, H|1, Q, K], the kernel's attention_mask; None: none)."""
    q_segment_ids: object
    kv_segment_ids: object
    band: tuple
    attention_mask: object = None


def segment_ids_to_mask(xp, segment_ids, dtype=None, return_separate_masks=False):
    """[B, 1, Q, K]: (q == kv) & (q > -1) & (kv > -1); segment_ids is one [B, S] array (self
    attention) or the pair (q [B, Q], kv [B, K])."""
    q, kv = segment_ids if isinstance(segment_ids, tuple) else (segment_ids, segment_ids)
    q, kv = xp.asarray(q), xp.asarray(kv, like=q)
    dtype = xp.bool_ if dtype is None else dtype
    q_valid, kv_valid = q > -1, kv > -1
    mask = (q[:, :, None] == kv[:, None, :]) & q_valid[:, :, None] & kv_valid[:, None, :]
    mask = xp.astype(mask[:, None], dtype)
    if return_separate_masks:
        return xp.astype(q_valid, dtype), xp.astype(kv_valid, dtype), mask
    return mask


def _first_equal(xp, lines):
    """For each row of bool [..., N, M], the index of the first row equal to it; -1 for an
    all-false row; then the indices renumbered 0, 1, ... in order of first appearance."""
    n = lines.shape[-2]
    index = xp.arange(n, xp.int32, like=lines)
    equal = xp.all(lines[..., :, None, :] == lines[..., None, :, :], axis=-1)
    anchors = xp.amin(xp.where(equal, index, n), axis=-1)
    empty = ~xp.any(lines, axis=-1)
    is_anchor = (~empty) & (anchors == index)
    number = xp.astype(xp.cumsum(xp.astype(is_anchor, xp.int32), axis=-1), xp.int32) - 1
    first = xp.take_along(number, xp.clip(anchors, 0, max(n - 1, 0)), axis=-1)
    return xp.astype(xp.where(empty, -1, first), xp.int32)


def mask_to_segment_ids(xp, mask, per_head=False):
    """Segment ids of a dense mask: rows (and, apart, columns) with the same pattern get the same
    id, all-false ones -1. [Q, K], [B, Q, K] or [B, H, Q, K] (head 0, unless per_head)."""
    m = xp.astype(xp.asarray(mask), xp.bool_)
    if m.ndim not in (2, 3, 4):
        raise ValueError(f"mask: expected a [Q, K], [B, Q, K] or [B, H, Q, K] mask, got shape {tuple(m.shape)}")
    if m.ndim == 4 and not per_head:
        m = m[:, 0]
    return _first_equal(xp, m), _first_equal(xp, xp.swap_last(m))


def helpers(xp, default_dtype):
    """segment_ids_to_mask and mask_to_segment_ids on `xp`'s arrays, with the seed's signatures."""
    def to_mask(segment_ids, dtype=default_dtype, return_separate_masks=False):
        return segment_ids_to_mask(xp, segment_ids, dtype, return_separate_masks)

    def to_ids(mask, per_head=False):
        return mask_to_segment_ids(xp, mask, per_head)

    for public, shared in ((to_mask, segment_ids_to_mask), (to_ids, mask_to_segment_ids)):
        public.__name__ = public.__qualname__ = shared.__name__
        public.__doc__ = shared.__doc__
    return to_mask, to_ids


def positions(xp, ids, pad_value):
    """Each token's position within its segment (restarting at 0 where the id changes); padding
    gets pad_value. A run starts where the id differs from the one before (or after padding)."""
    ids = xp.asarray(ids, xp.int32)
    n = ids.shape[-1]
    t = xp.arange(n, xp.int32, like=ids)
    pad = ids < 0
    first = xp.ones(tuple(ids.shape[:-1]) + (1,), xp.bool_, like=ids)
    differs = xp.concatenate([first, ids[..., 1:] != ids[..., :-1]], axis=-1)
    start = xp.cummax(xp.where((~pad) & differs, t, -1), axis=-1)
    return xp.astype(xp.where(pad, pad_value, t - start), xp.int32)


def take_rows(xp, x, start, n, axis):
    """x[b, ..., start[b]:start[b] + n, ...] along `axis` for each batch row b (start in range)."""
    x = xp.asarray(x)
    index = xp.arange(n, xp.int32, like=x).reshape((1,) * axis + (n,) + (1,) * (x.ndim - axis - 1))
    index = xp.asarray(start, xp.int32, like=x).reshape((-1,) + (1,) * (x.ndim - 1)) + index
    shape = tuple(x.shape[:axis]) + (n,) + tuple(x.shape[axis + 1:])
    return xp.take_along(x, xp.broadcast_to(index, shape), axis=axis)


def _band_and(a, b):
    return tuple(y if x is None else x if y is None else min(x, y) for x, y in zip(a, b))


def _static_int(value):
    """value as a Python int when it is one, else None."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value)
    return None


def relabel(xp, a_q, a_kv, b_q, b_kv, count):
    """One labelling whose equal pairs are those equal in both a and b (b's labels < count)."""
    valid_q, valid_kv = (a_q >= 0) & (b_q >= 0), (a_kv >= 0) & (b_kv >= 0)
    return (xp.astype(xp.where(valid_q, a_q * count + b_q, -1), xp.int32),
            xp.astype(xp.where(valid_kv, a_kv * count + b_kv, -1), xp.int32))


@dataclasses.dataclass(frozen=True, eq=False)
class MaskStructure(MaskViews):
    """Attention mask information, as ``ejkernel.types.MaskInfo`` (same constructors, methods and
    results; a dense mask only when one is asked for), on the arrays of the subclass's ``xp``.
    Build it with from_segments, from_attention_mask or from_cu_seqlens; compose with apply_*;
    pass it as ``flash_attention(..., mask_info=...)``."""
    xp = None                            # the array operations (a class attribute, not a field)
    _attention_mask: object = None       # the dense term: [B, H|1, Q, K] bool, or None
    _q_segment_ids: object = None        # the seed's visible ids (get_or_compute_segment_ids)
    _kv_segment_ids: object = None
    _cu_seqlens_q: object = None
    _cu_seqlens_kv: object = None
    q_positions: object = None
    kv_positions: object = None
    _term_q: object = None               # the segment term when it differs from the visible ids
    _term_kv: object = None
    _segments: str = "visible"           # the segment term: "visible" ids, "term" ids, or "none"
    _band: tuple = _NO_BAND
    _chunk: int | None = None
    causal_mask_baked_in: bool = False
    sliding_window_baked_in: bool = False
    chunked_mask_baked_in: bool = False
    token_type_ids_baked_in: bool = False
    _mask_dtype: object = None           # what attention_mask is read as (to_dtype); None: bool
    batch_axis_name: object = ("dp", "fsdp")
    qheads_axis_name: object = "tp"
    kvheads_axis_name: object = "tp"
    sequence_axis_name: object = "sp"

    _CHILDREN = ("_attention_mask", "_q_segment_ids", "_kv_segment_ids", "_cu_seqlens_q", "_cu_seqlens_kv",
                 "q_positions", "kv_positions", "_term_q", "_term_kv")

    # --- as a tree (arrays, and the rest as static data) ----------------------------------------
    def tree_flatten(self):
        children = tuple(getattr(self, n) for n in self._CHILDREN)
        aux = tuple((f.name, getattr(self, f.name)) for f in dataclasses.fields(self) if f.name not in self._CHILDREN)
        return children, aux

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(**dict(zip(cls._CHILDREN, children)), **dict(aux))

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)

    def _like(self):
        """An array of this MaskInfo (new arrays go where it is), or None."""
        for x in (self._q_segment_ids, self._attention_mask, self._kv_segment_ids, self._term_q):
            if x is not None:
                return x
        return None

    def _arange(self, n):
        return self.xp.arange(n, self.xp.int32, like=self._like())

    # --- constructors ---------------------------------------------------------------------------
    @classmethod
    def from_segments(cls, q_segment_ids, kv_segment_ids=None, q_positions=None, kv_positions=None,
                      batch_axis_name=("dp", "fsdp"), qheads_axis_name="tp", kvheads_axis_name="tp",
                      sequence_axis_name="sp", is_attn_mask=False):
        """Segment ids [B, Q] (and [B, K]; default the same): equal ids see each other, -1 is
        padding. is_attn_mask: the inputs are 0/1 padding masks instead (ids 0 and -1)."""
        xp = cls.xp
        q = xp.asarray(q_segment_ids, xp.int32)
        kv = q if kv_segment_ids is None else xp.asarray(kv_segment_ids, xp.int32, like=q)
        if is_attn_mask:
            q, kv = xp.astype(xp.where(q != 0, 0, -1), xp.int32), xp.astype(xp.where(kv != 0, 0, -1), xp.int32)
        return cls(_q_segment_ids=q, _kv_segment_ids=kv, q_positions=q_positions, kv_positions=kv_positions,
                   batch_axis_name=batch_axis_name, qheads_axis_name=qheads_axis_name,
                   kvheads_axis_name=kvheads_axis_name, sequence_axis_name=sequence_axis_name)

    @classmethod
    def from_attention_mask(cls, attention_mask, q_positions=None, kv_positions=None, *, mask_is_valid=True,
                            batch_axis_name=("dp", "fsdp"), qheads_axis_name="tp", kvheads_axis_name="tp",
                            sequence_axis_name="sp"):
        """A padding mask [B, S] (ids 0 and -1), or a dense [B, Q, K] / [B, H, Q, K] mask (true:
        may attend; mask_is_valid=False: true means masked, as PyTorch writes it)."""
        xp = cls.xp
        m = xp.asarray(attention_mask)
        m = m if m.dtype == xp.bool_ else m != 0
        if not mask_is_valid:
            m = ~m
        axes = dict(batch_axis_name=batch_axis_name, qheads_axis_name=qheads_axis_name,
                    kvheads_axis_name=kvheads_axis_name, sequence_axis_name=sequence_axis_name)
        if m.ndim == 2:
            ids = xp.astype(xp.where(m, 0, -1), xp.int32)
            return cls(_q_segment_ids=ids, _kv_segment_ids=ids, q_positions=q_positions,
                       kv_positions=kv_positions, **axes)
        if m.ndim == 3:
            m = m[:, None]
        elif m.ndim != 4:
            raise ValueError(f"attention_mask: expected [B, S], [B, Q, K] or [B, H, Q, K], got shape "
                             f"{tuple(m.shape)}")
        any_head = xp.any(m, axis=1)
        q_ids = xp.astype(xp.where(xp.any(any_head, axis=-1), 0, -1), xp.int32)
        kv_ids = xp.astype(xp.where(xp.any(any_head, axis=-2), 0, -1), xp.int32)
        return cls(_attention_mask=m, _q_segment_ids=q_ids, _kv_segment_ids=kv_ids, _segments="none",
                   q_positions=q_positions, kv_positions=kv_positions, **axes)

    @classmethod
    def from_cu_seqlens(cls, cu_seqlens_q, *, max_q_len, cu_seqlens_kv=None, max_kv_len=None, q_positions=None,
                        kv_positions=None, batch_axis_name=("dp", "fsdp"), qheads_axis_name="tp",
                        kvheads_axis_name="tp", sequence_axis_name="sp"):
        """Per-row token spans as the seed stores them: interleaved [start_0, end_0, start_1,
        end_1, ...] (2B entries); tokens in [start, end) are valid (id 0), the rest padding."""
        xp = cls.xp
        max_kv_len = max_q_len if max_kv_len is None else max_kv_len
        cu_q = xp.asarray(cu_seqlens_q, xp.int32)
        cu_kv = cu_q if cu_seqlens_kv is None else xp.asarray(cu_seqlens_kv, xp.int32, like=cu_q)

        def ids(cu, length, name):
            if cu.ndim != 1 or cu.shape[0] % 2:
                raise ValueError(f"{name}: expected [2 * B] entries (start, end per row), got shape {tuple(cu.shape)}")
            pairs = cu.reshape(-1, 2)
            idx = xp.arange(length, xp.int32, like=cu)[None, :]
            return xp.astype(xp.where((idx >= pairs[:, :1]) & (idx < pairs[:, 1:]), 0, -1), xp.int32)

        return cls(_q_segment_ids=ids(cu_q, max_q_len, "cu_seqlens_q"),
                   _kv_segment_ids=ids(cu_kv, max_kv_len, "cu_seqlens_kv"), _cu_seqlens_q=cu_q,
                   _cu_seqlens_kv=cu_kv, q_positions=q_positions, kv_positions=kv_positions,
                   batch_axis_name=batch_axis_name, qheads_axis_name=qheads_axis_name,
                   kvheads_axis_name=kvheads_axis_name, sequence_axis_name=sequence_axis_name)

    # --- shape ----------------------------------------------------------------------------------
    @property
    def batch_size(self):
        for x in (self._q_segment_ids, self._attention_mask):
            if x is not None:
                return x.shape[0]
        return None

    @property
    def q_len(self):
        if self._q_segment_ids is not None:
            return self._q_segment_ids.shape[-1]
        return None if self._attention_mask is None else self._attention_mask.shape[-2]

    @property
    def kv_len(self):
        if self._kv_segment_ids is not None:
            return self._kv_segment_ids.shape[-1]
        return None if self._attention_mask is None else self._attention_mask.shape[-1]

    @property
    def shape(self):
        return (self.batch_size, self.q_len, self.kv_len)

    def _lengths(self, what):
        if self.q_len is None or self.kv_len is None:
            raise ValueError(f"{what}: the MaskInfo has no shape (build it with from_segments, "
                             "from_attention_mask or from_cu_seqlens)")
        return self.q_len, self.kv_len

    # --- the seed's accessors -------------------------------------------------------------------
    @property
    def q_segment_ids(self):
        return self._q_segment_ids

    @property
    def kv_segment_ids(self):
        return self._kv_segment_ids

    @property
    def cu_seqlens_q(self):
        return self._cu_seqlens_q

    @property
    def cu_seqlens_kv(self):
        return self._cu_seqlens_kv

    @property
    def attention_mask(self):
        return self.get_or_compute_attention_mask(self._mask_dtype)

    @property
    def bias(self):
        return self.create_bias()

    def get_or_compute_segment_ids(self, per_head=False):
        if self._q_segment_ids is not None and self._kv_segment_ids is not None:
            return self._q_segment_ids, self._kv_segment_ids
        return mask_to_segment_ids(self.xp, self.get_or_compute_attention_mask(), per_head=per_head)

    def get_or_compute_positions(self):
        """(q positions, kv positions): given ones, else each token's index within its segment
        (queries' padding -1, keys' INT32_MAX)."""
        q_pos, kv_pos = self.q_positions, self.kv_positions
        if (q_pos is None or kv_pos is None) and (self._q_segment_ids is not None or self._attention_mask is not None):
            q_ids, kv_ids = self.get_or_compute_segment_ids()
            q_pos = positions(self.xp, q_ids, -1) if q_pos is None else q_pos
            kv_pos = positions(self.xp, kv_ids, INT32_MAX) if kv_pos is None else kv_pos
        return q_pos, kv_pos

    def _term(self):
        """The segment term's (q, kv) labels, or None."""
        if self._segments == "visible":
            return (self._q_segment_ids, self._kv_segment_ids) if self._q_segment_ids is not None else None
        return (self._term_q, self._term_kv) if self._segments == "term" else None

    def _index_terms(self, q_len, kv_len):
        q = self._arange(q_len)[:, None]
        k = self._arange(kv_len)[None, :]
        keep = self.xp.ones((q_len, kv_len), self.xp.bool_, like=self._like())
        left, right = self._band
        if left is not None:
            keep = keep & (k >= q - left)
        if right is not None:
            keep = keep & (k <= q + right)
        if self._chunk is not None:
            keep = keep & ((q // self._chunk) == (k // self._chunk))
        return keep

    def get_or_compute_attention_mask(self, dtype=None):
        """The dense mask [B, H|1, Q, K]: the AND of every term."""
        xp = self.xp
        q_len, kv_len = self._lengths("attention_mask")
        mask = self._index_terms(q_len, kv_len)[None, None]
        term = self._term()
        if term is not None:
            mask = mask & segment_ids_to_mask(xp, term)
        if self._attention_mask is not None:
            mask = mask & self._attention_mask
        mask = xp.broadcast_to(mask, (self.batch_size,) + tuple(mask.shape[1:]))
        return xp.astype(mask, xp.bool_ if dtype is None else xp.dtype(dtype))

    def create_bias(self, dtype=None):
        """0 where attending, the dtype's lowest finite value elsewhere (default float32)."""
        xp = self.xp
        dtype = xp.float32 if dtype is None else xp.dtype(dtype)
        mask = self.get_or_compute_attention_mask()
        return xp.where(mask, xp.asarray(0, dtype, like=mask), xp.asarray(xp.finfo(dtype).min, dtype, like=mask))

    # --- composition ----------------------------------------------------------------------------
    def _dense(self, mask, **changes):
        """This MaskInfo with its whole mask as the dense term `mask`."""
        return self.replace(_attention_mask=mask, _segments="none", _term_q=None, _term_kv=None, _band=_NO_BAND,
                            _chunk=None, **changes)

    def _per_batch(self, value):
        """An int or per-batch int array as int32 [B], where this MaskInfo's arrays are."""
        xp = self.xp
        return xp.broadcast_to(xp.asarray(value, xp.int32, like=self._like()), (self.batch_size,))

    def apply_causal(self, offset=0):
        """Keep keys k <= q + offset (top-left; offset K - Q aligns it bottom-right)."""
        q_len, kv_len = self._lengths("apply_causal")
        static = _static_int(offset)
        if static is not None:
            return self.replace(_band=_band_and(self._band, (None, static)), causal_mask_baked_in=True)
        off = self._per_batch(offset)
        causal = self._arange(kv_len)[None, None, :] <= self._arange(q_len)[None, :, None] + off[:, None, None]
        return self._dense(self.get_or_compute_attention_mask() & causal[:, None], causal_mask_baked_in=True)

    def apply_sliding_window(self, sliding_window, *, offset=0, mode=None, index=None):
        """Keep keys in [row - left, row + right], row = offset + q (an int w means (w, w)); not
        causal by itself. mode="decode": only query row `index` and the window's keys around it;
        mode="prefill": only the last window-width keys."""
        single = _static_int(sliding_window)
        left, right = (single, single) if single is not None else tuple(sliding_window)
        if (_static_int(left) is not None and left < 0) or (_static_int(right) is not None and right < 0):
            raise ValueError(f"sliding_window: expected values >= 0, got {sliding_window!r}")
        q_len, kv_len = self._lengths("apply_sliding_window")
        if mode == "decode" and index is None:
            raise ValueError("index: required with mode='decode' (the query row being decoded)")
        if mode not in (None, "default", "decode", "prefill"):
            raise ValueError(f"mode: expected 'default', 'decode' or 'prefill', got {mode!r}")
        static = _static_int(offset)
        if static is not None and _static_int(left) is not None and _static_int(right) is not None:
            windowed = self.replace(_band=_band_and(self._band, (left - static, right + static)),
                                    sliding_window_baked_in=True)
        else:
            row = self._per_batch(offset)[:, None, None] + self._arange(q_len)[None, :, None]
            col = self._arange(kv_len)[None, None, :]
            window = (col >= row - left) & (col <= row + right)
            windowed = self._dense(self.get_or_compute_attention_mask() & window[:, None],
                                   sliding_window_baked_in=True)
        if mode == "decode":
            return windowed._decode_slice(left, right, index)
        if mode == "prefill":
            width = min(single if single is not None else left + right + 1, kv_len)
            return windowed._prefill_slice(width)
        return windowed

    def _decode_slice(self, left, right, index):
        xp = self.xp
        q_len, kv_len = self._lengths("apply_sliding_window")
        width = min(left + right + 1, kv_len)
        idx = xp.clip(self._per_batch(index), 0, q_len - 1)
        start = xp.clip(idx - left, 0, max(kv_len - width, 0))
        mask = self.get_or_compute_attention_mask()
        mask = take_rows(xp, take_rows(xp, mask, idx, 1, axis=2), start, width, axis=3)

        def rows(x, at, n):
            return None if x is None else take_rows(xp, x, at, n, axis=1)

        return self._dense(mask, _q_segment_ids=rows(self._q_segment_ids, idx, 1),
                           _kv_segment_ids=rows(self._kv_segment_ids, start, width),
                           q_positions=rows(self.q_positions, idx, 1),
                           kv_positions=rows(self.kv_positions, start, width))

    def _prefill_slice(self, width):
        kv_len = self.kv_len
        start = max(kv_len - width, 0)
        mask = self.get_or_compute_attention_mask()[..., start:start + width]
        cut = (lambda x: None if x is None else x[:, start:start + width])
        return self._dense(mask, _kv_segment_ids=cut(self._kv_segment_ids), kv_positions=cut(self.kv_positions))

    def apply_chunked(self, chunk_size, offset=0):
        """Keep keys in the query's chunk of chunk_size tokens with k <= q + offset; the visible
        segment ids become chunk numbers (from 1), padding staying -1."""
        xp = self.xp
        if _static_int(chunk_size) is None or chunk_size <= 0:
            raise ValueError(f"chunk_size: expected a positive int, got {chunk_size!r}")
        if _static_int(offset) is None:
            raise ValueError(f"offset: expected an int, got {offset!r}")
        q_len, kv_len = self._lengths("apply_chunked")
        q_ids, kv_ids = self.get_or_compute_segment_ids()
        base = self if self._chunk in (None, chunk_size) else self._dense(self.get_or_compute_attention_mask())
        term = base._term()
        batch = self.batch_size
        q_chunks = xp.broadcast_to(self._arange(q_len) // chunk_size + 1, (batch, q_len))
        kv_chunks = xp.broadcast_to(self._arange(kv_len) // chunk_size + 1, (batch, kv_len))
        return base.replace(
            _q_segment_ids=xp.where(q_ids < 0, -1, q_chunks), _kv_segment_ids=xp.where(kv_ids < 0, -1, kv_chunks),
            _term_q=None if term is None else term[0], _term_kv=None if term is None else term[1],
            _segments="none" if term is None else "term", _chunk=chunk_size,
            _band=_band_and(base._band, (None, offset)), chunked_mask_baked_in=True)

    def apply_token_type_ids(self, token_type_ids, *, combine="union", zero_policy="q", update_segment_ids=None):
        """Queries and keys of equal token type see each other (type 0 disabled on the side(s)
        zero_policy names): OR-ed into the mask (union), AND-ed (intersect), or the mask
        (replace). The visible segment ids become the types (0 as -1) unless combining by union."""
        xp = self.xp
        q_types, kv_types = token_type_ids if isinstance(token_type_ids, tuple) else (token_type_ids,) * 2
        q_types = xp.asarray(q_types, xp.int32, like=self._like())
        kv_types = xp.asarray(kv_types, xp.int32, like=self._like())
        if q_types.ndim != 2 or kv_types.ndim != 2 or q_types.shape[0] != kv_types.shape[0]:
            raise ValueError(f"token_type_ids: expected [B, Q] (and [B, K]) arrays, got shapes {tuple(q_types.shape)} "
                             f"and {tuple(kv_types.shape)}")
        if zero_policy not in ("q", "kv", "both", "none"):
            raise ValueError(f"zero_policy: expected 'q', 'kv', 'both' or 'none', got {zero_policy!r}")
        if combine not in ("union", "intersect", "replace"):
            raise ValueError(f"combine: expected 'union', 'intersect' or 'replace', got {combine!r}")
        update = combine != "union" if update_segment_ids is None else update_segment_ids
        visible = {}
        if update:
            visible = dict(_q_segment_ids=xp.astype(xp.where(q_types == 0, -1, q_types), xp.int32),
                           _kv_segment_ids=xp.astype(xp.where(kv_types == 0, -1, kv_types), xp.int32))
        # As labels: a disabled type 0 on either side makes type 0 match nothing on both.
        label_q, label_kv = ((q_types, kv_types) if zero_policy == "none" else
                             (xp.where(q_types == 0, -1, q_types), xp.where(kv_types == 0, -1, kv_types)))
        if combine == "replace":
            return self.replace(_attention_mask=None, _segments="term", _term_q=label_q, _term_kv=label_kv,
                                _band=_NO_BAND, _chunk=None, token_type_ids_baked_in=True, **visible)
        if combine == "intersect" and self._term() is None:
            return self.replace(_segments="term", _term_q=label_q, _term_kv=label_kv, token_type_ids_baked_in=True,
                                **visible)
        eq = segment_ids_to_mask(xp, (label_q, label_kv))
        mask = self.get_or_compute_attention_mask()
        return self._dense(mask | eq if combine == "union" else mask & eq, token_type_ids_baked_in=True, **visible)

    def apply_kv_lengths(self, kv_lengths, *, q_len=None, end_index=None, sliding_window=None):
        """Keys at k >= kv_lengths[b] masked (their ids -1); the q_len query rows ending at
        end_index[b] kept; with sliding_window, only the last sliding_window keys before
        kv_lengths[b]."""
        xp = self.xp
        if q_len is None:
            raise ValueError("q_len: required (the query rows to keep)")
        if end_index is None:
            raise ValueError("end_index: required (where each row's kept queries end)")
        mask = self.get_or_compute_attention_mask()
        batch, _, rows, keys = mask.shape
        kv_lengths = xp.asarray(kv_lengths, xp.int32, like=mask).reshape(batch)
        end_index = xp.asarray(end_index, xp.int32, like=mask).reshape(batch)
        kv_valid = self._arange(keys)[None, :] < kv_lengths[:, None]
        mask = mask & kv_valid[:, None, None, :]
        kv_ids = self._kv_segment_ids
        kv_ids = None if kv_ids is None else xp.where(kv_valid, kv_ids, -1)
        start_q = xp.clip(end_index - q_len, 0, max(rows - q_len, 0))
        mask = take_rows(xp, mask, start_q, q_len, axis=2)
        q_ids = self._q_segment_ids
        if q_ids is not None:
            q_ids = take_rows(xp, q_ids, start_q, q_len, axis=1)
        if sliding_window is not None:
            width = min(sliding_window, keys)
            start_k = xp.clip(kv_lengths - width, 0, max(keys - width, 0))
            mask = take_rows(xp, mask, start_k, width, axis=3)
            if kv_ids is not None:
                kv_ids = take_rows(xp, kv_ids, start_k, width, axis=1)
        return self._dense(mask, _q_segment_ids=q_ids, _kv_segment_ids=kv_ids)

    # --- lowering -------------------------------------------------------------------------------
    def lower(self, what="mask_info"):
        """The structure as segment labels, a band and a dense term, for a kernel that takes
        those: a dense term becomes labels when it is concrete and exactly a segment mask (and
        the other labels, if any, are concrete too); otherwise it stays dense (the kernel's
        mask-reading variant), ANDed there with the rest."""
        xp = self.xp
        term = self._term()
        dense = self._attention_mask
        if dense is not None and xp.is_concrete(dense) and (term is None or xp.is_concrete(term[0])):
            # A concrete mask captured by a traced function: evaluated now, not traced.
            with xp.eager():
                q_d, kv_d = mask_to_segment_ids(xp, dense)
                again = xp.broadcast_to(segment_ids_to_mask(xp, (q_d, kv_d)), tuple(dense.shape))
                if bool(xp.all(again == dense)):
                    term = (q_d, kv_d) if term is None else self._combine(term, (q_d, kv_d), what)
                    dense = None
        if self._chunk is not None:
            q_len, kv_len = self._lengths(what)
            batch = self.batch_size
            count = -(-max(q_len, kv_len) // self._chunk)
            chunks = (xp.broadcast_to(self._arange(q_len) // self._chunk, (batch, q_len)),
                      xp.broadcast_to(self._arange(kv_len) // self._chunk, (batch, kv_len)))
            term = chunks if term is None else relabel(xp, *term, *chunks, count)
        if term is None:
            return Lowered(None, None, self._band, dense)
        q, kv = (xp.broadcast_to(xp.asarray(x, xp.int32), (self.batch_size, n))
                 for x, n in zip(term, self._lengths(what)))
        return Lowered(q, kv, self._band, dense)

    def _combine(self, a, b, what):
        xp = self.xp
        if not xp.is_concrete(b[0]):
            raise NotImplementedError(f"{what}: two segment labellings can be combined only when concrete")
        count = int(max(int(xp.amax(b[0])), int(xp.amax(b[1])), 0)) + 1
        return relabel(xp, *a, *b, count)

    def __repr__(self):
        return (f"MaskInfo(shape={self.shape}, band={self._band}, chunk={self._chunk}, "
                f"segments={self._segments}, dense={self._attention_mask is not None})")
