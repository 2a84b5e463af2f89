"""Flash attention sharded over a 2x2 mesh: batch over "data", heads over "model"; each device
runs the kernel on its own [B/2, S, H/2, D] shard. On a CPU, XLA makes 4 devices of the host:

    XLA_FLAGS=--xla_force_host_platform_device_count=4 python python/examples/shard_map.py

(the flag is added below when absent; it must be set before jax starts its backend).
"""
import os

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec as P

from ejk.jax import flash_attention

mesh = Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("data", "model"))
q, k, v = (jax.random.normal(key, (4, 512, 8, 64), jnp.bfloat16) for key in jax.random.split(jax.random.key(0), 3))

# One spec per operand in ejkernel.modules' order: query, key, value, bias, softmax_aux,
# cum_seqlens_q, cum_seqlens_k (None: not given).
spec = P("data", None, "model", None)
sharded = jax.jit(lambda q, k, v: flash_attention(q, k, v, causal=True, mesh=mesh, in_specs=(spec,) * 3 + (None,) * 4,
                                                  out_specs=spec))
out = sharded(q, k, v)
whole = jax.jit(lambda q, k, v: flash_attention(q, k, v, causal=True))(q, k, v)
print(f"{out.shape} {out.dtype} on {len(mesh.devices.flat)} devices as {out.sharding.spec}; "
      f"max error against the unsharded call: {float(jnp.abs(out.astype(jnp.float32) - whole).max()):.3g}")
