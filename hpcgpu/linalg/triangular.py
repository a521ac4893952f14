"""Triangular solves with many right-hand sides on the 2-D block-cyclic layout: ScaLAPACK's PDTRSM.

``op(A) X = B`` with ``A`` ``n x n`` triangular and ``B`` ``n x nrhs``, both dealt in ``nb x nb`` blocks over one
``pr x pc`` grid (:mod:`hpcgpu.linalg.cyclic`). The solve walks the block rows in the order substitution needs
them. At block ``k`` the grid column holding ``A``'s column block ``k`` broadcasts its part of it along the grid
rows (each rank receives the rows it holds), and then:

* ``op(A) = A`` (right-looking): the grid row holding block row ``k`` solves ``X_k = A_kk^{-1} B_k`` on its own
  columns of ``B``, broadcasts ``X_k`` down the grid columns, and every rank updates its rows still to solve,
  ``B_i -= A_ik X_k``, by one local GEMM.
* ``op(A) = A^T`` or ``A^H`` (left-looking): every rank multiplies its rows already solved,
  ``W = sum_i op(A_ik) X_i``, one ``Allreduce`` down each grid column sums ``W``, and the grid row holding block
  row ``k`` solves ``X_k = op(A_kk)^{-1} (B_k - W)``. The column block of ``A`` serves as ``op(A)``'s row block,
  so no transpose of ``A`` is ever moved.

Only the triangle of ``A`` that ``lower`` names is read (the other may hold anything, such as LU's other
factor).

Cost model (``n x n`` ``A``, ``nrhs`` columns, ``P = pr pc`` ranks, block size ``nb``): ``n^2 nrhs`` flops in all,
``n^2 nrhs / P`` a rank when balanced; per rank about ``n^2 / (2 pr)`` words of ``A``'s panels and
``n nrhs / pc`` words of ``X`` (or ``W``) received, in ``2 n / nb`` collectives.

References
----------
J. Choi, J. Demmel, I. Dhillon, J. Dongarra, S. Ostrouchov, A. Petitet, K. Stanley, D. Walker, R. C. Whaley,
"ScaLAPACK: A portable linear algebra library for distributed memory computers - design issues and performance",
Computer Physics Communications 97, 1996 (LAPACK Working Note 95); PBLAS's PDTRSM.
"""

from __future__ import annotations

import numpy as np

from ..comm import Allreduce, Bcast
from ..errors import agree, agreed
from ..watchdog import watch
from . import _checks, _local
from .cyclic import default_nb, to_cyclic
from .distmatrix import from_cyclic

__all__ = ["trsm_cyclic", "solve_triangular", "pdtrsm"]

_TRANS = {0: 0, 1: 1, 2: 2, "N": 0, "T": 1, "C": 2}


def trsm_cyclic(a_local, a_lay, b_local, b_lay, *, lower: bool, trans=0, unit_diagonal: bool = False):
    """Solve ``op(A) X = B`` on the block-cyclic layout; ``X`` overwrites ``B``'s blocks.

    Collective over the grid of ``a_lay`` (its row and column communicators). The caller has agreed the
    arguments and checked the shapes (:func:`solve_triangular`, :func:`hpcgpu.linalg.chol.cho_solve` and
    ``lu_solve`` do); nothing is validated here.

    Parameters
    ----------
    a_local : xp.ndarray, shape ``a_lay.lshape``
        This rank's blocks of ``A`` (global ``n x n``); only the triangle ``lower`` names is read.
    a_lay : Cyclic
        ``A``'s layout: global ``(n, n)``, block size ``nb``.
    b_local : xp.ndarray, shape ``b_lay.lshape``
        This rank's blocks of ``B`` (global ``n x nrhs``), C-contiguous, ``a_local``'s dtype and side;
        overwritten by ``X``.
    b_lay : Cyclic
        ``B``'s layout: global ``(n, nrhs)`` on the same grid with the same ``nb``.
    lower : bool, keyword-only
        ``A`` is lower (or upper) triangular.
    trans : {0, 1, 2, "N", "T", "C"}, keyword-only
        ``op(A)``: ``A``, ``A^T``, ``A^H``.
    unit_diagonal : bool, keyword-only
        ``A``'s diagonal is taken as ones (not read).

    Returns
    -------
    xp.ndarray
        ``b_local``, holding this rank's blocks of ``X``.

    Notes
    -----
    Waits are watched by the stall watchdog (:func:`hpcgpu.watchdog.watch`). The broadcasts and sums go through
    :mod:`hpcgpu.comm` (host, staged or NCCL as the runtime decided).
    """
    t = _TRANS[trans]
    n, nb = a_lay.n, a_lay.nb
    grid = a_lay.grid
    if STATIONARY_FACTOR * max(grid.shape) * b_lay.n <= n and grid.shape != (1, 1):
        return _trsm_stationary(a_local, a_lay, b_local, b_lay, lower, t, unit_diagonal)
    xp = _local.xp_of(b_local)
    nblk = -(-n // nb)
    # substitution order: forward when op(A) is lower triangular
    forward = lower == (t == 0)
    for step, k in enumerate(range(nblk) if forward else range(nblk - 1, -1, -1)):
        k0, k1 = k * nb, min((k + 1) * nb, n)
        rk, ck = a_lay.row_owner(k0), a_lay.col_owner(k0)
        d0, d1 = a_lay.local_row(k0), a_lay.local_row(k1)  # block row k's local rows (empty off grid row rk)
        # the rows of column block k this step reads: block k and A's triangle off it, the rows below (lower) or
        # above (upper); those are the rows still to solve (op = A) or already solved (op = A^T, A^H)
        r0, r1 = (d0, a_lay.lshape[0]) if lower else (0, d1)
        panel = xp.empty((r1 - r0, k1 - k0), a_local.dtype)
        if grid.col == ck:
            c0 = a_lay.local_col(k0)
            panel[...] = a_local[r0:r1, c0:c0 + (k1 - k0)]
        detail = f"block {step + 1} of {nblk}"
        if panel.size:
            with watch("triangular solve panel broadcast", detail):
                Bcast(panel, root=ck, comm=grid.row_comm)
        diag = panel[d0 - r0:d1 - r0]
        off, boff = (panel[d1 - r0:], b_local[d1:]) if lower else (panel[:d0 - r0], b_local[:d0])
        bk = b_local[d0:d1]
        if t == 0:
            xk = xp.empty((k1 - k0, b_local.shape[1]), b_local.dtype)
            if grid.row == rk:
                xk[...] = _local.trsm(diag, bk, lower, 0, unit_diagonal)
                bk[...] = xk
            if xk.size:
                with watch("triangular solve broadcast of X", detail):
                    Bcast(xk, root=rk, comm=grid.col_comm)
            _local.gemm_update(boff, off, xk, -1.0)
        else:
            w = xp.zeros((k1 - k0, b_local.shape[1]), b_local.dtype)
            _local.gemm_update(w, off, boff, 1.0, trans_a=t)
            if w.size:
                with watch("triangular solve sum of solved rows", detail):
                    Allreduce(w, comm=grid.col_comm)
            if grid.row == rk:
                bk[...] = _local.trsm(diag, bk - w, lower, t, unit_diagonal)
    return b_local


STATIONARY_FACTOR = 4
"""``trsm_cyclic`` keeps ``A`` where it lies when ``STATIONARY_FACTOR * max(pr, pc) * nrhs <= n``."""


def _trsm_stationary(a_local, a_lay, b_local, b_lay, lower: bool, t: int, unit: bool):
    """:func:`trsm_cyclic` for few right-hand sides: ``A`` stays where it lies, only ``X`` and sums move.

    Left-looking. At block ``k`` the ranks holding ``op(A)``'s block row ``k`` (grid row ``rk`` for ``op(A) = A``,
    grid column ``ck`` for ``A^T``, ``A^H``) multiply their blocks of it by the ``X`` blocks already solved that
    they hold, one ``Allreduce`` along that grid row or column sums the products at the diagonal block's rank,
    which solves ``X_k``; its broadcasts give ``X_k`` to the ranks that will multiply by it and to grid row ``rk``,
    which holds ``B``'s block row ``k``. A rank receives about ``2 n nrhs`` words in ``2-3 n / nb`` collectives,
    where the panel broadcasts of the general case move about ``n^2 / (2 pr)`` words of ``A``: at ``n = 4096``,
    ``P = 4``, one right-hand side, the two solves of an LU waited 0.08-0.09 s for those panels. Parameters and
    result as :func:`trsm_cyclic`'s.
    """
    grid = a_lay.grid
    xp = _local.xp_of(b_local)
    n, nb, nrhs = a_lay.n, a_lay.nb, b_lay.n
    nblk = -(-n // nb)
    # B's rows of this rank's grid row, all nrhs columns: each rank of the grid row gives its columns (an exact sum)
    brows = xp.zeros((a_lay.lshape[0], nrhs), b_local.dtype)
    my_bcols = xp.asarray(b_lay.cols())
    if b_local.size:
        brows[:, my_bcols] = b_local
    if brows.size and grid.shape[1] > 1:
        with watch("triangular solve gather of B's rows"):
            Allreduce(brows, comm=grid.row_comm)
    # X solved so far at this rank's local columns (op = A) or local rows (op = A^T, A^H)
    x_mine = xp.zeros((a_lay.lshape[1] if t == 0 else a_lay.lshape[0], nrhs), b_local.dtype)
    forward = lower == (t == 0)
    for step, k in enumerate(range(nblk) if forward else range(nblk - 1, -1, -1)):
        k0, k1 = k * nb, min((k + 1) * nb, n)
        rk, ck = a_lay.row_owner(k0), a_lay.col_owner(k0)
        d0, c0 = a_lay.local_row(k0), a_lay.local_col(k0)
        detail = f"block {step + 1} of {nblk}"
        xk = _stationary_block(a_local, a_lay, brows, x_mine, (k0, k1), lower, t, unit, forward, detail)
        if t == 0 and grid.col == ck:  # the ranks that multiply by X_k at later blocks: grid column ck
            if grid.shape[0] > 1 and xk.size:
                with watch("triangular solve broadcast of X", detail):
                    Bcast(xk, root=rk, comm=grid.col_comm)
            x_mine[c0:c0 + k1 - k0] = xk
        if grid.row == rk:  # grid row rk: X_k's rows of B (and of x_mine for op(A) = A^T, A^H)
            if grid.shape[1] > 1 and xk.size:
                with watch("triangular solve broadcast of X", detail):
                    Bcast(xk, root=ck, comm=grid.row_comm)
            if t != 0:
                x_mine[d0:d0 + k1 - k0] = xk
            if b_local.size:
                b_local[d0:d0 + k1 - k0] = xk[:, my_bcols]
    return b_local


def _stationary_block(a_local, lay, brows, x_mine, block, lower: bool, t: int, unit: bool, forward: bool,
                      detail: str):
    """``X_k`` of :func:`_trsm_stationary`'s block ``block = (k0, k1)``, on the diagonal block's rank.

    The ranks holding ``op(A)``'s block row sum their products with the solved ``X`` they hold (``x_mine``) over
    their grid row or column; elsewhere the result is uninitialized (a broadcast fills it).
    """
    grid = lay.grid
    xp = _local.xp_of(brows)
    k0, k1 = block
    kb = k1 - k0
    rk, ck = lay.row_owner(k0), lay.col_owner(k0)
    d0, c0 = lay.local_row(k0), lay.local_col(k0)
    xk = xp.empty((kb, brows.shape[1]), brows.dtype)
    if (grid.row if t == 0 else grid.col) != (rk if t == 0 else ck):
        return xk
    if t == 0:  # A's block row k; the solved columns before (forward) or after it
        s0, s1 = (0, c0) if forward else (lay.local_col(k1), lay.lshape[1])
        part, comm, what, others = a_local[d0:d0 + kb, s0:s1], grid.row_comm, "columns", grid.shape[1] > 1
    else:  # A's column block k; the solved rows before (forward) or after it
        s0, s1 = (0, d0) if forward else (lay.local_row(k1), lay.lshape[0])
        part, comm, what, others = a_local[s0:s1, c0:c0 + kb], grid.col_comm, "rows", grid.shape[0] > 1
    w = xp.zeros((kb, brows.shape[1]), brows.dtype)
    _local.gemm_update(w, part, x_mine[s0:s1], 1.0, trans_a=t)
    if others and w.size:  # (no right-hand side: nothing to sum, on every rank of the comm alike)
        with watch(f"triangular solve sum of solved {what}", detail):
            Allreduce(w, comm=comm)
    if grid.row == rk and grid.col == ck:
        xk[...] = _local.trsm(a_local[d0:d0 + kb, c0:c0 + kb], brows[d0:d0 + kb] - w, lower, t, unit)
    return xk


def _trans_error(where: str, trans):
    if isinstance(trans, bool) or trans not in _TRANS:
        return ValueError(f"{where}: trans must be 0, 1, 2, 'N', 'T' or 'C', got {trans!r}")
    return None


def _flag_error(where: str, name: str, value):
    if not isinstance(value, (bool, np.bool_)):
        return TypeError(f"{where}: {name} must be True or False, got {value!r}")
    return None


def solve_triangular(a, b, trans=0, lower=False, unit_diagonal=False, *, nb=None):
    """Solve ``op(A) X = B`` for distributed ``A`` triangular and ``B``: SciPy's ``solve_triangular``.

    Collective over ``a.grid``: all its ranks must call it with the same arguments. ``A`` and ``B`` move into the
    block-cyclic layout (one ``Alltoallv`` each, ``hpcgpu.linalg.cyclic.to_cyclic``), ``trsm_cyclic``
    solves, and ``X`` moves back.

    Parameters
    ----------
    a : DistMatrix
        ``A``, global ``(n, n)``, float32, float64, complex64 or complex128, host or device. Only the triangle
        ``lower`` names is used (SciPy's rule), but every element must be finite.
    b : DistMatrix
        ``B``, global ``(n, nrhs)``, on ``a``'s grid, ``a``'s dtype.
    trans : {0, 1, 2, "N", "T", "C"}
        ``op(A)``: ``A``, ``A^T``, ``A^H``.
    lower : bool
        ``A`` is lower triangular (default upper, as SciPy's).
    unit_diagonal : bool
        Take ``A``'s diagonal as ones (not read).
    nb : int, optional, keyword-only
        Block size of the block-cyclic layout (default ``hpcgpu.linalg.cyclic.default_nb``: about 10 panels
        a grid row or column, 64-256 on a host, 256-512 on a GPU).

    Returns
    -------
    DistMatrix
        ``X``, global ``(n, nrhs)``, on ``a``'s grid, ``a``'s dtype and side.

    Raises
    ------
    TypeError
        ``a`` or ``b`` no DistMatrix, a dtype the solvers do not take, ``b``'s dtype not ``a``'s, ``lower`` or
        ``unit_diagonal`` not a bool, ``nb`` not an int. Raised on every rank (an
        :class:`~hpcgpu.errors.AgreedError`).
    ValueError
        ``a`` not square, ``b``'s rows not ``a``'s or another grid, ``trans`` not one of the above, ``nb < 1``,
        NaN or inf in ``a`` or ``b`` (naming the element), or the arguments differing between ranks. On every rank.
    MemoryError
        The working copies do not fit in the rank's memory. On every rank.

    Notes
    -----
    A zero on ``A``'s diagonal is not checked (SciPy's ``solve_triangular`` raises on it; here the result holds
    inf or NaN).

    References
    ----------
    ScaLAPACK's PDTRSM; J. Choi et al., "ScaLAPACK: A portable linear algebra library for distributed memory
    computers - design issues and performance", Computer Physics Communications 97, 1996.
    """
    where = "solve_triangular"
    err = _checks.matrix_error(where, "A", a, square=True) or _checks.matrix_error(where, "B", b)
    if err is not None and not hasattr(a, "grid"):
        raise agreed(err)  # no grid to agree over: every rank is given the same kinds of object
    if err is None:
        err = (_checks.conform_error(where, a, b) or _trans_error(where, trans)
               or _flag_error(where, "lower", lower) or _flag_error(where, "unit_diagonal", unit_diagonal)
               or _checks.nb_error(where, nb))
    comm = a.grid.cart
    _checks.entry(where, dict(a=a.describe(), b=getattr(b, "describe", lambda: type(b).__name__)(),
                              trans=trans, lower=lower, unit_diagonal=unit_diagonal, nb=nb), comm, err)
    # the arguments agreed, every rank asks (the host's answer is collective): the moves' buffers, the panels
    nbv = nb or default_nb(a.xp, a.gshape[0], a.grid)
    need = 3 * (a.lnbytes + b.lnbytes) + (a.lshape[0] + b.lshape[1] + nbv) * nbv * a.dtype.itemsize
    agree(_checks.memory_error(where, need, comm, a.xp), comm=comm)
    _checks.finite(where, {"A": a, "B": b}, comm)
    nb = nb or default_nb(a.xp, a.gshape[0], a.grid)
    a_local, a_lay = to_cyclic(a, nb, triangle="lower" if lower else "upper")  # the triangle trsm_cyclic reads
    b_local, b_lay = to_cyclic(b, nb)
    trsm_cyclic(a_local, a_lay, b_local, b_lay, lower=bool(lower), trans=trans, unit_diagonal=bool(unit_diagonal))
    return from_cyclic(b_local, b_lay)


pdtrsm = solve_triangular
"""ScaLAPACK's name for :func:`solve_triangular`."""
