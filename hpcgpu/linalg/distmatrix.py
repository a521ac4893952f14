"""DistMatrix: a dense matrix in 2-D blocks on a :class:`ProcessGrid`; its transposes as views; DistVector.

Nothing global is held by one rank unless the user asks for it
(:meth:`DistMatrix.gather`, or :meth:`DistMatrix.from_global` on the root).
:class:`TransposeView` is ``a.T`` and ``a.H`` (moved only when its blocks are
read); :class:`DistVector` a vector laid out as a matrix's rows or columns, so
that ``A @ x`` is a local GEMV and one ``Allreduce``.
"""

from __future__ import annotations

import numbers
import operator
import os

import numpy as np
from mpi4py import MPI

from .. import _context, _device
from .._gemm import accumulator_dtype, bfloat16_dtype, gemm
from .._version import __version__
from .blocks import remap
from ..comm import Allgather, Allreduce, movable
from ..errors import agree, agree_inputs, agreed
from .cyclic import Cyclic, default_nb, from_cyclic_blocks, nb_error, to_cyclic as _to_cyclic
from .grid import ProcessGrid, default_grid, grid_error
from .._memory import node_memory_error
from .._outputs import write_dataset
from ..io import open_hdf5, source_error
from .summa import matmul, variant
from ..watchdog import watch

__all__ = ["DistMatrix", "DistVector", "TransposeView", "CyclicMatrix", "from_cyclic", "norm", "matmul_operator",
           "DTYPES", "LAYOUTS"]

DTYPES = tuple(np.dtype(t) for t in ("float32", "float64", "complex64", "complex128", "float16")) + (
    (bfloat16_dtype(),) if bfloat16_dtype() is not None else ())
"""The element types of a DistMatrix; bfloat16 is ``ml_dtypes.bfloat16`` (CuPy >= 14 uses the same)."""

# Tile edge of DistMatrix.random: the global matrix is made of tiles, each drawn
# from its own seed, so any rank can make any part without the rest.
_TILE = 256


def _xp():
    """The runtime's array module (NumPy before :func:`hpcgpu.init`: host blocks)."""
    decided = _context.current()
    return np if decided is None else decided.xp


def _dtype_error(dtype, what: str) -> ValueError | None:
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        dtype = repr(dtype)  # not a dtype at all: named as given
    if dtype not in DTYPES:
        return ValueError(f"{what}: dtype {dtype} is not one of {', '.join(t.name for t in DTYPES)}")
    return None


def _dtype_name(dtype) -> str:
    """``dtype``'s name (``numpy.float64`` and ``"float64"`` alike; its repr if it is none): what ranks agree on."""
    try:
        return np.dtype(dtype).name
    except TypeError:
        return repr(dtype)


def _file_dtype(dtype: np.dtype) -> np.dtype:
    """How a block of ``dtype`` is stored in HDF5: HDF5 has no bfloat16, so float32 (exact)."""
    return np.dtype("float32") if dtype.name == "bfloat16" else dtype


class _Elementwise:
    """The arithmetic of :class:`DistMatrix` and :class:`DistVector`: local, elementwise, NumPy's promotion.

    Not collective: each rank works on its own block, and every refusal is of what all ranks share (shapes,
    grids, dtypes), so all raise it alike. A scalar is each rank's own (SPMD code passes the same on every rank;
    it is not compared). A subclass gives ``local``, ``dtype``, ``xp``, ``describe()``, ``_like(local)`` (the
    same layout with another block) and ``_fits(other)`` (the same layout).
    """

    __array_ufunc__ = None  # NumPy defers to the operators below (np.float32(2) * a) and refuses np.add(a, b)

    def __array__(self, dtype=None, copy=None):
        """Refused: a distributed array is no one array on a rank (NumPy would make a 0-d object array)."""
        raise agreed(TypeError(f"np.asarray of a {type(self).__name__}: it is distributed; .gather() (collective) "
                               "gives the whole of it on rank 0, .local this rank's block"))

    def _binary(self, other, opname: str, sym: str, reflected: bool = False):
        return _elementwise(self, other, opname, sym, reflected)

    def _inplace(self, other, opname: str, sym: str):
        return _elementwise(self, other, opname, sym, inplace=True)

    def _unary(self, fn):
        """``fn`` of the block (a local op), of the same layout."""
        return self._like(fn(self.local))

    def __add__(self, other):
        return self._binary(other, "add", "+")

    def __radd__(self, other):
        return self._binary(other, "add", "+", reflected=True)

    def __sub__(self, other):
        return self._binary(other, "sub", "-")

    def __rsub__(self, other):
        return self._binary(other, "sub", "-", reflected=True)

    def __mul__(self, other):
        return self._binary(other, "mul", "*")

    def __rmul__(self, other):
        return self._binary(other, "mul", "*", reflected=True)

    def __truediv__(self, other):
        return self._binary(other, "truediv", "/")

    def __rtruediv__(self, other):
        return self._binary(other, "truediv", "/", reflected=True)

    def __iadd__(self, other):
        return self._inplace(other, "add", "+=")

    def __isub__(self, other):
        return self._inplace(other, "sub", "-=")

    def __imul__(self, other):
        return self._inplace(other, "mul", "*=")

    def __itruediv__(self, other):
        return self._inplace(other, "truediv", "/=")

    def __neg__(self):
        return self._unary(lambda x: -x)

    def __pos__(self):
        return self._unary(lambda x: x.copy())

    def __abs__(self):
        """Elementwise absolute value; a complex dtype gives its real dtype (complex128 -> float64)."""
        return self._unary(abs)

    def conj(self):
        """The elementwise complex conjugate (a copy for real dtypes). Not collective."""
        return self._unary(lambda x: x.conj() if x.dtype.kind == "c" else x.copy())

    @property
    def real(self):
        """The real part, a new array of the real dtype (complex64 -> float32). Not collective."""
        return self._unary(lambda x: x.real.copy())

    @property
    def imag(self):
        """The imaginary part, a new array of the real dtype (zeros for a real dtype). Not collective."""
        return self._unary(lambda x: x.imag.copy() if x.dtype.kind == "c" else self.xp.zeros_like(x))

    def astype(self, dtype):
        """Converted to ``dtype`` (one of :data:`DTYPES`), a new array of the same layout. Not collective.

        Raises
        ------
        ValueError
            ``dtype`` is not one of :data:`DTYPES` (on every rank alike).
        """
        err = _dtype_error(dtype, "astype")
        if err:
            raise agreed(err)
        return self._unary(lambda x: x.astype(dtype))

    def copy(self):
        """A copy with a copy of every block (a view's: its transpose, moved). Not collective but for a view."""
        return self._like(self.local.copy())


class DistMatrix(_Elementwise):
    """A global ``m x n`` matrix; rank ``(i, j)`` holds block ``(i, j)``.

    Parameters
    ----------
    local : xp.ndarray, shape ``lshape``
        This rank's block, C-contiguous, in host (NumPy) or device (CuPy) memory.
    gshape : (int, int)
        Global shape ``(m, n)``.
    grid : ProcessGrid

    Attributes
    ----------
    gshape, lshape : (int, int)
        Global shape, and local shape ``(len(rows), len(cols))``.
    rows, cols : slice
        The global rows and columns of the local block:
        ``rows = block_range(m, pr, i)``, ``cols = block_range(n, pc, j)``.
    dtype : numpy.dtype
        float32, float64, complex64, complex128, float16 or bfloat16
        (``ml_dtypes.bfloat16``); see :data:`DTYPES`.
    xp : module
        ``numpy`` or ``cupy``, after where ``local`` lives.
    shape, ndim, size
        NumPy's names: ``shape`` is :attr:`gshape`, ``ndim`` 2, ``size`` ``m * n`` (global).

    Raises
    ------
    ValueError
        ``local`` does not have the block's shape, or an unsupported dtype.

    Notes
    -----
    What is collective and what is not. Local, no communication: ``+``, ``-``, ``*``, ``/`` (reflected and
    in place) with a Python or NumPy scalar and elementwise with a matrix of the same global shape and grid,
    unary ``-`` and ``+``, ``abs``, :meth:`conj`, :attr:`real`, :attr:`imag`, :meth:`astype`, :meth:`copy`
    (results in NumPy's promoted dtype; a refusal, of shapes, grids or dtypes that every rank shares, is
    raised on every rank alike), and taking :attr:`T` or :attr:`H` (views). Collective over ``grid.cart``:
    ``@`` and :func:`hpcgpu.matmul`, reading a view's blocks, :meth:`norm`, :meth:`trace`, :meth:`sum` and
    :meth:`diag` (one small collective each and the argument agreement, the same value on every rank), and
    the constructors, :meth:`gather`, :meth:`redistribute` and :meth:`to_hdf5`. ``np.asarray(a)`` is refused
    (it would make a 0-d object array): :meth:`gather` or :attr:`local`.

    Examples
    --------
    >>> a = DistMatrix.random((1000, 500), seed=1)     # doctest: +SKIP
    >>> a.lshape                                       # doctest: +SKIP
    [0/4] (500, 250)
    """

    def __init__(self, local, gshape: tuple[int, int], grid: ProcessGrid):
        self.gshape = (int(gshape[0]), int(gshape[1]))
        self.grid = grid
        self.rows, self.cols = grid.block(self.gshape)
        want = grid.block_shape(self.gshape)
        if tuple(local.shape) != want:
            raise ValueError(f"local block has shape {tuple(local.shape)}, expected {want} for {self.gshape} "
                             f"on grid {grid.shape}")
        err = _dtype_error(local.dtype, "DistMatrix")
        if err:
            raise err
        if not local.flags.c_contiguous:
            local = local.copy()
        self.local = local
        self.dtype = np.dtype(local.dtype)
        self.xp = _device.cupy_or_none() if _device.is_device_array(local) else np

    @property
    def lshape(self) -> tuple[int, int]:
        """Shape of this rank's block, ``(len(rows), len(cols))``. Not collective (a view's is known unmoved)."""
        return (self.rows.stop - self.rows.start, self.cols.stop - self.cols.start)

    @property
    def lnbytes(self) -> int:
        """Bytes of this rank's block (local)."""
        return self.lshape[0] * self.lshape[1] * self.dtype.itemsize

    @property
    def shape(self) -> tuple[int, int]:
        """The global shape ``(m, n)``, NumPy's name for :attr:`gshape`."""
        return self.gshape

    ndim = 2
    """Always 2."""

    @property
    def size(self) -> int:
        """Elements of the whole matrix, ``m * n`` (global)."""
        return self.gshape[0] * self.gshape[1]

    view_of = None
    """``(base, "T" or "C")`` for a transposed view (:class:`TransposeView`), ``None`` for a matrix."""

    @property
    def gnbytes(self) -> int:
        """Bytes of the whole matrix over all ranks (global), ``m * n * itemsize``."""
        return self.gshape[0] * self.gshape[1] * self.dtype.itemsize

    def __repr__(self) -> str:
        return (f"DistMatrix(gshape={self.gshape}, dtype={self.dtype}, grid={self.grid.shape}, "
                f"lshape={self.lshape}, xp={self.xp.__name__})")

    def describe(self) -> str:
        """``"100 x 80 float64 on grid 3x1"``: what every rank's part of the matrix shares. Not collective.

        What :func:`hpcgpu.errors.agree_inputs` compares (the block shape, which is each rank's own, is left out).
        """
        return f"{self.gshape[0]} x {self.gshape[1]} {self.dtype} on grid {self.grid.shape[0]}x{self.grid.shape[1]}"

    def __matmul__(self, other):
        """``self @ other``: :func:`hpcgpu.matmul` for a matrix or a view, ``A x`` for a :class:`DistVector`.

        Collective; see :func:`matmul_operator`.
        """
        return matmul_operator(self, other)

    # -- transposes and redistribution -----------------------------------------
    @property
    def T(self) -> TransposeView:  # noqa: N802 - NumPy's name
        """The transpose, ``(n, m)``, as a view: nothing moves when it is taken. Not collective.

        :func:`hpcgpu.matmul` and ``@`` read a view as ``transa``/``transb`` on this matrix, and the
        arithmetic of two views of one kind works on the matrices beneath; reading the view's blocks
        (:attr:`TransposeView.local`, :meth:`gather`, anything that needs ``(n, m)`` blocks) moves the
        matrix once (one ``Alltoallv``, collective) and keeps the result on the view. ``a.T.T`` is ``a``.
        """
        return TransposeView(self, conj=False)

    @property
    def H(self) -> TransposeView:  # noqa: N802 - the conjugate transpose's usual name
        """The conjugate transpose, ``(n, m)``, as a view (:attr:`T` for real dtypes). Not collective."""
        return TransposeView(self, conj=self.dtype.kind == "c")

    def redistribute(self, grid: ProcessGrid) -> DistMatrix:
        """The same matrix on another process grid of the same ranks. Collective (one ``Alltoallv``).

        Parameters
        ----------
        grid : ProcessGrid
            Made from the same communicator as :attr:`grid` (the same ranks
            in the same order), any shape: a 1 x P grid that suits a
            row-wise read onto the square grid SUMMA prefers, for instance.

        Returns
        -------
        DistMatrix
            Global shape and dtype unchanged; this rank's block of ``grid``.

        Raises
        ------
        ValueError
            ``grid`` is not over the same ranks (every rank, before any
            communication).
        """
        err = None
        if not isinstance(grid, ProcessGrid):  # agreed over this matrix's grid, with the other ranks' grids
            err = TypeError(f"redistribute: grid must be a ProcessGrid, got {type(grid).__name__}")
        elif grid.size != self.grid.size or MPI.Comm.Compare(grid.cart, self.grid.cart) not in (
                MPI.IDENT, MPI.CONGRUENT):
            err = ValueError(f"redistribute: grid {grid.shape} is not over the ranks of grid {self.grid.shape}")
        agree_inputs("redistribute", {"matrix": self.describe(), "grid": grid}, comm=self.grid.cart, error=err)
        return self._move(grid, transpose=False, conj=False)

    def to_cyclic(self, nb: int | None = None, grid: ProcessGrid | None = None):
        """This matrix in the 2-D block-cyclic layout the factorizations work on, kept so.

        Collective over :attr:`grid`'s ranks: the arguments' agreement, then one ``Alltoallv``. A
        :class:`~hpcgpu.linalg.CyclicMatrix` given to :func:`~hpcgpu.linalg.cholesky`,
        :func:`~hpcgpu.linalg.cho_factor`, :func:`~hpcgpu.linalg.lu_factor` or :func:`~hpcgpu.linalg.solve` is
        factored where it lies: a code that factors one matrix (or one updated in place) again and again moves it
        once, here, instead of at every call.

        Parameters
        ----------
        nb : int, optional
            Block size, >= 1; by default the factorizations' (``hpcgpu.linalg.cyclic.default_nb`` of the larger
            side and the grid: about 10 blocks a grid row or column, 64-256 on a host, 256-512 on a GPU).
        grid : ProcessGrid, optional
            The layout's grid: any shape over :attr:`grid`'s ranks in its order (``ProcessGrid((pr, pc),
            comm=a.grid.cart)``; LU pivots fastest on a flat one, ``a.grid.flat()``); :attr:`grid` by default.

        Returns
        -------
        CyclicMatrix
            Global shape and dtype unchanged, on ``grid``, host or device as this matrix; this rank's blocks on a
            padded row stride (``hpcgpu.linalg.cyclic.padded_empty``), as the factorizations' GEMMs want them.

        Raises
        ------
        TypeError
            ``nb`` not an int, ``grid`` not a ProcessGrid (on every rank).
        ValueError
            ``nb < 1``, ``grid`` not over this matrix's ranks in their order, the arguments differing across
            ranks (on every rank).
        """
        where = "to_cyclic"
        err = nb_error(where, nb) or grid_error(where, grid, self)
        agree_inputs(where, {"matrix": self.describe(), "nb": nb, "grid": getattr(grid, "shape", grid)},
                     comm=self.grid.cart, error=err)
        grid = self.grid if grid is None else grid
        nb = default_nb(self.xp, max(self.gshape), grid) if nb is None else int(nb)
        with watch("DistMatrix Alltoallv", "to_cyclic"):
            local, _ = _to_cyclic(self, nb, grid, padded=True)
        return CyclicMatrix(local, self.gshape, grid, nb)

    def _move(self, grid: ProcessGrid, transpose: bool, conj: bool) -> DistMatrix:
        """This matrix (or its transpose) in ``grid``'s blocks: pack, one Alltoallv, unpack."""
        m, n = self.gshape
        tshape = (n, m) if transpose else (m, n)
        with watch("DistMatrix Alltoallv", "transpose" if transpose else "redistribute"):
            out = remap(self.local, lambda p: self.grid.block(self.gshape, p), lambda q: grid.block(tshape, q),
                        self.grid.cart, transpose=transpose, conj=conj)
        return DistMatrix(out, tshape, grid)

    def _like(self, local):
        """A matrix of this one's global shape and grid with block ``local``."""
        return DistMatrix(local, self.gshape, self.grid)

    def _fits(self, other) -> bool:
        """Whether ``other`` is laid out as this matrix: same global shape, same grid."""
        return isinstance(other, DistMatrix) and other.gshape == self.gshape and self.grid.same_as(other.grid)

    # -- reductions: one small collective each, the same value on every rank ----
    def norm(self, ord=None):  # noqa: A002 - NumPy's name
        """The matrix norm, as :func:`numpy.linalg.norm` of the global matrix. Collective over ``grid.cart``.

        Parameters
        ----------
        ord : {None, "fro", 1, -1, inf, -inf}
            Frobenius (None, ``"fro"``: the scaled sum of squares of LAPACK's ``xLANGE``, one ``Allgather`` of
            two numbers a rank, so no square overflows), the largest (1) or smallest (-1) column sum of
            absolute values (column sums reduced down the grid columns, then their extreme along the grid
            rows), the largest (inf) or smallest (-inf) row sum. 2 and ``"nuc"`` need singular values,
            which hpcgpu does not compute.

        Returns
        -------
        numpy scalar
            Of the real dtype (float64 for float64 and complex128, float32 for float32 and complex64), the
            same on every rank; 0 for an empty matrix.

        Raises
        ------
        ValueError
            Another ``ord``; arguments that differ across the ranks (:func:`hpcgpu.errors.agree_inputs`).
        """
        return norm(self, ord)

    def trace(self):
        """The sum of the diagonal ``a[i, i]``, ``i < min(m, n)``, as :func:`numpy.trace`.

        Collective over ``grid.cart``: the argument agreement and one ``Allreduce`` of one number.

        Returns
        -------
        numpy scalar
            Of :attr:`dtype` (summed in float32 for float16 and bfloat16), the same on every rank.
        """
        agree_inputs("trace", {"matrix": self.describe()}, comm=self.grid.cart)
        base, op = self.view_of or (self, "N")  # a transpose has the same diagonal (conjugated for .H)
        total = _total(_diagonal(base), base.dtype, base.grid.cart)
        return total.conjugate() if op == "C" else total

    def sum(self):
        """The sum of every element, as ``numpy.sum`` of the global matrix.

        Collective over ``grid.cart``: the argument agreement and one ``Allreduce`` of one number.

        Returns
        -------
        numpy scalar
            Of :attr:`dtype` (summed in float32 for float16 and bfloat16), the same on every rank.
        """
        agree_inputs("sum", {"matrix": self.describe()}, comm=self.grid.cart)
        base, op = self.view_of or (self, "N")  # a transpose has the same elements (conjugated for .H)
        total = _total(base.local, base.dtype, base.grid.cart)
        return total.conjugate() if op == "C" else total

    def diag(self, layout: str = "rows") -> DistVector:
        """The diagonal ``a[i, i]``, ``i < min(m, n)``, as a :class:`DistVector`.

        Collective over ``grid.cart``: the argument agreement and one ``Alltoallv`` of the diagonal (each
        element from the one rank that holds it to the ranks of its vector layout).

        Parameters
        ----------
        layout : {"rows", "cols"}
            The vector's layout: ``"rows"`` (as ``A @ x`` gives, over the grid rows) by default.

        Returns
        -------
        DistVector
            Of length ``min(m, n)`` and :attr:`dtype`.

        Raises
        ------
        ValueError
            Another ``layout``; arguments that differ across the ranks.
        """
        agree_inputs("diag", {"matrix": self.describe(), "layout": layout}, comm=self.grid.cart,
                     error=_layout_error(layout, "diag"))
        base, op = self.view_of or (self, "N")  # a transpose has the same diagonal (conjugated for .H)
        grid, k = base.grid, min(base.gshape)

        def held(p):  # the diagonal elements rank p holds: the rows and columns of its block in common
            rows, cols = grid.block(base.gshape, p)
            lo = max(rows.start, cols.start)
            return slice(lo, max(lo, min(rows.stop, cols.stop))), slice(0, 1)

        with watch("DistMatrix.diag's Alltoallv"):
            out = remap(_diagonal(base).reshape(-1, 1), held,
                        lambda q: _vector_block(k, grid, layout, q), grid.cart)
        d = DistVector(out.reshape(-1), k, grid, layout)
        return d.conj() if op == "C" else d

    # -- constructors ---------------------------------------------------------
    @classmethod
    def zeros(cls, gshape, grid: ProcessGrid | None = None, dtype="float64", xp=None) -> DistMatrix:
        """A matrix of zeros. Collective over ``grid.cart``: one small agreement of the arguments.

        Parameters
        ----------
        gshape : (int, int)
            Global shape ``(m, n)``.
        grid : ProcessGrid, optional
            :func:`hpcgpu.linalg.grid.default_grid` when omitted (made on first use,
            which is collective).
        dtype : str or numpy.dtype
            float32, float64, complex64 or complex128.
        xp : module, optional
            Where the block goes (``numpy`` or ``cupy``); the runtime's ``xp``
            by default.

        Returns
        -------
        DistMatrix
            This rank's block is ``xp.zeros(grid.block_shape(gshape), dtype)``.

        Raises
        ------
        ValueError
            Unsupported dtype or a shape that is not two sizes >= 0; arguments that differ across the ranks
            (:func:`hpcgpu.errors.agree_inputs`); on every rank.
        """
        comm, err = _grid_of(grid, "zeros")
        xp = _xp() if xp is None else xp
        err = err or _shape_error(gshape, "zeros") or _dtype_error(dtype, "zeros")
        shape = gshape if err else tuple(int(d) for d in gshape)  # a list and a tuple are one shape
        agree_inputs("zeros", {"gshape": shape, "dtype": _dtype_name(dtype), "grid": grid}, comm=comm,
                     error=err)
        grid = default_grid() if grid is None else grid
        return cls(xp.zeros(grid.block_shape(tuple(gshape)), dtype=dtype), gshape, grid)

    @classmethod
    def from_global(cls, a, grid: ProcessGrid | None = None, root: int = 0, xp=None) -> DistMatrix:
        """Distribute the global array ``a`` held by ``root``.

        Collective over ``grid.cart``. Only ``root`` needs ``a`` (others may
        pass ``None``); it sends every rank its block, one at a time, so the
        root holds ``a`` plus one block.

        Parameters
        ----------
        a : array-like of shape (m, n) on ``root``
        grid : ProcessGrid, optional
        root : int
            Rank in ``grid.cart``.
        xp : module, optional
            Where the blocks go (the runtime's ``xp`` by default).

        Raises
        ------
        ValueError
            ``a`` on the root is not 2-D or has an unsupported dtype; ``root`` or the grid differ across the
            ranks (:func:`hpcgpu.errors.agree_inputs`); on every rank.
        """
        comm, err = _grid_of(grid, "from_global")  # the default grid's ranks are its communicator's, in order
        xp = _xp() if xp is None else xp
        meta = None
        if err is None and not (isinstance(root, int) and 0 <= root < comm.size):
            err = ValueError(f"from_global: root must be a rank of the grid (0 to {comm.size - 1}), got {root!r}")
        if err is None and comm.rank == root:
            a = _device.asnumpy(a)
            if a.ndim != 2:
                err = ValueError(f"from_global: expected a 2-D array, got shape {a.shape}")
            else:
                err = _dtype_error(a.dtype, "from_global")
                meta = (a.shape, a.dtype)  # the dtype itself: bfloat16's .str is an opaque '<V2'
        agree_inputs("from_global", {"root": root, "grid": grid}, comm=comm, error=err)
        grid = default_grid() if grid is None else grid
        comm = grid.cart
        with watch("DistMatrix.from_global's Bcast and blocks", f"from rank {root}"):
            gshape, dtype = comm.bcast(meta, root=root)
            dtype = np.dtype(dtype)
            if comm.rank == root:
                for r in range(comm.size):
                    if r != root:
                        rows, cols = grid.block(gshape, r)
                        comm.Send(movable(np.ascontiguousarray(a[rows, cols])), dest=r, tag=11)
                rows, cols = grid.block(gshape)
                local = np.array(a[rows, cols], order="C")  # a copy: never a view of the caller's array
            else:
                local = np.empty(grid.block_shape(gshape), dtype=dtype)
                comm.Recv(movable(local), source=root, tag=11)
        return cls(xp.asarray(local), gshape, grid)

    @classmethod
    def random(cls, gshape, grid: ProcessGrid | None = None, dtype="float64", seed: int = 0,
               xp=None) -> DistMatrix:
        """Uniform values in [-1, 1), the same global matrix for a ``seed`` whatever the grid.

        Real and imaginary parts are both uniform. Collective over ``grid.cart``: one small agreement of the
        arguments, then no communication. The matrix is tiled in ``256 x 256`` tiles, tile
        ``(ti, tj)`` drawn from ``numpy.random.default_rng([seed, ti, tj])``;
        a rank draws only the tiles its block touches.

        Parameters
        ----------
        gshape : (int, int)
            Global shape ``(m, n)``, both ``>= 0``.
        grid : ProcessGrid, optional
            :func:`hpcgpu.linalg.grid.default_grid` when omitted (made on first use,
            which is collective).
        dtype : str or numpy.dtype
            float32, float64, complex64 or complex128. Values are drawn in
            float64 and then cast.
        seed : int
            Non-negative; with the tile indices it seeds every tile's generator.
        xp : module, optional
            Where the block goes (``numpy`` or ``cupy``); the runtime's ``xp``
            by default. The tiles are drawn on the host and copied once.

        Returns
        -------
        DistMatrix
            This rank's block of the global matrix.

        Raises
        ------
        ValueError
            Unsupported dtype or negative shape; arguments that differ across the ranks
            (:func:`hpcgpu.errors.agree_inputs`); on every rank.
        """
        comm, err = _grid_of(grid, "random")
        xp = _xp() if xp is None else xp
        err = err or _dtype_error(dtype, "random") or _shape_error(gshape, "random") or _seed_error(seed)
        shape = gshape if err else tuple(int(d) for d in gshape)  # a list and a tuple are one shape
        agree_inputs("random", {"gshape": shape, "dtype": _dtype_name(dtype), "seed": seed, "grid": grid},
                     comm=comm, error=err)
        grid = default_grid() if grid is None else grid
        dtype = np.dtype(dtype)
        gshape = (int(gshape[0]), int(gshape[1]))
        rows, cols = grid.block(gshape)
        local = np.empty(grid.block_shape(gshape), dtype=dtype)
        T = _TILE
        for ti in range(rows.start // T, -(-rows.stop // T)):
            for tj in range(cols.start // T, -(-cols.stop // T)):
                rng = np.random.default_rng([seed, ti, tj])
                th, tw = min(T, gshape[0] - ti * T), min(T, gshape[1] - tj * T)
                tile = rng.random((th, tw, 2 if dtype.kind == "c" else 1), dtype=np.float64) * 2 - 1
                tile = (tile[..., 0] + 1j * tile[..., 1]) if dtype.kind == "c" else tile[..., 0]
                r0, r1 = max(rows.start, ti * T), min(rows.stop, ti * T + th)
                c0, c1 = max(cols.start, tj * T), min(cols.stop, tj * T + tw)
                local[r0 - rows.start : r1 - rows.start, c0 - cols.start : c1 - cols.start] = (
                    tile[r0 - ti * T : r1 - ti * T, c0 - tj * T : c1 - tj * T].astype(dtype))
        return cls(xp.asarray(local), gshape, grid)

    @classmethod
    def from_hdf5(cls, path: str, name: str | None = None, grid: ProcessGrid | None = None,
                  dtype=None, transpose: bool = False, xp=None) -> DistMatrix:
        """Read a 2-D HDF5 dataset; each rank reads only its block's hyperslab.

        Collective over ``grid.cart``: every check is agreed, so bad input
        raises the same one-line error on every rank.

        Parameters
        ----------
        path : str
        name : str, optional
            Dataset path in the file; when omitted the file must hold exactly
            one dataset.
        grid : ProcessGrid, optional
        dtype : optional
            Type of the blocks: the dataset's if it is one of :data:`DTYPES`,
            float64 for integers, unless given. bfloat16 is converted from
            the stored type (rounded to nearest even).
        transpose : bool
            Make the matrix the transpose of the dataset (reads the
            transposed hyperslab; no communication).
        xp : module, optional

        Raises
        ------
        FileNotFoundError
            No file at ``path``.
        ValueError
            Not HDF5; no such dataset (or not exactly one when ``name`` is
            omitted); not 2-D; not numeric; complex data asked for as a real
            ``dtype``; a FIFO or device; a virtual dataset whose source is
            missing.
        MemoryError
            The blocks of a node's ranks would not fit in its memory
            (checked before anything is read).
        """
        import h5py

        comm, err = _grid_of(grid, "from_hdf5")
        xp = _xp() if xp is None else xp
        err = err or _names_error(path, name, "from_hdf5", none=True)
        meta, err = (None, err) if err else _hdf5_meta(path, name)
        if err is None and dtype is not None:
            err = _dtype_error(dtype, f"{path}:{meta[0]}")
            if err is None and meta[2].kind == "c" and np.dtype(dtype).kind != "c":
                err = ValueError(f"{path}:{meta[0]}: complex data cannot be read as {np.dtype(dtype)} "
                                 "(it would lose the imaginary part)")
        agree_inputs("from_hdf5", {"path": path, "name": name, "transpose": transpose, "grid": grid,
                                   "dtype": None if dtype is None else _dtype_name(dtype)}, comm=comm, error=err)
        grid = default_grid() if grid is None else grid
        comm = grid.cart
        name, dshape, ddtype = meta
        if dtype is None:
            dtype = ddtype if ddtype in DTYPES else np.dtype("float64")
        gshape = (dshape[1], dshape[0]) if transpose else dshape
        rows, cols = grid.block(gshape)
        bshape = grid.block_shape(gshape)
        agree(node_memory_error(int(np.prod(bshape)) * np.dtype(dtype).itemsize, comm, f"{path}:{name}"), comm=comm)
        local = np.empty(bshape, dtype=dtype)
        err = None
        try:
            if local.size:
                with h5py.File(path, "r") as f:
                    ds = f[name]
                    if transpose:
                        local[...] = ds[cols, rows].T
                    elif (local.dtype.kind == "c" and ddtype.kind != "c") or local.dtype.name == "bfloat16":
                        local[...] = ds[rows, cols]  # HDF5 cannot convert real to complex itself
                    else:
                        ds.read_direct(local, np.s_[rows, cols])
        except (OSError, TypeError, ValueError) as e:
            err = OSError(f"{path}:{name}: cannot read block {rows.start}:{rows.stop} x "
                          f"{cols.start}:{cols.stop} ({e})")
        agree(err, comm=comm)
        return cls(xp.asarray(local), gshape, grid)

    # -- output ---------------------------------------------------------------
    def gather(self, root: int = 0):
        """The global matrix as a NumPy array on ``root`` (``None`` elsewhere).

        Collective over ``grid.cart``. The root needs memory for the whole
        matrix; use :meth:`to_hdf5` for matrices that do not fit. Device
        blocks are copied to the host first.

        Parameters
        ----------
        root : int
            Rank in ``grid.cart`` that receives the matrix.

        Returns
        -------
        numpy.ndarray, shape (m, n), or None
            The global matrix, of dtype :attr:`dtype`, on ``root``; ``None``
            on the other ranks.
        """
        comm, grid = self.grid.cart, self.grid
        err = None if isinstance(root, int) and 0 <= root < comm.size else ValueError(
            f"gather: root must be a rank of the grid (0 to {comm.size - 1}), got {root!r}")
        agree_inputs("gather", {"matrix": self.describe(), "root": root}, comm=comm, error=err)
        local = _device.asnumpy(self.local)
        with watch("DistMatrix.gather's blocks", f"to rank {root}"):
            if comm.rank != root:
                comm.Send(movable(np.ascontiguousarray(local)), dest=root, tag=12)
                return None
            out = np.empty(self.gshape, dtype=self.dtype)
            for r in range(comm.size):
                rows, cols = grid.block(self.gshape, r)
                if r == root:
                    out[rows, cols] = local
                else:
                    buf = np.empty(grid.block_shape(self.gshape, r), dtype=self.dtype)
                    comm.Recv(movable(buf), source=r, tag=12)
                    out[rows, cols] = buf
        return out

    def to_hdf5(self, path: str, name: str = "C", attrs: dict | None = None, *, overwrite: bool = False,
                what: str = "to_hdf5") -> str:
        """Write the matrix to dataset ``name`` of ``path``, atomically, keeping the file's other objects.

        Collective over ``grid.cart``. Rank 0 first copies everything of an
        existing ``path`` but ``name`` into a temporary file beside it
        (:func:`hpcgpu.io.temp_keeping`); with a parallel h5py
        (``h5py.get_config().mpi``) every rank then writes its block through
        the ``mpio`` driver, otherwise the ranks write their blocks one after
        another (``mpi4py.util.sync.Sequential``); the temporary is renamed
        over ``path`` when complete. A failed or killed write never changes
        ``path``. Attributes ``world_size``, ``grid``, ``hpcgpu_version``
        and ``attrs`` go on the dataset, and on the root too when the file
        is new.

        Parameters
        ----------
        path : str
            The HDF5 file: created (with missing parent directories), or an
            existing HDF5 file in which ``name`` is added or replaced.
        name : str
            Path of the dataset in the file, of shape ``(m, n)`` and dtype
            :attr:`dtype` (bfloat16, which HDF5 has no type for, is written
            as float32: exact).
        attrs : dict, optional
            More root attributes (values h5py can store); they override the
            standard ones of the same name.
        overwrite : bool, keyword-only
            Replace an existing dataset ``name`` that hpcgpu did not write
            (refused otherwise: the output policy, ``hpcgpu._outputs``).
        what : str, keyword-only
            How messages name ``path`` (a command line passes its option, ``-o``).

        Returns
        -------
        str
            ``path``.

        Raises
        ------
        OSError
            The path cannot be written, another process has it open for
            writing, it exists and is not HDF5, ``name`` lies under a
            dataset or is a dataset hpcgpu did not write (every rank; the
            file is left as it was).
        """
        agree_inputs("to_hdf5", {"matrix": self.describe(), "path": path, "name": name, "attrs": attrs,
                                 "overwrite": overwrite,
                                 "what": what}, comm=self.grid.cart, error=_names_error(path, name, "to_hdf5"))
        meta = dict(world_size=self.grid.cart.size, grid=np.array(self.grid.shape), hpcgpu_version=__version__)
        meta.update(attrs or {})
        local = _device.asnumpy(self.local).astype(_file_dtype(self.dtype), copy=False)
        # Not watched: without parallel HDF5 the ranks write in turn, and the last one waits for the whole file
        return write_dataset(path, name, self.gshape, local, (self.rows, self.cols), comm=self.grid.cart,
                             attrs=meta, overwrite=overwrite, what=what)


class TransposeView(DistMatrix):
    """``a.T`` or ``a.H``: the (conjugate) transpose of a :class:`DistMatrix`, taken without moving it.

    Not collective to take. :func:`hpcgpu.matmul` and ``@`` read it as ``transa``/``transb`` on :attr:`base`;
    ``+``, ``-``, ``*``, ``/`` with a scalar, the unary operations, :meth:`astype` and the arithmetic of two
    views of one kind on matrices of one shape give views of the same operations on the matrices beneath (no
    communication); :meth:`~DistMatrix.trace`, :meth:`~DistMatrix.sum`, :meth:`~DistMatrix.norm` and
    :meth:`~DistMatrix.diag` read :attr:`base` as it lies. Anything that needs the transpose's own ``(n, m)``
    blocks (:attr:`local`, :meth:`~DistMatrix.gather`, :meth:`~DistMatrix.to_hdf5`, a view combined with a
    matrix) moves the matrix once, collectively (one ``Alltoallv``), and keeps the moved blocks on the view.
    ``a.T.T`` is ``a``; ``a.H.T`` and ``a.T.H`` are ``a.conj()`` (local).

    A view shows its matrix as it was when its blocks were first read: change the matrix, not a view's
    ``local`` (in-place operators on a view are refused).

    Parameters
    ----------
    base : DistMatrix
        The matrix, global shape ``(m, n)``.
    conj : bool
        The conjugate transpose (``a.H``) rather than the transpose.

    Attributes
    ----------
    base : DistMatrix
        The matrix beneath.
    view_of : (DistMatrix, str)
        ``(base, "T")``, or ``(base, "C")`` for the conjugate transpose of a complex matrix.
    gshape : (int, int)
        ``(n, m)``; :attr:`~DistMatrix.rows`, :attr:`~DistMatrix.cols` and :attr:`~DistMatrix.lshape` are
        those of the transpose's blocks, known without moving anything.
    """

    def __init__(self, base: DistMatrix, conj: bool = False):
        self.base = base
        self.view_of = (base, "C" if conj else "T")
        self.gshape = (base.gshape[1], base.gshape[0])
        self.grid = base.grid
        self.rows, self.cols = base.grid.block(self.gshape)
        self.dtype, self.xp = base.dtype, base.xp
        self._moved = None

    @property
    def local(self):
        """This rank's block of the transpose, ``lshape``: the matrix moved on first read (collective), kept after."""
        if self._moved is None:
            self._moved = self.base._move(self.grid, transpose=True, conj=self.view_of[1] == "C")
        return self._moved.local

    @property
    def T(self) -> DistMatrix:  # noqa: N802 - NumPy's name
        """The transpose of the view: :attr:`base` (``a.conj()`` for a conjugate transpose). Not collective."""
        return self.base if self.view_of[1] == "T" else self.base.conj()

    @property
    def H(self) -> DistMatrix:  # noqa: N802
        """The conjugate transpose of the view: :attr:`base` (``a.conj()`` for a complex transpose). Not collective."""
        return self.base if self.view_of[1] == "C" or self.dtype.kind != "c" else self.base.conj()

    def __repr__(self) -> str:
        return f"TransposeView({'H' if self.view_of[1] == 'C' else 'T'} of {self.base!r})"

    def _move(self, grid: ProcessGrid, transpose: bool, conj: bool) -> DistMatrix:
        """Moved from :attr:`base` in one ``Alltoallv`` (never through the view's own blocks)."""
        return self.base._move(grid, not transpose, conj != (self.view_of[1] == "C"))

    def _binary(self, other, opname: str, sym: str, reflected: bool = False):
        base, op = self.view_of
        if _is_scalar(other):  # f(s, conj(x)) = conj(f(conj(s), x)) for + - * /
            s = other.conjugate() if op == "C" else other
            return TransposeView(base._binary(s, opname, sym, reflected), op == "C")
        if isinstance(other, TransposeView) and other.view_of[1] == op and base._fits(other.base):
            return TransposeView(base._binary(other.base, opname, sym, reflected), op == "C")
        return super()._binary(other, opname, sym, reflected)

    def _inplace(self, other, opname: str, sym: str):
        raise agreed(TypeError(f"DistMatrix {sym} on a transposed view (.T, .H) would change a copy, not its "
                               f"matrix: write v = v {sym[0]} x, or change the matrix itself"))

    def _unary(self, fn):
        base, op = self.view_of
        return TransposeView(base._unary(fn), op == "C")

    def conj(self):
        """The view's conjugate: the other kind of view of :attr:`base` (``a.T.conj()`` is ``a.H``). Not collective."""
        base, op = self.view_of
        return TransposeView(base, op == "T" and base.dtype.kind == "c")

    @property
    def real(self):
        """``base.real``'s transpose, a view. Not collective."""
        return TransposeView(self.base.real)

    @property
    def imag(self):
        """``base.imag``'s transpose (negated for ``.H``), a view. Not collective."""
        return TransposeView(-self.base.imag if self.view_of[1] == "C" else self.base.imag)


LAYOUTS = ("rows", "cols")
"""The layouts of a :class:`DistVector`: as the rows of a matrix (over the grid rows) or as its columns."""


def _layout_error(layout, what: str) -> ValueError | None:
    return None if isinstance(layout, str) and layout in LAYOUTS else ValueError(
        f"{what}: layout must be 'rows' or 'cols', got {layout!r}")


def _vector_block(n: int, grid: ProcessGrid, layout: str, rank: int) -> tuple[slice, slice]:
    """The elements of a length-``n`` vector of ``layout`` that ``rank`` holds, as an ``(n_l, 1)`` block."""
    i, j = grid.cart.Get_coords(rank)
    return (grid.rows(n, i) if layout == "rows" else grid.cols(n, j)), slice(0, 1)


def _vector_source(n: int, grid: ProcessGrid, layout: str, rank: int):
    """:func:`_vector_block` on the ranks of the first copy (grid column 0 for "rows", grid row 0 for "cols").

    None elsewhere: every element from one rank, as :func:`hpcgpu.linalg.blocks.remap`'s source layout wants it.
    """
    i, j = grid.cart.Get_coords(rank)
    return _vector_block(n, grid, layout, rank) if (j if layout == "rows" else i) == 0 else None


class DistVector(_Elementwise):
    """A global vector of length ``n`` on a :class:`ProcessGrid`, laid out as a matrix's rows or columns.

    ``layout="cols"``: the ranks of grid column ``j`` each hold elements ``block_range(n, pc, j)``, split
    over the grid columns as the columns of an ``m x n`` matrix are and the same on every rank of a grid
    column; it is the ``x`` of ``y = A @ x``, which is then each rank's local GEMV of its block plus one
    ``Allreduce`` along its grid row. ``layout="rows"``: the ranks of grid row ``i`` each hold
    ``block_range(n, pr, i)``, as an ``n x k`` matrix's rows: what ``A @ x`` gives and the ``x`` of
    ``A.T @ x``. (Elemental's ``[MR,*]`` and ``[MC,*]``; PETSc's right and left vectors of a matrix.) Each
    element is held ``pr`` (``"cols"``) or ``pc`` (``"rows"``) times; every operation keeps the copies
    equal, and the reductions count each element once.

    Parameters
    ----------
    local : xp.ndarray, shape ``(len(span),)``
        This rank's elements, C-contiguous, host (NumPy) or device (CuPy).
    n : int
        Global length.
    grid : ProcessGrid
    layout : {"rows", "cols"}

    Attributes
    ----------
    n : int
    span : slice
        The global indices of :attr:`local`.
    shape : (int,)
        ``(n,)``; ``ndim`` is 1 and ``size`` is ``n``.
    layout, grid, dtype, xp
        As given, and after ``local``.

    Raises
    ------
    ValueError
        ``local`` does not have the piece's shape, an unsupported dtype, or another ``layout``.

    Notes
    -----
    Arithmetic (``+ - * /`` with scalars and with vectors of the same length, layout and grid, unary ``-``,
    ``abs``, :meth:`conj`, :attr:`real`, :attr:`imag`, :meth:`astype`, :meth:`copy`) is local. :meth:`dot`,
    :meth:`vdot` and :meth:`norm` are one small collective each; :meth:`as_layout`, :meth:`to_matrix`,
    :meth:`from_matrix` and :meth:`gather` one ``Alltoallv`` of the vector.
    """

    ndim = 1

    def __init__(self, local, n: int, grid: ProcessGrid, layout: str = "cols"):
        err = _layout_error(layout, "DistVector")
        if err:
            raise err
        self.n, self.grid, self.layout = int(n), grid, layout
        self.span = _vector_block(self.n, grid, layout, grid.rank)[0]
        want = (self.span.stop - self.span.start,)
        if tuple(local.shape) != want:
            raise ValueError(f"DistVector: local piece has shape {tuple(local.shape)}, expected {want} for {self.n} "
                             f"elements along the {layout} of grid {grid.shape}")
        err = _dtype_error(local.dtype, "DistVector")
        if err:
            raise err
        self.local = local if local.flags.c_contiguous else local.copy()
        self.dtype = np.dtype(local.dtype)
        self.xp = _device.cupy_or_none() if _device.is_device_array(local) else np

    @property
    def shape(self) -> tuple[int]:
        """``(n,)``."""
        return (self.n,)

    @property
    def size(self) -> int:
        """``n``."""
        return self.n

    def describe(self) -> str:
        """``"vector of 100 float64 along the cols of grid 2x2"``: what every rank's part shares. Not collective."""
        pr, pc = self.grid.shape
        return f"vector of {self.n} {self.dtype} along the {self.layout} of grid {pr}x{pc}"

    def __repr__(self) -> str:
        return (f"DistVector(n={self.n}, dtype={self.dtype}, layout={self.layout!r}, grid={self.grid.shape}, "
                f"span={self.span.start}:{self.span.stop}, xp={self.xp.__name__})")

    def _like(self, local):
        return DistVector(local, self.n, self.grid, self.layout)

    def _fits(self, other) -> bool:
        return isinstance(other, DistVector) and (other.n, other.layout) == (self.n, self.layout) and \
            self.grid.same_as(other.grid)

    def _first_copy(self) -> bool:
        """Whether this rank holds the first copy of its elements (the one the reductions count)."""
        return (self.grid.col if self.layout == "rows" else self.grid.row) == 0

    # -- constructors and conversions ------------------------------------------------
    @classmethod
    def zeros(cls, n: int, grid: ProcessGrid | None = None, layout: str = "cols", dtype="float64",
              xp=None) -> DistVector:
        """A vector of zeros. Collective over ``grid.cart``: one small agreement of the arguments.

        Parameters
        ----------
        n : int
            Length, >= 0.
        grid : ProcessGrid, optional
            :func:`hpcgpu.linalg.grid.default_grid` when omitted.
        layout : {"rows", "cols"}
        dtype : str or numpy.dtype
            One of :data:`DTYPES`.
        xp : module, optional
            ``numpy`` or ``cupy``; the runtime's ``xp`` by default.

        Raises
        ------
        ValueError
            A bad length, layout or dtype; arguments that differ across the ranks; on every rank.
        """
        comm, err = _grid_of(grid, "DistVector.zeros")
        xp = _xp() if xp is None else xp
        if err is None and (isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0):
            err = ValueError(f"DistVector.zeros: n must be a length (an integer >= 0), got {n!r}")
        err = err or _layout_error(layout, "DistVector.zeros") or _dtype_error(dtype, "DistVector.zeros")
        agree_inputs("DistVector.zeros", {"n": n, "layout": layout, "dtype": _dtype_name(dtype), "grid": grid},
                     comm=comm, error=err)
        grid = default_grid() if grid is None else grid
        span = _vector_block(int(n), grid, layout, grid.rank)[0]
        return cls(xp.zeros(span.stop - span.start, dtype=dtype), n, grid, layout)

    @classmethod
    def from_global(cls, x, grid: ProcessGrid | None = None, layout: str = "cols", root: int = 0,
                    xp=None) -> DistVector:
        """Distribute the 1-D array ``x`` held by ``root``. Collective over ``grid.cart``.

        Only ``root`` needs ``x`` (others may pass ``None``); it sends each rank its piece.

        Parameters
        ----------
        x : array-like of shape (n,) on ``root``
        grid : ProcessGrid, optional
        layout : {"rows", "cols"}
        root : int
            Rank in ``grid.cart``.
        xp : module, optional

        Raises
        ------
        ValueError
            ``x`` on the root is not 1-D or of an unsupported dtype; a bad ``layout`` or ``root``; arguments
            that differ across the ranks; on every rank.
        """
        comm, err = _grid_of(grid, "DistVector.from_global")
        xp = _xp() if xp is None else xp
        err = err or _layout_error(layout, "DistVector.from_global")
        meta = None
        if err is None and not (isinstance(root, int) and 0 <= root < comm.size):
            err = ValueError(f"DistVector.from_global: root must be a rank of the grid (0 to {comm.size - 1}), "
                             f"got {root!r}")
        if err is None and comm.rank == root:
            x = _device.asnumpy(x)
            if x.ndim != 1:
                err = ValueError(f"DistVector.from_global: expected a 1-D array, got shape {x.shape}")
            else:
                err = _dtype_error(x.dtype, "DistVector.from_global")
                meta = (x.shape[0], x.dtype)
        agree_inputs("DistVector.from_global", {"root": root, "grid": grid, "layout": layout}, comm=comm,
                     error=err)
        grid = default_grid() if grid is None else grid
        comm = grid.cart
        with watch("DistVector.from_global's Bcast and pieces", f"from rank {root}"):
            n, dtype = comm.bcast(meta, root=root)
            if comm.rank == root:
                for r in range(comm.size):
                    if r != root:
                        comm.Send(movable(np.ascontiguousarray(x[_vector_block(n, grid, layout, r)[0]])), dest=r,
                                  tag=13)
                local = np.array(x[_vector_block(n, grid, layout, root)[0]])  # a copy, never the caller's
            else:
                span = _vector_block(n, grid, layout, comm.rank)[0]
                local = np.empty(span.stop - span.start, dtype=np.dtype(dtype))
                comm.Recv(movable(local), source=root, tag=13)
        return cls(xp.asarray(local), n, grid, layout)

    @classmethod
    def from_matrix(cls, a: DistMatrix, layout: str = "cols") -> DistVector:
        """The ``n x 1`` matrix ``a`` as a vector of ``layout``. Collective over ``a.grid.cart`` (one ``Alltoallv``).

        Parameters
        ----------
        a : DistMatrix
            Global ``(n, 1)``.
        layout : {"cols", "rows"}
            The vector's layout (see the class).

        Returns
        -------
        DistVector

        Raises
        ------
        ValueError
            ``a`` is not an ``n x 1`` :class:`DistMatrix`; a bad ``layout``; on every rank.
        """
        err = _layout_error(layout, "DistVector.from_matrix")
        if not isinstance(a, DistMatrix) or a.gshape[1] != 1:
            raise agreed(ValueError(f"DistVector.from_matrix: a must be an n x 1 DistMatrix, got "
                                    f"{a.describe() if isinstance(a, DistMatrix) else type(a).__name__}"))
        agree_inputs("DistVector.from_matrix", {"a": a.describe(), "layout": layout}, comm=a.grid.cart, error=err)
        n, grid = a.gshape[0], a.grid
        with watch("DistVector.from_matrix's Alltoallv"):
            out = remap(a.local, lambda p: grid.block(a.gshape, p), lambda q: _vector_block(n, grid, layout, q),
                        grid.cart)
        return cls(out.reshape(-1), n, grid, layout)

    def to_matrix(self) -> DistMatrix:
        """This vector as an ``n x 1`` :class:`DistMatrix` (blocks on grid column 0). Collective (one ``Alltoallv``)."""
        agree_inputs("DistVector.to_matrix", {"x": self.describe()}, comm=self.grid.cart)
        n, grid = self.n, self.grid
        with watch("DistVector.to_matrix's Alltoallv"):
            out = remap(self.local.reshape(-1, 1), lambda p: _vector_source(n, grid, self.layout, p),
                        lambda q: grid.block((n, 1), q), grid.cart)
        return DistMatrix(out, (n, 1), grid)

    def as_layout(self, layout: str) -> DistVector:
        """This vector in ``layout`` (itself when it is already). Collective (one ``Alltoallv`` of the vector).

        Parameters
        ----------
        layout : {"cols", "rows"}

        Returns
        -------
        DistVector

        Raises
        ------
        ValueError
            Another ``layout``; arguments that differ across the ranks.
        """
        agree_inputs("DistVector.as_layout", {"x": self.describe(), "layout": layout}, comm=self.grid.cart,
                     error=_layout_error(layout, "DistVector.as_layout"))
        return self._relayout(layout)

    def _relayout(self, layout: str) -> DistVector:
        if layout == self.layout:
            return self
        n, grid = self.n, self.grid
        with watch("DistVector's Alltoallv", f"{self.layout} to {layout}"):
            out = remap(self.local.reshape(-1, 1), lambda p: _vector_source(n, grid, self.layout, p),
                        lambda q: _vector_block(n, grid, layout, q), grid.cart)
        return DistVector(out.reshape(-1), n, grid, layout)

    def gather(self, root: int = 0):
        """The whole vector as a NumPy array on ``root`` (``None`` elsewhere). Collective (one ``Alltoallv``).

        Parameters
        ----------
        root : int
            A rank of ``grid.cart``.

        Returns
        -------
        numpy.ndarray or None
            Shape ``(n,)`` on ``root``.

        Raises
        ------
        ValueError
            ``root`` is not a rank of the grid; arguments that differ across the ranks.
        """
        comm = self.grid.cart
        err = None if isinstance(root, int) and 0 <= root < comm.size else ValueError(
            f"gather: root must be a rank of the grid (0 to {comm.size - 1}), got {root!r}")
        agree_inputs("gather", {"x": self.describe(), "root": root}, comm=comm, error=err)
        n, grid = self.n, self.grid
        with watch("DistVector.gather's Alltoallv", f"to rank {root}"):
            out = remap(self.local.reshape(-1, 1), lambda p: _vector_source(n, grid, self.layout, p),
                        lambda q: (slice(0, n), slice(0, 1)) if q == root else None, comm)
        return _device.asnumpy(out).reshape(-1) if comm.rank == root else None

    def __matmul__(self, other):
        """``x @ y``: :meth:`dot` for a vector, ``A.T @ x`` for a matrix ``A`` (NumPy's 1-D ``x @ A``). Collective."""
        if isinstance(other, DistVector):
            return self.dot(other)
        if isinstance(other, DistMatrix):
            return other.T @ self
        return NotImplemented

    # -- reductions -----------------------------------------------------------------
    def dot(self, other: DistVector):
        """``sum(x * y)``, as :func:`numpy.dot` of two vectors (no conjugate: :meth:`vdot` conjugates ``x``).

        Collective over ``grid.cart``: the argument agreement, ``other`` moved to this vector's layout if it
        has the other one, then one ``Allreduce`` of one number.

        Parameters
        ----------
        other : DistVector
            Length ``n``, same grid, either layout.

        Returns
        -------
        numpy scalar
            Of NumPy's promoted dtype (summed in float32 for 16-bit types), the same on every rank.

        Raises
        ------
        ValueError
            ``other`` is not a vector of length ``n`` on this grid; arguments that differ across the ranks.
        """
        return _dot(self, other, "dot", conj=False)

    def vdot(self, other: DistVector):
        """``sum(conj(x) * y)``, as :func:`numpy.vdot`. Collective, as :meth:`dot`.

        Parameters
        ----------
        other : DistVector
            The same length and grid.

        Returns
        -------
        scalar
            The same on every rank.
        """
        return _dot(self, other, "vdot", conj=True)

    def norm(self, ord=None):  # noqa: A002 - NumPy's name
        """The vector norm, as :func:`numpy.linalg.norm`. Collective over ``grid.cart``.

        Parameters
        ----------
        ord : {None, 2, 1, inf, -inf}
            2 (None): the scaled sum of squares (LAPACK's ``xLASSQ``: no square overflows), one
            ``Allgather`` of two numbers a rank; 1: the sum of absolute values; inf, -inf: the largest,
            smallest absolute value; one ``Allreduce`` of one number each.

        Returns
        -------
        numpy scalar
            Of the real dtype, the same on every rank.

        Raises
        ------
        ValueError
            Another ``ord``; arguments that differ across the ranks.
        """
        return norm(self, ord)


def _is_scalar(x) -> bool:
    """A Python or NumPy number, or a 0-d array of one: what combines with every element."""
    if isinstance(x, (numbers.Number, np.generic)) or (getattr(x, "ndim", None) == 0 and hasattr(x, "dtype")):
        kind = getattr(getattr(x, "dtype", None), "kind", None)
        return kind in ("b", "i", "u", "f", "c") if kind is not None else isinstance(x, numbers.Number)
    return False


def _elementwise(x, other, opname: str, sym: str, reflected: bool = False, inplace: bool = False):
    """``x sym other`` (or ``other sym x``), block by block: local, NumPy's promotion, refusals agreed."""
    name = type(x).__name__ if not isinstance(x, DistMatrix) else "DistMatrix"
    where = f"{name} {sym}"
    if _is_scalar(other):
        operand, kind = other, other  # a Python scalar's type is weak in NumPy's promotion (NEP 50)
    elif isinstance(other, _Elementwise):  # a DistMatrix, DistVector or CyclicMatrix
        if not x._fits(other):
            raise agreed(ValueError(f"{where}: the operands differ: {x.describe()} and {other.describe()} "
                                    "(elementwise needs one shape, layout and grid)"))
        if x.xp is not other.xp:
            raise agreed(TypeError(f"{where}: one operand's blocks are in host memory, the other's on the device"))
        operand, kind = other.local, other.dtype
    elif hasattr(other, "shape") and hasattr(other, "dtype"):
        raise agreed(TypeError(f"{where} {type(other).__name__}: combine with a scalar or a {name} of the same "
                               f"shape and grid ({name}.from_global distributes an array)"))
    else:
        return NotImplemented
    try:
        dtype = np.result_type(x.dtype, kind)
    except (TypeError, ValueError):  # no common type (NumPy's DTypePromotionError is a TypeError)
        dtype = None
    if dtype not in DTYPES:
        what = other.dtype if hasattr(other, "dtype") else type(other).__name__
        raise agreed(TypeError(f"{where}: {x.dtype} and {what} give {dtype}, not one of "
                               f"{', '.join(t.name for t in DTYPES)}"))
    if inplace:
        if dtype != x.dtype:
            raise agreed(TypeError(f"{where}: the result is {dtype}, the operand {x.dtype}: x = x {sym[0]} y "
                                   "makes a new one"))
        getattr(operator, f"i{opname}")(x.local, operand)  # in place: NumPy's and CuPy's in-place operators
        return x
    fn = getattr(operator, opname)
    out = fn(operand, x.local) if reflected else fn(x.local, operand)
    return x._like(out.astype(dtype, copy=False))


def _diagonal(a: DistMatrix):
    """The diagonal elements ``a[k, k]`` this rank holds (its block's rows and columns in common), 1-D."""
    lo, hi = max(a.rows.start, a.cols.start), min(a.rows.stop, a.cols.stop)
    k = a.xp.arange(lo, max(lo, hi))
    return a.local[k - a.rows.start, k - a.cols.start]


def _real_dtype(dtype) -> np.dtype:
    """The dtype of ``abs`` of ``dtype`` (float32 for complex64, float64 for complex128; itself if real)."""
    dtype = np.dtype(dtype)
    return {"complex64": np.dtype("float32"), "complex128": np.dtype("float64")}.get(dtype.name, dtype)


def _total(part, dtype, comm):
    """The sum over every rank of ``part``'s elements as a ``dtype`` scalar, summed in its accumulator type.

    Collective over ``comm``: one ``Allreduce`` of one number, so every rank has the same value.
    """
    acc = accumulator_dtype(dtype)
    local = np.zeros(1, dtype=acc)
    if part.size:
        local[0] = _device.asnumpy(part.astype(acc, copy=False).sum())
    with watch("a reduction's Allreduce"):
        Allreduce(local, comm=comm)
    return np.dtype(dtype).type(local[0])


def _two_norm(part, comm) -> float:
    """``sqrt(sum |part|^2)`` over every rank, scaled as LAPACK's ``xLASSQ`` so that no square overflows.

    Collective over ``comm``: one ``Allgather`` of (scale, scaled sum of squares) a rank, combined in rank
    order on every rank (the same value everywhere).
    """
    mine = np.zeros(2)
    if part.size:
        a = abs(part).astype(np.float64)
        mine[0] = _device.asnumpy(a.max())
        if 0 < mine[0] < np.inf:
            mine[1] = _device.asnumpy(((a / mine[0]) ** 2).sum())
    every = np.empty((comm.Get_size(), 2))
    with watch("a norm's Allgather"):
        Allgather(mine, every, comm=comm)
    scale = every[:, 0].max()
    if not 0 < scale < np.inf:  # 0, inf or NaN: the norm itself
        return float(scale)
    return float(scale * np.sqrt((every[:, 1] * (every[:, 0] / scale) ** 2).sum()))


def _extreme(values, op, comm) -> float:
    """The largest (``MPI.MAX``) or smallest (``MPI.MIN``) of ``values`` over every rank. One ``Allreduce``."""
    empty = 0.0 if op == MPI.MAX else np.inf
    buf = np.array([float(_device.asnumpy(values.max() if op == MPI.MAX else values.min())) if values.size
                    else empty])
    with watch("a norm's Allreduce"):
        Allreduce(buf, op=op, comm=comm)
    return float(buf[0])


_MATRIX_ORDS = {None: "fro", "fro": "fro", 1: "col max", -1: "col min", np.inf: "row max", -np.inf: "row min"}
_VECTOR_ORDS = {None: "2", 2: "2", 1: "1", np.inf: "max", -np.inf: "min"}


def norm(x, ord=None):  # noqa: A002 - NumPy's name
    """A matrix or vector norm, as :func:`numpy.linalg.norm` of the global array. Collective over the grid.

    Parameters
    ----------
    x : DistMatrix or DistVector
        A transposed view is read as its matrix (its 1-norm is the matrix's inf-norm), unmoved.
    ord : optional
        For a matrix None or ``"fro"`` (Frobenius), 1, -1, inf, -inf (see :meth:`DistMatrix.norm`); for a
        vector None or 2, 1, inf, -inf (see :meth:`DistVector.norm`).

    Returns
    -------
    numpy scalar
        Of the real dtype (float64 for complex128), the same on every rank.

    Raises
    ------
    TypeError
        ``x`` is neither a DistMatrix nor a DistVector (this rank's own; no communication).
    ValueError
        An ``ord`` not listed (2 and ``"nuc"`` of a matrix need singular values, which hpcgpu does not
        compute); arguments that differ across the ranks (:func:`hpcgpu.errors.agree_inputs`).
    """
    if not isinstance(x, (DistMatrix, DistVector)):
        raise agreed(TypeError(f"norm: x must be a DistMatrix or a DistVector, got {type(x).__name__}"))
    vector = isinstance(x, DistVector)
    table = _VECTOR_ORDS if vector else _MATRIX_ORDS
    try:
        how = table.get(ord)
    except TypeError:  # unhashable
        how = None
    err = None
    if how is None and vector:
        err = ValueError(f"norm: ord must be None, 2, 1, inf or -inf for a vector, got {ord!r}")
    elif how is None:
        err = ValueError(f"norm: ord must be None, 'fro', 1, -1, inf or -inf for a matrix, got {ord!r}")
    agree_inputs("norm", {"x": x.describe(), "ord": repr(ord)}, comm=x.grid.cart, error=err)
    real = _real_dtype(x.dtype)
    if vector:
        if x.n == 0:
            return real.type(0)
        part = x.local if x._first_copy() else x.local[:0]
        if how == "2":
            return real.type(_two_norm(part, x.grid.cart))
        if how == "1":
            return real.type(_total(abs(part), real, x.grid.cart))
        return real.type(_extreme(abs(part), MPI.MAX if how == "max" else MPI.MIN, x.grid.cart))
    base, op = x.view_of or (x, "N")
    if op != "N" and how != "fro":  # a transpose's column sums are its matrix's row sums
        how = ("row " if how.startswith("col") else "col ") + how.split()[1]
    grid = base.grid
    if how == "fro":
        return real.type(_two_norm(base.local, grid.cart))
    if base.size == 0:
        return real.type(0)
    axis, across, along = (0, grid.col_comm, grid.row_comm) if how.startswith("col") else \
        (1, grid.row_comm, grid.col_comm)
    sums = abs(base.local).astype(accumulator_dtype(real)).sum(axis=axis)  # this block's part of each sum
    with watch("a norm's Allreduce"):
        Allreduce(sums, comm=across)
    return real.type(_extreme(sums, MPI.MAX if how.endswith("max") else MPI.MIN, along))


def _dot(x: DistVector, y, where: str, conj: bool):
    """:meth:`DistVector.dot` and :meth:`DistVector.vdot`."""
    err = None
    if not isinstance(y, DistVector) or y.n != x.n or not x.grid.same_as(y.grid):
        err = ValueError(f"{where}: the vectors differ: {x.describe()} and "
                         f"{y.describe() if isinstance(y, DistVector) else type(y).__name__}")
    else:
        try:
            dtype = np.result_type(x.dtype, y.dtype)
        except (TypeError, ValueError):
            dtype = None
        if dtype not in DTYPES:
            err = TypeError(f"{where}: {x.dtype} and {y.dtype} have no common dtype of a DistVector")
    agree_inputs(where, {"x": x.describe(), "y": y.describe() if isinstance(y, DistVector) else type(y).__name__},
                 comm=x.grid.cart, error=err)
    y = y._relayout(x.layout)
    a = x.local.conj() if conj and x.dtype.kind == "c" else x.local
    part = a * y.local if x._first_copy() else a[:0]
    return _total(part, dtype, x.grid.cart)


def matmul_operator(a, b):
    """``a @ b`` for :class:`DistMatrix` (and its views) on the left. Collective over the grid.

    Parameters
    ----------
    a : DistMatrix or TransposeView
    b : DistMatrix, TransposeView or DistVector

    Returns
    -------
    DistMatrix or DistVector
        A matrix: :func:`hpcgpu.matmul` with each view read as ``transa``/``transb`` on its matrix (never
        moved as a view), by the algorithm :func:`hpcgpu.linalg.summa.variant` models as moving fewer bytes: SUMMA,
        or, for a skinny product (``op(A)`` times a few columns), stationary A (only B and C move). A vector
        ``x``: ``y = op(A) x``, each rank's local GEMV of its block and one ``Allreduce`` of its piece of y
        along its grid row (``"rows"`` layout; ``x`` in ``"cols"``), or for a transposed view along its grid
        column (``x`` in ``"rows"``, y in ``"cols"``); ``x`` in the other layout is moved first (one
        ``Alltoallv`` of the vector).

    Raises
    ------
    ValueError, TypeError
        As :func:`hpcgpu.matmul`; for a vector, a length other than op(A)'s columns, another grid or dtype
        (on every rank).
    """
    if isinstance(b, DistVector):
        return _matvec(a, b)
    if not isinstance(b, DistMatrix):
        if hasattr(b, "shape") and hasattr(b, "dtype"):
            raise agreed(TypeError(f"DistMatrix @ {type(b).__name__}: multiply by a DistMatrix or a DistVector "
                                   "(their from_global distributes an array)"))
        return NotImplemented
    ta = a.view_of[1] if a.view_of is not None else "N"
    tb = b.view_of[1] if b.view_of is not None else "N"
    return matmul(a, b, algorithm=variant((a.gshape, b.gshape), a.grid.shape, ta, tb))


def _matvec(a: DistMatrix, x: DistVector) -> DistVector:
    """``op(A) x``: the local GEMV of each block, one ``Allreduce`` of the partial sums."""
    base, op = a.view_of or (a, "N")
    grid, xp = base.grid, base.xp
    err = None
    if x.n != a.gshape[1]:
        err = ValueError(f"DistMatrix @ DistVector: shapes do not conform: {a.gshape[0]} x {a.gshape[1]} and a "
                         f"vector of {x.n}")
    elif not grid.same_as(x.grid):
        err = ValueError(f"DistMatrix @ DistVector: different grids ({grid.shape} and {x.grid.shape})")
    elif a.dtype != x.dtype:
        err = TypeError(f"DistMatrix @ DistVector: dtypes differ: {a.dtype} and {x.dtype} (x.astype(a.dtype))")
    agree_inputs("DistMatrix @ DistVector", {"a": a.describe(), "x": x.describe()}, comm=grid.cart, error=err)
    x = x._relayout("cols" if op == "N" else "rows")
    acc = accumulator_dtype(a.dtype)
    if op == "N":
        y = xp.empty(base.lshape[0], acc)
        gemm(base.local, x.local.reshape(-1, 1), y.reshape(-1, 1))
        comm, layout = grid.row_comm, "rows"
    else:  # A^H x = conj(A^T conj(x)): the block is read transposed, never copied
        xl = x.local.conj() if op == "C" else x.local
        y = xp.empty(base.lshape[1], acc)
        gemm(base.local.T, xl.reshape(-1, 1), y.reshape(-1, 1))
        if op == "C":
            y = y.conj()
        comm, layout = grid.col_comm, "cols"
    with watch("DistMatrix @ DistVector's Allreduce"):
        Allreduce(y, comm=comm)
    return DistVector(y.astype(a.dtype, copy=False), a.gshape[0], grid, layout)


def _grid_of(grid, what: str) -> tuple[MPI.Intracomm, TypeError | None]:
    """The communicator a constructor's arguments are agreed over, and this rank's refusal of ``grid``, or None.

    No communication: ``grid.cart`` for a :class:`ProcessGrid`; the runtime's communicator (the default grid's
    ranks, in order) for None, whose grid is made after the agreement (making it is collective), and for
    anything else, refused with a TypeError that the agreement carries to every rank.
    """
    if isinstance(grid, ProcessGrid):
        return grid.cart, None
    err = None if grid is None else TypeError(f"{what}: grid must be a ProcessGrid, got {type(grid).__name__}")
    return _context.comm(), err


def _seed_error(seed) -> TypeError | None:
    """Why ``seed`` is not a seed (an integer >= 0), or None. No communication."""
    ok = isinstance(seed, numbers.Integral) and not isinstance(seed, bool) and seed >= 0
    return None if ok else TypeError(f"random: seed must be an integer >= 0, got {seed!r}")


def _names_error(path, name, what: str, none: bool = False) -> TypeError | None:
    """Why ``path`` is not a path or ``name`` not a dataset's name (a string; None where ``none``), or None."""
    if not isinstance(path, (str, os.PathLike)):
        return TypeError(f"{what}: path must be a str or os.PathLike, got {type(path).__name__}")
    if not (isinstance(name, str) or (name is None and none)):
        return TypeError(f"{what}: name must be a dataset's name (str), got {type(name).__name__}")
    return None


def _shape_error(gshape, what: str) -> ValueError | None:
    """Why ``gshape`` is not a global shape (two integer sizes >= 0), or None. No communication."""
    try:
        ok = len(gshape) == 2 and all(int(d) == d and d >= 0 for d in gshape)
    except (TypeError, ValueError):
        ok = False
    return None if ok else ValueError(f"{what}: shape must be two sizes >= 0, got {gshape!r}")


def _hdf5_meta(path: str, name: str | None):
    """``((name, shape, dtype), None)`` or ``(None, error)``; no communication."""
    import h5py

    f, err = open_hdf5(path)
    if err:
        return None, err
    with f:
        if name is None:
            names = []
            f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
            if len(names) != 1:
                return None, ValueError(
                    f"{path}: holds {len(names)} datasets ({', '.join(names[:5]) or 'none'}); "
                    "name one as FILE:DATASET")
            name = names[0]
        if name not in f or not isinstance(f[name], h5py.Dataset):
            return None, ValueError(f"{path}: no dataset {name}")
        ds = f[name]
        err = source_error(path, ds, f"{path}:{name}")
        if err is not None:
            return None, err
        if ds.ndim != 2:
            return None, ValueError(f"{path}:{name}: must be a 2-D matrix, has shape {ds.shape}")
        if ds.dtype.kind not in "fiuc" or ds.dtype.itemsize > 16:
            return None, ValueError(f"{path}:{name}: must be numeric, has dtype {ds.dtype}")
        return (name, tuple(ds.shape), np.dtype(ds.dtype)), None


def from_cyclic(local, layout: Cyclic, grid=None, triangle=None):
    """Move a block-cyclic matrix back into a :class:`~hpcgpu.DistMatrix` on the same grid (or on ``grid``).

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
    DistMatrix
        Global ``(layout.m, layout.n)``, ``local``'s dtype and side.
    """
    grid = layout.grid if grid is None else grid
    return DistMatrix(from_cyclic_blocks(local, layout, grid, triangle), (layout.m, layout.n), grid)


class CyclicMatrix(_Elementwise):
    """A global ``m x n`` matrix in the 2-D block-cyclic layout of a process grid (ScaLAPACK's).

    Blocks of ``nb x nb`` are dealt round-robin over the ``pr x pc`` grid, the first on grid position ``(0, 0)``
    (ScaLAPACK's descriptor with ``MB = NB = nb``, ``RSRC = CSRC = 0``): global row ``i`` lives on grid row
    ``(i // nb) % pr`` at local row ``(i // (nb pr)) nb + i % nb``, columns likewise over the grid's columns
    (``hpcgpu.linalg.cyclic.Cyclic``). Made by ``DistMatrix.to_cyclic`` (collective) or from each
    rank's blocks (this constructor: local, no communication). Given to :func:`~hpcgpu.linalg.cholesky`,
    :func:`~hpcgpu.linalg.cho_factor`, :func:`~hpcgpu.linalg.lu_factor` or :func:`~hpcgpu.linalg.solve`, it is
    factored where it lies, with its own ``nb`` (and on its own grid): no move in, and ``cholesky`` returns the
    factor in this layout.

    Parameters
    ----------
    local : xp.ndarray, shape ``(numroc(m, nb, row, pr), numroc(n, nb, col, pc))``
        This rank's blocks, its rows and columns in ascending global order; host (NumPy) or device (CuPy); any
        strides (a padded row stride, as ``DistMatrix.to_cyclic`` gives, is kept).
    gshape : (int, int)
        Global shape ``(m, n)``.
    grid : ProcessGrid
    nb : int
        Block size, >= 1.

    Attributes
    ----------
    local : xp.ndarray
    layout : Cyclic
        Where every element lives (global indices of this rank's rows and columns: ``layout.rows()``,
        ``layout.cols()``).
    gshape, lshape : (int, int)
        Global shape and this rank's local shape.
    grid : ProcessGrid
    nb : int
    dtype : numpy.dtype
        One of :data:`hpcgpu.linalg.distmatrix.DTYPES`.
    xp : module
        ``numpy`` or ``cupy``, after where ``local`` lives.
    shape, ndim, size
        NumPy's names: ``shape`` is :attr:`gshape`, ``ndim`` 2, ``size`` ``m * n``.

    Raises
    ------
    ValueError
        ``local`` does not have this rank's shape in the layout, ``nb < 1``, or an unsupported dtype (on this rank:
        the constructor is local).

    Notes
    -----
    Local, no communication: the arithmetic of :class:`~hpcgpu.DistMatrix` (``+``, ``-``, ``*``, ``/`` with a
    scalar or elementwise with a matrix of the same layout, ``abs``, :meth:`conj`, :attr:`real`, :attr:`imag`,
    :meth:`astype`, :meth:`copy`). Collective over ``grid.cart``: :meth:`to_distmatrix`, :meth:`gather` and the
    routines above. Anything else of a DistMatrix (``matmul``, norms, HDF5) takes :meth:`to_distmatrix`'s result.

    Examples
    --------
    >>> c = a.to_cyclic()                                  # doctest: +SKIP
    >>> for shift in shifts:                               # doctest: +SKIP
    ...     f = hpcgpu.linalg.cho_factor(c + shift * eye)  # no move: eye = identity.to_cyclic(nb=c.nb)
    """

    ndim = 2
    """Always 2."""

    def __init__(self, local, gshape, grid, nb: int):
        if isinstance(nb, bool) or not isinstance(nb, (int, np.integer)) or nb < 1:
            raise ValueError(f"CyclicMatrix: nb must be an int >= 1, got {nb!r}")
        self.layout = Cyclic(gshape, grid, int(nb))
        self.gshape = (self.layout.m, self.layout.n)
        self.grid, self.nb = grid, self.layout.nb
        if tuple(local.shape) != self.layout.lshape:
            raise ValueError(f"CyclicMatrix: local blocks have shape {tuple(local.shape)}, expected "
                             f"{self.layout.lshape} for {self.gshape} on grid {grid.shape} with nb {self.nb}")
        err = _dtype_error(local.dtype, "CyclicMatrix")
        if err:
            raise err
        self.local = local
        self.dtype = np.dtype(local.dtype)
        self.xp = _device.cupy_or_none() if _device.is_device_array(local) else np

    @property
    def lshape(self) -> tuple[int, int]:
        """This rank's local shape (local)."""
        return self.layout.lshape

    @property
    def lnbytes(self) -> int:
        """Bytes of this rank's blocks (local)."""
        return self.lshape[0] * self.lshape[1] * self.dtype.itemsize

    @property
    def shape(self) -> tuple[int, int]:
        """The global shape ``(m, n)``."""
        return self.gshape

    @property
    def size(self) -> int:
        """The global number of elements ``m * n``."""
        return self.gshape[0] * self.gshape[1]

    def describe(self) -> str:
        """``"100 x 100 float64 block-cyclic nb 8 on grid 2x2"``: what every rank's part shares. Not collective."""
        return (f"{self.gshape[0]} x {self.gshape[1]} {self.dtype} block-cyclic nb {self.nb} on grid "
                f"{self.grid.shape[0]}x{self.grid.shape[1]}")

    def __repr__(self) -> str:
        return (f"CyclicMatrix(gshape={self.gshape}, dtype={self.dtype}, grid={self.grid.shape}, nb={self.nb}, "
                f"lshape={self.lshape}, xp={self.xp.__name__})")

    def _like(self, local):
        """A matrix of this one's layout with blocks ``local``."""
        return CyclicMatrix(local, self.gshape, self.grid, self.nb)

    def _fits(self, other) -> bool:
        """Whether ``other`` is laid out as this matrix: same global shape, grid and ``nb``."""
        return (isinstance(other, CyclicMatrix) and other.gshape == self.gshape and other.nb == self.nb
                and self.grid.same_as(other.grid))

    def to_distmatrix(self):
        """This matrix in the block layout of its grid, as a :class:`~hpcgpu.DistMatrix`.

        Collective over ``grid.cart``: one ``Alltoallv`` (a copy on one rank).

        Returns
        -------
        DistMatrix
            Global ``(m, n)``, on :attr:`grid`, this matrix's dtype and side.
        """
        return from_cyclic(self.local, self.layout)

    def gather(self, root: int = 0):
        """The whole matrix on rank ``root`` (``None`` elsewhere), as ``DistMatrix.gather``.

        Collective over ``grid.cart``: :meth:`to_distmatrix`, then the DistMatrix's gather.

        Parameters
        ----------
        root : int
            The rank of ``grid.cart`` that receives it.

        Returns
        -------
        numpy.ndarray or None
            ``(m, n)`` on ``root``.
        """
        return self.to_distmatrix().gather(root)

    def __matmul__(self, other):
        """Refused (on every rank alike): SUMMA multiplies DistMatrix blocks."""
        raise agreed(TypeError("CyclicMatrix @: SUMMA multiplies DistMatrix blocks: c.to_distmatrix() @ ..."))

    __rmatmul__ = __matmul__

    @property
    def T(self):  # noqa: N802 - NumPy's name
        """Refused (on every rank alike): no transpose view is kept of a block-cyclic matrix."""
        raise agreed(TypeError("CyclicMatrix.T: a block-cyclic matrix has no transpose view: "
                               "c.to_distmatrix().T is one, and its .to_cyclic() the transpose in this layout"))

    @property
    def H(self):  # noqa: N802 - the conjugate transpose's usual name
        """Refused (on every rank alike), as :attr:`T`."""
        raise agreed(TypeError("CyclicMatrix.H: a block-cyclic matrix has no transpose view: "
                               "c.to_distmatrix().H is one, and its .to_cyclic() the transpose in this layout"))
