"""The local GEMM of SUMMA: ``c = a @ b + beta * c`` without a C-sized temporary.

NumPy's ``matmul`` has no ``beta``; ``c += a @ b`` would allocate and stream
a block as large as C for every panel. BLAS's gemm accumulates in place: on
the host through the CBLAS GEMM of NumPy's own BLAS library (``hpcgpu._blas``:
one thread pool per rank; SciPy's BLAS wrappers only where that library
cannot be bound), on the GPU through cuBLAS.

Half precision (float16, and bfloat16 from ``ml_dtypes``) always accumulates
in float32, as cuBLAS's ``cublasGemmEx`` with ``CUBLAS_COMPUTE_32F`` does:
``c`` may be float32 (SUMMA's accumulator over panels) or the inputs' dtype.
The host BLAS has no half-precision GEMM: there the inputs are widened to
float32 (exact) and the product is rounded once.
"""

from __future__ import annotations

import numpy as np

from . import _blas, _device

_SCIPY_GEMM: dict = {}


def _scipy_gemm(dtype):
    if dtype.char not in _SCIPY_GEMM:
        try:
            from scipy.linalg.blas import get_blas_funcs

            _SCIPY_GEMM[dtype.char] = get_blas_funcs("gemm", dtype=dtype)
        except ImportError:
            _SCIPY_GEMM[dtype.char] = None
    return _SCIPY_GEMM[dtype.char]


MATH_MODES = ("default", "tf32", "full")
"""The local GEMM's arithmetic on a GPU (cuBLAS's math mode): follow CuPy's, TF32, or IEEE."""


def bfloat16_dtype() -> np.dtype | None:
    """``ml_dtypes.bfloat16`` as a NumPy dtype, or ``None`` when ml_dtypes is missing. Not collective."""
    try:
        import ml_dtypes
    except ImportError:
        return None
    return np.dtype(ml_dtypes.bfloat16)


HALF_NAMES = ("float16", "bfloat16")
"""The 16-bit floating types, by name (bfloat16 is ``ml_dtypes``', imported only where one is made): multiplied
with float32 accumulation."""


def half_dtypes() -> tuple:
    """The 16-bit floating dtypes this process can make: float16, and bfloat16 where ml_dtypes is installed."""
    return tuple(t for t in (np.dtype("float16"), bfloat16_dtype()) if t is not None)


def as_dtype(dtype) -> np.dtype:
    """``numpy.dtype(dtype)``, where ``"bfloat16"`` is ml_dtypes' (imported here). Not collective.

    NumPy knows the name only once ml_dtypes is imported, which hpcgpu does
    only where a bfloat16 array is made.

    Parameters
    ----------
    dtype : str or numpy.dtype-like

    Returns
    -------
    numpy.dtype

    Raises
    ------
    TypeError
        ``"bfloat16"`` without ml_dtypes installed, or a name NumPy does not know.
    """
    if isinstance(dtype, str) and dtype == "bfloat16":
        bf16 = bfloat16_dtype()
        if bf16 is None:
            raise TypeError("bfloat16 needs the ml_dtypes package (pip install ml_dtypes)")
        return bf16
    return np.dtype(dtype)


def is_half(dtype) -> bool:
    """Whether ``dtype`` is one of the 16-bit floating types (:data:`HALF_NAMES`). Not collective."""
    return np.dtype(dtype).name in HALF_NAMES


def accumulator_dtype(dtype) -> np.dtype:
    """The dtype a GEMM of ``dtype`` inputs accumulates in: float32 for :data:`HALF_NAMES`, else ``dtype``."""
    dtype = np.dtype(dtype)
    return np.dtype("float32") if is_half(dtype) else dtype


def gemm(a, b, c, *, alpha=1.0, beta=0.0, math_mode: str = "default") -> None:
    """``c[...] = alpha * a @ b + beta * c`` in place, on the host or the device.

    Not collective. BLAS semantics on both: ``beta = 0`` ignores what ``c``
    held (NaN included), ``beta = 1`` accumulates without a temporary.

    Parameters
    ----------
    a : xp.ndarray, shape (m, k)
    b : xp.ndarray, shape (k, n)
    c : xp.ndarray, shape (m, n)
        C-contiguous, on the same device as ``a`` and ``b``. Same dtype as
        them (float32, float64, complex64, complex128, float16, bfloat16),
        or float32 when they are float16 or bfloat16 (accumulate a sum of
        half-precision products in single precision).
    alpha, beta : scalar, keyword-only
    math_mode : {"default", "tf32", "full"}, keyword-only
        On the device: ``"default"`` follows CuPy's TF32 mode as
        ``cupy.matmul`` does (TF32 tensor cores for float32 and complex64
        under ``CUPY_TF32=1``), ``"tf32"`` asks for them, ``"full"`` forbids
        them. The host BLAS has no TF32: every choice is full precision there.
        Half-precision inputs are multiplied in float32 (``CUBLAS_COMPUTE_32F``)
        under every choice.

    Notes
    -----
    Empty blocks (``m``, ``n`` or ``k`` of 0) are handled here, before BLAS
    or cuBLAS sees them: cuBLAS rejects a leading dimension of 0.
    """
    if c.size == 0:
        return
    if a.shape[1] == 0:  # alpha * (empty sum) = 0
        if beta == 0:
            c.fill(0)
        elif beta != 1:
            c *= beta
        return
    if _device.is_device_array(c):
        _device.gemm(a, b, c, alpha, beta, math_mode)
        return
    if is_half(a.dtype):
        _host_half(a, b, c, alpha, beta)
        return
    if beta == 0 and alpha == 1:
        np.matmul(a, b, out=c)
        return
    if _blas.gemm(a, b, c, alpha, beta):  # NumPy's own BLAS: one thread pool per rank (hpcgpu/_blas.py)
        return
    f = _scipy_gemm(c.dtype)
    if f is not None and c.flags.c_contiguous and a.flags.c_contiguous and b.flags.c_contiguous:
        r = f(alpha, b.T, a.T, beta=beta, c=c.T, overwrite_c=True)
        if np.shares_memory(r, c):
            return
        c[...] = r.T  # the wrapper had to copy: still right, just slower
        return
    _host_fallback(a, b, c, alpha, beta)


def _host_half(a, b, c, alpha, beta) -> None:
    """No half-precision host BLAS: widen (exact), multiply and add in float32, round once."""
    a, b = a.astype(np.float32), b.astype(np.float32)
    if c.dtype == np.float32:
        gemm(a, b, c, alpha=alpha, beta=beta)
        return
    c32 = c.astype(np.float32) if beta != 0 else np.empty(c.shape, np.float32)
    gemm(a, b, c32, alpha=alpha, beta=beta)
    c[...] = c32


def _host_fallback(a, b, c, alpha, beta) -> None:
    """Without SciPy's BLAS (or for non-contiguous operands): a temporary product."""
    t = a @ b
    if alpha != 1:
        t *= alpha
    if beta == 0:
        c[...] = t
        return
    if beta != 1:
        c *= beta
    c += t
