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
CUBLAS_TF32_TENSOR_OP_MATH = 3
CUBLAS_STATUS_INVALID_VALUE = 7

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


_MATH_MODES: dict = {}  # handle -> math mode (cublasSetMathMode); CUBLAS_DEFAULT_MATH until set
MATH_NAMES = {0: "CUBLAS_DEFAULT_MATH", 1: "CUBLAS_TENSOR_OP_MATH", 3: "CUBLAS_TF32_TENSOR_OP_MATH"}


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
