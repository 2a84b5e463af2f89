"""The rest of ``ejkernel.types.MaskInfo``'s methods: views of a mask (lengths, validity masks,
positions, cu_seqlens, a picture) and the constructors that need no structure of their own
(from_random, dynamic_init). MaskInfo (mask.py) inherits them; each gives the seed's result on
the same inputs, computed from MaskInfo's structure."""
import jax
import jax.numpy as jnp
import numpy as np


def _concrete(x):
    return not isinstance(x, jax.core.Tracer)


def _lengths_of(ids, what):
    """The seed's per-segment lengths: with segments beyond 0, the count of each id 0..max over
    the whole batch; else each row's valid tokens. The result's shape depends on the ids' values,
    so they must be concrete (under jit there is no static shape to give it)."""
    if ids is None:
        return None
    ids = ids[:, 0, :] if ids.ndim == 3 else ids
    if not _concrete(ids):
        raise ValueError(f"{what}: its length is the number of segments, a value of the segment ids: call it outside "
                         "jax.jit (or use get_or_compute_qkv_cu_seqlens(max_segments=...), whose shape is static)")
    top = int(jnp.max(ids))
    if top > 0:
        flat = ids.reshape(-1)
        return jnp.sum(flat[None, :] == jnp.arange(top + 1, dtype=jnp.int32)[:, None], axis=1).astype(jnp.int32)
    return jnp.sum(ids >= 0, axis=-1).astype(jnp.int32)


def _cumulative_counts(ids, out_dtype, max_segments):
    """[0, n_0, n_0 + n_1, ...]: the tokens of segment ids 0..max_segments-1 over the batch."""
    flat = ids.reshape(-1)
    counts = jnp.sum(flat[None, :] == jnp.arange(max_segments, dtype=jnp.int32)[:, None], axis=1)
    return jnp.concatenate([jnp.zeros((1,), out_dtype), jnp.cumsum(counts).astype(out_dtype)])


class MaskViews:
    """Methods of MaskInfo that only read it (and two constructors)."""

    # --- lengths and flags ------------------------------------------------------------------------
    def _ids(self):
        """The visible (q, kv) segment ids, computed from the dense mask where none are stored
        (as the seed's, once it has computed them); (None, None) for an empty MaskInfo."""
        if self.q_len is None:
            return None, None
        return self.get_or_compute_segment_ids()

    @property
    def q_lens(self):
        return _lengths_of(self._ids()[0], "q_lens")

    @property
    def kv_lens(self):
        return _lengths_of(self._ids()[1], "kv_lens")

    @property
    def is_multi_sequence(self):
        """Whether a segment id above 0 exists (a JAX bool; False without ids)."""
        for ids in self._ids():
            if ids is not None:
                return jnp.max(ids[:, 0, :] if ids.ndim == 3 else ids) > 0
        return jnp.array(False)

    @property
    def baked_in_masks(self):
        return {"causal": self.causal_mask_baked_in, "sliding_window": self.sliding_window_baked_in,
                "chunked": self.chunked_mask_baked_in, "token_type_ids": self.token_type_ids_baked_in}

    def is_self_attention(self):
        """Queries and keys are the same tokens: equal ids, else a square mask."""
        if self._q_segment_ids is not None and self._kv_segment_ids is not None:
            return (self._q_segment_ids.shape == self._kv_segment_ids.shape
                    and jnp.array_equal(self._q_segment_ids, self._kv_segment_ids))
        if self._attention_mask is not None:
            return self._attention_mask.shape[-2] == self._attention_mask.shape[-1]
        return False

    # --- per-token views -------------------------------------------------------------------------
    @property
    def q_attention_mask(self):
        """[B, Q]: 1 for a query that is not padding, 0 for padding."""
        return jnp.where(self.get_or_compute_segment_ids()[0] == -1, 0, 1)

    @property
    def q_position_ids(self):
        """Each query's index within its segment (from the ids, whatever q_positions says);
        padding -1."""
        from .mask import _positions
        return _positions(self.get_or_compute_segment_ids()[0], -1)

    def get_qkv_masks(self, dtype=jnp.bool_):
        """(q_mask [B, Q], kv_mask [B, K], the segment mask [B, 1, Q, K]) of the visible ids."""
        from .mask import segment_ids_to_mask
        q_ids, kv_ids = self.get_or_compute_segment_ids()
        return segment_ids_to_mask((q_ids, kv_ids), dtype=dtype, return_separate_masks=True)

    def get_or_compute_qkv_cu_seqlens(self, *, out_dtype=jnp.int32, max_segments=128):
        """(cu_seqlens_q, cu_seqlens_kv): the stored ones (one of them for both), else the
        cumulative token counts of segment ids 0..max_segments-1 ([max_segments + 1], static)."""
        cu_q, cu_kv = self._cu_seqlens_q, self._cu_seqlens_kv
        if cu_q is not None or cu_kv is not None:
            cu_q = cu_kv if cu_q is None else cu_q
            cu_kv = cu_q if cu_kv is None else cu_kv
            return jnp.asarray(cu_q, out_dtype), jnp.asarray(cu_kv, out_dtype)
        q_ids, kv_ids = self.get_or_compute_segment_ids()
        q_ids = q_ids[:, 0, :] if q_ids.ndim == 3 else q_ids
        kv_ids = kv_ids[:, 0, :] if kv_ids.ndim == 3 else kv_ids
        return _cumulative_counts(q_ids, out_dtype, max_segments), _cumulative_counts(kv_ids, out_dtype, max_segments)

    # --- materializing -----------------------------------------------------------------------------
    def materialize_attention_mask(self, dtype=jnp.bool_):
        """This MaskInfo with its dense mask available in `dtype` (here it always is: the mask is
        kept as its structure and made when read, so only the dtype it is read in changes)."""
        self._lengths("materialize_attention_mask")
        return self if np.dtype(dtype) == np.dtype(self._mask_dtype) else self.replace(_mask_dtype=np.dtype(dtype))

    def materialize_segment_ids(self, per_head=False):
        """This MaskInfo with visible segment ids (computed from the dense mask if it has none)."""
        if self._q_segment_ids is not None and self._kv_segment_ids is not None:
            return self
        if self._attention_mask is None:
            raise ValueError("materialize_segment_ids: the MaskInfo has neither segment ids nor an attention mask")
        q_ids, kv_ids = self.get_or_compute_segment_ids(per_head=per_head)
        return self.replace(_q_segment_ids=jnp.asarray(q_ids, jnp.int32), _kv_segment_ids=jnp.asarray(kv_ids, jnp.int32))

    def to_dtype(self, dtype):
        """This MaskInfo with `attention_mask` in `dtype` (1 where attending, 0 elsewhere)."""
        return self.materialize_attention_mask(dtype)

    @staticmethod
    def get_empty_sharding():
        from .mask import MaskSharding
        return MaskSharding(*(None,) * len(MaskSharding._fields))

    @staticmethod
    def create_chunked_attention_mask(chunk_size, q_len, kv_len=None, offset=0, dtype=jnp.bool_):
        """[Q, K]: keys in the query's chunk of `chunk_size`, and causal (k <= q + offset)."""
        if chunk_size <= 0:
            raise ValueError(f"chunk_size: expected a positive int, got {chunk_size}")
        kv_len = q_len if kv_len is None else kv_len
        q = jnp.arange(q_len, dtype=jnp.int32)[:, None]
        k = jnp.arange(kv_len, dtype=jnp.int32)[None, :]
        return (((q // chunk_size) == (k // chunk_size)) & (k <= q + offset)).astype(dtype)

    # --- constructors ------------------------------------------------------------------------------
    @classmethod
    def from_random(cls, batch_size, q_len, kv_len=None, sparsity=0.5, seed=0, q_positions=None, kv_positions=None,
                    batch_axis_name=("dp", "fsdp"), qheads_axis_name="tp", kvheads_axis_name="tp",
                    sequence_axis_name="sp"):
        """A dense random mask [B, 1, Q, K] with a fraction `sparsity` masked (jax.random, as the
        seed draws it: the same mask for the same seed)."""
        kv_len = q_len if kv_len is None else kv_len
        if not 0.0 <= sparsity <= 1.0:
            raise ValueError(f"sparsity: expected a float in [0, 1] (the masked fraction), got {sparsity}")
        mask = jax.random.bernoulli(jax.random.PRNGKey(seed), p=1.0 - sparsity, shape=(batch_size, 1, q_len, kv_len))
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
            attention_mask = jnp.ones(tuple(source.shape[:2]), jnp.bool_)
        else:
            attention_mask = jnp.asarray(attention_mask)
            if attention_mask.dtype != jnp.bool_:
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
        mask = np.asarray(jax.device_get(self.get_or_compute_attention_mask()))
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
        ids = np.asarray(self.get_or_compute_segment_ids()[0])[batch] if show_segments else None
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
