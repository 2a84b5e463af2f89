"""grouped_matmul, with ``ejkernel.modules.grouped_matmul``'s signature, differentiable in lhs,
rhs and existing_out through grouped_matmul_backward."""


from .. import _kit

# The seed's defaults that are framework objects (float32, Precision.DEFAULT): each framework's.
_DEFAULT = _kit.FRAMEWORK_DEFAULT


def _cast(x, dtype):
    """x in dtype: a JAX array's astype, a torch tensor's to."""
    return x.astype(dtype) if hasattr(x, "astype") else x.to(dtype)


def grouped_matmul(fw, lhs, rhs, group_sizes, group_offset=None, existing_out=None, /, *,
                   preferred_element_type=_DEFAULT, rhs_scale=None, rhs_bias=None, transpose_rhs=False,
                   interpret=False, do_padding=True, precision=_DEFAULT, use_v2=False, use_v3=False,
                   out_shard_callback=None, platform=None, cfg=None, mesh=None, in_specs=None, out_specs=None):
    """Grouped matmul (MoE), as ``ejkernel.modules.grouped_matmul``; differentiable.

    Rows of lhs are sorted by group: group i has group_sizes[i] rows (prefix sums, clamped to
    m). The computed groups are group_offset .. group_offset + G - 1 (G = rhs.shape[0]); group
    group_offset + g's rows are multiplied by rhs[g]. Rows of other groups and rows past the
    sizes' sum are 0; existing_out is added.

    Args:
      lhs: [m, k], float32, bfloat16 or float16.
      rhs: [G, k, n] in lhs's dtype, or [G, n, k] with transpose_rhs.
      group_sizes: int32 [GS], GS >= G (not differentiated).
      group_offset: int32 scalar or [1], the first computed group (default 0; not differentiated).
      existing_out: [m, n], float32 or lhs's dtype, added to the result.
      preferred_element_type: the result's dtype (default float32); sums are float32 always,
        and another dtype is the float32 result rounded.
      transpose_rhs: rhs is stored [G, n, k] (read in place, not transposed in memory).
      precision: any (the products are computed in float32).
      interpret, do_padding, use_v2, use_v3: kernel choices of ejkernel's; ignored.
      rhs_scale, rhs_bias, out_shard_callback, platform ("auto" or None), cfg, mesh, in_specs,
        out_specs: None only.

    Returns:
      [m, n] in preferred_element_type. Gradients reach lhs, rhs (in its layout) and
      existing_out (the output's gradient itself).
    """
    fw.refuse("grouped_matmul", rhs_scale=rhs_scale is not None, rhs_bias=rhs_bias is not None,
              out_shard_callback=out_shard_callback is not None, platform=platform not in (None, "auto"),
              mesh=mesh is not None, in_specs=in_specs is not None,
              out_specs=out_specs is not None)
    for name, value in (("interpret", interpret), ("do_padding", do_padding), ("use_v2", use_v2),
                        ("use_v3", use_v3)):
        fw.scalar(name, value, "bool")
    transpose_rhs = fw.scalar("transpose_rhs", transpose_rhs, "bool")
    offset = fw.array("group_offset", group_offset)
    weights = {"rhs_t" if transpose_rhs else "rhs": fw.array("rhs", rhs)}
    out = fw.call("grouped_matmul", cfg=cfg, lhs=fw.array("lhs", lhs), **weights,
                  group_sizes=fw.array("group_sizes", group_sizes),
                  group_offset=None if offset is None else offset.reshape(1),
                  existing_out=fw.array("existing_out", existing_out))["out"]
    if fw.is_float32(preferred_element_type):
        return out
    return _cast(out, preferred_element_type)


WRAPPERS = (grouped_matmul,)


def _backward(call, shape, inputs, scalars, grads):
    """dlhs and drhs from the backward op; existing_out's gradient is out's, in its dtype."""
    weights = {name: inputs[name] for name in ("rhs", "rhs_t") if name in inputs}
    result = call("grouped_matmul_backward", lhs=inputs["lhs"], **weights, group_sizes=inputs["group_sizes"],
                  group_offset=inputs.get("group_offset"), d_out=grads["out"])
    out = {"lhs": result["dlhs"], next(iter(weights)): result["drhs"]}
    if "existing_out" in inputs:
        out["existing_out"] = _cast(grads["out"], inputs["existing_out"].dtype)
    return out


GRADIENTS = {"grouped_matmul": _backward}
