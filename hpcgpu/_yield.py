"""MPICH's ranks give up the CPU while they wait, on a node with more ranks than cores.

MPICH's progress engine polls while a rank waits in a collective, with a
``sched_yield`` every 1000 polls. With more than two ranks a core
(``mpiexec -n 8`` on a 2-core laptop or CI machine) the waiting ranks then take
the CPU from the one the others wait for: the README's main job (8 ranks on 2
cores) took 8.9 s, 7.0 s of it in the kernel, and 5.9 s with
``MPIR_CVAR_ENABLE_HEAVY_YIELD=1`` (a ``nanosleep`` instead, 1.6 s in the
kernel). At two ranks a core MPICH's polling is the faster (:func:`when_oversubscribed`).
MPICH reads its control variables at ``MPI_Init``, so this runs at ``import hpcgpu``,
before mpi4py's import initializes MPI. A variable the user set is never
changed; Open MPI yields by itself when it knows the node is oversubscribed.

OpenBLAS likewise starts its threads when NumPy loads it: one a core, each
spinning a while, in every rank (eight ranks of a 16-core node started 128
threads; NumPy's import took 0.10 s of CPU here with two, 0.05 s with one).
:func:`blas_at_start` has it start with the rank's share, the count
:func:`hpcgpu.runtime.init` sets anyway.

A process that no launcher started (``python script.py``: a singleton, one
rank with no peers) loads the MPI library all the same, and the ``mpich``
wheel's links UCX, whose library constructor installs its memory hooks
(patching ``mmap`` and its kin so a registration cache learns of unmapped
memory): 42 ms of a 0.1 s start here, the cost openucx/ucx#11211 reports.
With no peer there is no registration to keep: :func:`mpi_start` has UCX
skip the hooks (``UCX_MEM_EVENTS=no``) for that load only.
"""

from __future__ import annotations

import os
import sys

__all__ = ["HEAVY_YIELD", "RANKS_A_CORE", "blas_at_start", "mpi_start", "node_cores", "when_oversubscribed"]

HEAVY_YIELD = "MPIR_CVAR_ENABLE_HEAVY_YIELD"
RANKS_A_CORE = 2
"""The most ranks a core at which MPICH's waiting ranks keep polling; above it they sleep (:data:`HEAVY_YIELD`)."""
LOCAL_SIZE_VARS = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE")
"""The launcher's count of this node's ranks: Hydra's (MPICH, Intel MPI), Open MPI's."""

LAUNCHER_VARS = ("PMI_RANK", "PMI_SIZE", "PMI_FD", "PMI_PORT", "PMIX_RANK", "PMIX_NAMESPACE",
                 "OMPI_COMM_WORLD_SIZE") + LOCAL_SIZE_VARS
"""What a launcher (Hydra, Open MPI's, Slurm's ``srun`` with PMI or PMIx) puts in each rank's environment: none of
them set, the process is a singleton."""

UCX_MEM_EVENTS = "UCX_MEM_EVENTS"

THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "MKL_NUM_THREADS",
               "BLIS_NUM_THREADS")
"""The variables by which a user chooses a BLAS's threads: any of them set, :func:`blas_at_start` does nothing."""


def _local_size() -> int | None:
    for var in LOCAL_SIZE_VARS:
        value = os.environ.get(var, "")
        if value.isdigit() and int(value) >= 1:
            return int(value)
    return None


def cores() -> tuple[int, int]:
    """This rank's CPU set size and the node's cores (the set is the node when the OS has no affinity)."""
    try:
        mine = len(os.sched_getaffinity(0))
    except AttributeError:
        mine = os.cpu_count() or 1
    return mine, os.cpu_count() or mine


def blas_share(mine: int, total: int, local_size: int) -> int:
    """A rank's BLAS threads when the user chose none. Not collective.

    Its CPU set (``mine`` cores) when bound to fewer than the node's
    ``total`` cores, else the node's cores over its ``local_size`` ranks
    (at least 1).
    """
    return mine if mine < total else max(1, total // max(1, local_size))


def blas_at_start() -> str | None:
    """Set ``OPENBLAS_NUM_THREADS`` to this rank's share of the cores for NumPy's import; the variable set, or None.

    Not collective. Only before NumPy's first import, and only where the
    user chose no count (:data:`THREAD_VARS`) and the launcher said how many
    ranks the node has: the share (:func:`blas_share`) is what
    :func:`hpcgpu.runtime.init` gives a rank, which that call sets again and
    may raise. The caller removes the variable after the import
    (:func:`blas_started`), so a user's choice is still told from hpcgpu's
    and no child process inherits it.
    """
    if "numpy" in sys.modules or any(os.environ.get(v) for v in THREAD_VARS):
        return None
    local = _local_size()
    if local is None:
        return None
    mine, total = cores()
    n = blas_share(mine, total, local)
    if n >= total:
        return None  # what OpenBLAS starts with anyway
    os.environ["OPENBLAS_NUM_THREADS"] = str(n)
    return "OPENBLAS_NUM_THREADS"


def blas_started(var: str | None) -> None:
    """Remove the variable :func:`blas_at_start` set (None: nothing), once NumPy has loaded its BLAS."""
    if var is not None:
        os.environ.pop(var, None)


def when_oversubscribed() -> bool:
    """Set :data:`HEAVY_YIELD` where the launcher put more than :data:`RANKS_A_CORE` ranks a core on this node.

    The node's cores are :func:`node_cores`'s. Returns whether it did. Not
    collective (every rank of a node decides the same from the same
    variables). Nothing is set when the variable (or its ``MPICH_`` alias)
    is already set, or no launcher said how many ranks the node has.

    Heavy yield waits with ``nanosleep(1 ns)`` between polls, which the
    kernel rounds up to its timer slack (50 us by default): about 70 us a
    poll, measured, so a waiting rank wakes some 14,000 times a second and
    sees a peer's message up to 70 us late, at every stage of a reduction.
    At two ranks a core that costs more than the polling saves: the trainer
    (784-256-256-10, batch 256, 4 ranks on 2 cores, the machine otherwise
    quiet) made 17,000-21,000 samples/s with it and 26,000-31,000 without;
    at four ranks a core (the README's job, 8 ranks) it still wins, 9.5-10.8 s
    against 12.6-16.0 s.
    """
    if HEAVY_YIELD in os.environ or "MPICH_ENABLE_HEAVY_YIELD" in os.environ:
        return False
    for var in LOCAL_SIZE_VARS:
        value = os.environ.get(var, "")
        if value.isdigit() and int(value) > RANKS_A_CORE * node_cores():
            os.environ[HEAVY_YIELD] = "1"
            return True
    return False


SLURM_CPUS = "SLURM_CPUS_ON_NODE"
"""Slurm's count of the CPUs its job holds on this node (in every job and step)."""


def node_cores() -> int:
    """The cores this node's ranks share: Slurm's allocation on the node, else the node's. Not collective.

    Slurm's is :data:`SLURM_CPUS`, where a Slurm job runs the ranks. On a node shared between jobs the
    allocation is what the ranks get (its cgroup confines them to it): 8 ranks in a 2-core allocation of a
    64-core node are 4 a core, not 1 in 8. A rank's own CPU set is no measure of it: a launcher that binds
    each rank to a core of its own gives a set of one core to ranks that share none.
    """
    value = os.environ.get(SLURM_CPUS, "")
    if value.isdigit() and int(value) >= 1:
        return int(value)
    return os.cpu_count() or 1


class _MPIStart:
    """A meta path finder around ``mpi4py.MPI``'s import, which loads the MPI library and runs ``MPI_Init``.

    Placed first in ``sys.meta_path`` by :func:`mpi_start` at ``import hpcgpu``; at the import of ``mpi4py.MPI``
    it asks the finders after it for the module (mpi4py's own opens the MPI library there, to learn its ABI:
    the library's first load, whose UCX constructor reads ``UCX_MEM_EVENTS``), with ``UCX_MEM_EVENTS=no`` set for
    that search only in a singleton, and wraps the module's loader so that what the library's load and
    ``MPI_Init`` do to the stop signals' actions is undone (:func:`hpcgpu._early.undo_mpi_init`). It does nothing
    after its first use, and leaves ``sys.meta_path`` once the module is loaded (not while the import system walks
    the list).
    """

    done = False

    @classmethod
    def find_spec(cls, fullname, path, target=None):
        if fullname != "mpi4py.MPI" or cls.done:
            return None
        cls.done = True
        from . import _early

        before = _early.os_actions()  # before the library loads: UCX's constructor installs its SIGHUP handler
        ucx = _ucx_unhooked()
        if ucx:  # a singleton: no peer needs UCX's memory hooks
            os.environ[UCX_MEM_EVENTS] = "no"
        try:  # the import system's own search, by the finders after this one
            spec = None
            for finder in [f for f in sys.meta_path if f is not cls]:
                find = getattr(finder, "find_spec", None)
                spec = find(fullname, path, target) if find is not None else None
                if spec is not None:
                    break
        finally:
            if ucx:
                os.environ.pop(UCX_MEM_EVENTS, None)
        if spec is not None and spec.loader is not None:
            spec.loader = _Restoring(spec.loader, before)
        return spec


class _Restoring:
    """``mpi4py.MPI``'s loader, after which the signal actions ``MPI_Init`` changed are put back."""

    def __init__(self, loader, before):
        self.loader, self.before = loader, before

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        from . import _early

        try:
            self.loader.exec_module(module)  # MPI_Init (mpi4py's default)
        finally:
            _early.undo_mpi_init(self.before)
            if _MPIStart in sys.meta_path:
                sys.meta_path.remove(_MPIStart)


def _ucx_unhooked() -> bool:
    """Whether the MPI library may load without UCX's memory hooks: a singleton, and no value of the user's."""
    return UCX_MEM_EVENTS not in os.environ and not any(v in os.environ for v in LAUNCHER_VARS)


def mpi_start() -> bool:
    """Arrange ``mpi4py.MPI``'s import (:class:`_MPIStart`); whether it will be watched. Not collective.

    Called at ``import hpcgpu``, when ``mpi4py.MPI`` is not loaded yet. What
    ``MPI_Init`` does to the signal actions is undone (MPICH swallowed
    SIGUSR1), and a singleton (no launcher's variable, :data:`LAUNCHER_VARS`,
    and no :data:`UCX_MEM_EVENTS` of the user's) loads the MPI library with
    ``UCX_MEM_EVENTS=no``, the variable set for that load only: with no peer
    there is no registration for UCX's memory hooks to keep (a singleton
    that would connect to others, ``MPI_Comm_spawn``, which hpcgpu does not
    use: set ``UCX_MEM_EVENTS=yes``). An MPI library without UCX ignores it.
    """
    if "mpi4py.MPI" in sys.modules:
        return False
    if _MPIStart not in sys.meta_path:
        sys.meta_path.insert(0, _MPIStart)
    return True
