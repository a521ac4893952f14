"""Training data: HDF5 shards read by hyperslab, and the global-batch sampler.

Each rank reads only its contiguous shard of ``/train`` (rows
``block_range(N, P, rank)``) and of ``/test``. Every epoch the global order
of the training samples is a permutation drawn from ``(seed, epoch)``; global
batch ``b`` is positions ``b*B .. (b+1)*B`` of that order, and rank ``r``
takes positions ``block_range(B, P, r)`` of each global batch. The samples
of a global batch are therefore the same whatever the number of ranks P.

The rows a rank needs for an epoch mostly lie in other ranks' shards: one
``Alltoallv`` per epoch moves them, so the data set stays distributed (each
rank holds about 2N/P rows) and the file is read once, not every epoch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from mpi4py import MPI
from mpi4py.util.dtlib import from_numpy_dtype

from .._partition import block_range, block_starts
from ..comm import agree
from ..io import open_hdf5

__all__ = ["Split", "load_split", "GlobalBatchSampler"]


@dataclass
class Split:
    """One rank's shard of a data split.

    Attributes
    ----------
    X : numpy.ndarray, shape (stop - start, D)
    y : numpy.ndarray, shape (stop - start,), int64
    start, stop : int
        Global rows of the shard.
    n_global, dim : int
        N and D of the whole split.
    """

    X: np.ndarray
    y: np.ndarray
    start: int
    stop: int
    n_global: int
    dim: int


def _meta(path: str, split: str, required: bool):
    """Shapes and dtypes of ``/split/X`` and ``/split/y``, or an error (no raise)."""
    import h5py

    f, err = open_hdf5(path, "--data")
    if err:
        return None, err
    with f:
        names = [f"/{split}/X", f"/{split}/y"]
        present = [n in f and isinstance(f[n], h5py.Dataset) for n in names]
        if not any(present):
            if required:
                return None, ValueError(f"--data {path}: no dataset {names[0]}")
            return "absent", None
        for n, ok in zip(names, present):
            if not ok:
                return None, ValueError(f"--data {path}: no dataset {n}")
        X, y = f[names[0]], f[names[1]]
        if X.ndim != 2:
            return None, ValueError(f"--data {path}: {names[0]} must be 2-D (N x D), has shape {X.shape}")
        if X.dtype.kind not in "fiu":
            return None, ValueError(f"--data {path}: {names[0]} must be real numbers, has dtype {X.dtype}")
        if y.ndim != 1 or y.dtype.kind not in "iu":
            return None, ValueError(
                f"--data {path}: {names[1]} must be a 1-D integer label array, "
                f"has shape {y.shape} and dtype {y.dtype}"
            )
        if X.shape[0] != y.shape[0]:
            return None, ValueError(
                f"--data {path}: {names[0]} has {X.shape[0]} rows but {names[1]} has {y.shape[0]} labels"
            )
        if X.shape[1] == 0:
            return None, ValueError(f"--data {path}: {names[0]} has no features (D = 0)")
        nc = f.attrs.get("num_classes")
        return (X.shape[0], X.shape[1], None if nc is None else int(nc)), None


def load_split(path: str, split: str, comm: MPI.Intracomm, required: bool = True,
               dtype="float32", min_rows: int = 1) -> tuple[Split | None, int | None]:
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
        dtype of the returned ``X`` (float32 or float64).
    min_rows : int
        Fewest rows the split may have (the number of ranks for training).

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
        different lengths; fewer than ``min_rows`` rows; NaN or infinity in X;
        a negative label (labels are checked against the class count later).
    """
    import h5py

    meta, err = _meta(path, split, required)
    agree(err, comm=comm)
    if meta == "absent":
        return None, None
    n, d, nc = meta
    err = None
    if n < min_rows:
        err = ValueError(
            f"--data {path}: /{split} has {n} samples, fewer than the {min_rows} ranks "
            "(each rank needs at least one)"
        )
    agree(err, comm=comm)
    start, stop = block_range(n, comm.size, comm.rank)
    try:
        with h5py.File(path, "r") as f:
            X = np.empty((stop - start, d), dtype=dtype)
            if stop > start:
                f[f"/{split}/X"].read_direct(X, np.s_[start:stop])
            y = f[f"/{split}/y"][start:stop].astype(np.int64)
    except (OSError, TypeError, ValueError) as e:
        X = y = None
        err = OSError(f"--data {path}: rank {comm.rank} cannot read /{split} rows {start}:{stop} ({e})")
    if err is None:
        bad = np.flatnonzero(~np.isfinite(X).all(axis=1))
        if bad.size:
            err = ValueError(f"--data {path}: /{split}/X row {start + int(bad[0])} holds NaN or infinity")
        elif y.size and y.min() < 0:
            err = ValueError(f"--data {path}: /{split}/y has a negative label ({int(y.min())})")
    agree(err, comm=comm)
    return Split(X, y, start, stop, n, d), nc


def check_labels(path: str, splits, num_classes: int | None, comm: MPI.Intracomm) -> int:
    """Agree on the class count C and check every label is in ``0..C-1``.

    Collective. ``C`` is the file's ``num_classes`` attribute, else the
    largest label of any split plus one.

    Raises
    ------
    ValueError
        A label is ``>= C``, or ``C < 2``.
    """
    local_max = max((int(s.y.max()) for s in splits if s is not None and s.y.size), default=-1)
    gmax = comm.allreduce(local_max, op=MPI.MAX)
    C = num_classes if num_classes is not None else gmax + 1
    err = None
    if gmax >= C:
        err = ValueError(f"--data {path}: label {gmax} is outside 0..{C - 1} (num_classes = {C})")
    elif C < 2:
        err = ValueError(f"--data {path}: {C} class(es); classification needs at least 2")
    agree(err, comm=comm)
    return C


class GlobalBatchSampler:
    """This rank's samples of every global batch of an epoch, in step order.

    Collective (:meth:`epoch`): all ranks of ``comm`` call it with the same
    epoch.

    Parameters
    ----------
    train : Split
        This rank's shard.
    batch_size : int
        The GLOBAL batch B; B <= N and B >= P (checked by the trainer).
    seed : int
    comm : mpi4py.MPI.Intracomm

    Attributes
    ----------
    steps : int
        Global batches per epoch, ``N // B`` (the last partial batch is
        dropped, so every step averages over exactly B samples).
    local_batch : int
        ``len(block_range(B, P, rank))``: B/P, rounded up on the last
        ``B mod P`` ranks. Uneven local batches are exact: the gradient is
        summed over ranks and divided by B.
    """

    def __init__(self, train: Split, batch_size: int, seed: int, comm: MPI.Intracomm):
        self.train, self.B, self.seed, self.comm = train, int(batch_size), int(seed), comm
        self.N, self.P = train.n_global, comm.size
        self.steps = self.N // self.B
        self.bounds = [block_range(self.B, self.P, r) for r in range(self.P)]
        lo, hi = self.bounds[comm.rank]
        self.local_batch = hi - lo
        self.shard_starts = np.asarray(block_starts(self.N, self.P))
        self._rowtype = from_numpy_dtype(train.X.dtype).Create_contiguous(train.dim).Commit()

    def free(self) -> None:
        """Free the MPI datatype (not collective)."""
        if self._rowtype != MPI.DATATYPE_NULL:
            self._rowtype.Free()

    def order(self, epoch: int) -> np.ndarray:
        """The global order of the training samples in ``epoch`` (N,), same on every rank."""
        return np.random.default_rng([self.seed, int(epoch)]).permutation(self.N)

    def wanted(self, perm: np.ndarray, rank: int) -> np.ndarray:
        """Global rows rank ``rank`` processes in the epoch, in step order."""
        lo, hi = self.bounds[rank]
        return perm[: self.steps * self.B].reshape(self.steps, self.B)[:, lo:hi].ravel()

    def epoch(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """Gather this rank's rows for the whole epoch with one ``Alltoallv``.

        Returns
        -------
        (X, y) : numpy arrays of shapes (steps * local_batch, D) and
            (steps * local_batch,). Step ``s`` uses rows
            ``s*local_batch .. (s+1)*local_batch``. The arrays are reused by
            the next call (no page faults on large fresh allocations).
        """
        comm, t = self.comm, self.train
        perm = self.order(epoch)
        owner_of = lambda rows: np.searchsorted(self.shard_starts, rows, side="right") - 1  # noqa: E731
        # What I send: for each destination rank, its wanted rows that live in my shard.
        send_idx, send_counts = [], np.zeros(self.P, dtype=np.int64)
        for r in range(self.P):
            w = self.wanted(perm, r)
            mine = w[owner_of(w) == comm.rank] - t.start
            send_idx.append(mine)
            send_counts[r] = mine.size
        send_idx = np.concatenate(send_idx)
        # What I receive: my wanted rows, grouped by owner rank (stable order).
        want = self.wanted(perm, comm.rank)
        owners = owner_of(want)
        recv_counts = np.bincount(owners, minlength=self.P).astype(np.int64)
        sX, sy, rX, ry, X, y = self._buffers(send_idx.size, want.size)
        np.take(t.X, send_idx, axis=0, out=sX)
        np.take(t.y, send_idx, out=sy)
        sd, rd = _displs(send_counts), _displs(recv_counts)
        comm.Alltoallv([sX, (send_counts, sd), self._rowtype], [rX, (recv_counts, rd), self._rowtype])
        comm.Alltoallv([sy, (send_counts, sd), MPI.INT64_T], [ry, (recv_counts, rd), MPI.INT64_T])
        # rX[k] is want[order[k]]: put it back into step order.
        order = np.argsort(owners, kind="stable")
        X[order] = rX
        y[order] = ry
        return X, y

    def _buffers(self, n_send: int, n_recv: int):
        """Send, receive and result buffers, kept between epochs, grown on demand."""
        D, dt = self.train.dim, self.train.X.dtype
        b = getattr(self, "_buf", None)
        if b is None or b[0].shape[0] < n_send or b[2].shape[0] != n_recv:
            cap = max(n_send, 0 if b is None else b[0].shape[0])
            cap = cap + cap // 8  # the rows a rank sends vary a little from epoch to epoch
            b = (np.empty((cap, D), dt), np.empty(cap, np.int64), np.empty((n_recv, D), dt),
                 np.empty(n_recv, np.int64), np.empty((n_recv, D), dt), np.empty(n_recv, np.int64))
            self._buf = b
        return (b[0][:n_send], b[1][:n_send], *b[2:])


def _displs(counts: np.ndarray) -> np.ndarray:
    d = np.zeros_like(counts)
    np.cumsum(counts[:-1], out=d[1:])
    return d
