"""Host memory: how much a process may use, and whether a node's ranks' blocks fit, checked before they are read.

A leaf module (it imports no other hpcgpu module) so that every layer, the matrices below the runtime
included, can refuse a declared size beyond memory in one line instead of dying in ``numpy.empty``.
"""

from __future__ import annotations

import os

__all__ = ["host_memory", "node_memory_error"]


def host_memory() -> int:
    """Bytes of memory this process may use: the node's, or its cgroup's limit (Slurm, containers) if lower.

    Not collective.

    Returns
    -------
    int
        Bytes; 0 when it cannot be told.
    """
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0
    for limit in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(limit) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit():
            memory = min(memory, int(text))
    return memory


def node_memory_error(nbytes: int, comm, what: str,
                      fix: str = "use more nodes, or fewer ranks per node") -> MemoryError | None:
    """Whether the ranks of this node can each hold ``nbytes`` more; the same answer on every rank.

    Collective over ``comm`` (its node-local part, ``Split_type`` SHARED,
    sums the ranks' requests, and the answer is agreed over ``comm``).

    Parameters
    ----------
    nbytes : int
        Bytes this rank is about to allocate on the host.
    comm : mpi4py.MPI.Intracomm
    what : str
        Names what is read in the message (``A.h5:A``).
    fix : str
        What the message advises (where more nodes do not help: a smaller size).

    Returns
    -------
    MemoryError or None
        An error naming ``what``, the bytes the node's ranks need and the
        bytes it has (GiB); ``None`` when it fits or the memory is unknown.
    """
    from mpi4py import MPI

    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    here = node.allreduce(int(nbytes))
    node.Free()
    memory = host_memory()
    short = bool(memory) and here > memory
    gib = 2.0**30
    worst = comm.allreduce((here / gib, memory / gib) if short else (0.0, 0.0), op=MPI.MAX)
    if not comm.allreduce(short, op=MPI.LOR):
        return None
    return MemoryError(f"{what}: the ranks of a node need {worst[0]:.1f} GiB for their blocks, more than its memory "
                       f"({worst[1]:.1f} GiB): {fix}")
