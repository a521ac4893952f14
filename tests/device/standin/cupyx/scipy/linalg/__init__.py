"""Stand-in for the parts of ``cupyx.scipy.linalg`` hpcgpu uses: ``solve_triangular`` and ``lu_factor``.

Mirrored from CuPy's ``cupyx/scipy/linalg/_solve_triangular.py`` and ``_decomp_lu.py``: device arrays only, the
results in Fortran order (CuPy copies into a Fortran array for cuBLAS's TRSM and cuSOLVER's GETRF), ``trans`` as
0/1/2 or 'N'/'T'/'C', ``lu_factor``'s pivots 0-based int32, a singular ``U`` a warning, not an error.
"""

from __future__ import annotations

import numpy
import scipy.linalg

from cupy.linalg._kernels import launch


def solve_triangular(a, b, trans=0, lower=False, unit_diagonal=False, overwrite_b=False, check_finite=False):
    """Solve ``op(a) x = b`` for triangular ``a``.

    Parameters
    ----------
    a : cupy.ndarray, shape (n, n)
    b : cupy.ndarray, shape (n,) or (n, k)
    trans : {0, 1, 2, 'N', 'T', 'C'}
    lower, unit_diagonal, overwrite_b, check_finite : bool

    Returns
    -------
    cupy.ndarray
        ``x``, Fortran order for 2-D ``b``.
    """
    if trans not in (0, 1, 2, "N", "T", "C"):
        raise ValueError("unknown trans")
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError("expected square matrix")
    if len(a) != len(b):
        raise ValueError("incompatible dimensions")
    t = {0: 0, 1: 1, 2: 2, "N": 0, "T": 1, "C": 2}[trans]

    def trsm(fa, fb):
        if not unit_diagonal and not numpy.all(numpy.diagonal(fa) != 0):
            return numpy.full(fb.shape, numpy.nan, fb.dtype, order="F")  # cuBLAS goes on through a zero: not finite
        return numpy.asfortranarray(scipy.linalg.solve_triangular(fa, fb, trans=t, lower=lower,
                                                                  unit_diagonal=unit_diagonal, check_finite=False))

    return launch(trsm, a, b)


def lu_factor(a, overwrite_a=False, check_finite=True):
    """LU factorization with partial pivoting, SciPy's layout.

    Parameters
    ----------
    a : cupy.ndarray, shape (m, n)
    overwrite_a, check_finite : bool

    Returns
    -------
    (cupy.ndarray, cupy.ndarray)
        ``lu`` (Fortran order) and the 0-based pivots (int32).
    """
    if a.ndim != 2:
        raise ValueError("expected matrix")

    def getrf(f):
        lu, piv = scipy.linalg.lu_factor(f, check_finite=False)  # warns of an exactly zero pivot, as CuPy does
        return numpy.asfortranarray(lu), piv.astype(numpy.int32)

    return launch(getrf, a)
