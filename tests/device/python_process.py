#!/usr/bin/env python3
"""libejk inside a Python process that uses PyTorch: loaded before and after `import torch`, it
JIT-compiles a variant no build has (NVRTC, or the CPU JIT without a GPU), runs it on torch's
tensors and stream through the C ABI, and matches torch's own attention.

  python_process.py LIBEJK [--order before|after|both]   (both: one child process per order)

Exit 0 when every order passed. Run by scripts/device-check.sh on the GPU machine.
"""
import ctypes, os, subprocess, sys


class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int32), ("device_kind", ctypes.c_int32),
                ("device_index", ctypes.c_int32), ("rank", ctypes.c_int32),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64))]


class Arg(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("kind", ctypes.c_int32), ("tensor", ctypes.POINTER(Tensor)),
                ("ints", ctypes.c_int64 * 2), ("real", ctypes.c_double)]


class Context(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("backend", ctypes.c_int32), ("stream", ctypes.c_void_p),
                ("cpu_parallel_for", ctypes.c_void_p), ("cpu_pool", ctypes.c_void_p)]


def describe(t, keep):
    shape = (ctypes.c_int64 * t.dim())(*t.shape)
    strides = (ctypes.c_int64 * t.dim())(*t.stride())
    keep += [shape, strides]
    dtype = {"torch.float32": 0, "torch.bfloat16": 1, "torch.float16": 2}[str(t.dtype)]
    return Tensor(t.data_ptr(), dtype, 1 if t.is_cuda else 0, t.device.index or 0, t.dim(), shape, strides)


def run(lib_path, order):
    if order == "after":
        import torch  # noqa: F401  (first: its C++ runtime pieces load before ours)
    lib = ctypes.CDLL(lib_path)
    import torch
    lib.ejk_run.restype = ctypes.c_int
    lib.ejk_last_error.restype = ctypes.c_char_p
    cuda = torch.cuda.is_available()
    dev = "cuda" if cuda else "cpu"
    dt = torch.bfloat16 if cuda else torch.float32
    torch.manual_seed(0)
    # head_dim 80 with a window: no build pre-builds it, so the call compiles it here.
    b, s, h, d = 2, 300, 4, 80
    q, k, v = (torch.randn(b, s, h, d, device=dev, dtype=dt) for _ in range(3))
    out = torch.full_like(q, float("nan"))
    lse = torch.full((b, h, s), float("nan"), device=dev, dtype=torch.float32)
    keep = []
    tensors = {n: describe(t, keep) for n, t in dict(q=q, k=k, v=v, out=out, lse=lse).items()}
    args = [Arg(n.encode(), 0, ctypes.pointer(t), (ctypes.c_int64 * 2)(0, 0), 0.0) for n, t in tensors.items()]
    args.append(Arg(b"sliding_window", 4, None, (ctypes.c_int64 * 2)(32, 32), 0.0))
    arr = (Arg * len(args))(*args)
    stream = torch.cuda.Stream() if cuda else None
    ctx = Context(ctypes.sizeof(Context), 0, stream.cuda_stream if cuda else None, None, None)
    rc = lib.ejk_run(b"flash_attention", arr, len(args), ctypes.byref(ctx))
    if rc != 0:
        print(f"{order}: ejk_run failed ({rc}): {lib.ejk_last_error().decode()}")
        return 1
    if cuda:
        stream.synchronize()
    idx = torch.arange(s, device=dev)
    mask = (idx[None, :] - idx[:, None]).abs() <= 32  # keys in [q - 32, q + 32]
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2).float(), k.transpose(1, 2).float(), v.transpose(1, 2).float(), attn_mask=mask).transpose(1, 2)
    err = ((out.float() - ref).norm() / ref.norm()).item()
    ok = err <= (1e-2 if cuda else 1e-5) and not torch.isnan(out).any()
    print(f"{order}: rel_l2 {err:.2e} on {dev} {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


def main():
    lib = sys.argv[1]
    order = sys.argv[sys.argv.index("--order") + 1] if "--order" in sys.argv else "both"
    if order != "both":
        return run(lib, order)
    rc = 0
    for o in ("before", "after"):  # a fresh process each: the order of loading is the point
        rc |= subprocess.run([sys.executable, __file__, lib, "--order", o]).returncode
    return rc


if __name__ == "__main__":
    sys.exit(main())
