"""The rest of ``ejkernel.types.MaskInfo``'s methods: views of a mask (lengths, validity masks,
positions, cu_seqlens, a picture) and the constructors that need no structure of their own
(from_random, dynamic_init). MaskInfo's structure (structure.py) inherits them; each gives the seed's result
on the same inputs, computed from the structure, on the arrays of the class's ``xp``."""
import numpy as np


def _lengths_of(xp, ids, what):
    """The seed's per-segment lengths: with segments beyond 0, the count of each id 0..max over
    the whole batch; else each row's valid tokens. The result's shape depends on the ids' values,
    so they must be concrete (under tracing there is no static shape to give it)."""
    if ids is None:
        return None
    ids = ids[:, 0, :] if ids.ndim == 3 else ids
    if not xp.is_concrete(ids):
        raise ValueError(f"{what}: its length is the number of segments, a value of the segment ids: call it outside "
                         "jax.jit or torch.compile (or use get_or_compute_qkv_cu_seqlens(max_segments=...), whose "
                         "shape is static)")
    top = int(xp.amax(ids))
    if top > 0:
        flat = ids.reshape(-1)
        counts = xp.sum(flat[None, :] == xp.arange(top + 1, xp.int32, like=ids)[:, None], axis=1)
        return xp.astype(counts, xp.int32)
    return xp.astype(xp.sum(ids >= 0, axis=-1), xp.int32)


def _cumulative_counts(xp, ids, out_dtype, max_segments):
    """[0, n_0, n_0 + n_1, ...]: the tokens of segment ids 0..max_segments-1 over the batch."""
    flat = ids.reshape(-1)
    counts = xp.sum(flat[None, :] == xp.arange(max_segments, xp.int32, like=ids)[:, None], axis=1)
    return xp.concatenate([xp.zeros((1,), out_dtype, like=ids), xp.astype(xp.cumsum(counts, axis=0), out_dtype)])


class MaskViews:
    """Methods of MaskInfo that only read it (and two constructors); `xp` is the subclass's."""

    # --- lengths and flags ------------------------------------------------------------------------
    def _ids(self):
        """The visible (q, kv) segment ids, computed from the dense mask where none are stored
        (as the seed's, once it has computed them); (None, None) for an empty MaskInfo."""
        if self.q_len is None:
            return None, None
        return self.get_or_compute_segment_ids()

    @property
    def q_lens(self):
        return _lengths_of(self.xp, self._ids()[0], "q_lens")

    @property
    def kv_lens(self):
        return _lengths_of(self.xp, self._ids()[1], "kv_lens")

    @property
    def is_multi_sequence(self):
        """Whether a segment id above 0 exists (an array's bool; False without ids)."""
        for ids in self._ids():
            if ids is not None:
                return self.xp.amax(ids[:, 0, :] if ids.ndim == 3 else ids) > 0
        return self.xp.asarray(False)

    @property
    def baked_in_masks(self):
        return {"causal": self.causal_mask_baked_in, "sliding_window": self.sliding_window_baked_in,
                "chunked": self.chunked_mask_baked_in, "token_type_ids": self.token_type_ids_baked_in}

    def is_self_attention(self):
        """Queries and keys are the same tokens: equal ids, else a square mask."""
        if self._q_segment_ids is not None and self._kv_segment_ids is not None:
            return (self._q_segment_ids.shape == self._kv_segment_ids.shape
                    and self.xp.array_equal(self._q_segment_ids, self._kv_segment_ids))
        if self._attention_mask is not None:
            return self._attention_mask.shape[-2] == self._attention_mask.shape[-1]
        return False

    # --- per-token views -------------------------------------------------------------------------
    @property
    def q_attention_mask(self):
        """[B, Q]: 1 for a query that is not padding, 0 for padding."""
        return self.xp.where(self.get_or_compute_segment_ids()[0] == -1, 0, 1)

    @property
    def q_position_ids(self):
        """Each query's index within its segment (from the ids, whatever q_positions says);
        padding -1."""
        from .structure import positions
        return positions(self.xp, self.get_or_compute_segment_ids()[0], -1)

    def get_qkv_masks(self, dtype=None):
        """(q_mask [B, Q], kv_mask [B, K], the segment mask [B, 1, Q, K]) of the visible ids
        (default bool)."""
        from .structure import segment_ids_to_mask
        q_ids, kv_ids = self.get_or_compute_segment_ids()
        dtype = None if dtype is None else self.xp.dtype(dtype)
        return segment_ids_to_mask(self.xp, (q_ids, kv_ids), dtype=dtype, return_separate_masks=True)

    def get_or_compute_qkv_cu_seqlens(self, *, out_dtype=None, max_segments=128):
        """(cu_seqlens_q, cu_seqlens_kv): the stored ones (one of them for both), else the
        cumulative token counts of segment ids 0..max_segments-1 ([max_segments + 1], static);
        default int32."""
        xp = self.xp
        out_dtype = xp.int32 if out_dtype is None else xp.dtype(out_dtype)
        cu_q, cu_kv = self._cu_seqlens_q, self._cu_seqlens_kv
        if cu_q is not None or cu_kv is not None:
            cu_q = cu_kv if cu_q is None else cu_q
            cu_kv = cu_q if cu_kv is None else cu_kv
            return xp.asarray(cu_q, out_dtype), xp.asarray(cu_kv, out_dtype)
        q_ids, kv_ids = self.get_or_compute_segment_ids()
        q_ids = q_ids[:, 0, :] if q_ids.ndim == 3 else q_ids
        kv_ids = kv_ids[:, 0, :] if kv_ids.ndim == 3 else kv_ids
        return (_cumulative_counts(xp, q_ids, out_dtype, max_segments),
                _cumulative_counts(xp, kv_ids, out_dtype, max_segments))

    # --- materializing -----------------------------------------------------------------------------
    def materialize_attention_mask(self, dtype=None):
        """This MaskInfo with its dense mask available in `dtype` (here it always is: the mask is
        kept as its structure and made when read, so only the dtype it is read in changes)."""
        self._lengths("materialize_attention_mask")
        xp = self.xp
        dtype = xp.bool_ if dtype is None else xp.dtype(dtype)
        current = xp.bool_ if self._mask_dtype is None else xp.dtype(self._mask_dtype)
        return self if dtype == current else self.replace(_mask_dtype=dtype)

    def materialize_segment_ids(self, per_head=False):
        """This MaskInfo with visible segment ids (computed from the dense mask if it has none)."""
        if self._q_segment_ids is not None and self._kv_segment_ids is not None:
            return self
        if self._attention_mask is None:
            raise ValueError("materialize_segment_ids: the MaskInfo has neither segment ids nor an attention mask")
        q_ids, kv_ids = self.get_or_compute_segment_ids(per_head=per_head)
        xp = self.xp
        return self.replace(_q_segment_ids=xp.asarray(q_ids, xp.int32), _kv_segment_ids=xp.asarray(kv_ids, xp.int32))

    def to_dtype(self, dtype):
        """This MaskInfo with `attention_mask` in `dtype` (1 where attending, 0 elsewhere)."""
        return self.materialize_attention_mask(dtype)

    @classmethod
    def create_chunked_attention_mask(cls, chunk_size, q_len, kv_len=None, offset=0, dtype=None):
        """[Q, K]: keys in the query's chunk of `chunk_size`, and causal (k <= q + offset)."""
        xp = cls.xp
        if chunk_size <= 0:
            raise ValueError(f"chunk_size: expected a positive int, got {chunk_size}")
        kv_len = q_len if kv_len is None else kv_len
        q = xp.arange(q_len, xp.int32)[:, None]
        k = xp.arange(kv_len, xp.int32)[None, :]
        mask = ((q // chunk_size) == (k // chunk_size)) & (k <= q + offset)
        return xp.astype(mask, xp.bool_ if dtype is None else xp.dtype(dtype))

    # --- constructors ------------------------------------------------------------------------------
    @classmethod
    def from_random(cls, batch_size, q_len, kv_len=None, sparsity=0.5, seed=0, q_positions=None, kv_positions=None,
                    batch_axis_name=("dp", "fsdp"), qheads_axis_name="tp", kvheads_axis_name="tp",
                    sequence_axis_name="sp"):
        """A dense random mask [B, 1, Q, K] with a fraction `sparsity` masked: the same mask for
        the same seed (JAX: jax.random's draw, the seed's; PyTorch: a torch.Generator's)."""
        kv_len = q_len if kv_len is None else kv_len
        if not 0.0 <= sparsity <= 1.0:
            raise ValueError(f"sparsity: expected a float in [0, 1] (the masked fraction), got {sparsity}")
        mask = cls.xp.bernoulli(seed, 1.0 - sparsity, (batch_size, 1, q_len, kv_len))
        return cls(_attention_mask=mask, _segments="none", q_positions=q_positions, kv_positions=kv_positions,
                   batch_axis_name=batch_axis_name, qheads_axis_name=qheads_axis_name,
                   kvheads_axis_name=kvheads_axis_name, sequence_axis_name=sequence_axis_name)

    @classmethod
    def dynamic_init(cls, *, mask_info=None, input_ids=None, inputs_embeds=None, attention_mask=None):
        """mask_info itself; else one from attention_mask (a [B, S] padding mask, 1 or True
        valid; a dense one as from_attention_mask takes), else no padding over input_ids' or
        inputs_embeds' [B, S]."""
        if mask_info is not None:
            return mask_info
        if attention_mask is None:
            source = input_ids if input_ids is not None else inputs_embeds
            if source is None:
                raise ValueError("dynamic_init: give one of mask_info, input_ids, inputs_embeds or attention_mask "
                                 "(the batch size and sequence length come from them)")
            attention_mask = cls.xp.ones(tuple(source.shape[:2]), cls.xp.bool_, like=source)
        else:
            attention_mask = cls.xp.asarray(attention_mask)
            if attention_mask.dtype != cls.xp.bool_:
                attention_mask = attention_mask == 1
        if attention_mask.ndim == 2:
            return cls.from_segments(attention_mask, is_attn_mask=True)
        return cls.from_attention_mask(attention_mask)

    # --- a picture -----------------------------------------------------------------------------------
    def visualize(self, block_size=32, batch=0, head=0, fit_in_screen=True, max_rows=32, max_cols=64,
                  charset="unicode", show_segments=True, return_str=False):
        """The mask of (batch, head) in blocks: full, partial or empty (two characters each),
        each row led by its queries' segment id when they share one (PAD, MIX otherwise). With
        fit_in_screen the blocks grow until at most max_rows x max_cols remain. Printed, or
        returned with return_str; the layout is ours, the classification the seed's."""
        mask = self.xp.to_numpy(self.get_or_compute_attention_mask())
        if not 0 <= batch < mask.shape[0]:
            raise IndexError(f"batch: expected 0 <= batch < {mask.shape[0]}, got {batch}")
        if not 0 <= head < mask.shape[1]:
            raise IndexError(f"head: expected 0 <= head < {mask.shape[1]}, got {head}")
        if charset not in ("unicode", "ascii"):
            raise ValueError(f"charset: expected 'unicode' or 'ascii', got {charset!r}")
        rb, cb = (block_size, block_size) if isinstance(block_size, int) else block_size
        rb, cb = max(int(rb), 1), max(int(cb), 1)
        m = mask[batch, head]
        if fit_in_screen:
            rb = max(rb, -(-m.shape[0] // max_rows))
            cb = max(cb, -(-m.shape[1] // max_cols))
        blocks = block_classes(m, rb, cb)
        glyphs = {"unicode": ("  ", "░░", "██"), "ascii": ("  ", "..", "##")}[charset]
        ids = self.xp.to_numpy(self.get_or_compute_segment_ids()[0])[batch] if show_segments else None
        lines = [f"MaskInfo {self.shape}, batch {batch}, head {head}, blocks of {rb} x {cb}"]
        for r, row in enumerate(blocks):
            label = ""
            if ids is not None:
                part = ids[r * rb:(r + 1) * rb]
                label = ("PAD" if part[0] < 0 else str(int(part[0]))) if np.all(part == part[0]) else "MIX"
                label = f"{label:>4} "
            lines.append(label + "".join(glyphs[c] for c in row))
        text = "\n".join(lines)
        if return_str:
            return text
        print(text)
        return None


def block_classes(mask, rb, cb):
    """bool [Q, K] in blocks of rb x cb: 0 no key visible, 1 some, 2 all (padding counts as
    not visible)."""
    q, k = mask.shape
    padded = np.pad(mask, ((0, -q % rb), (0, -k % cb)))
    counts = padded.reshape(padded.shape[0] // rb, rb, padded.shape[1] // cb, cb).sum(axis=(1, 3))
    return np.where(counts == rb * cb, 2, np.where(counts == 0, 0, 1))
