"""LU factorization with partial pivoting on the 2-D block-cyclic layout (ScaLAPACK's PDGETRF and PDGETRS).

:func:`lu_factor` moves A into the block-cyclic layout of a flat grid over its grid's ranks, ``pc >= 4 pr``
(``ProcessGrid.flat``: ``1 x P`` up to 15 ranks, so a ``2 x 1`` or ``2 x 2`` grid's LU works on ``1 x 2`` or
``1 x 4``; ``grid=`` chooses another), by one ``Alltoallv`` (``cyclic.to_cyclic``), and factors it right-looking,
one panel of ``nb`` columns at a time. For the panel of global columns ``k0:k1`` (``w = k1 - k0``), owned by
grid column ``qk`` and, for its diagonal block, grid row ``pk``:

1. *Panel.* The ranks of grid column ``qk`` gather the panel's trailing rows ``k0:n`` (an ``Allgather`` over the
   grid column) and the diagonal block's owner factors them with one local ``getrf``: partial pivoting over the
   whole column, exactly LAPACK's choice of pivots, not a choice within a block (dask's ``lu`` pivots within each
   diagonal chunk and loses ten digits on a matrix whose leading block is small).
2. *Pivots.* The ``w`` pivots (and LAPACK's ``info``) are broadcast from that rank over the whole grid.
3. *Interchanges.* Every grid column exchanges the rows the pivots swap, across its grid rows (one ``Alltoallv``
   over the grid column, of only the rows that move), in all its columns left and right of the panel.
4. *L.* The factoring rank sends each rank of its grid column the diagonal block and that rank's rows of the
   factored panel (an ``Alltoallv`` used as a scatter); each grid row broadcasts its part along itself
   (``Ibcast`` over the grid row).
5. *U.* Grid row ``pk`` solves its block row ``U12 = L11^-1 A12`` (unit lower ``trsm``) and broadcasts it down
   each grid column.
6. *Update.* Every rank subtracts ``L21 U12`` from its part of the trailing matrix (local GEMMs). Lookahead:
   the grid column that owns the next panel updates that panel's columns first, factors it and posts its
   broadcasts (steps 1, 2 and 4, non-blocking ``Ibcast``), then updates the rest, while the other grid columns
   update theirs: the next panel's factorization and broadcasts overlap this panel's update.

A 1 x 1 grid is one ``getrf`` and nothing else. :func:`lu_solve` moves only B: into the same layout, its rows
interchanged as the pivots say, then the two block-cyclic triangular solves
(``triangular.trsm_cyclic``) and back.

Cost model (``n x n``, ``P = pr x pc`` ranks, ``nb``): ``2 n^3 / 3`` flops in all, ``2 n^3 / (3 P)`` a rank (the
layout keeps every rank in the trailing matrix to the end), all but ``O(n^2 nb)`` of them in the local GEMMs of
step 6. Words a rank receives, summed over the ``n / nb`` panels: ``n^2 / (2 pc)`` in the panel gathers (its grid
column owns one panel in ``pc``), about ``n^2 / (2 pr)`` of L along its grid row and ``n^2 / (2 pc)`` of U down its
grid column (each rank's share of the trailing matrix's rows and columns), plus the interchanged rows, at most
``nb`` rows of ``n / pc`` words a panel (``n^2 / pc`` in all, fewer as pivots stay on their grid row). Latency: six
collectives a panel, ``6 n / nb`` in all, each ``O(log P)`` messages. The panel's own ``getrf`` (``(n - k0) nb^2``
flops on one rank) is on the critical path only as far as the lookahead does not hide it behind the update (an
MPI that progresses the posted broadcasts only inside MPI calls delivers them at the wait).

References
----------
J. Choi, J. J. Dongarra, L. S. Ostrouchov, A. P. Petitet, D. W. Walker and R. C. Whaley, "The Design and
Implementation of the ScaLAPACK LU, QR, and Cholesky Factorization Routines", LAPACK Working Note 80 (1994);
J. Choi, J. Demmel et al., "ScaLAPACK: A Portable Linear Algebra Library for Distributed Memory Computers",
LAPACK Working Note 95; L. S. Blackford et al., "ScaLAPACK Users' Guide" (SIAM, 1997): PDGETRF, PDGETRS; A. Petitet,
"Algorithmic Redistribution Methods for Block Cyclic Decompositions", LAPACK Working Note 100 (1996).
"""

from __future__ import annotations

import hashlib
import numbers

import numpy as np

from ..comm import Allgather, Alltoallv, Bcast, Ibcast
from ..errors import agree, agreed
from ..watchdog import watch
from . import _checks
from ._local import gemm_update, getrf, getrs, trsm, xp_of
from .cyclic import Cyclic, default_nb, numroc, to_cyclic
from .distmatrix import CyclicMatrix, DistMatrix, from_cyclic
from .grid import flat_shape

__all__ = ["LUFactor", "lu_factor", "lu_solve"]


class LUFactor:
    """The LU factors of a square matrix, kept in the 2-D block-cyclic layout they were computed in.

    ``L`` (unit lower triangular, its diagonal not stored) below the diagonal and ``U`` on and above it, LAPACK's
    packing, each rank holding its blocks of the layout (``cyclic.Cyclic``). Made by :func:`lu_factor` and
    read by :func:`lu_solve`, which then move only the right-hand sides.

    Parameters
    ----------
    local : xp.ndarray, shape ``layout.lshape``
        This rank's blocks of the packed factors (host or device); on one rank LAPACK's array as ``getrf`` left
        it (Fortran order), elsewhere C-ordered.
    layout : Cyclic
        The ``n x n`` block-cyclic layout over the grid it was factored on.
    grid : ProcessGrid, optional
        A's grid, where B and the results live (``layout.grid`` by default; the layout may be on its
        ``wide()`` transpose).

    Attributes
    ----------
    local : xp.ndarray
    layout : Cyclic
    gshape : (int, int)
        ``(n, n)``.
    nb : int
        The block size.
    grid : ProcessGrid
        A's grid.
    dtype : numpy.dtype
    xp : module
        ``numpy`` or ``cupy``.
    """

    def __init__(self, local, layout: Cyclic, grid=None):
        self.local, self.layout = local, layout
        self.gshape = (layout.m, layout.n)
        self.nb, self.grid = layout.nb, layout.grid if grid is None else grid
        self.dtype = np.dtype(local.dtype)
        self.xp = xp_of(local)

    def to_distmatrix(self):
        """The packed factors as a :class:`~hpcgpu.DistMatrix` on the same grid (SciPy's ``lu`` array).

        Collective over the grid: one ``Alltoallv``.

        Returns
        -------
        DistMatrix
            ``(n, n)``, the factors' dtype and side.
        """
        return from_cyclic(self.local, self.layout, self.grid)

    def describe(self) -> str:
        """``"LU of 100 x 100 float64 on grid 2x2, nb 8"``: what the ranks' parts share (for ``agree_inputs``)."""
        return (f"LU of {self.gshape[0]} x {self.gshape[1]} {self.dtype} on grid {self.grid.shape[0]}x"
                f"{self.grid.shape[1]}, nb {self.nb}")

    def __repr__(self) -> str:
        return f"LUFactor({self.describe()})"


def lu_factor(a, *, nb: int | None = None, grid=None):
    """LU factorization with partial pivoting, ``A = P L U``, of a distributed square matrix (PDGETRF).

    SciPy's ``scipy.linalg.lu_factor`` for a :class:`~hpcgpu.DistMatrix`: right-looking by panels of ``nb``
    columns on the 2-D block-cyclic layout, the pivots chosen over the whole column as LAPACK chooses them.

    Collective: every rank of ``a.grid`` calls it with its block.

    Parameters
    ----------
    a : DistMatrix or CyclicMatrix
        ``(n, n)``, float32, float64, complex64 or complex128, host or device; finite. Not modified. A
        :class:`~hpcgpu.linalg.CyclicMatrix` is factored in its own layout (a copy of its blocks, on
        its grid, with its ``nb``): no move.
    nb : int, optional, keyword-only
        Block size of the layout and width of the panels, >= 1; by default about 10 panels a row or column of
        A's grid (``cyclic.default_nb(xp, n, a.grid)``, whatever grid the factorization runs on), 64-256 on a
        host, 256-512 on a GPU.
    grid : ProcessGrid, optional, keyword-only
        The grid to factor on: any shape over ``a.grid``'s ranks in its order (``ProcessGrid((pr, pc),
        comm=a.grid.cart)``), the same grid object's shape on every rank (only its shape is agreed). By default
        ``a.grid.flat()``, ``pc >= 4 pr`` (``1 x P`` up to 15 ranks): each panel's pivot search and interchanges
        cross ``pr`` ranks. The results stay on ``a.grid``.

    Returns
    -------
    lu : LUFactor
        The packed factors in the block-cyclic layout (``lu.to_distmatrix()`` is SciPy's ``lu``).
    piv : numpy.ndarray of int64, shape (n,)
        LAPACK's ``ipiv``, 0-based: global row ``i`` was interchanged with row ``piv[i]`` (``piv[i] >= i``), in
        order; the same on every rank, on the host also for a device ``a``.

    Raises
    ------
    TypeError
        ``a`` is no DistMatrix or has another dtype; ``nb`` is not an int; ``grid`` is not a ProcessGrid.
    ValueError
        ``a`` is not square; ``nb < 1``; ``grid`` is not over ``a.grid``'s ranks in its order or was freed; for a
        CyclicMatrix, ``nb`` or ``grid`` not its own; the ranks' arguments differ; A holds NaN or inf (naming the
        element).
    MemoryError
        The layout's copy and the panels do not fit in this rank's memory.
    numpy.linalg.LinAlgError
        A is exactly singular: ``U``'s diagonal is zero at the named column (LAPACK's ``info``), found at that
        column's panel, which ends the factorization.

    All on every rank (:class:`~hpcgpu.errors.AgreedError`), before any work but the factorization's own.

    Notes
    -----
    Cost: ``2 n^3 / 3`` flops, ``2 n^3 / (3 P)`` a rank, six collectives a panel; the module's docstring gives the
    words each rank moves. Memory a rank: its blocks twice (the layout's copy and the move's buffers), the panel
    (``n x nb``, padded by the grid's rows) and a block row of ``U``.

    References
    ----------
    ScaLAPACK Users' Guide (1997), PDGETRF; LAPACK Working Notes 80 and 100.

    Examples
    --------
    >>> lu, piv = hpcgpu.linalg.lu_factor(a, nb=64)         # doctest: +SKIP
    >>> x = hpcgpu.linalg.lu_solve((lu, piv), b)            # doctest: +SKIP
    """
    where = "lu_factor"
    _refuse_alone(where, "A", a)
    err = _checks.matrix_error(where, "A", a, square=True, cyclic=True) or _checks.nb_error(where, nb) or \
        _checks.grid_error(where, grid, a) or _checks.layout_nb_error(where, a, nb, grid)
    _checks.entry(where, dict(a=a, nb=nb, grid=getattr(grid, "shape", grid)), a.grid.cart, err)
    nb = _nb(a, nb)
    grid = a.grid if isinstance(a, CyclicMatrix) else grid
    agree(_checks.memory_error(where, factor_bytes(a, nb, grid), a.grid.cart, a.xp), comm=a.grid.cart)
    _checks.finite(where, {"A": a}, a.grid.cart)
    return factor(a, nb, where, grid)


def lu_solve(lu_and_piv, b, trans: int = 0):
    """Solve ``A X = B`` (or ``A^T X = B``, ``A^H X = B``) from :func:`lu_factor`'s factors (PDGETRS).

    SciPy's ``scipy.linalg.lu_solve``. Only B moves: into the factors' block-cyclic layout (one ``Alltoallv``),
    its rows interchanged as the pivots say (one ``Alltoallv`` over each grid column), the two triangular solves
    on that layout, and back (one ``Alltoallv``).

    Collective: every rank of the factors' grid calls it.

    Parameters
    ----------
    lu_and_piv : (LUFactor, numpy.ndarray)
        :func:`lu_factor`'s result, the same on every rank.
    b : DistMatrix
        ``(n, nrhs)`` (``nrhs = 1`` for one vector) on the factors' grid, their dtype; finite.
    trans : {0, 1, 2}
        Solve ``A X = B``, ``A^T X = B`` or ``A^H X = B``.

    Returns
    -------
    DistMatrix
        ``X``, ``(n, nrhs)`` on the same grid, B's dtype and side.

    Raises
    ------
    TypeError
        ``lu_and_piv`` is not :func:`lu_factor`'s pair; ``b`` is no DistMatrix, or has another dtype.
    ValueError
        ``piv`` is not ``n`` pivot rows; B is on another grid or has other than ``n`` rows; ``trans`` is not 0, 1
        or 2; the ranks' arguments differ; B holds NaN or inf.
    MemoryError
        B's copies do not fit.

    All on every rank (:class:`~hpcgpu.errors.AgreedError`), before any communication but the checks' own.

    Notes
    -----
    Cost: ``2 n^2 nrhs`` flops, ``/ P`` a rank; B's ``n nrhs / P`` words a rank moved three times, plus the
    triangular solves' broadcasts.

    References
    ----------
    ScaLAPACK Users' Guide (1997), PDGETRS.
    """
    where = "lu_solve"
    if not (isinstance(lu_and_piv, tuple) and len(lu_and_piv) == 2 and isinstance(lu_and_piv[0], LUFactor)):
        raise agreed(TypeError(f"{where}: the factors must be lu_factor's (lu, piv), got "
                               f"{type(lu_and_piv).__name__}"))
    lu, piv = lu_and_piv
    err = _piv_error(where, piv, lu.gshape[0]) or _checks.matrix_error(where, "B", b) \
        or _checks.conform_error(where, lu, b) or _trans_error(where, trans)
    digest = hashlib.blake2b(np.ascontiguousarray(piv).tobytes(), digest_size=8).hexdigest() \
        if isinstance(piv, np.ndarray) else type(piv).__name__
    _checks.entry(where, dict(lu=lu, piv=digest, b=b, trans=trans), lu.grid.cart, err)
    agree(_checks.memory_error(where, solve_bytes(b), lu.grid.cart, lu.xp), comm=lu.grid.cart)
    _checks.finite(where, {"B": b}, lu.grid.cart)
    return solve_factored(lu, np.asarray(piv, np.int64), b, int(trans))


# -- checks ----------------------------------------------------------------------------------------------------------

def _refuse_alone(where: str, name: str, a) -> None:
    """No DistMatrix, so no grid to agree over: this rank refuses alone (an SPMD program's ranks are alike)."""
    if not isinstance(a, (DistMatrix, CyclicMatrix)):
        raise agreed(_checks.matrix_error(where, name, a, cyclic=True))


def _nb(a, nb) -> int:
    """The checked ``nb``, or the default for ``a``'s side."""
    if nb is None:
        return a.nb if isinstance(a, CyclicMatrix) else default_nb(a.xp, a.gshape[0], a.grid)
    return int(nb)


def _piv_error(where: str, piv, n: int) -> BaseException | None:
    if not isinstance(piv, np.ndarray) or piv.dtype.kind not in "iu" or piv.shape != (n,):
        return ValueError(f"{where}: piv must be lu_factor's pivots, {n} integers, got "
                          f"{getattr(piv, 'shape', type(piv).__name__)}")
    if n and (np.any(piv < np.arange(n)) or np.any(piv >= n)):
        return ValueError(f"{where}: piv must be lu_factor's pivots: piv[i] in i..{n - 1}")
    return None


def _trans_error(where: str, trans) -> BaseException | None:
    if isinstance(trans, bool) or not isinstance(trans, numbers.Integral) or trans not in (0, 1, 2):
        return ValueError(f"{where}: trans must be 0, 1 or 2 (A X = B, A^T X = B, A^H X = B), got {trans!r}")
    return None


def factor_bytes(a, nb: int, grid=None) -> int:
    """Bytes this rank allocates to factor ``a`` with block size ``nb`` on ``grid``. Not collective.

    ``grid`` None: ``a.grid.flat()``'s shape, without making it. The layout's copy and the move's two buffers,
    the padded panel gather and the factored panel, a block row of ``U``.
    """
    n = a.gshape[0]
    if grid is None:  # the flat grid's places: row-major over A's ranks in A's order, as ProcessGrid makes them
        (pr, pc), rank = flat_shape(a.grid.size), a.grid.rank
        row, col = divmod(rank, pc)
    else:
        (pr, pc), row, col = grid.shape, grid.row, grid.col
    lrows, lcols = numroc(n, nb, row, pr), numroc(n, nb, col, pc)
    w = min(nb, n)
    return a.dtype.itemsize * (3 * lrows * lcols + 3 * (n + pr * w) * w + w * lcols)


def solve_bytes(b) -> int:
    """Bytes a rank allocates to solve for ``b``: its copies in the layout and the moves' buffers. Not collective."""
    return 4 * b.lnbytes + 2 * b.dtype.itemsize * (b.gshape[0] // b.grid.shape[0] + 1) * max(b.gshape[1], 1)


# -- the factorization ---------------------------------------------------------------------------------------------

def factor(a, nb: int, where: str, grid=None):
    """:func:`lu_factor` of checked arguments: ``(LUFactor, piv)``. Collective over ``a.grid``.

    For the routines of :mod:`hpcgpu.linalg` that checked ``a`` (and ``nb``, ``grid``: the grid to factor on,
    ``a.grid.flat()`` when None) at their own entry; ``where`` names the routine in the singular matrix's message.
    """
    if a.grid.size == 1:  # one getrf (into a new array), no move, no loop: one block is the block-cyclic layout
        lu, piv, info = getrf(a.local)
        _singular(where, 0, info)
        # kept in LAPACK's (Fortran) order: one rank's factor never moves, and its C-ordered copy was 0.17 s of a
        # 1.4 s n = 4096 factor and solve here; the triangular solves read either order
        return LUFactor(lu, Cyclic(a.gshape, a.grid, nb)), piv
    # few grid rows: each panel's pivot search, gather and interchanges cross pr ranks (n = 4096: at P = 2 0.62
    # of SciPy on 2 x 1, 0.85 on 1 x 2; at P = 4 1.46 s on 2 x 2, 1.18 s on 1 x 4)
    if isinstance(a, CyclicMatrix):  # factored where it lies (on its grid, with its nb: lu_factor checked them)
        local, lay = a.local.copy(), a.layout
    else:
        local, lay = to_cyclic(a, nb, a.grid.flat() if grid is None else grid)  # flat(): collective at first call
    n = lay.n
    piv = np.empty(n, np.int64)
    panels = range(0, n, nb)
    steps = [_Step(lay, k0, min(k0 + nb, n), where, f"panel {p + 1} of {len(panels)}") for p, k0 in enumerate(panels)]
    if steps:
        steps[0].start(local)
    for p, step in enumerate(steps):
        k0, k1 = step.k0, step.k1
        ipiv, lpanel = step.finish()
        piv[k0:k1] = k0 + ipiv
        dst, src = _swaps(k0, ipiv)
        with step.watch("row interchanges"):
            permute_rows(local, lay, dst, src)
        step.store(local, lpanel)
        u12 = step.u_row(local, lpanel)
        # the trailing update: this rank's rows below k1 of L's panel times its columns right of k1 of U's row;
        # lookahead: the next panel's columns first, so that its grid column factors it and posts its broadcasts
        # before the rest of the update, which the other grid columns do meanwhile
        lr0, lr1, lc1 = lay.local_row(k0), lay.local_row(k1), lay.local_col(k1)
        l21 = lpanel[k1 - k0 + lr1 - lr0:]
        ahead = 0
        if p + 1 < len(steps):
            nxt = steps[p + 1]
            if lay.pcol == nxt.qk:
                ahead = nxt.w
                gemm_update(local[lr1:, lc1:lc1 + ahead], l21, u12[:, :ahead])
            nxt.start(local)
        gemm_update(local[lr1:, lc1 + ahead:], l21, u12[:, ahead:])
    return LUFactor(local, lay, a.grid), piv


def _singular(where: str, k0: int, info: int) -> None:
    """Raise, on every rank (``info`` is known to all), when a panel met an exactly zero pivot."""
    if info:
        j = k0 + info - 1
        raise agreed(np.linalg.LinAlgError(f"{where}: A is singular: U's diagonal is exactly zero at column {j} "
                                           f"(LAPACK info {j + 1})"))


class _Step:
    """One panel ``k0:k1`` of the factorization: who owns it and its communication steps."""

    def __init__(self, lay: Cyclic, k0: int, k1: int, where: str, detail: str):
        self.lay, self.k0, self.k1, self.w = lay, k0, k1, k1 - k0
        self.where, self.detail = where, detail
        self.pk, self.qk = lay.row_owner(k0), lay.col_owner(k0)  # the diagonal block's grid row and column
        self.grid = lay.grid

    def watch(self, what: str):
        return watch(f"{self.where} {what}", self.detail)

    def factor_panel(self, local):
        """On grid column ``qk``: gather the panel's rows ``k0:n``, factor them on ``(pk, qk)``.

        Returns ``(lu, ipiv, info)`` on the factoring rank, ``None`` elsewhere.
        """
        lay, k0, w = self.lay, self.k0, self.w
        if lay.pcol != self.qk:
            return None
        xp = xp_of(local)
        lc0 = lay.local_col(k0)
        counts = [lay.local_shape(q)[0] - lay.local_row(k0, q) for q in range(lay.pr)]
        top = max(counts)
        send = xp.zeros((top, w), local.dtype)
        send[:counts[lay.prow]] = local[lay.local_row(k0):, lc0:lc0 + w]
        recv = xp.empty((lay.pr, top, w), local.dtype)
        with self.watch("panel gather"):
            Allgather(send, recv, comm=self.grid.col_comm)
        if lay.prow != self.pk:
            return None
        panel = xp.empty((lay.n - k0, w), local.dtype)
        for q in range(lay.pr):
            rows = lay.rows(q)[lay.local_row(k0, q):] - k0
            panel[xp.asarray(rows)] = recv[q, :counts[q]]
        return getrf(panel)

    def start(self, local) -> None:
        """Factor the panel (:meth:`factor_panel`) and post its broadcasts (``Ibcast``).

        The pivots over the grid, L's panel (:meth:`l_panel`) along the grid rows. Every rank calls it;
        :meth:`finish` waits for both.
        """
        panel = self.factor_panel(local)
        self.meta = np.zeros(self.w + 1, np.int64)  # the pivots, then LAPACK's info
        if panel is not None:
            self.meta[:self.w], self.meta[self.w] = panel[1], panel[2]
        self.meta_req = Ibcast(self.meta, root=self.grid.rank_of(self.pk, self.qk), comm=self.grid.cart)
        self.lpanel = self.l_panel(local, panel)
        self.l_req = Ibcast(self.lpanel, root=self.qk, comm=self.grid.row_comm)

    def finish(self):
        """Wait for :meth:`start`'s broadcasts: ``(pivots within the panel, L's panel)``; a zero pivot raises."""
        with self.watch("pivot broadcast"):
            self.meta_req.Wait()
        with self.watch("L panel broadcast"):
            self.l_req.Wait()
        _singular(self.where, self.k0, int(self.meta[self.w]))
        return self.meta[:self.w], self.lpanel

    def l_panel(self, local, panel):
        """This rank's part of L's panel, ``[diagonal block; its rows k0:n]``, ``(w + rows, w)``.

        Filled on grid column ``qk`` (the factoring rank scatters it down the column by an ``Alltoallv``); on the
        other columns a buffer for the broadcast along the grid row.
        """
        lay, k0, w = self.lay, self.k0, self.w
        xp = xp_of(local)
        mine = lay.lshape[0] - lay.local_row(k0)
        out = xp.empty((w + mine, w), local.dtype)
        if lay.pcol != self.qk:
            return out
        if lay.pr == 1:
            lu = panel[0]
            out[:w], out[w:] = lu[:w], lu
            return out
        counts = [(w + lay.local_shape(q)[0] - lay.local_row(k0, q)) * w for q in range(lay.pr)]
        send = xp.empty(sum(counts) if panel is not None else 0, local.dtype)
        if panel is not None:
            lu, off = panel[0], 0
            for q in range(lay.pr):
                rows = xp.asarray(lay.rows(q)[lay.local_row(k0, q):] - k0)
                part = send[off:off + counts[q]].reshape(-1, w)
                part[:w], part[w:] = lu[:w], lu[rows]
                off += counts[q]
        recv_counts = [counts[lay.prow] if q == self.pk else 0 for q in range(lay.pr)]
        send_counts = counts if panel is not None else [0] * lay.pr
        with self.watch("L panel scatter"):
            Alltoallv(send, send_counts, out.reshape(-1), recv_counts, comm=self.grid.col_comm)
        return out

    def store(self, local, lpanel) -> None:
        """On grid column ``qk``: its rows of the factored panel into its blocks (after the interchanges)."""
        if self.lay.pcol == self.qk:
            lc0 = self.lay.local_col(self.k0)
            local[self.lay.local_row(self.k0):, lc0:lc0 + self.w] = lpanel[self.w:]

    def u_row(self, local, lpanel):
        """U's block row right of the panel, ``L11^-1 A12``: solved on grid row ``pk``, broadcast down the columns."""
        lay, w = self.lay, self.w
        xp = xp_of(local)
        lc1 = lay.local_col(self.k1)
        if lay.prow == self.pk:
            lr0 = lay.local_row(self.k0)
            u = trsm(lpanel[:w], local[lr0:lr0 + w, lc1:], lower=True, unit_diagonal=True)
            local[lr0:lr0 + w, lc1:] = u
        else:
            u = xp.empty((w, lay.lshape[1] - lc1), local.dtype)
        with self.watch("U row broadcast"):
            Bcast(u, root=self.pk, comm=self.grid.col_comm)
        return u


# -- row interchanges ------------------------------------------------------------------------------------------------

def _swaps(k0: int, ipiv) -> tuple[np.ndarray, np.ndarray]:
    """LAPACK's interchanges ``k0 + i <-> k0 + ipiv[i]``, in order, as one move ``(dst, src)``.

    New row ``dst[j]`` is old row ``src[j]``: only the rows that move, ascending ``dst``. Not collective.
    """
    held: dict[int, int] = {}  # position -> the original row now there
    for i, p in enumerate(ipiv):
        a, b = k0 + i, k0 + int(p)
        held[a], held[b] = held.get(b, b), held.get(a, a)
    moved = sorted(g for g, s in held.items() if g != s)
    return np.array(moved, np.int64), np.array([held[g] for g in moved], np.int64)


def full_permutation(piv) -> tuple[np.ndarray, np.ndarray]:
    """All of ``piv``'s interchanges as one move ``(dst, src)``, as ``_swaps``. Not collective."""
    perm = np.arange(len(piv), dtype=np.int64)
    for i, p in enumerate(piv):
        if p != i:
            perm[i], perm[p] = perm[p], perm[i]
    dst = np.nonzero(perm != np.arange(len(piv)))[0]
    return dst, perm[dst]


def _local_index(g: np.ndarray, nb: int, nprocs: int) -> np.ndarray:
    """The local index of global rows ``g`` on the grid row that holds each."""
    return (g // (nb * nprocs)) * nb + g % nb


def permute_rows(local, lay: Cyclic, dst: np.ndarray, src: np.ndarray) -> None:
    """Move global row ``src[j]`` to row ``dst[j]`` in every column of a block-cyclic matrix, in place.

    Collective over each grid column (``lay.grid.col_comm``): one ``Alltoallv`` of the rows that change grid row,
    none at one grid row. ``dst`` and ``src`` are the same on every rank, and ``src`` is a permutation of ``dst``.
    """
    if dst.size == 0 or local.shape[1] == 0:  # a grid column's ranks hold the same columns: all return together
        return
    xp = xp_of(local)
    nb, pr, me = lay.nb, lay.pr, lay.prow
    if pr == 1:
        local[xp.asarray(dst)] = local[xp.asarray(src)]
        return
    own_d, own_s = (dst // nb) % pr, (src // nb) % pr
    ncols = local.shape[1]
    out_rows = [_local_index(src[(own_s == me) & (own_d == q)], nb, pr) for q in range(pr)]
    in_rows = [_local_index(dst[(own_d == me) & (own_s == q)], nb, pr) for q in range(pr)]
    send_idx, recv_idx = np.concatenate(out_rows), np.concatenate(in_rows)
    send = xp.ascontiguousarray(local[xp.asarray(send_idx)]).reshape(-1)
    recv = xp.empty(recv_idx.size * ncols, local.dtype)
    Alltoallv(send, [r.size * ncols for r in out_rows], recv, [r.size * ncols for r in in_rows],
              comm=lay.grid.col_comm)
    if recv_idx.size:
        local[xp.asarray(recv_idx)] = recv.reshape(-1, ncols)


# -- the solve -------------------------------------------------------------------------------------------------------

def solve_factored(lu: LUFactor, piv: np.ndarray, b, trans: int = 0):
    """:func:`lu_solve` of checked arguments: ``X`` as a DistMatrix. Collective over the grid."""
    from .triangular import trsm_cyclic

    if lu.layout.grid.size == 1:  # getrf's factor as LAPACK left it: one getrs, no loop over blocks
        from .distmatrix import DistMatrix

        return DistMatrix(getrs(lu.local, piv, b.local, trans), b.gshape, b.grid)
    local, lay = to_cyclic(b, lu.nb, lu.layout.grid)
    dst, src = full_permutation(piv)
    if trans == 0:  # A = P L U: L U X = P^T B
        permute_rows(local, lay, dst, src)
        local = trsm_cyclic(lu.local, lu.layout, local, lay, lower=True, trans=0, unit_diagonal=True)
        local = trsm_cyclic(lu.local, lu.layout, local, lay, lower=False, trans=0, unit_diagonal=False)
    else:  # A^T = U^T L^T P^T: X = P L^-T U^-T B (conjugated for trans 2)
        local = trsm_cyclic(lu.local, lu.layout, local, lay, lower=False, trans=trans, unit_diagonal=False)
        local = trsm_cyclic(lu.local, lu.layout, local, lay, lower=True, trans=trans, unit_diagonal=True)
        permute_rows(local, lay, src, dst)
    return from_cyclic(local, lay, b.grid)

