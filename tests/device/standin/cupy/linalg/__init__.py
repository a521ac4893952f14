"""Stand-in for the parts of ``cupy.linalg`` hpcgpu uses: ``cholesky``, ``qr``, ``svd`` (cuSOLVER's in CuPy).

Mirrored from CuPy's ``cupy/linalg/_decomposition.py`` and ``cupy/linalg/_util.py``: square and dtype checks,
``cholesky`` returning the lower factor, a failure reported through ``devInfo`` that raises only under
``cupyx.errstate(linalg="raise")`` (by default CuPy returns whatever cuSOLVER left: here NaN), ``qr``'s modes
``reduced``, ``complete``, ``r``, ``raw`` (NumPy's), ``svd``'s ``full_matrices`` and ``compute_uv``.
"""

from __future__ import annotations

import numpy

from cupy.linalg._kernels import launch, operands

LinAlgError = numpy.linalg.LinAlgError


def _check(a, what: str) -> None:
    operands(a)
    if a.ndim < 2:
        raise LinAlgError(f"{a.ndim}-dimensional array given. Array must be at least two-dimensional")
    if what == "square" and a.shape[-1] != a.shape[-2]:
        raise LinAlgError("Last 2 dimensions of the array must be square")
    if a.dtype.char not in "fdFD":
        raise TypeError(f"dtype {a.dtype} is not supported")


def cholesky(a):
    """Lower Cholesky factor ``L`` of ``a = L L^H`` (only ``a``'s lower triangle is read).

    Parameters
    ----------
    a : cupy.ndarray, shape (n, n)

    Returns
    -------
    cupy.ndarray

    Raises
    ------
    numpy.linalg.LinAlgError
        Not positive definite, under ``cupyx.errstate(linalg="raise")``.
    """
    import cupyx

    _check(a, "square")
    info = []

    def potrf(f):
        low = numpy.tril(f)
        try:
            return numpy.linalg.cholesky(low + numpy.tril(low, -1).conj().T)
        except numpy.linalg.LinAlgError:
            d = [numpy.linalg.eigvalsh(f[:i + 1, :i + 1], UPLO="L").min() for i in range(f.shape[0])]
            info.append(next(i + 1 for i, v in enumerate(d) if not v > 0))
            return numpy.full(f.shape, numpy.nan, f.dtype)

    out = launch(potrf, a)
    if info and cupyx.geterr()["linalg"] == "raise":
        raise LinAlgError(f"Error reported by potrf in cuSOLVER. devInfo = {info[0]}. Please refer to the "
                          "cuSOLVER documentation.")
    return out


def qr(a, mode="reduced"):
    """QR factorization, NumPy's modes.

    Parameters
    ----------
    a : cupy.ndarray, shape (m, n)
    mode : {'reduced', 'complete', 'r', 'raw'}

    Returns
    -------
    cupy.ndarray or tuple of cupy.ndarray
    """
    _check(a, "any")
    if mode not in ("reduced", "complete", "r", "raw"):
        raise ValueError(f"Unrecognized mode '{mode}'")
    return launch(lambda f: numpy.linalg.qr(f, mode=mode) if mode == "r" else tuple(numpy.linalg.qr(f, mode=mode)),
                  a)


def svd(a, full_matrices=True, compute_uv=True):
    """Singular value decomposition ``a = U diag(s) V^H``.

    Parameters
    ----------
    a : cupy.ndarray, shape (m, n)
    full_matrices, compute_uv : bool

    Returns
    -------
    cupy.ndarray or tuple of cupy.ndarray
    """
    _check(a, "any")
    if not compute_uv:
        return launch(lambda f: numpy.linalg.svd(f, compute_uv=False), a)
    return launch(lambda f: tuple(numpy.linalg.svd(f, full_matrices=full_matrices)), a)
