"""The float64 grouped matmul and its gradients, a loop over the groups (the semantics of
kernels/ejk/kernels/common/grouped_matmul_params.h): group i's rows are the prefix sums of the
sizes clamped to m; groups offset .. offset + G - 1 are computed; every other row is 0."""
import numpy as np


def group_rows(sizes, m, offset, groups):
    """[(start, end)] of the computed groups."""
    ends = np.minimum(np.cumsum(np.maximum(np.asarray(sizes, np.int64), 0)), m)
    starts = np.concatenate([[0], ends[:-1]])
    return [(int(starts[offset + g]), int(ends[offset + g])) for g in range(groups)]


def forward(lhs, rhs, sizes, offset=0, existing=None):
    lhs, rhs = np.asarray(lhs, np.float64), np.asarray(rhs, np.float64)
    out = np.zeros((lhs.shape[0], rhs.shape[2]))
    for g, (a, e) in enumerate(group_rows(sizes, lhs.shape[0], offset, rhs.shape[0])):
        out[a:e] = lhs[a:e] @ rhs[g]
    return out if existing is None else out + np.asarray(existing, np.float64)


def backward(lhs, rhs, sizes, d_out, offset=0):
    """(dlhs, drhs) for rhs [G, k, n]."""
    lhs, rhs, d_out = (np.asarray(x, np.float64) for x in (lhs, rhs, d_out))
    dlhs, drhs = np.zeros_like(lhs), np.zeros_like(rhs)
    for g, (a, e) in enumerate(group_rows(sizes, lhs.shape[0], offset, rhs.shape[0])):
        dlhs[a:e] = d_out[a:e] @ rhs[g].T
        drhs[g] = lhs[a:e].T @ d_out[a:e]
    return dlhs, drhs
