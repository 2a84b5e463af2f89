"""libejk through its C ABI (ctypes): loading it privately, describing arguments, checking calls.

The libraries are the package's own (``ejk/lib``), or those of a build tree when
``EJK_LIBRARY_DIR`` names its directory (the tests run against the Release build that way).
They are loaded with RTLD_LOCAL: nothing of ours binds to the copies of LLVM, fmt or the C++
runtime that jaxlib or torch carry, nor theirs to ours.
"""
import ctypes
import os
import pathlib
import threading

import numpy as np

# ejk.h's codes.
OK, INVALID_ARGUMENT, COMPILE_ERROR, BACKEND_UNAVAILABLE = 0, 1, 2, 3
ARG_TENSOR, ARG_BOOL, ARG_INT, ARG_FLOAT, ARG_INT_PAIR, ARG_TUNE = 0, 1, 2, 3, 4, 5
DEVICE_CPU, DEVICE_CUDA = 0, 1
BACKEND_CPU, BACKEND_CUDA = 1, 2
ROLE_INPUT, ROLE_OUTPUT, ROLE_SCALAR, ROLE_TUNING = 0, 1, 2, 3
DTYPES = {"float32": 0, "bfloat16": 1, "float16": 2, "float64": 3, "int32": 4, "int64": 5, "uint8": 6}
SONAME = "libejk.so.0"
MAX_KEY = 1024


class CompileError(RuntimeError):
    """A variant could not be produced (compile failure, or no CPU JIT plugin for a new one)."""


class BackendUnavailable(RuntimeError):
    """The backend cannot run here (no driver, no device, not in this build)."""


class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int32), ("device_kind", ctypes.c_int32),
                ("device_index", ctypes.c_int32), ("rank", ctypes.c_int32),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64))]


class Arg(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("kind", ctypes.c_int32), ("tensor", ctypes.POINTER(Tensor)),
                ("ints", ctypes.c_int64 * 2), ("real", ctypes.c_double)]


class ParamInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("role", ctypes.c_int32), ("optional", ctypes.c_int32),
                ("contiguous", ctypes.c_int32), ("type", ctypes.c_char_p), ("layout", ctypes.c_char_p),
                ("default_value", ctypes.c_char_p), ("doc", ctypes.c_char_p)]


class OpInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("doc", ctypes.c_char_p), ("num_params", ctypes.c_int32),
                ("params", ctypes.POINTER(ParamInfo))]


class OutputSpec(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * 64), ("dtype", ctypes.c_int32), ("rank", ctypes.c_int32),
                ("shape", ctypes.c_int64 * 8)]


class Context(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("backend", ctypes.c_int32), ("stream", ctypes.c_void_p),
                ("cpu_parallel_for", ctypes.c_void_p), ("cpu_pool", ctypes.c_void_p)]


def library_dir():
    """Where the package's shared libraries are: $EJK_LIBRARY_DIR, else ejk/lib."""
    given = os.environ.get("EJK_LIBRARY_DIR")
    return pathlib.Path(given).resolve() if given else pathlib.Path(__file__).resolve().parent / "lib"


def load(name):
    """One of the package's libraries, loaded privately (RTLD_LOCAL)."""
    path = library_dir() / name
    if not path.exists():
        raise ImportError(f"ejk: {path} is missing (EJK_LIBRARY_DIR={os.environ.get('EJK_LIBRARY_DIR')!r}); "
                          "install the package with pip, or point EJK_LIBRARY_DIR at a build's runtime/ directory")
    return ctypes.CDLL(str(path), mode=os.RTLD_LOCAL)


_lock = threading.Lock()
_libejk = None


def libejk():
    """libejk, loaded once, with the C functions the package calls typed."""
    global _libejk
    with _lock:
        if _libejk is None:
            lib = load(SONAME)
            lib.ejk_last_error.restype = ctypes.c_char_p
            lib.ejk_version.restype = ctypes.c_uint32
            lib.ejk_run.argtypes = [ctypes.c_char_p, ctypes.POINTER(Arg), ctypes.c_int32, ctypes.POINTER(Context)]
            lib.ejk_variant_key.argtypes = [ctypes.c_char_p, ctypes.POINTER(Arg), ctypes.c_int32,
                                            ctypes.POINTER(Context), ctypes.c_char_p, ctypes.c_int64]
            lib.ejk_op_count.restype = ctypes.c_int32
            lib.ejk_op_name.argtypes = [ctypes.c_int32]
            lib.ejk_op_name.restype = ctypes.c_char_p
            lib.ejk_describe_op.argtypes = [ctypes.c_char_p, ctypes.POINTER(OpInfo)]
            lib.ejk_output_specs.argtypes = [ctypes.c_char_p, ctypes.POINTER(Arg), ctypes.c_int32,
                                             ctypes.POINTER(Context), ctypes.POINTER(OutputSpec), ctypes.c_int32,
                                             ctypes.POINTER(ctypes.c_int32)]
            _libejk = lib
    return _libejk


def version():
    """libejk's version as "major.minor.patch"."""
    v = libejk().ejk_version()
    return f"{v >> 16}.{(v >> 8) & 0xFF}.{v & 0xFF}"


def raise_for(status, lib):
    """The exception of a C ABI status: ValueError for a bad argument, with libejk's message."""
    if status == OK:
        return
    message = lib.ejk_last_error().decode()
    if status == INVALID_ARGUMENT:
        raise ValueError(message)
    if status == COMPILE_ERROR:
        raise CompileError(message)
    if status == BACKEND_UNAVAILABLE:
        raise BackendUnavailable(message)
    raise RuntimeError(message)


def dtype_code(name, dtype):
    """ejk's code of a NumPy-like dtype or a dtype's name ("bfloat16"); ValueError naming the
    argument for one ejkernel lacks."""
    key = dtype if isinstance(dtype, str) else np.dtype(dtype).name
    code = DTYPES.get(key)
    if code is None:
        raise ValueError(f"{name}: dtype {key} is not one ejkernel takes (expected one of {', '.join(DTYPES)})")
    return code


class ArgList:
    """An ejk_arg array; keeps every buffer it points into alive as long as itself."""

    def __init__(self):
        self._args, self._keep = [], []

    def tensor(self, name, shape, dtype, data=None, device_kind=DEVICE_CPU, device_index=0):
        dims = (ctypes.c_int64 * max(1, len(shape)))(*shape)
        t = Tensor(data, dtype_code(name, dtype), device_kind, device_index, len(shape), dims, None)
        self._keep += [dims, t]
        self._args.append(Arg(name.encode(), ARG_TENSOR, ctypes.pointer(t), (ctypes.c_int64 * 2)(0, 0), 0.0))
        return self

    def scalar(self, name, kind, value):
        ints = tuple(value) if kind == ARG_INT_PAIR else (int(value) if kind != ARG_FLOAT else 0, 0)
        real = float(value) if kind == ARG_FLOAT else 0.0
        self._args.append(Arg(name.encode(), kind, None, (ctypes.c_int64 * 2)(*ints), real))
        return self

    def array(self):
        return (Arg * len(self._args))(*self._args), len(self._args)


DTYPE_NAMES = {code: name for name, code in DTYPES.items()}
MAX_OUTPUTS = 16


def op_names():
    """The ops libejk has, sorted."""
    lib = libejk()
    return [lib.ejk_op_name(i).decode() for i in range(lib.ejk_op_count())]


def describe_op(op):
    """op's arguments from its spec: (doc, [(name, role, optional, contiguous, type, layout, default, doc)])."""
    lib = libejk()
    info = OpInfo()
    raise_for(lib.ejk_describe_op(op.encode(), ctypes.byref(info)), lib)
    params = []
    for i in range(info.num_params):
        p = info.params[i]
        params.append((p.name.decode(), p.role, bool(p.optional), bool(p.contiguous), p.type.decode(),
                       p.layout.decode(), p.default_value.decode(), p.doc.decode()))
    return info.doc.decode(), params


def output_specs(op, args, backend=BACKEND_CPU):
    """[(name, shape, dtype name)] of the outputs a call's inputs and scalars imply, after libejk's
    checks of them (no data needed). Raises ValueError with libejk's message for a bad call."""
    lib = libejk()
    array, n = args.array()
    ctx = Context(ctypes.sizeof(Context), backend, None, None, None)
    specs = (OutputSpec * MAX_OUTPUTS)()
    count = ctypes.c_int32(0)
    raise_for(lib.ejk_output_specs(op.encode(), array, n, ctypes.byref(ctx), specs, MAX_OUTPUTS,
                                   ctypes.byref(count)), lib)
    return [(s.name.decode(), tuple(s.shape[:s.rank]), DTYPE_NAMES[s.dtype]) for s in specs[:count.value]]


def variant_key(op, args, backend=BACKEND_CPU):
    """The key of the variant a call would run, after every check a run makes (no data needed).

    Raises ValueError with libejk's message (naming the argument) for a bad call.
    """
    lib = libejk()
    array, n = args.array()
    ctx = Context(ctypes.sizeof(Context), backend, None, None, None)
    key = ctypes.create_string_buffer(MAX_KEY)
    raise_for(lib.ejk_variant_key(op.encode(), array, n, ctypes.byref(ctx), key, MAX_KEY), lib)
    return key.value.decode()
