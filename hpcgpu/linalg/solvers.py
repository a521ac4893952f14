"""``solve``: A X = B for a distributed square A, by LU with partial pivoting or by Cholesky (PDGESV, PDPOSV).

SciPy's ``scipy.linalg.solve`` for :class:`~hpcgpu.DistMatrix`: ``assume_a="gen"`` factors A by
:func:`~hpcgpu.linalg.lu_factor` (``2 n^3 / 3`` flops) and solves with its factors; ``assume_a="pos"`` (A
Hermitian positive definite) by :func:`~hpcgpu.linalg.cho_factor` and ``cho_solve`` (``n^3 / 3`` flops, no
pivots). Both work on the 2-D block-cyclic layout and return X on A's grid in B's shape.

The module is not called ``solve``: importing a submodule sets the package's attribute of its name, which would
hide the function ``hpcgpu.linalg.solve``.
"""

from __future__ import annotations

from ..errors import agree
from . import _checks
from .distmatrix import CyclicMatrix
from .lu import _nb, _refuse_alone, factor, factor_bytes, solve_bytes, solve_factored

__all__ = ["solve", "pdposv"]

SERVED = ("gen", "pos")
"""The ``assume_a`` values served: LU with partial pivoting, Cholesky."""


def solve(a, b, assume_a: str = "gen", *, nb: int | None = None):
    """Solve ``A X = B`` for a distributed square ``A`` (PDGESV; PDPOSV with ``assume_a="pos"``).

    Collective: every rank of ``a.grid`` calls it with its blocks.

    Parameters
    ----------
    a : DistMatrix or CyclicMatrix
        ``(n, n)``, float32, float64, complex64 or complex128, host or device; finite. Not modified. A
        :class:`~hpcgpu.linalg.CyclicMatrix` is factored in its own layout (its grid and ``nb``):
        only ``B`` and ``X`` move.
    b : DistMatrix
        ``(n, nrhs)`` (``(n, 1)`` for one vector) on ``a``'s grid, ``a``'s dtype; finite. Not modified.
    assume_a : {"gen", "pos"}
        SciPy's names: ``"gen"`` a general matrix (LU with partial pivoting, :func:`~hpcgpu.linalg.lu_factor`),
        ``"pos"`` Hermitian positive definite (Cholesky, :func:`~hpcgpu.linalg.cho_factor`, which
        reads the triangle it documents).
    nb : int, optional, keyword-only
        Block size of the factorization's block-cyclic layout (default ``hpcgpu.linalg.cyclic.default_nb``:
        about 10 panels a grid row or column, 64-256 on a host, 256-512 on a GPU).

    Returns
    -------
    DistMatrix
        ``X``, ``(n, nrhs)`` on ``a``'s grid, ``b``'s dtype and side.

    Raises
    ------
    TypeError
        ``a`` or ``b`` is no DistMatrix or of a dtype the solvers do not take, or their dtypes differ; ``nb`` is
        not an int.
    ValueError
        ``assume_a`` is neither ``"gen"`` nor ``"pos"``; ``a`` is not square; ``b`` is on another grid or has
        other than ``n`` rows; ``nb < 1`` (for a CyclicMatrix ``a``, not its own); the ranks' arguments differ;
        A or B holds NaN or inf.
    MemoryError
        The factorization's copies do not fit.
    numpy.linalg.LinAlgError
        ``"gen"``: A is exactly singular (the column of ``U``'s first zero diagonal element named); ``"pos"``:
        A is not positive definite (``assume_a="pos"``), naming ``solve``.

    All on every rank (:class:`~hpcgpu.errors.AgreedError`); the argument checks before any other
    communication.

    Notes
    -----
    ``"gen"``: ``2 n^3 / 3 + 2 n^2 nrhs`` flops, divided over the ranks; the words moved are
    :func:`~hpcgpu.linalg.lu_factor`'s and :func:`~hpcgpu.linalg.lu_solve`'s. The backward error is LAPACK's:
    HPL's scaled residual ``||A x - b||_inf / (eps (||A||_inf ||x||_inf + ||b||_inf) n)`` stays below 16.

    References
    ----------
    ScaLAPACK Users' Guide (1997), PDGESV and PDPOSV.

    Examples
    --------
    >>> x = hpcgpu.linalg.solve(a, b)                    # doctest: +SKIP
    >>> x = hpcgpu.linalg.solve(spd, b, assume_a="pos")  # doctest: +SKIP
    """
    where = "solve"
    _refuse_alone(where, "A", a)
    err = (None if isinstance(assume_a, str) and assume_a in SERVED else
           ValueError(f"{where}: assume_a must be 'gen' (LU) or 'pos' (Cholesky), got {assume_a!r}")) \
        or _checks.matrix_error(where, "A", a, square=True, cyclic=True) or _checks.matrix_error(where, "B", b) \
        or _checks.conform_error(where, a, b) or _checks.nb_error(where, nb) or _checks.layout_nb_error(where, a, nb)
    _checks.entry(where, dict(a=a, b=b, assume_a=assume_a, nb=nb), a.grid.cart, err)
    cyclic = isinstance(a, CyclicMatrix)  # factored in its own layout, on its own grid
    nb_ = _nb(a, nb)
    agree(_checks.memory_error(where, factor_bytes(a, nb_, a.grid if cyclic else None) + solve_bytes(b),
                               a.grid.cart, a.xp), comm=a.grid.cart)
    _checks.finite(where, {"A": a, "B": b}, a.grid.cart)
    if assume_a == "pos":
        from .chol import CholeskyFactor, _factor, cho_solve

        local, lay = _factor(where, a, False, nb)  # a matrix that is not positive definite is refused as solve's
        return cho_solve((CholeskyFactor(local, lay, False), False), b)
    lu, piv = factor(a, nb_, where, a.grid if cyclic else None)
    return solve_factored(lu, piv, b)


def pdposv(a, b, *, nb: int | None = None):
    """ScaLAPACK's PDPOSV: :func:`solve` with ``assume_a="pos"`` (Cholesky), A Hermitian positive definite.

    Collective: every rank of ``a.grid`` calls it.

    Parameters
    ----------
    a : DistMatrix
        ``(n, n)``, Hermitian positive definite (the triangle :func:`~hpcgpu.linalg.cho_factor` reads).
    b : DistMatrix
        ``(n, nrhs)`` on ``a``'s grid, its dtype.
    nb : int, optional, keyword-only
        Block size.

    Returns
    -------
    DistMatrix
        ``X``, ``(n, nrhs)``.

    Raises
    ------
    As :func:`solve`.
    """
    return solve(a, b, assume_a="pos", nb=nb)
