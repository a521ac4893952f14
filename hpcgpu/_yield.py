"""MPICH's ranks give up the CPU while they wait, on a node with more ranks than cores.

MPICH's progress engine polls while a rank waits in a collective, with a
``sched_yield`` every 1000 polls. With more ranks than cores (``mpiexec -n 8``
on a 2-core laptop or CI machine) the waiting ranks then take the CPU from the
one the others wait for: the README's main job (8 ranks on 2 cores) took 8.9 s,
7.0 s of it in the kernel, and 5.9 s with ``MPIR_CVAR_ENABLE_HEAVY_YIELD=1``
(a short ``nanosleep`` instead, 1.6 s in the kernel). MPICH reads its control
variables at ``MPI_Init``, so this runs at ``import hpcgpu``, before mpi4py's
import initializes MPI. A variable the user set is never changed; Open MPI
yields by itself when it knows the node is oversubscribed.
"""

from __future__ import annotations

import os

__all__ = ["HEAVY_YIELD", "when_oversubscribed"]

HEAVY_YIELD = "MPIR_CVAR_ENABLE_HEAVY_YIELD"
LOCAL_SIZE_VARS = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE")
"""The launcher's count of this node's ranks: Hydra's (MPICH, Intel MPI), Open MPI's."""


def when_oversubscribed() -> bool:
    """Set :data:`HEAVY_YIELD` when the launcher put more ranks on this node than it has cores; whether it did.

    Not collective (every rank of a node decides the same from the same
    variables). Nothing is set when the variable (or its ``MPICH_`` alias) is
    already set, or no launcher said how many ranks the node has.
    """
    if HEAVY_YIELD in os.environ or "MPICH_ENABLE_HEAVY_YIELD" in os.environ:
        return False
    for var in LOCAL_SIZE_VARS:
        value = os.environ.get(var, "")
        if value.isdigit() and int(value) > (os.cpu_count() or 1):
            os.environ[HEAVY_YIELD] = "1"
            return True
    return False
