"""Stand-in for the parts of ``cupyx.scipy.linalg`` hpcgpu uses: ``solve_triangular``, ``lu_factor``, ``lu_solve``.

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


def lu_solve(lu_and_piv, b, trans=0, overwrite_b=False, check_finite=True):
    """Solve ``op(a) x = b`` with :func:`lu_factor`'s factors (cuSOLVER's GETRS).

    Parameters
    ----------
    lu_and_piv : (cupy.ndarray, cupy.ndarray)
        ``lu`` (n, n) and the 0-based int32 pivots, as :func:`lu_factor` returned them.
    b : cupy.ndarray, shape (n,) or (n, k)
    trans : {0, 1, 2}
    overwrite_b, check_finite : bool

    Returns
    -------
    cupy.ndarray
        ``x``, Fortran order for 2-D ``b``.
    """
    lu, piv = lu_and_piv
    if lu.ndim != 2 or lu.shape[0] != lu.shape[1] or len(b) != len(lu):
        raise ValueError("incompatible dimensions")
    if trans not in (0, 1, 2):
        raise ValueError("unknown trans")
    if piv.dtype != numpy.int32:
        raise TypeError("lu_solve: piv must be int32, as lu_factor gives it")

    def getrs(f, p, fb):
        return numpy.asfortranarray(scipy.linalg.lu_solve((f, p), fb, trans=trans, check_finite=False))

    return launch(getrs, lu, piv, b)
