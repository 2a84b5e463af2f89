"""Philox 4x32-10 in numpy, written from the paper (Salmon et al., SC 2011) independently of
kernels/ejk/kernels/common/philox.h, and the attention keep mask that header defines: the yardstick
of the dropout tests."""
import numpy as np

_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
_W0, _W1 = np.uint32(0x9E3779B9), np.uint32(0xBB67AE85)
_LO = np.uint64(0xFFFFFFFF)

# Random123's known-answer vectors (its tests/kat_vectors): counter, key, output.
KNOWN_ANSWERS = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


def philox4x32_10(counter, key):
    """counter: four uint32 arrays (broadcast together), key: two uint32 scalars or arrays.
    Returns the four uint32 output words."""
    c = [np.asarray(x, np.uint32) for x in np.broadcast_arrays(*counter)]
    k0, k1 = np.uint32(key[0]), np.uint32(key[1])
    with np.errstate(over="ignore"):
        for _ in range(10):
            p0 = c[0].astype(np.uint64) * _M0
            p1 = c[2].astype(np.uint64) * _M1
            hi0, lo0 = (p0 >> np.uint64(32)).astype(np.uint32), (p0 & _LO).astype(np.uint32)
            hi1, lo1 = (p1 >> np.uint64(32)).astype(np.uint32), (p1 & _LO).astype(np.uint32)
            c = [hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0]
            k0, k1 = np.uint32(k0 + _W0), np.uint32(k1 + _W1)
    return c


def threshold_and_scale(p):
    """The integer threshold floor(p * 2^32) of the f32 p and the f32 scale 1 / (1 - p)."""
    p = float(np.float32(p))
    return int(np.floor(p * 2.0 ** 32)), float(np.float32(1.0 / (1.0 - p)))


def keep_mask(seed, p, batch, heads, rows, cols, first_batch=0):
    """keep[b, h, i, j] for batches first_batch.. first_batch + batch - 1, positions i < rows,
    j < cols: word j % 4 of Philox of counter (j // 4, i, h, b) under key (seed mod 2^32,
    seed >> 32) at least floor(p * 2^32)."""
    seed = int(seed) % (1 << 64)
    key = (seed & 0xFFFFFFFF, seed >> 32)
    b = np.arange(first_batch, first_batch + batch, dtype=np.uint32)[:, None, None, None]
    h = np.arange(heads, dtype=np.uint32)[None, :, None, None]
    i = np.arange(rows, dtype=np.uint32)[None, None, :, None]
    j = np.arange(cols, dtype=np.uint32)[None, None, None, :]
    words = philox4x32_10((j >> np.uint32(2), i, h, b), key)
    word = np.choose((j & np.uint32(3)).astype(np.int64), words)
    return word >= np.uint32(threshold_and_scale(p)[0])


def drop_factors(seed, p, batch, heads, rows, cols, first_batch=0):
    """keep / (1 - p) as float64 [B, H, rows, cols] (the scale is the kernels' f32 one)."""
    return keep_mask(seed, p, batch, heads, rows, cols, first_batch) * threshold_and_scale(p)[1]


def packed_drop_factors(seed, p, heads, cum_q, cum_k):
    """Packed varlen: [1, H, Tq, Tk] factors, each pair at its sequence's index and its positions
    within the sequence (pairs across sequences are invisible anyway; they get 0)."""
    cum_q, cum_k = np.asarray(cum_q), np.asarray(cum_k)
    out = np.zeros((1, heads, cum_q[-1], cum_k[-1]))
    for s in range(len(cum_q) - 1):
        sq, sk = cum_q[s + 1] - cum_q[s], cum_k[s + 1] - cum_k[s]
        full = drop_factors(seed, p, 1, heads, sq, sk, first_batch=s)[0]
        out[0, :, cum_q[s]:cum_q[s + 1], cum_k[s]:cum_k[s + 1]] = full
    return out
