"""The 2-D process grid: a Cartesian communicator with row and column communicators."""

from __future__ import annotations

import numbers
import re

from mpi4py import MPI

from .._partition import block_range, block_starts
from ..comm import default_comm
from ..errors import agree_inputs, agreed
from .. import watchdog as _watchdog  # noqa: F401 - the agreement of arguments waits under it

__all__ = ["ProcessGrid", "parse_grid", "default_grid"]

_GRIDS: dict = {}


def _integers(values, what: str, none: bool = False) -> None:
    """Refuse ``values`` (a tuple of arguments) unless each is an integer, or None where ``none``. Not collective.

    Raises an agreed ``TypeError`` naming ``what``: arguments are each rank's alike, so every rank raises it.
    """
    for v in values:
        if not ((v is None and none) or (isinstance(v, numbers.Integral) and not isinstance(v, bool))):
            raise agreed(TypeError(f"{what} must be integers, got {values if len(values) > 1 else v!r}"))


def _pair(gshape, what: str) -> None:
    """Refuse ``gshape`` unless it is two integers (a global shape). Not collective."""
    if isinstance(gshape, (str, bytes)) or not hasattr(gshape, "__len__") or len(gshape) != 2:
        raise agreed(TypeError(f"{what} must be two integers, got {gshape!r}"))
    _integers(tuple(gshape), what)


def parse_grid(text: str) -> tuple[int, int]:
    """``"2x3"`` -> ``(2, 3)``.

    Not collective.

    Parameters
    ----------
    text : str
        ``PRxPC``: rows and columns of the grid, separated by ``x``, ``X``,
        ``*`` or ``,`` (spaces allowed around them).

    Returns
    -------
    (int, int)
        ``(pr, pc)``.

    Raises
    ------
    ValueError
        Not of the form ``PRxPC`` with positive integers.
    """
    m = re.fullmatch(r"\s*(\d+)\s*[xX*,]\s*(\d+)\s*", text)
    if not m or int(m.group(1)) < 1 or int(m.group(2)) < 1:
        raise ValueError(f"--grid must look like 2x3 (rows x columns), got {text!r}")
    return int(m.group(1)), int(m.group(2))


class ProcessGrid:
    """A ``pr x pc`` grid of the ranks of ``comm``, row-major.

    Collective: all ranks of ``comm`` construct it together (the agreement
    of ``dims``, ``Create_cart`` and two ``Sub`` calls).

    Parameters
    ----------
    dims : (int, int), optional
        ``(pr, pc)``; ``MPI.Compute_dims(size, 2)`` (as square as possible,
        ``pr >= pc``) when omitted.
    comm : mpi4py.MPI.Intracomm, keyword-only
        The runtime's private communicator by default.

    Attributes
    ----------
    shape : (int, int)
        ``(pr, pc)``.
    row, col : int
        This rank's grid coordinates.
    cart : mpi4py.MPI.Cartcomm
    row_comm : mpi4py.MPI.Cartcomm
        The ``pc`` ranks of this grid row; rank in it = ``col``.
    col_comm : mpi4py.MPI.Cartcomm
        The ``pr`` ranks of this grid column; rank in it = ``row``.

    Raises
    ------
    ValueError
        ``pr * pc`` differs from the number of ranks, or ``dims`` differ
        across the ranks (raised on every rank, before any other
        communication, as an :class:`hpcgpu.AgreedError`:
        :func:`hpcgpu.errors.agree_inputs`).

    Notes
    -----
    A matrix of global shape ``(m, n)`` is distributed in 2-D blocks: rank
    ``(i, j)`` holds rows ``block_range(m, pr, i)`` and columns
    ``block_range(n, pc, j)``. Blocks differ in size by at most one row or
    column and may be empty when a dimension is smaller than the grid.
    """

    def __init__(self, dims: tuple[int, int] | None = None, *, comm: MPI.Intracomm | None = None):
        if comm is None:
            comm = default_comm()
        if not isinstance(comm, MPI.Intracomm):  # no communicator to agree over: each rank's alike
            raise agreed(TypeError(f"ProcessGrid: comm must be an mpi4py.MPI.Intracomm, got {type(comm).__name__}"))
        size = comm.Get_size()
        if dims is None:
            dims = tuple(MPI.Compute_dims(size, 2))
        try:  # a refusal of the type is agreed below, with the other ranks' arguments
            _pair(dims, "ProcessGrid: dims (pr, pc)")
            pr, pc = (int(d) for d in dims)
            err = ValueError(f"--grid {pr}x{pc} has {pr * pc} places for {size} ranks") \
                if pr < 1 or pc < 1 or pr * pc != size else None
        except TypeError as e:
            pr, pc, err = dims, None, e
        agree_inputs("ProcessGrid", {"dims": (pr, pc)}, comm=comm, error=err)  # before Create_cart, which would hang
        self.shape = (pr, pc)
        self.cart = comm.Create_cart([pr, pc], periods=[False, False], reorder=False)
        self.row, self.col = self.cart.Get_coords(self.cart.Get_rank())
        self.row_comm = self.cart.Sub([False, True])
        self.col_comm = self.cart.Sub([True, False])

    @property
    def rank(self) -> int:
        """This rank in :attr:`cart`."""
        return self.cart.Get_rank()

    @property
    def size(self) -> int:
        """Number of ranks, ``pr * pc``."""
        return self.cart.Get_size()

    def rank_of(self, row: int, col: int) -> int:
        """Rank in :attr:`cart` of grid position ``(row, col)``.

        Not collective.

        Parameters
        ----------
        row : int
            Grid row, ``0 <= row < pr``.
        col : int
            Grid column, ``0 <= col < pc``.

        Returns
        -------
        int
            ``row * pc + col`` (the grid is row-major and not reordered).
        """
        _integers((row, col), "ProcessGrid.rank_of: row and col")
        return self.cart.Get_cart_rank([row, col])

    def rows(self, m: int, row: int | None = None) -> slice:
        """Global rows of an ``m``-row matrix held by grid row ``row`` (default: mine).

        Not collective.

        Parameters
        ----------
        m : int
            Global number of rows of the matrix.
        row : int, optional
            Grid row, ``0 <= row < pr``; this rank's :attr:`row` when omitted.

        Returns
        -------
        slice
            ``slice(start, stop)`` with ``(start, stop) = block_range(m, pr, row)``;
            empty when ``m < pr`` leaves that grid row nothing.

        Raises
        ------
        ValueError
            ``row`` is not a grid row.
        """
        _integers((m, row), "ProcessGrid.rows: m and row", none=True)
        return slice(*block_range(m, self.shape[0], self.row if row is None else row))

    def cols(self, n: int, col: int | None = None) -> slice:
        """Global columns of an ``n``-column matrix held by grid column ``col`` (default: mine).

        Not collective.

        Parameters
        ----------
        n : int
            Global number of columns of the matrix.
        col : int, optional
            Grid column, ``0 <= col < pc``; this rank's :attr:`col` when omitted.

        Returns
        -------
        slice
            ``slice(start, stop)`` with ``(start, stop) = block_range(n, pc, col)``;
            empty when ``n < pc`` leaves that grid column nothing.

        Raises
        ------
        ValueError
            ``col`` is not a grid column.
        """
        _integers((n, col), "ProcessGrid.cols: n and col", none=True)
        return slice(*block_range(n, self.shape[1], self.col if col is None else col))

    def row_starts(self, m: int) -> list[int]:
        """First global row of every grid row, then ``m``.

        Not collective.

        Parameters
        ----------
        m : int
            Global number of rows of the matrix.

        Returns
        -------
        list of int
            ``pr + 1`` nondecreasing offsets: grid row ``i`` holds rows
            ``starts[i]:starts[i + 1]``.
        """
        _integers((m,), "ProcessGrid.row_starts: m")
        return block_starts(m, self.shape[0])

    def col_starts(self, n: int) -> list[int]:
        """First global column of every grid column, then ``n``.

        Not collective.

        Parameters
        ----------
        n : int
            Global number of columns of the matrix.

        Returns
        -------
        list of int
            ``pc + 1`` nondecreasing offsets: grid column ``j`` holds columns
            ``starts[j]:starts[j + 1]``.
        """
        _integers((n,), "ProcessGrid.col_starts: n")
        return block_starts(n, self.shape[1])

    def block(self, gshape: tuple[int, int], rank: int | None = None) -> tuple[slice, slice]:
        """``(rows, cols)`` of ``gshape``'s block on ``rank`` (default: mine), as global slices.

        Not collective.

        Parameters
        ----------
        gshape : (int, int)
            Global shape ``(m, n)`` of the matrix.
        rank : int, optional
            Rank in :attr:`cart`; this rank when omitted.

        Returns
        -------
        (slice, slice)
            ``(self.rows(m, i), self.cols(n, j))`` for the grid position
            ``(i, j)`` of ``rank``.
        """
        _pair(gshape, "ProcessGrid.block: gshape")
        _integers((rank,), "ProcessGrid.block: rank", none=True)
        if rank is None:
            return self.rows(gshape[0]), self.cols(gshape[1])
        i, j = self.cart.Get_coords(rank)
        return self.rows(gshape[0], i), self.cols(gshape[1], j)

    def block_shape(self, gshape: tuple[int, int], rank: int | None = None) -> tuple[int, int]:
        """Local shape ``(rows, cols)`` of ``gshape``'s block on ``rank`` (default: mine).

        Not collective. Either may be 0 when a dimension is smaller than the grid.

        Parameters
        ----------
        gshape : (int, int)
            Global shape ``(m, n)`` of the matrix.
        rank : int, optional
            Rank in :attr:`cart`; this rank when omitted.

        Returns
        -------
        (int, int)
            Number of rows and of columns of that block.
        """
        rows, cols = self.block(gshape, rank)
        return rows.stop - rows.start, cols.stop - cols.start

    def same_as(self, other) -> bool:
        """Whether ``other`` lays blocks out as this grid does. Not collective.

        The same shape over the same ranks in the same order: its
        communicator identical or congruent to this one's. Two grids made
        from one communicator are distinct objects with distinct
        communicators, yet a matrix on one multiplies with a matrix on the
        other.

        Parameters
        ----------
        other : ProcessGrid

        Returns
        -------
        bool
        """
        if other is self:
            return True
        if not isinstance(other, ProcessGrid) or other.shape != self.shape:
            return False
        return MPI.Comm.Compare(self.cart, other.cart) in (MPI.IDENT, MPI.CONGRUENT)

    def wide(self) -> ProcessGrid:
        """This grid if ``pr <= pc``, else its transpose ``pc x pr`` over the same ranks (made once, kept).

        Collective over the grid at its first call (``Create_cart``); not after. LU's panels are factored by one
        grid column, their pivot searches and row interchanges crossing its ``pr`` ranks: fewer grid rows than
        columns keeps them short (ScaLAPACK's advice), which :func:`hpcgpu.linalg.lu_factor` takes.

        Returns
        -------
        ProcessGrid
        """
        if self.shape[0] <= self.shape[1]:
            return self
        if getattr(self, "_wide", None) is None:
            self._wide = ProcessGrid((self.shape[1], self.shape[0]), comm=self.cart)
        return self._wide

    def flat(self) -> ProcessGrid:
        """The grid LU factors on: ``pr x pc`` over the same ranks with ``pc >= 4 pr`` (made once, kept).

        ``pr`` is the largest divisor of the number of ranks ``P`` with ``4 pr^2 <= P``: ``1 x P`` up to 15
        ranks, ``2 x 8`` at 16, ``4 x 16`` at 64; this grid itself when it has that shape, :meth:`wide` when its
        transpose has. Collective over the grid at its first call (``Create_cart``); not after.

        Each LU panel is gathered, factored and its rows interchanged across the ``pr`` ranks of one grid column,
        six collectives a panel on its critical path: fewer grid rows keep them short, at the price of more words
        of L broadcast along the longer grid rows (``n^2 / (2 pr)`` a rank). HPL's tuning advice takes ``pr <=
        pc`` and flat grids where latency dominates. Measured here (n = 4096, nb 192, P = 4, 2 cores, median of
        5): 1.18 s on ``1 x 4`` against 1.46 s on ``2 x 2``; at P = 6 1.7 s on ``1 x 6`` against 2.9 s on
        ``2 x 3``.

        Returns
        -------
        ProcessGrid
        """
        shape = flat_shape(self.size)
        if shape == self.shape:
            return self
        if shape == self.shape[::-1]:
            return self.wide()
        if getattr(self, "_flat", None) is None:
            self._flat = ProcessGrid(shape, comm=self.cart)
        return self._flat

    def free(self) -> None:
        """Free the three communicators, and those made for 2.5-D on this grid, its :meth:`wide` and :meth:`flat`.

        Collective.
        """
        for _, _, layer_grid, fiber in getattr(self, "_layers25d", {}).values():
            layer_grid.free()
            fiber.Free()
        self._layers25d = {}
        for attr in ("_wide", "_flat"):
            if getattr(self, attr, None) is not None:
                getattr(self, attr).free()
                setattr(self, attr, None)
        for c in (self.row_comm, self.col_comm, self.cart):
            if c != MPI.COMM_NULL:
                c.Free()

    def __repr__(self) -> str:
        return f"ProcessGrid({self.shape[0]}x{self.shape[1]}, me=({self.row}, {self.col}))"


def flat_shape(size: int) -> tuple[int, int]:
    """The shape of :meth:`ProcessGrid.flat` for ``size`` ranks. Not collective.

    ``(pr, size // pr)``, ``pr`` the largest divisor of ``size`` with ``4 pr^2 <= size`` (1 below 16 ranks).
    """
    return max((d, size // d) for d in range(1, size + 1) if size % d == 0 and (d == 1 or 4 * d * d <= size))


def default_grid() -> ProcessGrid:
    """The ``Compute_dims`` grid over the runtime's communicator, made once.

    Collective over the runtime's communicator the first time (it makes the
    grid's communicators); later calls return the same grid.

    Returns
    -------
    ProcessGrid

    Raises
    ------
    RuntimeError
        Before :func:`hpcgpu.init` (there is no runtime communicator yet).
    """
    comm = default_comm()
    g = _GRIDS.get(id(comm))
    if g is None or g.cart == MPI.COMM_NULL:
        g = _GRIDS[id(comm)] = ProcessGrid(comm=comm)
    return g


def grid_error(where: str, grid, a) -> BaseException | None:
    """Why ``grid`` cannot be the grid ``a`` is factored on, or None (None: the routine's own choice).

    Any shape over ``a.grid``'s ranks in its order (the communicators identical or congruent). ``a`` is a checked
    DistMatrix. Not collective (``MPI_Comm_compare`` is local).
    """
    if grid is None:
        return None
    if not isinstance(grid, ProcessGrid):
        return TypeError(f"{where}: grid must be an hpcgpu.ProcessGrid over A's ranks or None, got "
                         f"{type(grid).__name__}")
    if grid.cart == MPI.COMM_NULL:
        return ValueError(f"{where}: grid was freed (ProcessGrid.free): make it again from A's grid, "
                          "hpcgpu.ProcessGrid((pr, pc), comm=a.grid.cart)")
    if grid.size != a.grid.size or MPI.Comm.Compare(grid.cart, a.grid.cart) not in (MPI.IDENT, MPI.CONGRUENT):
        return ValueError(f"{where}: grid {grid.shape[0]}x{grid.shape[1]} is not over A's ranks in A's order: make "
                          "it from A's grid, hpcgpu.ProcessGrid((pr, pc), comm=a.grid.cart)")
    return None
