"""Training data: HDF5 shards read by hyperslab, and the global-batch sampler.

Each rank reads only its contiguous shard of ``/train`` (rows
``block_range(N, P, rank)``) and of ``/test``; data given in memory
(:func:`from_arrays`) is either the whole set on every rank, of which each
rank takes the same block, or each rank's own rows. Every epoch the global order
of the training samples is a permutation drawn from ``(seed, epoch)``; global
batch ``b`` is positions ``b*B .. (b+1)*B`` of that order, and rank ``r``
takes positions ``block_range(B, P, r)`` of each global batch (with K
micro-batches of gradient accumulation: ``block_range(B/K, P, r)`` of each
of the batch's K consecutive micro-batches). The samples of a global batch
are therefore the same whatever the number of ranks P and of micro-batches.

The rows a rank needs for an epoch mostly lie in other ranks' shards: one
``Alltoallv`` per epoch moves them, so the data set stays distributed (each
rank holds at most 2N/P rows) and the file is read once, not every epoch.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass

import numpy as np
from mpi4py import MPI
from mpi4py.util.dtlib import from_numpy_dtype

from .._partition import block_range, block_starts
from ..errors import agree, agreed
from ..io import one_line, open_hdf5, source_error

__all__ = ["Split", "load_split", "from_arrays", "GlobalBatchSampler", "fingerprint", "task_of"]


@dataclass
class Split:
    """One rank's shard of a data split.

    Attributes
    ----------
    X : numpy.ndarray, shape (stop - start, D)
    y : numpy.ndarray, shape (stop - start,) or (stop - start, k)
        int64 class labels (classification) or float targets (regression).
    start, stop : int
        Global rows of the shard.
    n_global, dim : int
        N and D of the whole split.
    starts : numpy.ndarray or None
        Every rank's first global row and N after them (P + 1 values) when
        the shards are not ``block_range``'s (each rank's own rows given in
        memory); None for ``block_range``'s.
    integer : bool
        The features are integers in the file they were read from (``X``
        holds them in the floating type, exactly up to 2**24 in float32 and
        2**53 in float64): a model of one's own gets them as int64.
    """

    X: np.ndarray
    y: np.ndarray
    start: int
    stop: int
    n_global: int
    dim: int
    starts: np.ndarray | None = None
    integer: bool = False

    @property
    def task(self) -> str:
        """``"classification"`` for integer targets, ``"regression"`` for float ones."""
        return task_of(self.y.dtype)

    @property
    def outputs(self) -> int:
        """The targets' width k (1 for labels and for 1-D targets)."""
        return int(np.prod(self.y.shape[1:])) if self.y.ndim > 1 else 1


def task_of(dtype) -> str:
    """The task of targets of ``dtype``: ``"classification"`` for integers, ``"regression"`` otherwise.

    Parameters
    ----------
    dtype : numpy.dtype or str

    Returns
    -------
    str
    """
    return "classification" if np.dtype(dtype).kind in "iu" else "regression"


def _meta(path: str, split: str, required: bool, task: str | None = None):
    """Shapes and dtypes of ``/split/X`` and ``/split/y``, or an error (no raise).

    HDF5's own failures (a damaged object header, an external link to a
    missing file) become a one-line error naming the dataset.
    """
    f, err = open_hdf5(path, "--data")
    if err:
        return None, err
    with f:
        try:
            return _meta_of(f, path, split, required, task)
        except (KeyError, OSError, RuntimeError, ValueError, TypeError) as e:
            return None, ValueError(f"--data {path}: /{split} cannot be read ({one_line(e)})")


def _unwritten(ds) -> tuple | None:
    """``(name, rows, chunks written, chunks, fill value)`` of a partly written dataset; None when complete."""
    if ds.chunks is None or ds.compression is not None or ds.shape[0] == 0:
        return None
    per = [-(-n // c) for n, c in zip(ds.shape, ds.chunks, strict=True)]
    total, written = int(np.prod(per)), ds.id.get_num_chunks()
    if written >= total:
        return None
    return ds.name, ds.shape[0], written, total, np.asarray(ds.fillvalue).item()


def _meta_of(f, path: str, split: str, required: bool, task: str | None):
    import h5py

    names = [f"/{split}/X", f"/{split}/y"]
    present = [n in f and isinstance(f[n], h5py.Dataset) for n in names]
    if not any(present):
        return (None, ValueError(f"--data {path}: no dataset {names[0]}")) if required else ("absent", None)
    if not all(present):
        return None, ValueError(f"--data {path}: no dataset {names[present.index(False)]}")
    X, y = f[names[0]], f[names[1]]
    err = source_error(path, X, f"--data {path}:{names[0]}") or source_error(path, y, f"--data {path}:{names[1]}")
    if err is not None:
        return None, err
    if X.ndim != 2:
        return None, ValueError(f"--data {path}: {names[0]} must be 2-D (N x D), has shape {X.shape}")
    if X.dtype.kind not in "fiu":
        return None, ValueError(f"--data {path}: {names[0]} must be real numbers, has dtype {X.dtype}")
    want = task or (task_of(y.dtype) if y.dtype.kind in "fiu" else "classification")
    labels = "iuf" if task == "classification" else "iu"  # float labels when the user says they are classes
    if want == "classification" and (y.ndim != 1 or y.dtype.kind not in labels):
        return None, ValueError(
            f"--data {path}: {names[1]} must be a 1-D integer label array for classification, "
            f"has shape {y.shape} and dtype {y.dtype}"
        )
    if want != "classification" and (y.ndim not in (1, 2) or y.dtype.kind not in "fiu"):
        return None, ValueError(
            f"--data {path}: {names[1]} must be numbers of shape (N,) or (N, k) for regression, "
            f"has shape {y.shape} and dtype {y.dtype}"
        )
    nc, err = _num_classes(f, path)
    if X.shape[0] != y.shape[0]:
        err = ValueError(f"--data {path}: {names[0]} has {X.shape[0]} rows but {names[1]} has {y.shape[0]} labels")
    elif X.shape[1] == 0:
        err = ValueError(f"--data {path}: {names[0]} has no features (D = 0)")
    if err is not None:
        return None, err
    notes = [w for w in (_unwritten(X), _unwritten(y)) if w]
    return (X.shape[0], X.shape[1], nc, want, y.shape[1:], notes, X.dtype), None


def _num_classes(f, path: str) -> tuple:
    """The file's ``num_classes`` attribute as an int (None when absent), or an error naming the attribute."""
    nc = f.attrs.get("num_classes")
    if nc is None:
        return None, None
    try:
        if float(nc) == int(nc) and int(nc) >= 2:
            return int(nc), None
    except (TypeError, ValueError):
        pass
    return None, ValueError(f"--data {path}: the attribute num_classes must be an integer >= 2, got {nc!r}")


def load_split(path: str, split: str, comm: MPI.Intracomm, required: bool = True,
               dtype="float32", min_rows: int = 1, task: str | None = None) -> tuple[Split | None, int | None]:
    """Read this rank's shard of ``/split/X`` and ``/split/y`` and check it.

    Collective: all ranks of ``comm`` must call it. Every check is agreed
    among the ranks before anything else is communicated, so bad input makes
    every rank raise the same one-line error.

    Parameters
    ----------
    path : str
        The HDF5 file.
    split : {"train", "test"}
    comm : mpi4py.MPI.Intracomm
    required : bool
        Whether a missing split is an error (else ``(None, None)``).
    dtype : str
        dtype of the returned ``X`` (float32 or float64), and of regression targets;
        integer features are read into it too, and the Split says they were
        (``integer``).
    min_rows : int
        Fewest rows the split may have (the number of ranks for training).
    task : {"classification", "regression"}, optional
        What ``/split/y`` must hold: 1-D integer labels (read as int64), or
        numbers of shape (N,) or (N, k) (read as ``dtype``). By default
        integer targets are labels and float ones regression targets.

    Returns
    -------
    (Split or None, int or None)
        The shard, and the ``num_classes`` attribute of the file if it has one.

    Raises
    ------
    FileNotFoundError
        No file at ``path``.
    ValueError
        Not HDF5; a dataset missing, of the wrong rank or dtype; X and y of
        different lengths; fewer than ``min_rows`` rows; NaN or infinity in X
        (or in regression targets); a negative label (labels are checked
        against the class count later).
    """
    import h5py

    meta, err = _meta(path, split, required, task)
    agree(err, comm=comm)
    if meta == "absent":
        return None, None
    n, d, nc, task, tail, notes, file_dtype = meta
    if comm.rank == 0:
        for name, rows, written, chunks, fill in notes:
            print(f"hpcgpu.train: warning: --data {path}: {name} declares {rows} rows but only {written} of its "
                  f"{chunks} chunks were ever written: the rest read as {fill} (the fill value)", file=sys.stderr,
                  flush=True)
    err = None
    if n < min_rows:
        err = ValueError(
            f"--data {path}: /{split} has {n} samples, fewer than the {min_rows} ranks "
            "(each rank needs at least one)"
        )
    agree(err, comm=comm)
    start, stop = block_range(n, comm.size, comm.rank)
    agree(_memory_error(path, split, n, d, stop - start, np.dtype(dtype).itemsize, comm), comm=comm)
    ytype = np.int64 if task == "classification" else dtype
    try:
        with h5py.File(path, "r") as f:
            X = np.empty((stop - start, d), dtype=dtype)
            if stop > start:
                f[f"/{split}/X"].read_direct(X, np.s_[start:stop])
            y = f[f"/{split}/y"][start:stop]
        err = _whole_labels(y, start, f"--data {path}: /{split}/y") if task == "classification" else None
        y = np.asarray(y, dtype=ytype) if err is None else None
    except (OSError, TypeError, ValueError) as e:
        X = y = None
        err = OSError(f"--data {path}: rank {comm.rank} cannot read /{split} rows {start}:{stop} ({e})")
    if err is None and X is not None and y is not None:
        err = _rows_error(X, y, start, f"--data {path}: /{split}/X", f"--data {path}: /{split}/y")
        if err is not None and "holds NaN or infinity" in str(err) and np.dtype(file_dtype).itemsize > X.itemsize:
            err = _overflow(path, split, X, start, file_dtype) or err
    agree(err, comm=comm)
    return Split(X, y, start, stop, n, d, integer=np.dtype(file_dtype).kind in "iu"), nc


def _whole_labels(y, start: int, what: str) -> ValueError | None:
    """Float labels given as classes (``task="classification"``) must be whole numbers: the first row that is not."""
    if y.dtype.kind != "f":
        return None
    bad = np.flatnonzero(~(np.isfinite(y) & (y == np.floor(y)) & (np.abs(y) < 2.0**62)))
    if bad.size:
        return ValueError(f"{what}: row {start + int(bad[0])} holds {float(y[bad[0]])}, not a whole number of "
                          "int64's range: class labels must be integers 0..C-1")
    return None


def _overflow(path: str, split: str, X, start: int, file_dtype) -> ValueError | None:
    """A row that is finite in the file but not in ``X``'s narrower type: the values overflow it."""
    import h5py

    bad = int(np.flatnonzero(~np.isfinite(X).all(axis=1))[0])
    with h5py.File(path, "r") as f:
        row = f[f"/{split}/X"][start + bad]
    if not np.isfinite(row).all():
        return None
    big = float(np.abs(row).max())
    return ValueError(f"--data {path}: /{split}/X row {start + bad} holds {big:.3g}, beyond {X.dtype}'s range "
                      f"({float(np.finfo(X.dtype).max):.3g}): use --dtype float64, or rescale the features")


def _memory_error(path: str, split: str, n: int, d: int, rows: int, itemsize: int, comm) -> MemoryError | None:
    """Whether this node's ranks' shards of ``/split`` fit in its memory (checked before reading any of them)."""
    from ..runtime import host_memory

    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    here = node.allreduce(rows * (d * itemsize + 8))
    node.Free()
    memory = host_memory()
    if not memory or here <= memory:
        return None
    gib = 2.0**30
    return MemoryError(f"--data {path}: /{split}/X declares {n} x {d} ({n * (d * itemsize + 8) / gib:.1f} GiB in "
                       f"all); this node's ranks would hold {here / gib:.1f} GiB of it, more than its memory "
                       f"({memory / gib:.1f} GiB): run on more nodes, or check the file's declared size")


def _beyond_range(src, cast, start: int, name: str) -> ValueError | None:
    """A row finite in the arrays given (``src``) but not in ``cast``, their narrower type's, as an error.

    ``src`` of objects (a frame of mixed columns) is read as float64 to tell; ``name`` names the array
    (``data: X``, ``data: y``).
    """
    if not cast.size:
        return None
    rows = cast.reshape(cast.shape[0], -1)
    bad = np.flatnonzero(~np.isfinite(rows).all(axis=1))
    kind = np.dtype(getattr(src, "dtype", "O")).kind
    if not bad.size or kind not in "fO":
        return None
    try:
        row = np.asarray(src, dtype=np.float64).reshape(rows.shape)[bad[0]]
    except (TypeError, ValueError):
        return None  # objects that are not numbers: the conversion said so already
    if not np.isfinite(row).all():
        return None  # NaN or infinity in the data itself: _rows_error says so
    return ValueError(f"{name} row {start + int(bad[0])} holds {float(np.abs(row).max()):.3g}, beyond "
                      f"{cast.dtype}'s range ({float(np.finfo(cast.dtype).max):.3g}): use dtype=\"float64\", or "
                      "rescale the data")


def _rows_error(X, y, start: int, xname: str, yname: str) -> ValueError | None:
    """A non-finite feature (or regression target) or a negative label in a shard, as an error naming its row."""
    bad = np.flatnonzero(~np.isfinite(X).all(axis=1))
    if bad.size:
        return ValueError(f"{xname} row {start + int(bad[0])} holds NaN or infinity")
    if y.dtype.kind in "iu":
        if y.size and y.min() < 0:
            return ValueError(f"{yname} has a negative label ({int(y.min())})")
        return None
    bad = np.flatnonzero(~np.isfinite(y.reshape(y.shape[0], int(np.prod(y.shape[1:])))).all(axis=1))
    if bad.size:
        return ValueError(f"{yname} row {start + int(bad[0])} holds NaN or infinity")
    return None


def _arrays_error(X, y, task: str | None, what: str) -> tuple:
    """``(error or None, X's shape, y's shape, task)`` of arrays given to :func:`from_arrays`. Not collective."""
    err = None
    try:
        xshape, yshape = tuple(X.shape), (tuple(y.shape) if hasattr(y, "shape") else np.shape(y))
        ykind = np.dtype(y.dtype).kind if hasattr(y, "dtype") else np.asarray(y).dtype.kind
        xkind = np.dtype(X.dtype).kind if hasattr(X, "dtype") else "f"
        ykind = "i" if ykind == "b" else ykind  # True/False labels: classes 1 and 0, as Keras takes them
    except (AttributeError, TypeError) as e:
        xshape, yshape, ykind, xkind = (), (), "O", "f"
        arrays = "X" if what == "predict" else "X and y"  # predict's y is its own placeholder
        err = ValueError(f"{what}: {arrays} must be arrays (or h5py datasets) with a shape ({e})")
    task = task or (task_of(np.dtype("int64") if ykind in "iu" else np.dtype("float64")))
    if err is not None:
        return err, (0, 0), (0,), task
    if task == "classification" and len(yshape) == 2 and yshape[1] == 1:
        yshape = yshape[:1]  # labels as a column (N, 1), as Keras's sparse losses take them: read as (N,)
    if xkind not in "biufO":  # objects may be numbers (a frame of mixed columns): their conversion decides
        err = ValueError(f"{what}: X must hold real numbers, has dtype {np.dtype(X.dtype)}")
    elif len(xshape) != 2 or xshape[1] == 0:
        err = ValueError(f"{what}: X must be 2-D (N x D) with D > 0, has shape {xshape}")
    elif not yshape or yshape[0] != xshape[0]:
        err = ValueError(f"{what}: X has {xshape[0]} rows but y has shape {yshape}")
    elif task == "classification" and (len(yshape) != 1 or ykind not in "iuf"):
        err = ValueError(f"{what}: y must be 1-D integer labels for classification (or whole-number floats), "
                         f"has shape {yshape} and kind {ykind!r}")
    elif task == "regression" and (len(yshape) not in (1, 2) or ykind not in "fiu"):
        err = ValueError(f"{what}: y must be numbers of shape (N,) or (N, k) for regression, has shape "
                         f"{yshape}")
    return err, xshape, yshape, task


def from_arrays(X, y, comm: MPI.Intracomm, *, sharded: bool = False, dtype="float32", task: str | None = None,
                what: str = "data", min_rows: int = 1) -> Split:
    """This rank's shard of data given in memory, checked. Collective over ``comm``.

    Nothing is broadcast: with ``sharded=False`` every rank holds (or can
    index) the whole set and takes rows ``block_range(N, P, rank)``; with
    ``sharded=True`` each rank passes its own rows, and the global set is
    their concatenation in rank order.

    Parameters
    ----------
    X : array_like, shape (N, D) or (n_rank, D)
        Anything with ``len()``, ``shape`` and slicing by rows: a NumPy or
        CuPy array, an h5py dataset (only this rank's rows are read).
    y : array_like, shape (N,) or (N, k)
        Integer labels (classification; whole-number floats too, with
        ``task="classification"``) or float targets (regression).
    comm : mpi4py.MPI.Intracomm
    sharded : bool
        Each rank's own rows (True) or the whole set on every rank (False).
    dtype : str
        Of the features (float32 or float64), and of regression targets.
    task : {"classification", "regression"}, optional
        Default: integer targets are labels, float ones regression targets.
    what : str
        How messages name the data (``data``, ``validation``).
    min_rows : int
        Fewest rows the whole set may have.

    Returns
    -------
    Split

    Raises
    ------
    ValueError
        Every rank, the same line: not 2-D features, a length mismatch,
        targets of the wrong shape or type, the ranks holding sets of
        different sizes with ``sharded=False``, too few rows, NaN or
        infinity, a negative label.
    """
    from .. import _device

    P, rank = comm.size, comm.rank
    err, xshape, yshape, task = _arrays_error(X, y, task, what)
    agree(err, comm=comm)
    n_here, d = xshape[0], xshape[1]
    counts = np.asarray(comm.allgather(n_here), dtype=np.int64)
    dims = comm.allgather((d, yshape[1:], task))
    err = None
    if len(set(dims)) > 1:
        err = ValueError(f"{what}: the ranks hold data of different shapes or tasks ({sorted(set(dims))})")
    elif not sharded and len(set(counts.tolist())) > 1:
        r = int(np.flatnonzero(counts != counts[0])[0])
        err = ValueError(f"{what}: rank 0 holds {counts[0]} rows and rank {r} {counts[r]}: with sharded=False every "
                         "rank passes the whole set; pass sharded=True when each passes its own rows")
    agree(err, comm=comm)
    if sharded:
        starts = np.concatenate([[0], np.cumsum(counts)])
        n, (start, stop) = int(starts[-1]), (int(starts[rank]), int(starts[rank + 1]))
        lo, hi, starts_out = 0, n_here, starts
    else:
        n = int(counts[0])
        start, stop = block_range(n, P, rank)
        lo, hi, starts_out = start, stop, None
    err = None
    if n == 0 and min_rows:
        err = ValueError(f"{what}: no samples")
    elif n < min_rows:
        err = ValueError(f"{what}: {n} samples, fewer than the {min_rows} ranks (each rank needs at least one)")
    agree(err, comm=comm)
    ytype = np.int64 if task == "classification" else dtype
    try:
        src = _device.asnumpy(X[lo:hi])
        ysrc = np.asarray(_device.asnumpy(y[lo:hi])).reshape((hi - lo,) + yshape[1:])  # a column (N, 1) of labels
        err = _whole_labels(ysrc, start, f"{what}: y") if task == "classification" else None
        with np.errstate(over="ignore", invalid="ignore"):  # a finite value beyond the dtype's range: named below
            Xr = np.array(src, dtype=dtype).reshape(hi - lo, d)
            yr = np.array(ysrc, dtype=ytype)  # True/False labels: 1 and 0
        err = err or _beyond_range(src, Xr, start, f"{what}: X") or \
            (_beyond_range(ysrc, yr, start, f"{what}: y") if yr.dtype.kind == "f" else None) or \
            _rows_error(Xr, yr, start, f"{what}: X", f"{what}: y")
    except (OSError, TypeError, ValueError, MemoryError) as e:
        Xr = yr = None
        err = ValueError(f"{what}: rank {rank} cannot take rows {lo}:{hi} ({type(e).__name__}: {e})")
    agree(err, comm=comm)
    return Split(Xr, yr, start, stop, n, d, starts_out)


def _words(a: np.ndarray) -> np.ndarray:
    """The rows of ``a`` (n, ...) as unsigned 64-bit words, one per element (its bits, zero-extended)."""
    a = np.ascontiguousarray(a).reshape(a.shape[0], -1)
    unsigned = {8: np.uint64, 4: np.uint32, 2: np.uint16, 1: np.uint8}[a.dtype.itemsize]
    return a.view(unsigned).astype(np.uint64, copy=False)


def _mix(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer on uint64, elementwise (Steele et al., OOPSLA 2014): each input bit moves each output."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def fingerprint(split: Split, comm: MPI.Intracomm, chunk: int = 4096) -> dict:
    """A fingerprint of a whole data split that does not depend on how it is sharded.

    Collective over ``comm`` (the ranks that hold the split's shards). Row
    ``r`` (features and target) hashes to ``mix(sum_j w_j K_j + r K_r)``:
    its elements' bits ``w_j`` times fixed odd 64-bit constants, plus its
    global index, through SplitMix64's finalizer; the fingerprint is the
    sum of the row hashes modulo 2**64. Each rank hashes its own rows, so
    the same data gives the same digest at any number of ranks, and one
    changed bit or two swapped rows change it (with probability about
    1 - 2**-64; it detects accidents, not an adversary). One pass over the
    shard, ``chunk`` rows at a time.

    Parameters
    ----------
    split : Split
        This rank's shard (rows ``start..stop`` of the split).
    comm : mpi4py.MPI.Intracomm
    chunk : int
        Rows hashed at a time (bounds the temporaries).

    Returns
    -------
    dict
        ``n`` (rows), ``dim`` (features), ``dtype`` (of X as loaded),
        ``targets`` (dtype and trailing shape of y), ``digest`` (16 hex
        digits); the same on every rank.
    """
    X, y = split.X, split.y
    width = X.shape[1] + (int(np.prod(y.shape[1:])) if y.ndim > 1 else 1)
    K = np.random.default_rng([0x68706367, width]).integers(1, 2**63, size=width + 1, dtype=np.uint64) | np.uint64(1)
    total = np.uint64(0)
    with np.errstate(over="ignore"):
        for lo in range(0, X.shape[0], chunk):
            hi = min(lo + chunk, X.shape[0])
            h = np.dot(_words(X[lo:hi]), K[: X.shape[1]]) + np.dot(_words(y[lo:hi]), K[X.shape[1] : width])
            h += np.arange(split.start + lo, split.start + hi, dtype=np.uint64) * K[width]
            total += _mix(h).sum(dtype=np.uint64)
    digest = sum(comm.allgather(int(total))) % 2**64
    return dict(n=int(split.n_global), dim=int(split.dim), dtype=str(X.dtype),
                targets=f"{y.dtype}{tuple(y.shape[1:]) if y.ndim > 1 else ''}", digest=f"{digest:016x}")


def check_labels(where: str, splits, num_classes: int | None, comm: MPI.Intracomm) -> int:
    """Agree on the class count C and check every label is in ``0..C-1``.

    Collective. ``C`` is ``num_classes`` (the file's attribute), else the
    largest label of the first split (the training set) plus one; a label
    of a later split (validation) outside ``0..C-1`` is an error, not a
    wider model.

    Parameters
    ----------
    where : str
        How messages name the data (``--data PATH``, ``data``).
    splits : sequence of Split or None
    num_classes : int or None
    comm : mpi4py.MPI.Intracomm

    Returns
    -------
    int
        C, the same on every rank.

    Raises
    ------
    ValueError
        A label is ``>= C``, or ``C < 2``.
    """
    def local_max(s):
        return int(s.y.max()) if s is not None and s.y.size else -1

    train_max = comm.allreduce(local_max(splits[0]), op=MPI.MAX)
    other_max = comm.allreduce(max((local_max(s) for s in splits[1:]), default=-1), op=MPI.MAX)
    gmax = max(train_max, other_max)
    C = num_classes if num_classes is not None else train_max + 1  # the classes are the training set's
    err = None
    if train_max >= C:
        err = ValueError(f"{where}: label {train_max} is outside 0..{C - 1} (num_classes = {C})")
    elif gmax >= C:
        err = ValueError(f"{where}: the validation labels hold {gmax}, outside the training set's classes "
                         f"0..{C - 1}: a model of {C} classes cannot predict it")
    elif C < 2:
        err = ValueError(f"{where}: {C} class(es); classification needs at least 2")
    agree(err, comm=comm)
    return C


class GlobalBatchSampler:
    """This rank's samples of every global batch, one step at a time.

    Collective (:meth:`start_epoch`): all ranks of ``comm`` call it with the
    same epoch.

    The rank's shard and the rows received from other ranks for the current
    epoch live in one *pool* (host, plus a device copy on a GPU): the shard
    at the front, copied once; the received rows behind it, replaced every
    epoch by one ``Alltoallv`` (a rank's own rows never travel). A step's
    local batch is gathered from the pool with one ``take`` into a small
    reused buffer, so no epoch-sized array is ever rebuilt.

    With ``replicate`` the pool is the whole training set on every rank,
    gathered once (``Allgatherv``) at construction, and an epoch starts
    without communication: what a small data set (Fashion-MNIST: 188 MB)
    should do, since the per-epoch ``Alltoallv`` moves about ``(P - 1) / P``
    of it every epoch. The batches are the same either way.

    Parameters
    ----------
    train : Split
        This rank's shard (its arrays move into the pool).
    batch_size : int
        The GLOBAL batch B; B <= N and B >= P (checked by the trainer).
    seed : int
    comm : mpi4py.MPI.Intracomm
    xp : module
        Where batches are made (``numpy`` or ``cupy``).
    micro_batches : int
        K: each global batch is K global micro-batches of B / K samples
        (consecutive in the epoch's order), each split among the ranks as
        a global batch is; K divides B and B / K >= P (checked by the
        trainer). K = 1: the global batch itself.
    replicate : bool
        Every rank holds the whole training set (see above); collective
        (construction then gathers it).
    drop_last : bool
        True (the default): the last ``N mod B`` samples of each epoch's
        order are not trained in that epoch, so every step averages over
        exactly B samples (the learning rate means the same at every step,
        and a step's shapes never change). The order is drawn anew every
        epoch, so no sample is left out for good, and the dropped samples
        are the same whatever P is. False (PyTorch's ``DataLoader``
        default): they are trained as a last, smaller step of ``N mod B``
        samples, its gradient averaged over them; split into K micro-batches
        (``block_range(N mod B, K, k)``) and each among the ranks as a full
        one is, so the same at any P. A rank may then hold no row of the
        last step (``N mod B < P``): it adds a zero gradient.

    Raises
    ------
    ValueError
        ``drop_last`` is not a bool (an :class:`hpcgpu.AgreedError`: the
        value is the same on every rank, so every rank raises it, before
        any communication).

    Attributes
    ----------
    global_batch : int
        B, the samples of one step over all data-parallel ranks.
    micro_batches : int
        K, the micro-batches of a step.
    n_global : int
        N, the training samples over all ranks.
    steps : int
        Global batches per epoch: ``N // B``, or ``ceil(N / B)`` without
        ``drop_last``.
    drop_last : bool
    dropped : int
        The samples of each epoch's order left out of it: ``N mod B``, or 0
        without ``drop_last``.
    last_batch : int
        The global batch of the epoch's last step: B, or ``N mod B`` where
        that step is a partial one.
    epoch_samples : int
        The samples an epoch trains: ``N - dropped``.
    local_micro_batch : int
        ``len(block_range(B / K, P, rank))``: B/(K P), rounded up on the
        last ``(B / K) mod P`` ranks. Uneven local batches are exact: the
        gradient is summed over ranks and divided by B.
    local_batch : int
        ``K * local_micro_batch``: this rank's samples of one step.
    """

    def __init__(self, train: Split, batch_size: int, seed: int, comm: MPI.Intracomm, xp=np,
                 micro_batches: int = 1, replicate: bool = False, drop_last: bool = True):
        if not isinstance(drop_last, (bool, np.bool_)):
            raise agreed(ValueError(f"drop_last={drop_last!r}: must be True or False"))
        self.train, self.global_batch, self.seed, self.comm, self.xp = train, int(batch_size), int(seed), comm, xp
        self.micro_batches, self.drop_last = int(micro_batches), bool(drop_last)
        self.n_global, self.data_parallel_size = train.n_global, comm.size
        self._full = self.n_global // self.global_batch  # steps of exactly B samples
        rest = self.n_global - self._full * self.global_batch
        self.steps = self._full + (1 if rest and not self.drop_last else 0)
        self.dropped = rest if self.drop_last else 0
        self.last_batch = rest if self.steps > self._full else self.global_batch
        self.epoch_samples = self.n_global - self.dropped
        P = self.data_parallel_size
        self.bounds = [block_range(self.global_batch // self.micro_batches, P, r) for r in range(P)]
        lo, hi = self.bounds[comm.rank]
        self.local_micro_batch = hi - lo
        self.local_batch = self.micro_batches * self.local_micro_batch
        # The partial last step's micro-batches: global positions (lo, hi) of each, and this rank's rows of each
        self._partial_micro = [block_range(rest, self.micro_batches, k) for k in range(self.micro_batches)]
        self._partial_local = sum(len(range(*block_range(mhi - mlo, P, comm.rank))) for mlo, mhi in
                                  self._partial_micro) if self.steps > self._full else 0
        self.shard_starts = np.asarray(train.starts if train.starts is not None else block_starts(self.n_global, P))
        self._rowtype = from_numpy_dtype(train.X.dtype).Create_contiguous(train.dim).Commit()
        ytail, ytype = train.y.shape[1:], train.y.dtype
        self._ytype = from_numpy_dtype(ytype).Create_contiguous(max(1, int(np.prod(ytail)))).Commit()
        n_local = train.stop - train.start
        self.replicated = bool(replicate)
        # Another rank's rows in one epoch: at most all of this rank's local batches.
        self._cap = min(self._full * self.local_batch + self._partial_local, self.n_global - n_local)
        D, dt = train.dim, train.X.dtype
        if self.replicated:  # the whole set, gathered once: row r of the pool is global row r
            counts, displs = np.diff(self.shard_starts), self.shard_starts[:-1]  # shard_starts ends with N
            err = None
            try:
                self._pool_X = np.empty((self.n_global, D), dt)
                self._pool_y = np.empty((self.n_global,) + ytail, ytype)
            except MemoryError:
                err = MemoryError(f"--data-placement replicated: no room for the training set "
                                  f"({self.n_global * (D * dt.itemsize + 8) / 2**20:.0f} MiB) on rank {comm.rank}; "
                                  "use --data-placement sharded")
            agree(err, comm=comm)
            comm.Allgatherv([train.X, n_local, self._rowtype], [self._pool_X, (counts, displs), self._rowtype])
            comm.Allgatherv([train.y, n_local, self._ytype], [self._pool_y, (counts, displs), self._ytype])
            train.X, train.y = self._pool_X[train.start : train.stop], self._pool_y[train.start : train.stop]
        else:
            self._pool_X = np.empty((n_local + self._cap, D), dt)
            self._pool_y = np.empty((n_local + self._cap,) + ytail, ytype)
            self._pool_X[:n_local], self._pool_y[:n_local] = train.X, train.y
            train.X, train.y = self._pool_X[:n_local], self._pool_y[:n_local]  # no second copy of the shard
        if xp is np:
            self._dev_X, self._dev_y = self._pool_X, self._pool_y
        else:
            err = None
            try:
                self._dev_X, self._dev_y = xp.asarray(self._pool_X), xp.asarray(self._pool_y)
            except Exception as e:  # noqa: BLE001 - CuPy's OutOfMemoryError: every rank must hear of it
                err = MemoryError(f"training data on the GPU of rank {comm.rank}: {e}"
                                  + ("; use --data-placement sharded" if self.replicated else ""))
            agree(err, comm=comm)
        # (a rank's rows of a partial step may outnumber its full local batch: block_range's sizes are not monotone)
        rows = max(self.local_batch, self._partial_local)
        self._bX_all, self._by_all = xp.empty((rows, D), dt), xp.empty((rows,) + ytail, ytype)
        self._bX, self._by = self._bX_all[: self.local_batch], self._by_all[: self.local_batch]
        self._index = None
        self._send = (np.empty((0, D), dt), np.empty((0,) + ytail, ytype))

    def free(self) -> None:
        """Free the MPI datatypes (not collective)."""
        for t in (self._rowtype, self._ytype):
            if t != MPI.DATATYPE_NULL:
                t.Free()

    def order(self, epoch: int) -> np.ndarray:
        """The global order of the training samples in ``epoch`` (N,), same on every rank.

        Not collective: a pure function of ``(seed, epoch)``.

        Parameters
        ----------
        epoch : int
            The epoch, 0-based.

        Returns
        -------
        numpy.ndarray, shape (N,), int64
            A permutation of the global rows ``0..N-1``.
        """
        return np.random.default_rng([self.seed, int(epoch)]).permutation(self.n_global)

    def wanted(self, perm: np.ndarray, rank: int) -> np.ndarray:
        """Global rows rank ``rank`` processes in the epoch, in step order.

        Not collective.

        Parameters
        ----------
        perm : numpy.ndarray, shape (N,)
            The epoch's order, from :meth:`order`.
        rank : int
            Rank in ``comm`` (any rank, not only this one).

        Returns
        -------
        numpy.ndarray, shape (full steps * K * lm + rows of the partial step,)
            With ``lm = len(block_range(B / K, P, rank))``: the rows of full
            step ``s`` are elements ``s * K * lm .. (s + 1) * K * lm``,
            micro-batch by micro-batch; a partial last step's rows (without
            ``drop_last``) follow, micro-batch by micro-batch too.
        """
        lo, hi = self.bounds[rank]
        b, full = self.global_batch // self.micro_batches, self._full
        rows = perm[: full * self.global_batch].reshape(full, self.micro_batches, b)[:, :, lo:hi].ravel()
        if self.steps == full:
            return rows
        first, P = full * self.global_batch, self.data_parallel_size
        parts = [rows]
        for mlo, mhi in self._partial_micro:
            rlo, rhi = block_range(mhi - mlo, P, rank)
            parts.append(perm[first + mlo + rlo : first + mlo + rhi])
        return np.concatenate(parts)

    def micro_batch_rows(self, step: int) -> list[tuple[int, int, int]]:
        """This rank's micro-batches of ``step``: ``(start, stop, first)`` each. Not collective.

        ``start:stop`` are the rows of :meth:`batch`'s arrays, ``first`` the
        position in the step's global batch of the micro-batch's first row
        on this rank (where a draw per global sample starts: dropout).

        Parameters
        ----------
        step : int
            Step in the epoch, ``0 <= step < steps``.

        Returns
        -------
        list of (int, int, int), one per micro-batch (K); a range may be
        empty on the partial last step.
        """
        P, r = self.data_parallel_size, self.comm.rank
        if step < self._full:
            lm, b, lo = self.local_micro_batch, self.global_batch // self.micro_batches, self.bounds[r][0]
            return [(k * lm, (k + 1) * lm, k * b + lo) for k in range(self.micro_batches)]
        out, at = [], 0
        for mlo, mhi in self._partial_micro:
            rlo, rhi = block_range(mhi - mlo, P, r)
            out.append((at, at + rhi - rlo, mlo + rlo))
            at += rhi - rlo
        return out

    def step_batch(self, step: int) -> int:
        """The global batch of ``step`` of an epoch: B, or ``N mod B`` for a partial last step. Not collective.

        Parameters
        ----------
        step : int
            Step in the epoch, ``0 <= step < steps``.

        Returns
        -------
        int
        """
        return self.global_batch if step < self._full else self.last_batch

    def state_dict(self) -> dict:
        """What decides the sample order and the steps: ``seed``, ``batch_size``, ``micro_batches``, ``drop_last``.

        The order of epoch ``e`` is a pure function of these and ``e``
        (:meth:`order`), so there is no generator state to save.
        """
        return dict(seed=self.seed, batch_size=self.global_batch, micro_batches=self.micro_batches,
                    drop_last=self.drop_last)

    def load_state_dict(self, state: dict) -> None:
        """Check that ``state`` gives this sampler's order. Not collective.

        Parameters
        ----------
        state : dict
            A :meth:`state_dict`.

        Raises
        ------
        ValueError
            ``state`` is another sampler's (its order would differ).
        """
        mine = self.state_dict()
        given = {k: state.get(k, True if k == "drop_last" else mine[k]) for k in mine}  # older: always dropped
        if {k: bool(v) if k == "drop_last" else v for k, v in given.items()} != mine:
            raise ValueError(f"a sampler of {state} cannot continue as {mine}")

    def _owner(self, rows: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.shard_starts, rows, side="right") - 1

    def start_epoch(self, epoch: int) -> None:
        """Bring the rows this rank needs in ``epoch`` from their owners: one ``Alltoallv``.

        Collective: all ranks of ``comm`` must call it, with the same
        ``epoch``. Replaces the rows received for the previous epoch, so the
        batches of that epoch are no longer available.

        Parameters
        ----------
        epoch : int
            The epoch, 0-based; its order is :meth:`order` ``(epoch)``.
        """
        comm, t, me = self.comm, self.train, self.comm.rank
        n_local = t.stop - t.start
        perm = self.order(epoch)
        if self.replicated:  # every row is here: the epoch's rows are their own pool indices
            index = self.wanted(perm, me)
            self._set_index(index)
            return
        # What I send: to every other rank, its wanted rows that live in my shard.
        send_idx, send_counts = [], np.zeros(self.data_parallel_size, dtype=np.int64)
        for r in range(self.data_parallel_size):
            if r != me:
                w = self.wanted(perm, r)
                send_idx.append(w[self._owner(w) == me] - t.start)
                send_counts[r] = send_idx[-1].size
        send_idx = np.concatenate(send_idx) if send_idx else np.empty(0, np.int64)
        # What I receive: my wanted rows owned by others, grouped by owner (stable).
        want = self.wanted(perm, me)
        owners = self._owner(want)
        local = owners == me
        recv_counts = np.bincount(owners[~local], minlength=self.data_parallel_size).astype(np.int64)
        n_recv = int(recv_counts.sum())
        if self._send[0].shape[0] < send_idx.size:  # grown, with room: counts vary by epoch
            cap = send_idx.size + send_idx.size // 8
            self._send = (np.empty((cap, t.dim), t.X.dtype), np.empty((cap,) + t.y.shape[1:], t.y.dtype))
        sX, sy = self._send[0][: send_idx.size], self._send[1][: send_idx.size]
        np.take(t.X, send_idx, axis=0, out=sX)
        np.take(t.y, send_idx, axis=0, out=sy)
        rX = self._pool_X[n_local : n_local + n_recv]
        ry = self._pool_y[n_local : n_local + n_recv]
        sd, rd = _displs(send_counts), _displs(recv_counts)
        comm.Alltoallv([sX, (send_counts, sd), self._rowtype], [rX, (recv_counts, rd), self._rowtype])
        comm.Alltoallv([sy, (send_counts, sd), self._ytype], [ry, (recv_counts, rd), self._ytype])
        # Where each wanted row sits in the pool, in step order.
        index = np.empty(want.size, np.int64)
        index[local] = want[local] - t.start
        remote = np.flatnonzero(~local)
        grouped = np.empty(remote.size, np.int64)
        grouped[np.argsort(owners[remote], kind="stable")] = np.arange(remote.size)
        index[remote] = n_local + grouped
        if self.xp is not np:
            self._dev_X[n_local : n_local + n_recv] = self.xp.asarray(rX)
            self._dev_y[n_local : n_local + n_recv] = self.xp.asarray(ry)
        self._set_index(index)

    def _set_index(self, index: np.ndarray) -> None:
        """Set the epoch's pool rows, checked once here.

        :meth:`batch` gathers with ``mode="clip"``, which would hide an index out of range.
        """
        if index.size and not (0 <= index.min() and index.max() < self._pool_X.shape[0]):
            raise AssertionError(f"sampler: pool index out of range [{index.min()}, {index.max()}]")
        self._index = index if self.xp is np else self.xp.asarray(index)

    def batch(self, step: int):
        """This rank's local batch of step ``step`` of the current epoch.

        Not collective; :meth:`start_epoch` must have been called for the
        epoch.

        Parameters
        ----------
        step : int
            Step in the current epoch, ``0 <= step < steps``.

        Returns
        -------
        X : xp.ndarray, shape (local_batch, D)
            Features, of the training data's dtype; micro-batch ``k`` is rows
            ``k * local_micro_batch .. (k + 1) * local_micro_batch``. A
            partial last step (no ``drop_last``) has fewer rows, in
            micro-batches as :meth:`micro_batch_rows` says (none at all on a
            rank that holds none of it).
        y : xp.ndarray, shape (local_batch,) or (local_batch, k)
            Targets (int64 labels, or regression targets). Both arrays are
            buffers reused (overwritten) by the next call.
        """
        lb, xp = self.local_batch, self.xp
        if step < self._full:
            rows, bX, by = self._index[step * lb : (step + 1) * lb], self._bX, self._by
        else:  # the partial last step: the first rows of the buffers
            n = self._partial_local
            rows, bX, by = self._index[step * lb : step * lb + n], self._bX_all[:n], self._by_all[:n]
        if xp is np:  # mode "raise" with out= buffers the whole gather and checks each index: twice the time
            np.take(self._dev_X, rows, axis=0, out=bX, mode="clip")
            np.take(self._dev_y, rows, axis=0, out=by, mode="clip")
        else:
            xp.take(self._dev_X, rows, axis=0, out=bX)
            xp.take(self._dev_y, rows, axis=0, out=by)
        return bX, by


def _displs(counts: np.ndarray) -> np.ndarray:
    d = np.zeros_like(counts)
    np.cumsum(counts[:-1], out=d[1:])
    return d


def _rows_meta(f, path: str, name: str):
    """Shape, dtype and :func:`~hpcgpu.io.source_error` of dataset ``name`` of open file ``f``.

    A function of its own so that no h5py Dataset outlives it: an error raised where one is a local stays
    alive with the traceback's frame, and a virtual dataset's creation property list alive at MPI_Finalize
    crashed parallel HDF5 1.10 (Debian's), which closes it there after the objects it refers to.
    """
    ds = f[name]
    return tuple(ds.shape), ds.dtype, source_error(path, ds, f"predict {path}:{name}")


class HDF5Rows:
    """Rows of an HDF5 dataset, read on demand (``len``, ``shape``, slicing): predict's input from a file.

    Raises ValueError (not agreed: the caller agrees) when the dataset cannot be read.
    """

    def __init__(self, path: str, name: str):
        f, err = open_hdf5(path, "predict")
        if err is not None:
            raise err
        try:
            with f:
                self.shape, self.dtype, err = _rows_meta(f, path, name)
        except (OSError, KeyError, TypeError) as e:
            raise ValueError(f"predict {path}:{name}: cannot be read ({one_line(e)})") from None
        if err is not None:
            raise err
        self.path, self.name = path, name

    def __len__(self):
        return self.shape[0] if self.shape else 0

    def __getitem__(self, key):
        import h5py

        with h5py.File(self.path, "r") as f:
            return f[self.name][key]


class ZeroTargets:
    """Float targets of zeros that ``predict``'s rows are checked with (its inputs have no targets)."""

    dtype = np.dtype("float64")

    def __init__(self, n: int):
        self.shape = (int(n),)

    def __len__(self):
        return self.shape[0]

    def __getitem__(self, key):
        return np.zeros(len(range(*key.indices(self.shape[0]))))


def split_off(data, validation, fraction, sharded: bool) -> tuple:
    """``(train, validation)``: the last ``fraction`` of the rows of the arrays ``data`` held out.

    Keras's ``validation_split``. The arguments are the same on every rank, so each raises the same error.
    """
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction < 1:
        raise agreed(ValueError(f"fit: validation_split={fraction!r} must be a fraction of the rows, between 0 and 1"))
    if validation is not None or sharded or not isinstance(data, (tuple, list)) or len(data) != 2:
        raise agreed(ValueError(f"fit: validation_split={fraction!r} takes the whole set's arrays, fit((X, y), "
                                f"validation_split=...), without validation= or sharded=True"))
    X, y = data
    n = len(X)
    cut = n - int(math.ceil(n * fraction))
    if cut < 1 or cut >= n:
        raise agreed(ValueError(f"fit: validation_split={fraction!r} of {n} rows leaves no row for training or "
                                f"none for validation"))
    return (X[:cut], y[:cut]), (X[cut:], y[cut:])
