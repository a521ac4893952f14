"""Stand-in for nvmath-python's ``nvmath.bindings.cublas`` (nvmath-python 1.0): what hpcgpu calls.

The real module is a thin Cython binding of cuBLAS: every function takes and
returns plain integers (handles, pointers, enum values), calls the cuBLAS
function of the same name once and raises :class:`cuBLASError` for a status
other than success. It has no guard of its own: unlike CuPy's wrappers it
never sets a handle's stream, so a call made while a stream captures a CUDA
graph runs on the handle's stream, and is captured when that stream is the
capturing one.

What is modeled
---------------
- Handles (``create``, ``destroy``; a destroyed or unknown handle is
  ``CUBLAS_STATUS_NOT_INITIALIZED``) on the current device, each with its
  stream (the legacy default stream until ``set_stream``), its math mode and
  its workspace. ``set_stream`` resets the workspace to cuBLAS's own pool, as
  ``cublasSetStream`` does; ``set_workspace`` takes a range inside one live
  device allocation (or ``0, 0``).
- ``gemm_ex``: ``cublasGemmEx`` on stand-in memory (column-major), with the
  type combinations cuBLAS lists for it, ``alpha`` and ``beta`` read from
  their host addresses during the call (host pointer mode: a capture keeps
  their values), TF32 rounding of the inputs for
  ``CUBLAS_COMPUTE_32F_FAST_TF32`` (or ``CUBLAS_COMPUTE_32F`` under
  ``CUBLAS_TF32_TENSOR_OP_MATH``), run as a kernel on the handle's stream:
  captured and replayed by the stand-in's graphs like any kernel. The
  operands and the workspace are held by the captured call as arrays are, so
  a replay after one of them was freed is an illegal address. Each call is
  logged (``cupy._standin.gemm_log``, ``api`` ``"nvmath.gemm_ex"``, with the
  handle, its stream and its workspace).
- A stand-in check that a GPU would not make: a ``gemm_ex`` while the
  current stream captures, on a handle whose stream is not capturing, raises
  (on a GPU it would run at once, outside the graph, and every replay would
  miss it).
- With ``HPCGPU_STANDIN_FAIL=nvmath`` the package does not import (see
  ``nvmath/__init__.py``); with ``cublas``, ``create`` fails as the library
  cannot be loaded.

Not modeled: the other routines, device pointer mode, the 64-bit (``_64``)
variants, cuBLAS's algorithms and its use of the workspace.
"""

from __future__ import annotations

import ctypes
import itertools
from enum import IntEnum

import numpy


class Status(IntEnum):
    """See ``cublasStatus_t``."""

    SUCCESS = 0
    NOT_INITIALIZED = 1
    ALLOC_FAILED = 3
    INVALID_VALUE = 7
    ARCH_MISMATCH = 8
    MAPPING_ERROR = 11
    EXECUTION_FAILED = 13
    INTERNAL_ERROR = 14
    NOT_SUPPORTED = 15
    LICENSE_ERROR = 16


class Operation(IntEnum):
    """See ``cublasOperation_t``."""

    N = 0
    T = 1
    C = 2
    HERMITAN = 2
    CONJG = 3


class PointerMode(IntEnum):
    """See ``cublasPointerMode_t``."""

    HOST = 0
    DEVICE = 1


class GemmAlgo(IntEnum):
    """See ``cublasGemmAlgo_t`` (the default algorithms only)."""

    DFALT = -1
    DEFAULT = -1
    DEFAULT_TENSOR_OP = 99
    DFALT_TENSOR_OP = 99


class Math(IntEnum):
    """See ``cublasMath_t``."""

    DEFAULT_MATH = 0
    TENSOR_OP_MATH = 1
    PEDANTIC_MATH = 2
    TF32_TENSOR_OP_MATH = 3
    DISALLOW_REDUCED_PRECISION_REDUCTION = 16


class ComputeType(IntEnum):
    """See ``cublasComputeType_t``."""

    COMPUTE_16F = 64
    COMPUTE_16F_PEDANTIC = 65
    COMPUTE_32F = 68
    COMPUTE_32F_PEDANTIC = 69
    COMPUTE_32F_FAST_16F = 74
    COMPUTE_32F_FAST_16BF = 75
    COMPUTE_32F_FAST_TF32 = 77
    COMPUTE_64F = 70
    COMPUTE_64F_PEDANTIC = 71
    COMPUTE_32I = 72
    COMPUTE_32I_PEDANTIC = 73


COMPUTE_NAMES = {64: "CUBLAS_COMPUTE_16F", 68: "CUBLAS_COMPUTE_32F", 77: "CUBLAS_COMPUTE_32F_FAST_TF32",
                 70: "CUBLAS_COMPUTE_64F"}
MATH_NAMES = {0: "CUBLAS_DEFAULT_MATH", 1: "CUBLAS_TENSOR_OP_MATH", 2: "CUBLAS_PEDANTIC_MATH",
              3: "CUBLAS_TF32_TENSOR_OP_MATH"}

# cublasGetStatusString's words for each status.
_STATUS_STRINGS = {
    1: "the library was not initialized",
    3: "the resource allocation failed",
    7: "an invalid value was used as an argument",
    8: "the architecture is not supported",
    11: "an access to GPU memory space failed",
    13: "the GPU program failed to execute",
    14: "an internal operation failed",
    15: "the functionality requested is not supported",
    16: "the functionality requested requires some license",
}


class cuBLASError(Exception):  # noqa: N801 (nvmath-python's name)
    """A cuBLAS status other than success: ``"<cublasGetStatusString> (<cublasGetStatusName>)"``.

    Parameters
    ----------
    status : int
    """

    def __init__(self, status):
        self.status = status
        super().__init__(f"{_STATUS_STRINGS.get(int(status), 'unknown error')} (CUBLAS_STATUS_{Status(status).name})")

    def __reduce__(self):
        return (type(self), (self.status,))


def check_status(status: int) -> None:
    """Raise :class:`cuBLASError` for a status other than success.

    Parameters
    ----------
    status : int
    """
    if status != 0:
        raise cuBLASError(status)


class _Handle:
    """What cuBLAS keeps in a handle: device, stream, workspace, math mode."""

    __slots__ = ("device", "stream", "workspace", "math")

    def __init__(self, device: int):
        self.device = device
        self.stream = 0  # the legacy default stream until cublasSetStream
        self.workspace = None  # (pointer, bytes); None: cuBLAS's own pool
        self.math = int(Math.DEFAULT_MATH)


_handles: dict[int, _Handle] = {}
_ids = itertools.count(1)


def _handle(handle: int) -> _Handle:
    h = _handles.get(int(handle))
    if h is None:
        raise cuBLASError(Status.NOT_INITIALIZED)
    return h


def create() -> int:
    """``cublasCreate``: a new handle on the current device (its context is created).

    Returns
    -------
    int
        The ``cublasHandle_t``.

    Raises
    ------
    ImportError
        ``HPCGPU_STANDIN_FAIL=cublas``: the library cannot be loaded.
    """
    from cupy import _standin

    _standin.check_cublas()
    dev = _standin.ensure_context()
    handle = 0x6B000000 + 0x10 * next(_ids)
    _handles[handle] = _Handle(dev)
    return handle


def destroy(handle: int) -> None:
    """``cublasDestroy``.

    Parameters
    ----------
    handle : int
    """
    _handle(handle)
    del _handles[int(handle)]


def set_stream(handle: int, stream_id: int) -> None:
    """``cublasSetStream``: the stream of the handle's later calls; the workspace goes back to cuBLAS's pool.

    Parameters
    ----------
    handle : int
    stream_id : int
        The stream's pointer (``Stream.ptr``; 0 for the legacy default stream).
    """
    h = _handle(handle)
    h.stream = int(stream_id)
    h.workspace = None


def get_stream(handle: int) -> int:
    """``cublasGetStream``.

    Parameters
    ----------
    handle : int

    Returns
    -------
    int
        The pointer of the handle's stream.
    """
    return _handle(handle).stream


def set_workspace(handle: int, workspace: int, workspace_size_in_bytes: int) -> None:
    """``cublasSetWorkspace``: the device memory cuBLAS uses as workspace for the handle's calls.

    Parameters
    ----------
    handle : int
    workspace : int
        Device address; 0 (with size 0) for no workspace.
    workspace_size_in_bytes : int

    Raises
    ------
    cuBLASError
        ``CUBLAS_STATUS_INVALID_VALUE``: the range is not inside one live
        device allocation (the stand-in's check: cuBLAS would use it as given).
    """
    from cupy import _standin

    h = _handle(handle)
    ptr, size = int(workspace), int(workspace_size_in_bytes)
    if size < 0 or (ptr == 0) != (size == 0):
        raise cuBLASError(Status.INVALID_VALUE)
    if ptr:
        try:
            al, off = _standin.find_pointer(ptr)
        except _standin.CUDARuntimeError:
            raise cuBLASError(Status.INVALID_VALUE) from None
        if off + size > al.nbytes:
            raise cuBLASError(Status.INVALID_VALUE)
    h.workspace = (ptr, size) if ptr else None


def workspace_of(handle: int):
    """The stand-in's record of the handle's workspace (not in nvmath-python).

    Parameters
    ----------
    handle : int

    Returns
    -------
    (int, int) or None
        ``(pointer, bytes)`` set since the last ``set_stream``, or None.
    """
    return _handle(handle).workspace


def set_math_mode(handle: int, mode: int) -> None:
    """``cublasSetMathMode``.

    Parameters
    ----------
    handle : int
    mode : int
        A :class:`Math` value, optionally ``| DISALLOW_REDUCED_PRECISION_REDUCTION``.
    """
    h = _handle(handle)
    if int(mode) & ~int(Math.DISALLOW_REDUCED_PRECISION_REDUCTION) not in MATH_NAMES:
        raise cuBLASError(Status.INVALID_VALUE)
    h.math = int(mode)


def get_math_mode(handle: int) -> int:
    """``cublasGetMathMode``.

    Parameters
    ----------
    handle : int

    Returns
    -------
    int
    """
    return _handle(handle).math


# cublasGemmEx (cuBLAS documentation, "cublasGemmEx"): compute type -> the (A/B type, C type) it takes.
_GEMM_EX = {68: {(0, 0), (2, 2), (2, 0), (14, 14), (14, 0)},  # CUBLAS_COMPUTE_32F
            77: {(0, 0)},  # CUBLAS_COMPUTE_32F_FAST_TF32
            70: {(1, 1)}}  # CUBLAS_COMPUTE_64F
_OP_NAMES = {0: "N", 1: "T", 2: "C"}


def gemm_ex(handle, transa, transb, m, n, k, alpha, a, atype, lda, b, btype, ldb, beta, c, ctype, ldc,
            compute_type, algo) -> None:
    """``cublasGemmEx``: ``C = alpha * op(A) @ op(B) + beta * C``, column-major, on the handle's stream.

    Parameters
    ----------
    handle : int
    transa, transb : int
        :class:`Operation` values.
    m, n, k : int
    alpha, beta : int
        Host addresses of scalars of the compute type's precision (host
        pointer mode), read during the call.
    a, b, c : int
        Device addresses.
    atype, btype, ctype : int
        ``cudaDataType_t``: 0 float32, 1 float64, 2 float16, 14 bfloat16.
    lda, ldb, ldc : int
    compute_type : int
        A :class:`ComputeType` value.
    algo : int
        A :class:`GemmAlgo` value.

    Raises
    ------
    cuBLASError
        ``CUBLAS_STATUS_NOT_SUPPORTED`` for a type combination cuBLAS does
        not list for ``cublasGemmEx``; ``CUBLAS_STATUS_INVALID_VALUE`` for bad
        sizes or operations; ``CUBLAS_STATUS_NOT_INITIALIZED`` for an unknown
        handle.
    RuntimeError
        The current stream captures a graph and the handle's stream does not
        (the stand-in's check).
    """
    from cupy import _standin
    from cupy.cublas import _cuda_dtype, _pointer_matrix
    from cupy.cuda import stream as _stream

    h = _handle(handle)
    transa, transb, m, n, k, lda, ldb, ldc = map(int, (transa, transb, m, n, k, lda, ldb, ldc))
    atype, btype, ctype, compute, algo = map(int, (atype, btype, ctype, compute_type, algo))
    stream = _stream.stream_of_ptr(h.stream)
    if _standin.capture_of(_stream.get_current_stream()) is not None and _standin.capture_of(stream) is None:
        raise RuntimeError(
            "nvmath stand-in: cublasGemmEx while the current stream captures a CUDA graph, on a handle whose "
            f"stream ({h.stream:#x}) does not capture: on a GPU it runs now, outside the graph, and no replay "
            "repeats it (set the handle's stream to the capturing one before the capture)")
    if compute not in _GEMM_EX or atype != btype or (atype, ctype) not in _GEMM_EX[compute]:
        raise cuBLASError(Status.NOT_SUPPORTED)
    if (transa not in _OP_NAMES or transb not in _OP_NAMES or min(m, n, k) < 0
            or lda < max(1, m if transa == Operation.N else k)
            or ldb < max(1, k if transb == Operation.N else n) or ldc < max(1, m)):
        raise cuBLASError(Status.INVALID_VALUE)
    scalar = ctypes.c_double if compute == ComputeType.COMPUTE_64F else ctypes.c_float
    al, be = scalar.from_address(alpha).value, scalar.from_address(beta).value  # host pointer mode: read now
    at, ct = _cuda_dtype(atype), _cuda_dtype(ctype)
    da = db = dc = ws = None
    if m and n:
        if k:
            da = _pointer_matrix(a, at, *((m, k) if transa == Operation.N else (k, m)), lda)[0]
            db = _pointer_matrix(b, at, *((k, n) if transb == Operation.N else (n, k)), ldb)[0]
        dc = _pointer_matrix(c, ct, m, n, ldc)[0]
    if h.workspace is not None:
        ws = _pointer_matrix(h.workspace[0], numpy.dtype(numpy.uint8), h.workspace[1], 1, h.workspace[1])[0]
    tf32 = compute == ComputeType.COMPUTE_32F_FAST_TF32 or (
        compute == ComputeType.COMPUTE_32F and atype == 0 and h.math & 0xF == Math.TF32_TENSOR_OP_MATH)
    entry = {
        "api": "nvmath.gemm_ex", "dtype": at.name, "c_dtype": ct.name, "m": n, "n": m, "k": k,
        "compute_type": COMPUTE_NAMES[compute], "algo": algo, "math_mode": MATH_NAMES[h.math & 0xF],
        "tf32": tf32, "alpha": al, "beta": be, "handle": int(handle), "stream": h.stream,
        "workspace": h.workspace[1] if h.workspace else 0,
        "call": ("cublasGemmEx", _OP_NAMES[transa], _OP_NAMES[transb], m, n, k, lda, ldb, ldc),
    }
    _standin.replayable(stream_of=lambda *args: stream)(_gemm_kernel)(
        stream, entry, transa, transb, k, al, da, db, be, dc, compute, tf32, ws)


def _gemm_kernel(stream, entry, transa, transb, k, al, da, db, be, dc, compute, tf32, ws) -> None:
    """The kernel of ``cublasGemmEx`` on ``stream``: operands as arrays, so that a capture holds them."""
    from cupy import _core, _standin

    _standin.log_gemm(dict(entry))
    if dc is None:
        return  # m or n is 0: quick return, nothing referenced
    # The workspace is held by the call's arguments (a replay after it was freed is an illegal address) but is
    # not data: refreshing its bytes from what MPI may have written would copy megabytes every call.
    _core._begin([da, db, dc], compile=False)
    acc = numpy.float64 if compute == ComputeType.COMPUTE_64F else numpy.float32
    c_cm = dc._f
    m, n = c_cm.shape
    if k == 0 or al == 0:
        prod = numpy.zeros((m, n), acc)
    else:
        op = {0: lambda x: x, 1: lambda x: x.T, 2: lambda x: x.T}
        a_op = numpy.ascontiguousarray(op[transa](da._f).astype(acc))
        b_op = numpy.ascontiguousarray(op[transb](db._f).astype(acc))
        if tf32:
            a_op, b_op = _core._tf32(a_op), _core._tf32(b_op)
        prod = acc(al) * (a_op @ b_op)
    if be != 0:
        prod = prod + acc(be) * c_cm.astype(acc)  # beta == 0: C is not read (may hold NaN)
    c_cm[...] = prod.astype(c_cm.dtype)
    _core._end([dc], stream=stream)
