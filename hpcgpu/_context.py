"""The decisions the runtime made for this process, for the layers below it to read.

:func:`hpcgpu.init` decides once per process which communicator hpcgpu's
collectives use by default, which array module holds their data and
whether device buffers may go to MPI; it passes those decisions down here
(:func:`set`), and the communication, grid and matrix layers read them
without importing the runtime: the import graph runs one way, from the
runtime down. Before ``init`` there is no default: a collective or a grid
then needs an explicit ``comm``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Decisions", "set", "clear", "current", "comm"]


@dataclass(frozen=True)
class Decisions:
    """What the runtime decided (see :class:`hpcgpu.Runtime`).

    Attributes
    ----------
    comm : mpi4py.MPI.Intracomm
        The runtime's private communicator: every default ``comm``.
    xp : module
        ``numpy`` or ``cupy``: where new arrays go by default.
    cuda_aware : bool
        Device pointers may go straight to MPI's blocking collectives.
    nonblocking_device : bool
        Also to its non-blocking ones.
    collectives : {"nccl", "mpi"}
        Whether device buffers go over NCCL (:mod:`hpcgpu._nccl`) or MPI.
    """

    comm: object
    xp: object
    cuda_aware: bool
    nonblocking_device: bool
    collectives: str = "mpi"


_CURRENT: Decisions | None = None


def set(decisions: Decisions) -> None:  # noqa: A001 - the module's own verb
    """Record the runtime's decisions (``hpcgpu.init``). Not collective."""
    global _CURRENT
    _CURRENT = decisions


def clear(comm=None) -> None:
    """Forget the decisions (the runtime was freed); only those of ``comm`` when it is given. Not collective."""
    global _CURRENT
    if comm is None or (_CURRENT is not None and _CURRENT.comm is comm):
        _CURRENT = None


def current() -> Decisions | None:
    """The runtime's decisions, or None before ``hpcgpu.init``. Not collective."""
    return _CURRENT


def comm():
    """The default communicator: the runtime's private one.

    Raises
    ------
    RuntimeError
        Before :func:`hpcgpu.init` (every rank that calls it: pass ``comm=``, or call ``init`` first).
    """
    if _CURRENT is None:
        raise RuntimeError("no default communicator yet: call hpcgpu.init() first (collective), or pass comm=")
    return _CURRENT.comm
