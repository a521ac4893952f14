"""DistMatrix: a dense matrix in 2-D blocks on a :class:`ProcessGrid`.

Nothing global is held by one rank unless the user asks for it
(:meth:`DistMatrix.gather`, or :meth:`DistMatrix.from_global` on the root).
"""

from __future__ import annotations

import numbers
import os

import numpy as np
from mpi4py import MPI

from .. import _context, _device
from .._gemm import bfloat16_dtype
from .._version import __version__
from .blocks import remap
from ..comm import movable
from ..errors import agree, agree_inputs
from .grid import ProcessGrid, default_grid
from .._memory import node_memory_error
from .._outputs import write_dataset
from ..io import open_hdf5, source_error
from .summa import matmul
from ..watchdog import watch

__all__ = ["DistMatrix", "DTYPES"]

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


class DistMatrix:
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

    Raises
    ------
    ValueError
        ``local`` does not have the block's shape, or an unsupported dtype.

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
        """Shape of this rank's block, ``(len(rows), len(cols))``."""
        return tuple(self.local.shape)

    @property
    def lnbytes(self) -> int:
        """Bytes of this rank's block (local)."""
        return int(self.local.nbytes)

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

    def __matmul__(self, other: DistMatrix) -> DistMatrix:
        return matmul(self, other)

    # -- transposes and redistribution -----------------------------------------
    @property
    def T(self) -> DistMatrix:  # noqa: N802 - NumPy's name
        """The transpose, ``(n, m)``, on the same grid. Collective over ``grid.cart`` (one ``Alltoallv``).

        Each rank sends every other the part of its block that falls in that
        rank's block of the transpose, and receives its own the same way:
        no rank holds more than its blocks and one send and one receive
        buffer of its block's size.
        """
        return self._move(self.grid, transpose=True, conj=False)

    @property
    def H(self) -> DistMatrix:  # noqa: N802 - the conjugate transpose's usual name
        """The conjugate transpose, ``(n, m)``, on the same grid (:attr:`T` for real dtypes). Collective."""
        return self._move(self.grid, transpose=True, conj=self.dtype.kind == "c")

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
        agree_inputs("redistribute", {"matrix": self, "grid": grid}, comm=self.grid.cart, error=err)
        return self._move(grid, transpose=False, conj=False)

    def _move(self, grid: ProcessGrid, transpose: bool, conj: bool) -> DistMatrix:
        """This matrix (or its transpose) in ``grid``'s blocks: pack, one Alltoallv, unpack."""
        m, n = self.gshape
        tshape = (n, m) if transpose else (m, n)
        with watch("DistMatrix Alltoallv", "transpose" if transpose else "redistribute"):
            out = remap(self.local, lambda p: self.grid.block(self.gshape, p), lambda q: grid.block(tshape, q),
                        self.grid.cart, transpose=transpose, conj=conj)
        return DistMatrix(out, tshape, grid)

    # -- constructors ---------------------------------------------------------
    @classmethod
    def zeros(cls, gshape, grid: ProcessGrid | None = None, dtype="float64", xp=None) -> DistMatrix:
        """A matrix of zeros. Collective over ``grid.cart``: one small agreement of the arguments.

        Parameters
        ----------
        gshape : (int, int)
            Global shape ``(m, n)``.
        grid : ProcessGrid, optional
            :func:`hpcgpu.grid.default_grid` when omitted (made on first use,
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
            :func:`hpcgpu.grid.default_grid` when omitted (made on first use,
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
        agree_inputs("gather", {"matrix": self, "root": root}, comm=comm, error=err)
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
        agree_inputs("to_hdf5", {"matrix": self, "path": path, "name": name, "attrs": attrs, "overwrite": overwrite,
                                 "what": what}, comm=self.grid.cart, error=_names_error(path, name, "to_hdf5"))
        meta = dict(world_size=self.grid.cart.size, grid=np.array(self.grid.shape), hpcgpu_version=__version__)
        meta.update(attrs or {})
        local = _device.asnumpy(self.local).astype(_file_dtype(self.dtype), copy=False)
        # Not watched: without parallel HDF5 the ranks write in turn, and the last one waits for the whole file
        return write_dataset(path, name, self.gshape, local, (self.rows, self.cols), comm=self.grid.cart,
                             attrs=meta, overwrite=overwrite, what=what)


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
