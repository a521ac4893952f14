"""The gradient reducer: the one flat buffer a data-parallel step sums over the ranks.

The shape of PyTorch DDP's ``Reducer`` and Horovod's ``_DistributedOptimizer``:
the model computes its gradient into the view it is given and knows nothing
of communication; the reducer owns the buffer, the named scalars that ride
in the same message (the step's loss sum and correct count, a rank's stop
request), and the reduction, watched for stalls.
"""

from __future__ import annotations

import contextlib

import numpy as np

from .. import _device
from ..comm import Allreduce

__all__ = ["GradientReducer"]


class GradientReducer:
    """A flat gradient buffer with named slots after it, summed over the ranks in one Allreduce.

    Parameters
    ----------
    n_params : int
        Length of the gradient.
    xp : module
        ``numpy`` or ``cupy``: where the buffer lives.
    dtype : numpy.dtype
        The buffer's type (the model's, or float32 for mixed precision).
    comm : mpi4py.MPI.Intracomm
        The ranks that sum.
    slots : sequence of str
        Names of the scalars after the gradient, in order; consecutive
        names can be viewed together (:meth:`view`).
    watchdog : hpcgpu.watchdog.Watchdog, optional
        Watches each reduction (named ``"gradient Allreduce"``, with the
        step) for stalls.

    Attributes
    ----------
    buffer : xp.ndarray, shape (n_params + len(slots),)
        Everything that is reduced, in one C-contiguous array.
    grad : xp.ndarray, shape (n_params,)
        The gradient part of :attr:`buffer` (a view), for the model to fill.
    """

    def __init__(self, n_params: int, xp, dtype, comm, slots=("loss_sum", "correct", "stop"), watchdog=None):
        self.n_params, self.xp, self.comm, self.watchdog = int(n_params), xp, comm, watchdog
        self.buffer = xp.zeros(self.n_params + len(slots), dtype=dtype)
        self.grad = self.buffer[: self.n_params]
        self._index = {name: self.n_params + i for i, name in enumerate(slots)}

    def view(self, first: str, count: int = 1):
        """The slots ``first`` and the ``count - 1`` after it, as a view of :attr:`buffer` (count,).

        Not collective.

        Parameters
        ----------
        first : str
            The first slot's name.
        count : int
            How many consecutive slots.

        Returns
        -------
        xp.ndarray, shape (count,)

        Raises
        ------
        ValueError
            The slots run past the end of the buffer.
        """
        i = self._index[first]
        if i + count > self.buffer.size:
            raise ValueError(f"{count} slots from {first!r} run past the buffer")
        return self.buffer[i : i + count]

    def set(self, name: str, value: float) -> None:
        """Write one slot (not collective; on a GPU a small kernel, no synchronization).

        Parameters
        ----------
        name : str
            One of the slots' names.
        value : float
        """
        self.buffer[self._index[name]] = value

    def reduce(self, what: str = "") -> None:
        """Sum :attr:`buffer` over the ranks, in place; nothing at one rank. Collective.

        Parameters
        ----------
        what : str
            Where the run is (``"step 12"``), named in a stall report.
        """
        if self.comm.size == 1:
            return
        watch = self.watchdog.watch("gradient Allreduce", what) if self.watchdog else contextlib.nullcontext()
        with watch:
            Allreduce(self.buffer, comm=self.comm)

    def read(self) -> dict[str, float]:
        """Every slot's value, by name, as host floats (one copy from a device). Not collective."""
        values = _device.asnumpy(self.buffer[self.n_params :]).astype(np.float64).tolist()
        return dict(zip(self._index, values, strict=True))
