"""Cholesky factorization and solves of distributed Hermitian positive definite matrices: ScaLAPACK's PDPOTRF.

``A = L L^H`` (``lower``) or ``A = U^H U``, right-looking and blocked by ``nb`` on the 2-D block-cyclic layout
(:mod:`hpcgpu.linalg.cyclic`). At block column ``k`` (rows and columns ``k0:k1``) of the lower form:

1. the rank holding the diagonal block factors it (``potrf``) and broadcasts ``L_kk`` down its grid column;
2. that grid column solves its rows of the panel, ``L_ik = A_ik L_kk^{-H}`` (``trsm``);
3. the panel goes along the grid rows (each rank receives the panel rows of its local rows) and, transposed,
   down the grid columns (the panel rows of its local columns: one ``Allgather`` over the grid column of the
   rows each grid row holds there, or a ``Bcast`` where one grid row holds them all, as the diagonal rank does
   on a square grid);
4. every rank updates the lower part of its trailing blocks, ``A_ij -= L_ik L_jk^H`` for ``i >= j``, one local
   GEMM per block column.

The upper form is the lower one of ``A^H`` with the grid's rows and columns swapped: no data moves for it. A
failing leading minor does not stop the loop (the failing diagonal block is replaced by the identity so that no
kernel raises); its order is made global by one reduction at the end and raised on every rank.

Cost model (``n x n``, ``P = pr pc`` ranks, block size ``nb``): ``n^3 / 3`` flops in all (``n^3 / (3 P)`` a rank
when balanced, which the cyclic layout keeps to the end); per rank about ``n^2 / (2 pr)`` words of panels
received along the grid row (for its rows) and ``n^2 / (2 pc)`` down the grid column (for its columns), in
``3 n / nb`` collectives; plus about ``n^2 / P`` words for the moves in and out of the cyclic layout (only the
triangle moves: ``hpcgpu.linalg.cyclic.to_cyclic``'s ``triangle``; ``2 n^2 / P`` above its
``MAX_TRIANGLE_BLOCKS``).

References
----------
J. Choi, J. Demmel, I. Dhillon, J. Dongarra, S. Ostrouchov, A. Petitet, K. Stanley, D. Walker, R. C. Whaley,
"ScaLAPACK: A portable linear algebra library for distributed memory computers - design issues and performance",
Computer Physics Communications 97, 1996 (LAPACK Working Note 95); J. Choi, J. Dongarra, L. S. Ostrouchov,
A. Petitet, D. Walker, R. C. Whaley, "The design and implementation of the ScaLAPACK LU, QR, and Cholesky
factorization routines", LAPACK Working Note 80, 1994; ScaLAPACK's PDPOTRF and PDPOTRS.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from ..comm import Allgather, Bcast, Ibcast
from ..errors import agree, agreed
from ..watchdog import watch
from . import _checks, _local
from .cyclic import Cyclic, default_nb, padded_empty, to_cyclic
from .distmatrix import CyclicMatrix, from_cyclic
from .triangular import _flag_error, trsm_cyclic

__all__ = ["CholeskyFactor", "cholesky", "cho_factor", "cho_solve", "pdpotrf", "pdpotrs"]


class CholeskyFactor:
    """A Cholesky factor kept in the block-cyclic layout, for :func:`cho_solve` to use without moving it.

    What :func:`cho_factor` returns (with ``lower``). Constructing one communicates nothing.

    Parameters
    ----------
    local : xp.ndarray, shape ``layout.lshape``
        This rank's blocks of the factor ``L`` (``lower``) or ``U``; the other triangle zero.
    layout : Cyclic
        Global ``(n, n)``, the grid and block size.
    lower : bool

    Attributes
    ----------
    local, layout, lower
    gshape : (int, int)
    grid : ProcessGrid
    dtype : numpy.dtype
    nb : int
    """

    def __init__(self, local, layout: Cyclic, lower: bool):
        self.local, self.layout, self.lower = local, layout, bool(lower)
        self.gshape = (layout.m, layout.n)
        self.grid = layout.grid
        self.dtype = np.dtype(local.dtype)
        self.nb = layout.nb

    def describe(self) -> str:
        """``"100 x 100 float64 lower factor on grid 2x3, nb 8"``: what every rank's part shares. Not collective."""
        tri = "lower" if self.lower else "upper"
        return (f"{self.gshape[0]} x {self.gshape[1]} {self.dtype} {tri} factor on grid "
                f"{self.grid.shape[0]}x{self.grid.shape[1]}, nb {self.nb}")

    def to_distmatrix(self):
        """The factor as a :class:`~hpcgpu.DistMatrix` on the same grid.

        Collective over the grid: one ``Alltoallv`` (none on one rank).

        Returns
        -------
        DistMatrix
            Global ``(n, n)``, the factor's dtype and side.
        """
        if self.grid.size == 1:
            from .distmatrix import DistMatrix

            return DistMatrix(self.local, self.gshape, self.grid)
        return from_cyclic(self.local, self.layout, triangle="lower" if self.lower else "upper")

    def __repr__(self) -> str:
        return f"CholeskyFactor({self.describe()})"


class _Axes:
    """The layout as the lower-form loop sees it: rows and columns as given, or swapped (the upper form)."""

    def __init__(self, lay: Cyclic, swap: bool):
        g = lay.grid
        self.n, self.nb = lay.n, lay.nb
        if not swap:
            self.row_owner, self.col_owner = lay.row_owner, lay.col_owner
            self.local_row, self.local_col = lay.local_row, lay.local_col
            self.rows, self.cols = lay.rows, lay.cols
            self.lshape, self.myrow, self.mycol, self.pr = lay.lshape, g.row, g.col, g.shape[0]
            self.row_comm, self.col_comm = g.row_comm, g.col_comm
        else:
            self.row_owner, self.col_owner = lay.col_owner, lay.row_owner
            self.local_row, self.local_col = lay.local_col, lay.local_row
            self.rows, self.cols = lay.cols, lay.rows
            self.lshape, self.myrow, self.mycol, self.pr = lay.lshape[::-1], g.col, g.row, g.shape[1]
            self.row_comm, self.col_comm = g.col_comm, g.row_comm


def _potrf_cyclic(local, lay: Cyclic, lower: bool, transposed: bool = False) -> int:
    """Factor the block-cyclic ``local`` in place; the 1-based order of the first failing minor, or 0.

    Collective over ``lay.grid``: every rank returns the same (one reduction at the end). ``transposed`` (the
    upper form only): ``local`` is the transpose view :func:`~hpcgpu.linalg.cyclic.to_cyclic` gives with
    ``transposed=True``, and ``local.T`` (its conjugate, for a complex dtype) is the lower form factored in place.
    """
    xp = _local.xp_of(local)
    ax = _Axes(lay, swap=not lower)
    if lower:
        work = local
    elif transposed:  # local.T is the padded array in A's order: conjugated, the lower form of A^H
        work = local.T
        _conjugate_spans(work, ax, xp)
    else:  # the lower form of A^H, on a padded row stride as to_cyclic's (cyclic.padded_empty)
        work = padded_empty(local.shape[::-1], local.dtype, xp)
        for jl, w, i0 in _lower_spans(ax):  # the triangle's block columns only: half a whole transpose's bytes
            work[i0:, jl:jl + w] = local[jl:jl + w, i0:].conj().T
    fail = _factor_lower(work, ax, xp)
    _zero_above(work, ax)  # the other triangle zero, as SciPy's cholesky returns it
    if transposed and not lower:  # local (the view) holds the upper factor once conjugated back
        _conjugate_spans(work, ax, xp)
    elif not lower:
        for jl, w, i0 in _lower_spans(ax):
            local[jl:jl + w, :i0] = 0
            local[jl:jl + w, i0:] = work[i0:, jl:jl + w].conj().T
    with watch("Cholesky agreement on the first failing minor"):
        fail = lay.grid.cart.allreduce(fail or lay.n + 1, op=MPI.MIN)
    return 0 if fail > lay.n else fail


def _conjugate_spans(work, ax: _Axes, xp) -> None:
    """Conjugate the lower form's block columns in place over :func:`_lower_spans` (nothing for a real dtype)."""
    if work.dtype.kind == "c":
        for jl, w, i0 in _lower_spans(ax):
            xp.conjugate(work[i0:, jl:jl + w], out=work[i0:, jl:jl + w])


def _lower_spans(ax: _Axes):
    """``(jl, w, i0)`` for each local block column of the lower form (``ax``'s axes).

    ``jl``: its first local column, ``w``: its width, ``i0``: the first local row on or below its diagonal block.
    The rows above ``i0`` are strictly above the diagonal: the factorization never reads or writes them
    (:func:`_factor_lower`).

    A factor kept for solves (:func:`cho_factor`) in the upper form is conjugate-transposed in and out over
    these spans only: a whole-array transpose of a rank's 64 MB at n = 4096, P = 2 took 0.045-0.07 s each way, a
    fifth of the factorization. :func:`cholesky` makes no such copy (``to_cyclic``'s ``transposed``).
    """
    rows, cols = ax.rows(), ax.cols()
    for jl in range(0, ax.lshape[1], ax.nb):  # local block columns are nb wide (the last one narrower)
        g = cols[jl:jl + ax.nb]
        yield jl, g.size, int(np.searchsorted(rows, g[0]))


def _zero_above(a, ax: _Axes) -> None:
    """Zero the elements of ``a`` above the diagonal (global row < global column), block column by block column.

    Whole blocks above the block column's diagonal block are cleared by slices; only a diagonal block is masked
    element by element (a mask of the whole local array, its comparison and its pages, costs 15 ms of a 0.5 s
    factorization at n = 4096).
    """
    rows, cols = ax.rows(), ax.cols()
    for jl in range(0, ax.lshape[1], ax.nb):  # local block columns are nb wide (the last one narrower)
        g = cols[jl:jl + ax.nb]  # one block's global columns, consecutive
        i0, i1 = (int(i) for i in np.searchsorted(rows, [g[0], g[-1]]))
        a[:i0, jl:jl + g.size] = 0
        if i1 > i0:  # rows inside the block's column range: this rank holds its diagonal block
            d = a[i0:i1, jl:jl + g.size]
            d[_local.xp_of(a).asarray(rows[i0:i1, None] < g[None, :])] = 0


def _factor_lower(a, ax: _Axes, xp) -> int:
    """The right-looking loop on the lower triangle of ``a`` (``ax``'s rows and columns), with a lookahead of one.

    At block ``k`` the next block column is updated first, its panel factored and its broadcast along the grid
    rows posted, and only then the rest of the trailing matrix: the broadcast travels during that update.
    Returns the first failing order this rank saw (1-based), or 0.
    """
    n, nb = ax.n, ax.nb
    nblk = -(-n // nb)
    fails: list[int] = []
    my_rows, my_cols = ax.rows(), ax.cols()
    # the global indices each grid row holds among this rank's columns: the transposed panel's sources
    shared = [np.intersect1d(ax.rows(q), my_cols) for q in range(ax.pr)]
    pending = _panel(a, ax, 0, nblk, xp, fails) if nblk else None
    for k in range(nblk):
        k1, k2 = min((k + 1) * nb, n), min((k + 2) * nb, n)
        prow = pending.wait()
        pcol = _transposed_panel(prow, ax, shared, my_rows, my_cols, k1, min(nb, n - k * nb), xp,
                                 f"block {k + 1} of {nblk}")
        _update_lower(a, prow, pcol, ax, my_cols, k1, ax.local_col(k1), ax.local_col(k2))  # block column k + 1
        if k + 1 < nblk:
            pending = _panel(a, ax, k + 1, nblk, xp, fails)
        _update_lower(a, prow, pcol, ax, my_cols, k1, ax.local_col(k2), ax.lshape[1])  # the rest
    return fails[0] if fails else 0


class _Pending:
    """A panel's broadcast along the grid row, posted (``Ibcast``); :meth:`wait` gives the panel rows."""

    def __init__(self, prow, request, detail: str):
        self.prow, self.request, self.detail = prow, request, detail

    def wait(self):
        if self.request is not None:
            with watch("Cholesky panel broadcast", self.detail):
                self.request.Wait()
        return self.prow


def _panel(a, ax: _Axes, k: int, nblk: int, xp, fails: list) -> _Pending:
    """Factor block column ``k`` (its trailing update done) and post its broadcast along the grid rows.

    The grid column holding it: the diagonal block's rank factors it (``potrf``) and broadcasts ``L_kk`` down
    the column, which solves its rows of the panel (``trsm``). A failing block is replaced by the identity so
    that no kernel raises; its order goes to ``fails`` and is agreed at the end.
    """
    n, nb = ax.n, ax.nb
    k0, k1 = k * nb, min((k + 1) * nb, n)
    kb = k1 - k0
    rk, ck = ax.row_owner(k0), ax.col_owner(k0)
    detail = f"block {k + 1} of {nblk}"
    r1, c0 = ax.local_row(k1), ax.local_col(k0)
    if ax.mycol == ck:
        lkk = xp.empty((kb, kb), a.dtype)
        if ax.myrow == rk:
            d0 = ax.local_row(k0)
            lkk[...], info = _local.potrf(a[d0:d0 + kb, c0:c0 + kb], lower=True)
            if info:
                fails.append(k0 + info)
                lkk[...] = xp.eye(kb, dtype=a.dtype)
            a[d0:d0 + kb, c0:c0 + kb] = lkk
        with watch("Cholesky diagonal block broadcast", detail):
            Bcast(lkk, root=rk, comm=ax.col_comm)
        if r1 < ax.lshape[0]:
            a[r1:, c0:c0 + kb] = _local.trsm(lkk, a[r1:, c0:c0 + kb], True, 2, side="R")
    # the panel rows of this rank's rows, along the grid row (those of its columns follow at the wait)
    prow = xp.empty((ax.lshape[0] - r1, kb), a.dtype)
    if ax.mycol == ck:
        prow[...] = a[r1:, c0:c0 + kb]
    request = Ibcast(prow, root=ck, comm=ax.row_comm) if prow.size else None
    return _Pending(prow, request, detail)


def _transposed_panel(prow, ax: _Axes, shared, my_rows, my_cols, k1: int, kb: int, xp, detail: str):
    """The panel rows of this rank's columns at or after ``k1``: each grid row gives those it holds.

    An ``Allgather`` over the grid column, or a ``Bcast`` from the one grid row that holds any (on a square grid
    the diagonal rank: the ``Allgather`` moved ``pr`` times the bytes, zeros from the other ranks).
    """
    c1 = ax.local_col(k1)
    pcol = xp.empty((ax.lshape[1] - c1, kb), prow.dtype)
    below = [s[s >= k1] for s in shared]
    count = max(s.size for s in below)
    if count == 0 or kb == 0:
        return pcol
    mine = below[ax.myrow]
    have = prow[xp.asarray(np.searchsorted(my_rows, mine) - ax.local_row(k1))] if mine.size else None
    givers = [q for q, s in enumerate(below) if s.size]
    if len(givers) == 1:  # one grid row holds them all (on a square grid, always): a broadcast from it
        q = givers[0]
        buf = have if q == ax.myrow else xp.empty((below[q].size, kb), prow.dtype)
        with watch("Cholesky transposed panel", detail):
            Bcast(buf, root=q, comm=ax.col_comm)
        pcol[xp.asarray(np.searchsorted(my_cols, below[q]) - c1)] = buf
        return pcol
    send = xp.zeros((count, kb), prow.dtype)
    if have is not None:
        send[:mine.size] = have
    recv = xp.empty((ax.pr, count, kb), prow.dtype)
    with watch("Cholesky transposed panel", detail):
        Allgather(send, recv, comm=ax.col_comm)
    for q, s in enumerate(below):
        if s.size:
            pcol[xp.asarray(np.searchsorted(my_cols, s) - c1)] = recv[q, :s.size]
    return pcol


UPDATE_CHUNK = 4
"""Local block columns the trailing update takes in one GEMM below their diagonal blocks (:func:`_update_lower`)."""


def _update_lower(a, prow, pcol, ax: _Axes, my_cols, k1: int, j0: int, j1: int) -> None:
    """``A_ij -= L_ik L_jk^H`` with ``i >= j`` on this rank's local block columns ``j0:j1``.

    The panel ``prow``/``pcol`` is block ``k``'s, which ends at ``k1``. The block columns go
    :data:`UPDATE_CHUNK` at a time: one GEMM for the chunk's rows at or below its last block column's diagonal
    block, then one per block column for its rows above those (its part of the chunk's triangle). No element
    above a block column's diagonal block is computed. One GEMM per block column, each re-reading the whole
    panel, ran at 60-67 GFLOP/s on a core here where a chunk of four ran at 70-72 (a single whole GEMM: 84-95).
    """
    r1, c1 = ax.local_row(k1), ax.local_col(k1)
    step = ax.nb * UPDATE_CHUNK
    for ja in range(j0, j1, step):
        jb = min(ja + step, j1)
        starts = list(range(ja, jb, ax.nb))  # local block columns are nb wide (the last one narrower)
        # this rank's rows at or below each block column's first global column
        tops = [ax.local_row(int(my_cols[jl])) for jl in starts]
        below = tops[-1]
        if below < ax.lshape[0]:
            _local.gemm_update(a[below:, ja:jb], prow[below - r1:], pcol[ja - c1:jb - c1], -1.0, trans_b=2)
        for jl, i0 in zip(starts[:-1], tops[:-1], strict=True):
            if i0 < below:
                w = min(ax.nb, jb - jl)
                _local.gemm_update(a[i0:below, jl:jl + w], prow[i0 - r1:below - r1], pcol[jl - c1:jl - c1 + w],
                                   -1.0, trans_b=2)


def _not_spd(where: str, order: int, n: int) -> BaseException:
    return agreed(np.linalg.LinAlgError(
        f"{where}: A is not positive definite: the leading minor of order {order} is not (column {order - 1} "
        f"of 0..{n - 1})"))


def _entry(where: str, a, lower, nb) -> None:
    """The checks of :func:`cholesky` and :func:`cho_factor`, agreed, before any other communication."""
    err = _checks.matrix_error(where, "A", a, square=True, cyclic=True)
    if err is not None and not hasattr(a, "grid"):
        raise agreed(err)  # no grid to agree over: every rank is given the same kind of object
    err = err or _flag_error(where, "lower", lower) or _checks.nb_error(where, nb) or _checks.layout_nb_error(
        where, a, nb)
    comm = a.grid.cart
    _checks.entry(where, dict(a=a.describe(), lower=lower, nb=nb), comm, err)
    # the arguments agreed, every rank asks (the host's answer is collective): the moves' buffers, the upper
    # form's copy, the panels
    nbv = nb or getattr(a, "nb", None) or default_nb(a.xp, a.gshape[0], a.grid)
    nbv = min(nbv, max(a.gshape[0], 1))
    copies = 2 if isinstance(a, CyclicMatrix) else 4  # a CyclicMatrix's copy (and the upper form's), no move
    need = copies * a.lnbytes + 4 * (a.lshape[0] + a.lshape[1] + nbv) * nbv * a.dtype.itemsize
    agree(_checks.memory_error(where, need, comm, a.xp), comm=comm)
    _checks.finite(where, {"A": a}, comm)


def _factor(where: str, a, lower: bool, nb, transposed: bool = False):
    """``(local, layout)`` of the factor; raises the agreed ``LinAlgError`` when ``A`` is not positive definite.

    ``transposed``: an upper factor's ``local`` may be a transpose view (:func:`_potrf_cyclic`), for a caller that
    only moves it back (:func:`cholesky`; a factor kept for solves stays C-ordered).
    """
    n = a.gshape[0]
    nb = nb or getattr(a, "nb", None) or default_nb(a.xp, n, a.grid)
    if a.grid.size == 1:  # the one block is the cyclic layout: one potrf, no move, no loop
        local, info = _local.potrf(a.local, lower)
        lay = Cyclic(a.gshape, a.grid, nb)
    elif isinstance(a, CyclicMatrix):  # factored where it lies: a copy of its blocks, on a padded row stride
        lay = a.layout
        local = padded_empty(a.lshape, a.dtype, a.xp)
        local[...] = a.local
        info = _potrf_cyclic(local, lay, lower)
    else:
        # the triangle potrf reads, on a padded row stride (the trailing updates' GEMMs: cyclic.padded_empty); the
        # upper form through a transpose view of the padded array it factors (no whole-array transposing copy)
        transposed = transposed and not lower
        local, lay = to_cyclic(a, nb, triangle="lower" if lower else "upper", padded=True, transposed=transposed)
        info = _potrf_cyclic(local, lay, lower, transposed)
    if info:
        raise _not_spd(where, info, n)
    return local, lay


def cholesky(a, lower=False, *, nb=None):
    """Cholesky factor of a distributed Hermitian positive definite matrix: SciPy's ``cholesky``.

    Collective over ``a.grid``: all its ranks must call it with the same arguments. A DistMatrix ``A`` moves
    into the block-cyclic layout and the factor back (one ``Alltoallv`` each; none on one rank, where it is one
    LAPACK ``potrf``); a :class:`~hpcgpu.linalg.CyclicMatrix` is factored in its own layout (a copy
    of its blocks) and the factor stays in it: no move.

    Parameters
    ----------
    a : DistMatrix or CyclicMatrix
        ``A``, global ``(n, n)``, float32, float64, complex64 or complex128, host or device. Only the triangle
        ``lower`` names is read (SciPy's rule), but every element must be finite. Not modified.
    lower : bool
        Return ``L`` with ``A = L L^H``; by default ``U`` with ``A = U^H U`` (SciPy's default).
    nb : int, optional, keyword-only
        Block size of the factorization (default ``hpcgpu.linalg.cyclic.default_nb``); a CyclicMatrix's own
        (``nb`` None or equal to it).

    Returns
    -------
    DistMatrix or CyclicMatrix
        The factor, global ``(n, n)``, on ``a``'s grid (in ``a``'s block-cyclic layout for a CyclicMatrix),
        ``a``'s dtype and side; the other triangle zero.

    Raises
    ------
    numpy.linalg.LinAlgError
        ``A`` is not positive definite: one line naming the order of the first leading minor that is not (and its
        column), on every rank (an :class:`~hpcgpu.errors.AgreedError`).
    TypeError
        ``a`` no DistMatrix, a dtype the solvers do not take, ``lower`` not a bool, ``nb`` not an int. On every
        rank.
    ValueError
        ``a`` not square, ``nb < 1`` (or, for a CyclicMatrix, not its own), NaN or inf in ``a`` (naming the
        element), the arguments differing between ranks. On every rank.
    MemoryError
        The working copies do not fit in the rank's memory. On every rank.

    Notes
    -----
    Right-looking blocked Cholesky (ScaLAPACK's PDPOTRF): see ``hpcgpu.linalg.chol``'s module docstring for the schedule
    and its cost, ``n^3 / 3`` flops.

    References
    ----------
    J. Choi et al., "ScaLAPACK: A portable linear algebra library for distributed memory computers - design
    issues and performance", Computer Physics Communications 97, 1996; LAPACK Working Note 80.
    """
    _entry("cholesky", a, lower, nb)
    local, lay = _factor("cholesky", a, bool(lower), nb, transposed=True)
    if isinstance(a, CyclicMatrix):
        return CyclicMatrix(local, a.gshape, a.grid, a.nb)
    return CholeskyFactor(local, lay, bool(lower)).to_distmatrix()


def cho_factor(a, lower=False, *, nb=None):
    """Cholesky factor kept for :func:`cho_solve`: SciPy's ``cho_factor``.

    Collective over ``a.grid``. As :func:`cholesky`, but the factor stays in the block-cyclic layout, so that
    solves with it move only their right-hand sides (a CyclicMatrix ``a``: nothing moves, the factor is in its
    layout).

    Parameters
    ----------
    a : DistMatrix or CyclicMatrix
        As for :func:`cholesky`.
    lower : bool
        Factor as ``L L^H`` (``True``) or ``U^H U`` (default).
    nb : int, optional, keyword-only
        Block size.

    Returns
    -------
    (CholeskyFactor, bool)
        The factor and ``lower``: pass the pair to :func:`cho_solve`. ``factor.to_distmatrix()`` gives it as a
        DistMatrix (the other triangle zero, unlike SciPy's, which leaves ``A``'s values there).

    Raises
    ------
    numpy.linalg.LinAlgError, TypeError, ValueError, MemoryError
        As :func:`cholesky`, naming ``cho_factor``. On every rank.
    """
    _entry("cho_factor", a, lower, nb)
    local, lay = _factor("cho_factor", a, bool(lower), nb)
    return CholeskyFactor(local, lay, bool(lower)), bool(lower)


def cho_solve(c_and_lower, b, *, nb=None):
    """Solve ``A X = B`` given ``A``'s Cholesky factor: SciPy's ``cho_solve``.

    Collective over the factor's grid: all its ranks must call it with the same arguments. ``B`` moves into the
    block-cyclic layout and ``X`` back (one ``Alltoallv`` each); a :class:`CholeskyFactor` does not move, a
    DistMatrix factor moves in first. Two triangular solves (``hpcgpu.linalg.triangular.trsm_cyclic``).

    Parameters
    ----------
    c_and_lower : (CholeskyFactor or DistMatrix, bool)
        What :func:`cho_factor` returned, or a factor from :func:`cholesky` with its ``lower``. Only the triangle
        ``lower`` names is read.
    b : DistMatrix
        ``B``, global ``(n, nrhs)``, on the factor's grid, the factor's dtype.
    nb : int, optional, keyword-only
        Block size for a DistMatrix factor (default ``hpcgpu.linalg.cyclic.default_nb``); a
        :class:`CholeskyFactor` keeps its own.

    Returns
    -------
    DistMatrix
        ``X``, global ``(n, nrhs)``, on the factor's grid, ``b``'s dtype and side.

    Raises
    ------
    TypeError
        ``c_and_lower`` not such a pair, ``b`` no DistMatrix, dtypes that differ or the solvers do not take,
        ``nb`` not an int. On every rank.
    ValueError
        Shapes that do not conform, another grid, ``nb < 1``, NaN or inf in ``b`` (or in a DistMatrix factor),
        the arguments differing between ranks. On every rank.
    MemoryError
        The working copies do not fit in the rank's memory. On every rank.

    References
    ----------
    ScaLAPACK's PDPOTRS.
    """
    where = "cho_solve"
    from .distmatrix import DistMatrix

    pair = isinstance(c_and_lower, tuple) and len(c_and_lower) == 2
    c, lower = c_and_lower if pair else (None, None)
    if not pair or not isinstance(c, (CholeskyFactor, DistMatrix)):
        got = type(c if pair else c_and_lower).__name__
        raise agreed(TypeError(f"{where}: c_and_lower must be (factor, lower) with the factor from cho_factor or "
                               f"cholesky (a CholeskyFactor or DistMatrix), got {got}"))
    err = (_checks.matrix_error(where, "c", c, square=True) if isinstance(c, DistMatrix) else None)
    err = err or _checks.matrix_error(where, "B", b)
    err = (err or _flag_error(where, "lower", lower) or _checks.conform_error(where, c, b)
           or _checks.nb_error(where, nb))
    if err is None and isinstance(c, CholeskyFactor) and c.lower != bool(lower):
        err = ValueError(f"{where}: lower={lower} but the factor was made with lower={c.lower}")
    comm = c.grid.cart
    _checks.entry(where, dict(c=c.describe(), lower=lower, b=getattr(b, "describe", lambda: type(b).__name__)(),
                              nb=nb), comm, err)
    nbv = c.nb if isinstance(c, CholeskyFactor) else (nb or default_nb(b.xp, c.gshape[0], c.grid))
    extra = 3 * c.lnbytes if isinstance(c, DistMatrix) else 0
    need = extra + 3 * b.lnbytes + (c.local.shape[0] + b.lshape[1] + nbv) * nbv * b.dtype.itemsize
    agree(_checks.memory_error(where, need, comm, b.xp), comm=comm)
    _checks.finite(where, {"c": c, "B": b} if isinstance(c, DistMatrix) else {"B": b}, comm)
    if isinstance(c, DistMatrix):
        c_local, c_lay = to_cyclic(c, nb or default_nb(c.xp, c.gshape[0], c.grid),
                                   triangle="lower" if lower else "upper")
    else:
        c_local, c_lay = c.local, c.layout
    b_local, b_lay = to_cyclic(b, c_lay.nb)
    lower = bool(lower)
    # A = L L^H: L Y = B, then L^H X = Y;  A = U^H U: U^H Y = B, then U X = Y
    trsm_cyclic(c_local, c_lay, b_local, b_lay, lower=lower, trans=0 if lower else 2)
    trsm_cyclic(c_local, c_lay, b_local, b_lay, lower=lower, trans=2 if lower else 0)
    return from_cyclic(b_local, b_lay)


pdpotrf = cholesky
"""ScaLAPACK's name for :func:`cholesky`."""

pdpotrs = cho_solve
"""ScaLAPACK's name for :func:`cho_solve`."""
