"""vmap for the FFI ops: the mapped axis folds into the op's own batch axis where the layouts
allow, so a vmapped call is one kernel launch; otherwise (packed varlen, per-example sinks) the
examples run one after another under lax.map.

Every rule here is called by jax.custom_batching.custom_vmap with the mapped axis of each batched
operand at position 0.
"""
import jax
import jax.numpy as jnp


def sequential(op, in_batched, operands):
    """op over the mapped axis, one example at a time."""
    batched = [x for x, b in zip(operands, in_batched) if b]

    def one(xs):
        it = iter(xs)
        return op(*[next(it) if b else x for x, b in zip(operands, in_batched)])

    return jax.lax.map(one, batched)


def broadcast(x, batched, size):
    """x with the mapped axis in front, of `size`, whether or not x was mapped."""
    return x if batched else jnp.broadcast_to(x, (size,) + x.shape)


def fold(x, batched, size):
    """[V, B, ...] (or unmapped [B, ...]) as [V*B, ...]."""
    x = broadcast(x, batched, size)
    return x.reshape((size * x.shape[1],) + x.shape[2:])


def fold_broadcastable(x, batched, size, batch):
    """A [B|1, ...] operand (flash attention's bias) folded to match [V*B, ...] operands; an
    unmapped one of leading size 1 stays as it is, broadcast by the kernel."""
    lead = x.shape[1] if batched else x.shape[0]
    if not batched and lead == 1:
        return x
    x = broadcast(x, batched, size)
    if lead == 1 and batch != 1:
        x = jnp.broadcast_to(x, (size, batch) + x.shape[2:])
    return x.reshape((size * batch,) + x.shape[2:])


def unfold(y, size, batch):
    """[V*B, ...] back to [V, B, ...]."""
    return y.reshape((size, batch) + y.shape[1:])
