"""The local GEMM of SUMMA: ``c = a @ b + beta * c`` without a C-sized temporary.

NumPy's ``matmul`` has no ``beta``; ``c += a @ b`` would allocate and stream
a block as large as C for every panel. BLAS's gemm accumulates in place: on
the host through SciPy's BLAS wrappers (C-ordered arrays are passed as their
Fortran-ordered transposes, ``c.T = b.T @ a.T``), on the GPU through cuBLAS.
"""

from __future__ import annotations

import numpy as np

from . import _device

_SCIPY_GEMM: dict = {}


def _scipy_gemm(dtype):
    if dtype.char not in _SCIPY_GEMM:
        try:
            from scipy.linalg.blas import get_blas_funcs

            _SCIPY_GEMM[dtype.char] = get_blas_funcs("gemm", dtype=dtype)
        except ImportError:
            _SCIPY_GEMM[dtype.char] = None
    return _SCIPY_GEMM[dtype.char]


def gemm(a, b, c, beta: float = 1.0) -> None:
    """``c[...] = a @ b + beta * c`` for 2-D ``a`` (m, k), ``b`` (k, n), ``c`` (m, n).

    Not collective. ``c`` must be C-contiguous; ``beta`` is 0 or 1.
    """
    if _device.is_device_array(c):
        _device.gemm(a, b, c, beta)
        return
    if beta == 0 or c.size == 0:
        np.matmul(a, b, out=c)
        return
    if a.shape[1] == 0:
        return
    f = _scipy_gemm(c.dtype)
    if f is not None and c.flags.c_contiguous and a.flags.c_contiguous and b.flags.c_contiguous:
        r = f(1.0, b.T, a.T, beta=1.0, c=c.T, overwrite_c=True)
        if np.shares_memory(r, c):
            return
        c[...] = r.T  # the wrapper had to copy: still right, just slower
        return
    c += a @ b
