"""Stand-in for ``cupy.cuda.cublas`` (``cupy_backends.cuda.libs.cublas``).

With ``HPCGPU_STANDIN_FAIL=cublas`` importing it fails, as the real module
(linked against ``libcublas.so.12``) does when the library is missing.
"""

from __future__ import annotations

from cupy import _standin

_standin.check_cublas()

CUBLAS_OP_N = 0
CUBLAS_OP_T = 1
CUBLAS_OP_C = 2
CUBLAS_POINTER_MODE_HOST = 0
CUBLAS_POINTER_MODE_DEVICE = 1
CUBLAS_DEFAULT_MATH = 0
CUBLAS_TENSOR_OP_MATH = 1
# CuPy 14's cupy_backends.cuda.libs.cublas names no CUBLAS_TF32_TENSOR_OP_MATH (3 in cublas_api.h): nor does
# the stand-in, so code that reads it fails here as it did on an H200
_TF32_TENSOR_OP_MATH = 3
CUBLAS_STATUS_INVALID_VALUE = 7
CUBLAS_STATUS_NOT_SUPPORTED = 15
CUBLAS_COMPUTE_16F = 64
CUBLAS_COMPUTE_32F = 68
CUBLAS_COMPUTE_32F_FAST_TF32 = 77
CUBLAS_COMPUTE_64F = 70
CUBLAS_GEMM_DEFAULT = -1
CUBLAS_GEMM_DEFAULT_TENSOR_OP = 99
COMPUTE_NAMES = {64: "CUBLAS_COMPUTE_16F", 68: "CUBLAS_COMPUTE_32F", 77: "CUBLAS_COMPUTE_32F_FAST_TF32",
                 70: "CUBLAS_COMPUTE_64F"}

STATUS = {
    0: "CUBLAS_STATUS_SUCCESS",
    1: "CUBLAS_STATUS_NOT_INITIALIZED",
    3: "CUBLAS_STATUS_ALLOC_FAILED",
    7: "CUBLAS_STATUS_INVALID_VALUE",
    8: "CUBLAS_STATUS_ARCH_MISMATCH",
    11: "CUBLAS_STATUS_MAPPING_ERROR",
    13: "CUBLAS_STATUS_EXECUTION_FAILED",
    14: "CUBLAS_STATUS_INTERNAL_ERROR",
    15: "CUBLAS_STATUS_NOT_SUPPORTED",
    16: "CUBLAS_STATUS_LICENSE_ERROR",
}


class CUBLASError(RuntimeError):
    """A cuBLAS status other than success; the message is the status name.

    Parameters
    ----------
    status : int
    """

    def __init__(self, status: int):
        self.status = status
        super().__init__(STATUS[status])

    def __reduce__(self):
        return (type(self), (self.status,))


def check_status(status: int) -> None:
    """Raise :class:`CUBLASError` for a non-zero status.

    Parameters
    ----------
    status : int
    """
    if status != 0:
        raise CUBLASError(status)


_STREAMS: dict = {}  # handle -> stream pointer (cublasSetStream); the legacy null stream (0) until set


def setStream(handle: int, stream: int) -> None:  # noqa: N802
    """``cublasSetStream``: the stream of every later call on ``handle``, as CuPy wraps it.

    Parameters
    ----------
    handle : int
    stream : int
        The stream's pointer (``Stream.ptr``).

    Raises
    ------
    NotImplementedError
        ``stream`` is capturing a CUDA graph: CuPy refuses cuBLAS then.
    """
    from cupy.cuda.stream import stream_of_ptr

    if _standin.capture_of(stream_of_ptr(stream)) is not None:
        raise NotImplementedError("calling cuBLAS API during stream capture is currently unsupported")
    _STREAMS[int(handle)] = int(stream)


def getStream(handle: int) -> int:  # noqa: N802
    """``cublasGetStream``: the pointer of the handle's stream.

    Parameters
    ----------
    handle : int

    Returns
    -------
    int
    """
    return _STREAMS.get(int(handle), 0)


def handle_stream(handle: int):
    """The stand-in stream a call on ``handle`` runs on."""
    from cupy.cuda.stream import stream_of_ptr

    return stream_of_ptr(getStream(handle))


_MATH_MODES: dict = {}  # handle -> math mode (cublasSetMathMode); CUBLAS_DEFAULT_MATH until set
MATH_NAMES = {0: "CUBLAS_DEFAULT_MATH", 1: "CUBLAS_TENSOR_OP_MATH", _TF32_TENSOR_OP_MATH: "CUBLAS_TF32_TENSOR_OP_MATH"}


def setMathMode(handle: int, mode: int) -> None:  # noqa: N802 (cuBLAS's name, as CuPy spells it)
    """``cublasSetMathMode``: the math mode of every later call on ``handle``.

    Parameters
    ----------
    handle : int
    mode : int
        ``CUBLAS_DEFAULT_MATH``, ``CUBLAS_TENSOR_OP_MATH`` or ``CUBLAS_TF32_TENSOR_OP_MATH``.
    """
    if mode not in MATH_NAMES:
        raise CUBLASError(CUBLAS_STATUS_INVALID_VALUE)
    _MATH_MODES[int(handle)] = int(mode)


def getMathMode(handle: int) -> int:  # noqa: N802
    """``cublasGetMathMode``.

    Parameters
    ----------
    handle : int

    Returns
    -------
    int
    """
    return _MATH_MODES.get(int(handle), CUBLAS_DEFAULT_MATH)


def gemmEx(handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb,  # noqa: N802,N803
           beta, C, Ctype, ldc, computeType, algo) -> None:  # noqa: N803
    """``cublasGemmEx`` on raw device pointers (column-major), as CuPy exposes it.

    Parameters
    ----------
    handle : int
    transa, transb : int
        ``CUBLAS_OP_N`` / ``_T`` / ``_C``.
    m, n, k : int
    alpha, beta : int
        Host addresses of scalars of the compute type's precision.
    A, B, C : int
        Device addresses (``ndarray.data.ptr``).
    Atype, Btype, Ctype : int
        ``cudaDataType_t``: 0 float32, 2 float16, 14 bfloat16.
    lda, ldb, ldc : int
    computeType : int
    algo : int

    Raises
    ------
    CUBLASError
        ``CUBLAS_STATUS_NOT_SUPPORTED`` for a type combination cuBLAS does not
        list for ``cublasGemmEx``; ``CUBLAS_STATUS_INVALID_VALUE`` for bad sizes.
    """
    from cupy.cublas import _gemm_ex
    from cupy.cuda.stream import get_current_stream

    setStream(handle, get_current_stream().ptr)  # as every CuPy cuBLAS wrapper: refused under a capture
    _gemm_ex(handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype, ldc,
             computeType, algo)

