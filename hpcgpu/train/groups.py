"""The trainer's process groups: data x tensor parallel, decisions every rank shares, the global state.

With tensor parallelism of degree T the P ranks form a (P / T) x T grid
(row-major: rank = d * T + t, so under the usual block placement a tensor
group shares a node). A tensor group's ranks hold slices of one model
replica and see the same samples; a data group's ranks hold the same slice
of different replicas and sum their gradients. Without tensor parallelism
the data group is the whole communicator.

The global state (the unsplit parameters and optimizer state, as
checkpoints and results files hold them) comes together on rank 0 from the
ZeRO blocks (over the data group) and the tensor slices (over the tensor
group of replica 0), and goes back the same way.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from .. import _device
from ..comm import Bcast
from ..grid import ProcessGrid

__all__ = ["ProcessGroups"]


class ProcessGroups:
    """The data and tensor communicators of a run, and the collectives on its global state.

    Collective over ``comm`` (construction splits it).

    Parameters
    ----------
    comm : mpi4py.MPI.Intracomm
        Every rank of the run.
    tensor_parallel : int
        T, which must divide ``comm.size`` (the trainer checks it first).

    Attributes
    ----------
    comm, data_comm : mpi4py.MPI.Intracomm
    tensor_comm : mpi4py.MPI.Intracomm or None
        None without tensor parallelism.
    tensor_parallel_size : int
        T: the ranks of a tensor group (1 without tensor parallelism).
    tensor_rank : int
        This rank's place in its tensor group (0 without).
    grid : hpcgpu.ProcessGrid or None
        The (P / T) x T grid (None without tensor parallelism).
    """

    def __init__(self, comm, tensor_parallel: int = 1):
        self.comm, self.tensor_parallel_size = comm, int(tensor_parallel)
        T = self.tensor_parallel_size
        self.grid = None
        self._shared = None  # the id of the model whose buffers share_buffers has sent all of once
        if T == 1:
            self.data_comm, self.tensor_comm, self.tensor_rank = comm, None, 0
            return
        self.grid = ProcessGrid((comm.size // T, T), comm=comm)
        self.tensor_comm, self.data_comm = self.grid.row_comm, self.grid.col_comm
        self.tensor_rank = self.grid.col

    @property
    def data_rank(self) -> int:
        """This rank's place among the data-parallel replicas (0 .. data_parallel_size - 1)."""
        return self.data_comm.rank

    @property
    def data_parallel_size(self) -> int:
        """D: the number of data-parallel replicas (the data communicator's size)."""
        return self.data_comm.size

    @staticmethod
    def any(flag: bool, comm) -> bool:
        """Whether ``flag`` holds on any rank of ``comm`` (one small Allreduce; none without ``comm``). Collective.

        Parameters
        ----------
        flag : bool
        comm : mpi4py.MPI.Intracomm or None

        Returns
        -------
        bool
            The same on every rank of ``comm``.
        """
        if comm is None or comm.size == 1:
            return flag
        return bool(comm.allreduce(bool(flag), op=MPI.LOR))

    def gather_global(self, model, params, states: dict, zero_shards: bool) -> tuple:
        """The unsplit parameters and state arrays, on rank 0. Collective.

        Parameters
        ----------
        model : hpcgpu.nn.TrainModel
            Knows the layout (``n_params``, ``global_of``).
        params : xp.ndarray, shape (n_params,)
            This rank's parameters (its tensor slice).
        states : dict of str to xp.ndarray
            The optimizer's state arrays: this rank's ZeRO block when
            ``zero_shards``, else laid out like ``params``.
        zero_shards : bool
            The states are ZeRO blocks (of the parameters padded to D equal blocks).

        Returns
        -------
        (numpy.ndarray, dict) or (None, None)
            ``params`` of shape (n_global,) and each state array likewise, on
            rank 0; None elsewhere.
        """
        params = _device.asnumpy(params)
        states = {k: _device.asnumpy(v) for k, v in states.items()}
        n = model.n_params
        if zero_shards:  # the blocks of each state array, over the data group
            for k in sorted(states):
                blocks = self.data_comm.gather(states[k], root=0)
                states[k] = np.concatenate(blocks)[:n] if blocks is not None else None
        if self.tensor_comm is None:
            return (params, states) if self.comm.rank == 0 else (None, None)
        if self.grid.row != 0:  # replicas hold the same slices: replica 0's are gathered
            return None, None
        pieces = self.tensor_comm.gather((params, states), root=0)
        if pieces is None:
            return None, None
        return (model.global_of([p for p, _ in pieces]),
                {k: model.global_of([s[k] for _, s in pieces]) for k in pieces[0][1]})

    def bcast_global(self, params, states: dict, names, dtype, n_global: int) -> tuple:
        """Rank 0's unsplit ``params`` and state arrays to every rank (host arrays). Collective.

        Parameters
        ----------
        params : numpy.ndarray or None
            Shape (n_global,) on rank 0.
        states : dict or None
            Arrays of shape (n_global,) by name, on rank 0.
        names : sequence of str
            The state arrays' names (the same on every rank).
        dtype : numpy.dtype
        n_global : int

        Returns
        -------
        (numpy.ndarray, dict)
            The arrays, on every rank; each rank then takes its slice.
        """
        root = self.comm.rank == 0
        bufs = [np.asarray(params, dtype) if root else np.empty(n_global, dtype)]
        bufs += [np.asarray(states[k], dtype) if root else np.empty(n_global, dtype) for k in names]
        for b in bufs:
            Bcast(b, root=0, comm=self.comm)
        return bufs[0], dict(zip(names, bufs[1:], strict=True))

    def share_buffers(self, model) -> None:
        """Make every data-parallel rank's buffers those of data rank 0, in place. Collective over the data group.

        PyTorch DDP's: a model's state that is not trained is rank 0's. At the first call every buffer is
        sent (DDP's broadcast of the module's state at construction: a frozen layer each rank initialized its
        own way); after it only those that training changes (``broadcast_buffers``: BatchNorm's running
        statistics, which each rank updates from its own rows), not the model's ``constant_buffers()`` (frozen
        parameters: no step changes them, and resuming or loading weights writes the same values on every
        rank). Called before each step, evaluation and prediction. Nothing to do at one data-parallel rank or
        without buffers.

        Parameters
        ----------
        model : hpcgpu.nn.TrainModel
            Its ``buffers()`` by name (the same names and shapes on every rank), written in place; not asked for
            at one data-parallel rank (a step's hot path).
        """
        if self.data_parallel_size == 1:
            return
        buffers = model.buffers()
        skip = getattr(model, "constant_buffers", frozenset)() if self._shared == id(model) else ()
        self._shared = id(model)
        for name in sorted(buffers):
            if name not in skip:
                Bcast(buffers[name], root=0, comm=self.data_comm)

    def gather_rows(self, local, n_global: int, root: int | None = 0):
        """Every data-parallel rank's block of rows, in rank order, on global rank ``root``. Collective.

        ``Gatherv`` over the data group to the data rank of ``root`` (``Allgatherv`` to every rank with ``root``
        None); each tensor column gathers its replicas' rows (every column holds the same rows).

        Parameters
        ----------
        local : numpy.ndarray, shape (n_local, k)
            This rank's rows (contiguous), the same ``k`` and dtype on every rank.
        n_global : int
            The rows of all the blocks together.
        root : int or None
            The global rank that receives the rows; None: every rank.

        Returns
        -------
        numpy.ndarray of shape (n_global, k), or None
            On ``root`` (every rank with ``root=None``); None elsewhere.
        """
        dcomm, k = self.data_comm, local.shape[1]
        counts = np.asarray(dcomm.allgather(local.shape[0]), dtype=np.int64) * k
        displs = np.concatenate([[0], np.cumsum(counts)[:-1]])
        droot = None if root is None else root // self.tensor_parallel_size  # the data rank of global rank root
        full = np.empty((n_global, k), local.dtype) if root is None or dcomm.rank == droot else None
        if root is None:
            dcomm.Allgatherv(local, [full, (counts, displs)])
        else:
            dcomm.Gatherv(local, [full, (counts, displs)] if dcomm.rank == droot else None, root=droot)
        return full if root is None or self.comm.rank == root else None

    def free(self) -> None:
        """Free the grid's communicators (not collective beyond MPI's own rules)."""
        if self.grid is not None:
            self.grid.free()
            self.grid = None
