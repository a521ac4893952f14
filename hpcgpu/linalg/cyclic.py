"""The 2-D block-cyclic layout (ScaLAPACK's) the factorizations work on, and the one move in and out of it.

A ``DistMatrix`` is one contiguous block a rank: on it a right-looking factorization keeps a rank busy only while
its block is in the trailing matrix (at P = 2 the ranks are 57% busy on average, mean over max work; 0.21 on an
8 x 8 grid). Dealt in ``nb x nb`` blocks round-robin over the grid, every rank keeps a share of the trailing
matrix to the end (97% and 69%). :func:`to_cyclic` moves a matrix into that layout and :func:`from_cyclic` back,
each by one ``Alltoallv`` over the grid; the routines of :mod:`hpcgpu.linalg` factor in between.

The layout is ScaLAPACK's with its first block on grid position ``(0, 0)`` (``RSRC = CSRC = 0``): global row ``i``
lives on grid row ``(i // nb) % pr`` at local row ``(i // (nb * pr)) * nb + i % nb``; columns likewise over the
grid's columns. A rank's local array is C-contiguous, ``(numroc(m), numroc(n))``, its rows and columns in
ascending global order.
"""

from __future__ import annotations

import numbers

import numpy as np

from .. import _device
from ..comm import Alltoallv

__all__ = ["Cyclic", "numroc", "to_cyclic", "from_cyclic_blocks", "default_nb"]


def numroc(n: int, nb: int, iproc: int, nprocs: int) -> int:
    """How many of ``n`` rows (or columns) dealt in blocks of ``nb`` over ``nprocs`` land on ``iproc``.

    ScaLAPACK's ``NUMROC`` with the first block on process 0. Local, no communication.

    Parameters
    ----------
    n : int
        Global rows (or columns).
    nb : int
        Block size.
    iproc : int
        The grid row (or column) asked about, ``0 <= iproc < nprocs``.
    nprocs : int
        Grid rows (or columns).

    Returns
    -------
    int
    """
    return _count_below(n, nb, iproc, nprocs)


def _count_below(i: int, nb: int, p: int, nprocs: int) -> int:
    """How many of the global indices ``0 .. i-1`` live on process ``p``."""
    cycle = nb * nprocs
    return (i // cycle) * nb + min(max(i % cycle - p * nb, 0), nb)


PANELS_A_RANK = 10
"""About how many panels :func:`default_nb` leaves each grid row or column of ranks (``n / (nb max(pr, pc))``):
fewer leave the last panels' ranks idle and the lookahead nothing to hide behind; more make more, smaller
messages and GEMMs. Measured: docs/performance.rst, "The default block size"."""


def default_nb(xp=np, n: int | None = None, grid=None) -> int:
    """The block size when the user gives none: about :data:`PANELS_A_RANK` panels a grid row or column of ranks.

    ``n / (10 max(pr, pc))`` rounded down to a multiple of 32 (of 128 on a GPU), within 64-256 on a host and
    256-512 on a GPU: 256 is the cache-blocked LAPACK sizes' order; on a GPU a cuBLAS GEMM of 512 columns runs
    near its peak, and smaller panels leave the device waiting on the host. At n = 4096 on a 2 x 2 or 2 x 1 grid
    192: with it Cholesky and LU at P = 4 ran 0.70-0.95 s and 1.33-1.61 s here, against 1.01-1.26 s and
    1.53-1.87 s at 128 and 0.77-0.97 s and 1.66-1.85 s at 256 (medians of three runs, this project's 2-core
    machine: docs/performance.rst). Without ``n`` or ``grid``, 256 (512 on a GPU). The same on every rank (it
    depends on agreed arguments only).

    Parameters
    ----------
    xp : module
        ``numpy`` (host) or ``cupy`` (device).
    n : int, optional
        The matrix's order (its larger side).
    grid : ProcessGrid, optional
        The factorization's grid (or its transpose: only ``max(pr, pc)`` counts).

    Returns
    -------
    int
    """
    (least, top), step = ((64, 256), 32) if xp is np else ((256, 512), 128)
    if n is None or grid is None:
        return top
    return max(least, min(top, n // (PANELS_A_RANK * max(grid.shape)) // step * step))


class Cyclic:
    """Where each element of an ``m x n`` matrix lives in the 2-D block-cyclic layout over a process grid.

    Local: constructing one communicates nothing (every rank builds the same from agreed arguments).

    Parameters
    ----------
    gshape : (int, int)
        Global shape ``(m, n)``, each >= 0.
    grid : ProcessGrid
        The ``pr x pc`` grid; this rank is at ``(grid.row, grid.col)``.
    nb : int
        Block size (rows and columns), >= 1.

    Attributes
    ----------
    m, n, nb : int
    pr, pc : int
        The grid's shape.
    prow, pcol : int
        This rank's grid position.
    lshape : (int, int)
        This rank's local shape, ``(numroc(m, nb, prow, pr), numroc(n, nb, pcol, pc))``.
    """

    def __init__(self, gshape, grid, nb: int):
        self.m, self.n = (int(gshape[0]), int(gshape[1]))
        self.nb = int(nb)
        self.grid = grid
        self.pr, self.pc = grid.shape
        self.prow, self.pcol = grid.row, grid.col
        self.lshape = self.local_shape()

    def local_shape(self, prow: int | None = None, pcol: int | None = None) -> tuple[int, int]:
        """The local shape of grid position ``(prow, pcol)`` (this rank's by default).

        Parameters
        ----------
        prow, pcol : int, optional
            A grid position.

        Returns
        -------
        (int, int)
        """
        prow = self.prow if prow is None else prow
        pcol = self.pcol if pcol is None else pcol
        return numroc(self.m, self.nb, prow, self.pr), numroc(self.n, self.nb, pcol, self.pc)

    def rows(self, prow: int | None = None) -> np.ndarray:
        """The global rows grid row ``prow`` holds, ascending (int64): its local rows' global indices.

        Parameters
        ----------
        prow : int, optional
            This rank's grid row by default.

        Returns
        -------
        numpy.ndarray
        """
        return _indices(self.m, self.nb, self.prow if prow is None else prow, self.pr)

    def cols(self, pcol: int | None = None) -> np.ndarray:
        """The global columns grid column ``pcol`` holds, ascending (int64).

        Parameters
        ----------
        pcol : int, optional
            This rank's grid column by default.

        Returns
        -------
        numpy.ndarray
        """
        return _indices(self.n, self.nb, self.pcol if pcol is None else pcol, self.pc)

    def row_owner(self, i: int) -> int:
        """The grid row holding global row ``i``.

        Parameters
        ----------
        i : int

        Returns
        -------
        int
        """
        return (i // self.nb) % self.pr

    def col_owner(self, j: int) -> int:
        """The grid column holding global column ``j``.

        Parameters
        ----------
        j : int

        Returns
        -------
        int
        """
        return (j // self.nb) % self.pc

    def local_row(self, i: int, prow: int | None = None) -> int:
        """How many local rows of grid row ``prow`` (this rank's by default) are above global row ``i``.

        That is ``i``'s local index on its owner, and on any grid row the first local row at or below ``i`` (a
        trailing matrix from global row ``i`` is ``local[local_row(i):]``).

        Parameters
        ----------
        i : int
            A global row, ``0 <= i <= m``.
        prow : int, optional
            This rank's grid row by default.

        Returns
        -------
        int
        """
        return _count_below(i, self.nb, self.prow if prow is None else prow, self.pr)

    def local_col(self, j: int, pcol: int | None = None) -> int:
        """As :meth:`local_row`, for columns over the grid's columns.

        Parameters
        ----------
        j : int
            A global column, ``0 <= j <= n``.
        pcol : int, optional
            This rank's grid column by default.

        Returns
        -------
        int
        """
        return _count_below(j, self.nb, self.pcol if pcol is None else pcol, self.pc)

    def __repr__(self) -> str:
        return f"Cyclic(({self.m}, {self.n}), grid {self.pr}x{self.pc}, nb={self.nb})"


def _indices(n: int, nb: int, p: int, nprocs: int) -> np.ndarray:
    starts = np.arange(p * nb, n, nb * nprocs, dtype=np.int64)
    if starts.size == 0:
        return np.empty(0, np.int64)
    idx = (starts[:, None] + np.arange(nb, dtype=np.int64)[None, :]).ravel()
    return idx[idx < n]


def _block_rows(grid, m: int, prow: int) -> np.ndarray:
    s = grid.rows(m, prow)
    return np.arange(s.start, s.stop, dtype=np.int64)


def _block_cols(grid, n: int, pcol: int) -> np.ndarray:
    s = grid.cols(n, pcol)
    return np.arange(s.start, s.stop, dtype=np.int64)


UNMOVED_FILL = None
"""What a move of one triangle puts where it moves nothing (None: leaves the memory as ``xp.empty`` gives it). The
tests set NaN, so that a routine reading an element outside its triangle gives NaN and fails its checks."""

ROW_ALIGN = 512
"""A factor's local array whose rows are a multiple of this many bytes apart gets :data:`ROW_PAD` more
(:func:`padded_empty`)."""

ROW_PAD = 128
"""Bytes added to such a row stride: two cache lines."""


def padded_empty(shape, dtype, xp=np):
    """An uninitialized C-ordered ``shape`` array whose row stride is not a multiple of :data:`ROW_ALIGN` bytes.

    A view of a wider array (rows contiguous, ``strides[0]`` larger than a row) when a row's bytes are such a
    multiple, else a plain array. Rows of ``2^k`` doubles (a 4096-column matrix on a ``P x 1`` grid) map to the
    same cache sets, and the trailing updates' GEMMs, which write a strip of rows at a time, evict their own
    lines: a Cholesky factorization of order 4096 at 2 ranks ran 8% faster on the padded array here (0.385 s
    against 0.42-0.45). On the host only; a device array is returned as ``xp.empty`` makes it (cuBLAS's
    leading dimension is the GPU's matter). Not collective.

    Parameters
    ----------
    shape : (int, int)
        The local array's shape (any shape; only a 2-D one of at least two rows is padded).
    dtype : dtype
    xp : module
        ``numpy`` or ``cupy``.

    Returns
    -------
    xp.ndarray
        ``shape``, ``dtype``; rows contiguous, ``strides[0]`` a row's bytes plus :data:`ROW_PAD` where padded.
    """
    shape = tuple(int(s) for s in shape)
    dtype = np.dtype(dtype)
    if xp is not np or len(shape) != 2 or shape[0] < 2 or (shape[1] * dtype.itemsize) % ROW_ALIGN:
        return xp.empty(shape, dtype=dtype)
    extra = -(-ROW_PAD // dtype.itemsize)
    return np.empty((shape[0], shape[1] + extra), dtype=dtype)[:, :shape[1]]


MAX_TRIANGLE_BLOCKS = 128
"""The most blocks a side (``ceil(n / nb)``) at which a move of one triangle goes piece by piece (:func:`_move`);
beyond it the pieces' Python loop would cost more than the other triangle's bytes, and the whole matrix moves."""


def _triangle_runs(pos: np.ndarray, glob: np.ndarray, nb: int) -> list[tuple[int, int, int]]:
    """The positions ``pos`` of global indices ``glob`` as runs that never cross a multiple of ``nb``.

    ``[(pos_start, glob_start, length), ...]``: consecutive in the global index, split at each block of the cyclic
    layout, so both sides of a move find the same runs from the same indices (the runs are then consecutive in
    either side's local positions too).
    """
    if pos.size == 0:
        return []
    breaks = np.flatnonzero((np.diff(glob) != 1) | (glob[1:] % nb == 0)) + 1
    starts = np.r_[0, breaks]
    lengths = np.diff(np.r_[starts, pos.size])
    if np.any(pos[starts] + lengths - 1 != pos[starts + lengths - 1]):  # a layout not made of such runs: a bug
        raise AssertionError("a triangle's move found runs not consecutive in a layout")
    return list(zip(pos[starts].tolist(), glob[starts].tolist(), lengths.tolist(), strict=True))


def _pieces(ri, gr, ci, gc, nb: int, triangle: str) -> list[tuple[int, int, int, int]]:
    """The ``(row, nrows, col, ncols)`` pieces of the positions ``ri`` x ``ci`` that hold part of ``triangle``.

    ``gr`` and ``gc`` are their global indices; a piece is kept when any of its elements is on or below the
    diagonal (``"lower"``) or on or above it (``"upper"``), in ascending global order: the sender's and the
    receiver's lists are the same pieces in the same order.
    """
    rows, cols = _triangle_runs(ri, gr, nb), _triangle_runs(ci, gc, nb)
    if triangle == "lower":
        return [(r, nr, c, nc) for r, g, nr in rows for c, h, nc in cols if g + nr - 1 >= h]
    return [(r, nr, c, nc) for r, g, nr in rows for c, h, nc in cols if g <= h + nc - 1]


def _move(local, src, dst, comm, dst_shape, dtype, triangle=None, nb=None, zero=False, padded=False,
          transposed=False):
    """Move a matrix between two layouts by one ``Alltoallv`` over ``comm``.

    ``src(rank)`` and ``dst(rank)`` are ``(rows, cols)``, the global indices (ascending) that rank of ``comm``
    holds in the source and the target layout; the two may lie on different grids over the same ranks. Every
    piece is sent and placed in ascending global order on both sides, so one intersection per pair of ranks is
    the whole plan. ``triangle`` (``"lower"`` or ``"upper"``, with the cyclic side's ``nb``): only the pieces
    that hold part of that triangle move (about half the bytes, :func:`_pieces`). A piece is an ``nb x nb``
    block of the cyclic layout, cut further where the block layout's ranks divide it, so even part of a diagonal
    block may not move. The target's elements no piece reaches are left undefined (:data:`UNMOVED_FILL`), or
    zero with ``zero``. ``padded``: the target is :func:`padded_empty`'s (rows contiguous, the row stride padded).
    ``transposed``: the target is the transpose (a view) of a C-ordered array (padded with ``padded``); each piece
    is written through it, a transposing copy of one block at a time, in cache (the rank's own part by runs).
    """
    xp = _device.cupy_or_none() if _device.is_device_array(local) else np
    size, me = comm.Get_size(), comm.Get_rank()
    (my_r, my_c), (t_r, t_c) = src(me), dst(me)
    rows_to, cols_to, rows_from, cols_from = [], [], [], []
    for p in range(size):
        (sr, sc), (dr, dc) = src(p), dst(p)
        rows_to.append(np.nonzero(np.isin(my_r, dr))[0])
        cols_to.append(np.nonzero(np.isin(my_c, dc))[0])
        rows_from.append(np.nonzero(np.isin(t_r, sr))[0])
        cols_from.append(np.nonzero(np.isin(t_c, sc))[0])
    # this rank's own piece is copied straight from the source to the target (no buffers): 1 / P of the bytes,
    # and two fresh buffers the fewer, which a virtual machine pays for in first-touch page faults
    if triangle is None:
        scounts = [0 if p == me else rows_to[p].size * cols_to[p].size for p in range(size)]
        rcounts = [0 if p == me else rows_from[p].size * cols_from[p].size for p in range(size)]
    else:
        send = [[] if p == me else _pieces(rows_to[p], my_r[rows_to[p]], cols_to[p], my_c[cols_to[p]], nb, triangle)
                for p in range(size)]
        recv = [[] if p == me else _pieces(rows_from[p], t_r[rows_from[p]], cols_from[p], t_c[cols_from[p]], nb,
                                           triangle) for p in range(size)]
        scounts = [sum(nr * nc for _, nr, _, nc in pieces) for pieces in send]
        rcounts = [sum(nr * nc for _, nr, _, nc in pieces) for pieces in recv]
    sendbuf = xp.empty(sum(scounts), dtype=dtype)
    off = 0
    for p, k in enumerate(scounts):
        if not k:
            continue
        if triangle is None:
            _gather(local, rows_to[p], cols_to[p], sendbuf[off:off + k].reshape(rows_to[p].size, -1), xp)
        else:
            _pack_pieces(local, send[p], sendbuf[off:off + k])
        off += k
    recvbuf = xp.empty(sum(rcounts), dtype=dtype)
    Alltoallv(sendbuf, scounts, recvbuf, rcounts, comm=comm)
    out = _target(dst_shape, dtype, xp, zero, triangle is not None and UNMOVED_FILL is not None, padded, transposed)
    for (s0, d0, nr) in _paired_runs(rows_to[me], rows_from[me]):
        for (c0, e0, nc) in _paired_runs(cols_to[me], cols_from[me]):
            out[d0:d0 + nr, e0:e0 + nc] = local[s0:s0 + nr, c0:c0 + nc]
    off = 0
    for p, k in enumerate(rcounts):
        if not k:
            continue
        if triangle is None:
            ri, ci = rows_from[p], cols_from[p]
            _scatter(out, ri, ci, recvbuf[off:off + k].reshape(ri.size, ci.size), xp)
        else:
            _place_pieces(out, recv[p], recvbuf[off:off + k])
        off += k
    return out


def _target(shape, dtype, xp, zero: bool, fill: bool, padded: bool, transposed: bool = False):
    """A move's target array: zeros, :data:`UNMOVED_FILL` (``fill``) or uninitialized.

    ``padded``: on a padded row stride (:func:`padded_empty`). ``transposed``: the transpose (a view) of a
    C-ordered ``shape[::-1]`` array (padded with ``padded``).
    """
    if transposed:
        return _target(tuple(shape)[::-1], dtype, xp, zero, fill, padded).T
    if padded:
        out = padded_empty(shape, dtype, xp)
        if zero or fill:
            out[...] = 0 if zero else UNMOVED_FILL
        return out
    if zero or not fill:
        return (xp.zeros if zero else xp.empty)(shape, dtype=dtype)
    return xp.full(shape, UNMOVED_FILL, dtype=dtype)


def _pack_pieces(local, pieces, flat) -> None:
    """Copy the ``(row, nrows, col, ncols)`` pieces of ``local`` one after another into the 1-D ``flat``."""
    at = 0
    for r, nr, c, nc in pieces:
        flat[at:at + nr * nc].reshape(nr, nc)[...] = local[r:r + nr, c:c + nc]
        at += nr * nc


def _place_pieces(out, pieces, flat) -> None:
    """Copy the 1-D ``flat`` into the ``(row, nrows, col, ncols)`` pieces of ``out``, as :func:`_pack_pieces` packs."""
    at = 0
    for r, nr, c, nc in pieces:
        out[r:r + nr, c:c + nc] = flat[at:at + nr * nc].reshape(nr, nc)
        at += nr * nc


def _paired_runs(src: np.ndarray, dst: np.ndarray) -> list[tuple[int, int, int]]:
    """Positions ``src[i]``, ``dst[i]`` (one global index in two layouts) as runs consecutive in both.

    Returns ``[(src_start, dst_start, length), ...]``.
    """
    if src.size == 0:
        return []
    breaks = np.flatnonzero((np.diff(src) != 1) | (np.diff(dst) != 1)) + 1
    starts = np.r_[0, breaks]
    lengths = np.diff(np.r_[starts, src.size])
    return list(zip(src[starts].tolist(), dst[starts].tolist(), lengths.tolist(), strict=True))


def _runs(idx: np.ndarray) -> list[tuple[int, int]]:
    """The ascending indices ``idx`` as runs of consecutive ones: ``[(start, stop), ...]``."""
    return [(s, s + n) for s, _, n in _paired_runs(idx, idx)]


def _gather(local, ri: np.ndarray, ci: np.ndarray, out, xp) -> None:
    """``out[...] = local[ri][:, ci]``: whole rows and column runs copied as blocks, no element-wise index.

    The layouts' pieces are runs of ``nb`` (or whole ranges): one strided copy per column run of the rows, taken
    first (a row gather of a C-ordered array is one contiguous copy a row), where 2-D fancy indexing computed
    every element's index (0.14 s of a 4096^2 move at 2 ranks, two thirds of it).
    """
    rr = _runs(ri)
    rows = local[rr[0][0]:rr[0][1]] if len(rr) == 1 else xp.take(local, xp.asarray(ri), axis=0)
    at = 0
    for c0, c1 in _runs(ci):
        out[:, at:at + c1 - c0] = rows[:, c0:c1]
        at += c1 - c0


def _scatter(out, ri: np.ndarray, ci: np.ndarray, block, xp) -> None:
    """``out[ri][:, ci] = block`` (``out`` updated in place), by row runs and column runs as :func:`_gather`."""
    cr = _runs(ci)
    rr = _runs(ri)
    at = 0
    for r0, r1 in rr:
        part = block[at:at + r1 - r0]
        pos = 0
        for c0, c1 in cr:
            out[r0:r1, c0:c1] = part[:, pos:pos + c1 - c0]
            pos += c1 - c0
        at += r1 - r0


def _blocks_of(grid, m: int, n: int):
    """``rank -> (rows, cols)`` of the 2-D block layout of an ``m x n`` matrix on ``grid``."""
    def of(rank):
        r, c = grid.cart.Get_coords(rank)
        return _block_rows(grid, m, r), _block_cols(grid, n, c)
    return of


def _cyclic_of(layout: Cyclic):
    """``rank -> (rows, cols)`` of ``layout``."""
    def of(rank):
        r, c = layout.grid.cart.Get_coords(rank)
        return layout.rows(r), layout.cols(c)
    return of


def _by_triangle(triangle, n: int, nb: int):
    """``triangle`` where the move goes piece by piece, else None (the whole matrix moves).

    Piece by piece at most :data:`MAX_TRIANGLE_BLOCKS` blocks a side; the same on every rank (agreed arguments).
    """
    if triangle not in (None, "lower", "upper"):
        raise ValueError(f"triangle must be 'lower', 'upper' or None, got {triangle!r}")
    if triangle is None or -(-n // nb) > MAX_TRIANGLE_BLOCKS:
        return None
    return triangle


def to_cyclic(a, nb: int, grid=None, triangle=None, *, padded=False, transposed=False):
    """Move a :class:`~hpcgpu.DistMatrix` into the block-cyclic layout of its grid (or of ``grid``).

    Collective over ``a.grid``: one ``Alltoallv``. The caller agrees on ``nb`` (the routines of
    :mod:`hpcgpu.linalg` do, with their other arguments).

    Parameters
    ----------
    a : DistMatrix
        Global ``(m, n)``, on a ``pr x pc`` grid, host or device.
    nb : int
        Block size, >= 1.
    grid : ProcessGrid, optional
        The layout's grid: another shape over the same ranks in the same order (``a.grid.wide()``); ``a.grid``
        by default.
    triangle : {None, "lower", "upper"}, optional
        Move only the pieces that hold part of this triangle of a square ``a`` (diagonal included), about half
        the bytes: what a Cholesky factorization or a triangular solve reads. A piece is an ``nb x nb`` block cut
        where the block layout's ranks divide it; the elements of ``local`` no piece reaches (outside the
        triangle, some even in a diagonal block) are undefined (:data:`UNMOVED_FILL`). Beyond
        :data:`MAX_TRIANGLE_BLOCKS` blocks a side the whole matrix moves.
    padded : bool, optional
        Give ``local`` a padded row stride (:func:`padded_empty`): what a factorization that updates it in place
        asks for. Its rows stay contiguous, the array is then not C-contiguous.
    transposed : bool, optional
        Give ``local`` as the transpose (a view) of a C-ordered array (padded with ``padded``): ``local.T`` is
        then the layout of ``A^T`` a factorization can update in place (Cholesky's upper form works on the
        lower form of ``A^H``), with no transposing copy of the whole array: each piece is written transposed as
        it arrives, one block at a time.

    Returns
    -------
    local : xp.ndarray, shape ``layout.lshape``
        This rank's blocks, C-contiguous (unless ``padded`` or ``transposed``), ``a``'s dtype and side (host or
        device).
    layout : Cyclic
    """
    layout = Cyclic(a.gshape, a.grid if grid is None else grid, nb)
    m, n = a.gshape
    tri = _by_triangle(triangle, max(m, n), nb)
    local = _move(a.local, _blocks_of(a.grid, m, n), _cyclic_of(layout), a.grid.cart, layout.lshape, a.dtype,
                  tri, nb, padded=padded, transposed=transposed)
    return local, layout


def from_cyclic_blocks(local, layout: Cyclic, grid=None, triangle=None):
    """This rank's block of a block-cyclic matrix moved back into the block layout of its grid (or ``grid``).

    Collective over ``layout.grid``: one ``Alltoallv``.

    Parameters
    ----------
    local : xp.ndarray, shape ``layout.lshape``
        This rank's blocks.
    layout : Cyclic
    grid : ProcessGrid, optional
        The result's grid: another shape over the same ranks in the same order; ``layout.grid`` by default.
    triangle : {None, "lower", "upper"}, optional
        A triangular matrix (zero outside this triangle, as a Cholesky factor): only the pieces that hold part
        of it move (about half the bytes), and the result's elements no piece reaches are zero.

    Returns
    -------
    xp.ndarray
        This rank's block of the global ``(layout.m, layout.n)`` matrix on ``grid`` (its block layout),
        ``local``'s dtype and side (:func:`hpcgpu.linalg.distmatrix.from_cyclic` makes it a DistMatrix).
    """
    grid = layout.grid if grid is None else grid
    m, n = layout.m, layout.n
    tri = _by_triangle(triangle, max(m, n), layout.nb)
    out = _move(local, _cyclic_of(layout), _blocks_of(grid, m, n), grid.cart, grid.block_shape((m, n)),
                np.dtype(local.dtype), tri, layout.nb, zero=tri is not None)
    return out


def nb_error(where: str, nb) -> BaseException | None:
    """``nb`` is neither None nor a positive int."""
    if nb is None:
        return None
    if isinstance(nb, bool) or not isinstance(nb, numbers.Integral):
        return TypeError(f"{where}: nb must be an int (a block size, >= 1) or None, got {type(nb).__name__}")
    if nb < 1:
        return ValueError(f"{where}: nb must be >= 1, got {nb}")
    return None
