"""The runtime: communicator, rank-to-GPU binding, the array module ``xp``.

One process is one MPI rank and drives at most one GPU. :func:`init` builds a
:class:`Runtime` once per process; every other layer of hpcgpu takes its
communicator and array module from it.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import importlib.util
import os
import socket
from dataclasses import dataclass, field
from types import ModuleType

import numpy
from mpi4py import MPI

from . import _blas, _context, _device, _heap, _nccl, _options, _yield
from ._memory import host_memory
from .errors import agree_call, agreed

__all__ = ["Runtime", "init", "get_runtime", "current_runtime", "detect_cuda_aware", "detect_nonblocking_device",
           "check_launch", "placement", "host_memory"]

_RUNTIME: Runtime | None = None
_PINNED: Runtime | None = None
"""A task process's one-rank runtime (``hpcgpu.tasks``, isolated tasks): :func:`init` returns it whatever it is
asked, since a task does not communicate."""



@dataclass(frozen=True)
class Runtime:
    """What one rank knows about itself and the job.

    Attributes
    ----------
    comm : mpi4py.MPI.Intracomm
        A private ``Dup`` of the communicator given to :func:`init`
        (``COMM_WORLD`` by default). Every hpcgpu collective runs on it, so
        user traffic on ``COMM_WORLD`` never matches ours.
    rank, size : int
        Rank in ``comm`` and number of ranks.
    local_rank, local_size : int
        Rank and size within the node (``Split_type(COMM_TYPE_SHARED)``).
    host : str
        Host name of this rank.
    device : {"cpu", "gpu"}
        Where arrays live.
    device_id : int or None
        The CUDA device this rank is bound to, ``None`` on the CPU.
    device_reason : str
        Why this device: ``"asked for"``, or for ``auto`` what it found
        (e.g. ``"auto: no usable CUDA device (...)"``).
    binding : str
        How the GPU was chosen: from the launcher's node-local rank before
        ``MPI_Init`` (``"SLURM_LOCALID=1, before MPI_Init"``), or from
        ``Split_type`` after it; empty on the CPU.
    xp : module
        ``cupy`` on a GPU, ``numpy`` otherwise.
    cuda_aware : bool
        Whether device buffers go straight to MPI. Always ``False`` on the CPU.
    cuda_aware_reason : str
        How ``cuda_aware`` was decided, in words.
    nonblocking_device : bool
        Whether device buffers go straight to MPI's non-blocking collectives
        too (``Ibcast``); when not, those are staged even on a CUDA-aware MPI.
    nonblocking_reason : str
        How ``nonblocking_device`` was decided.
    mpi_library : str
        First line of ``MPI.Get_library_version()``, cleaned of NUL bytes
        and runs of blanks.
    blas_threads : str
        The host BLAS threads this rank runs, and why (``init``'s
        ``blas_threads``: its share of the node's cores, a variable the BLAS
        reads, or left as it was).
    blas_capped : str
        Empty, or one line saying that a thread variable asked for more BLAS
        threads than some rank's CPU set holds and was capped, with the fix
        (the same on every rank: how many ranks, the first one's numbers).
        The run's first line (:meth:`summary`) ends with it.
    host_heap : str
        What :func:`init` did with glibc's ``malloc`` (``hpcgpu._heap``): ``"kept"`` (large arrays come from the
        heap, and freed memory stays in the rank for the next ones, so they are not page-faulted in afresh;
        ``HPCGPU_KEEP_HOST_MEMORY=0`` turns it off), or why not.
    gpu_sharing : int
        The most ranks bound to one physical GPU (same host and PCI bus id),
        over all nodes; 1 on the CPU. Above 1 the run's first line says so:
        it works, but slower, each rank with a share of the GPU's memory.
    collectives : {"nccl", "mpi"}
        How device buffers travel between ranks: over NCCL (every rank has
        a GPU of its own and NCCL loads everywhere), or over MPI (CUDA-aware
        or staged, :attr:`cuda_aware`). Always ``"mpi"`` on the CPU.
    collectives_reason : str
        Why, in words (``"NCCL 2.30.7: every rank has a GPU of its own"``,
        ``"ranks share a GPU (up to 2 on one), which NCCL refuses"``).
    """

    comm: MPI.Intracomm
    rank: int
    size: int
    local_rank: int
    local_size: int
    host: str
    device: str
    device_id: int | None
    xp: ModuleType
    cuda_aware: bool
    cuda_aware_reason: str
    mpi_library: str
    blas_threads: str = "not limited"
    blas_capped: str = ""
    host_heap: str = "glibc's defaults"
    device_reason: str = "asked for"
    binding: str = ""
    nonblocking_device: bool = False
    nonblocking_reason: str = ""
    gpu_sharing: int = 1
    collectives: str = "mpi"
    collectives_reason: str = "device is cpu"
    _owns_comm: bool = field(default=True, repr=False)

    def describe(self) -> str:
        """One line about this rank, as ``python -m hpcgpu info`` prints it."""
        if self.device == "gpu":
            dev = f"gpu:{self.device_id} ({_device.device_name(self.device_id)}; bound from {self.binding})"
        else:
            dev = "cpu"
        xp_version = getattr(self.xp, "__version__", "?")
        mpi_version = "%d.%d" % MPI.Get_version()
        aware = "yes" if self.cuda_aware else "no"
        line = (
            f"[{self.rank}/{self.size}] host={self.host} "
            f"local_rank={self.local_rank}/{self.local_size} device={dev} ({self.device_reason}) "
            f"xp={self.xp.__name__} {xp_version} "
            f"mpi={self.mpi_library} (MPI {mpi_version}) blas={_blas.describe()} blas_threads={self.blas_threads} "
            f"host_heap={self.host_heap} cuda_aware={aware} ({self.cuda_aware_reason})"
        )
        if self.device == "gpu":
            line += f" nonblocking_device={'yes' if self.nonblocking_device else 'no'} ({self.nonblocking_reason})"
            line += f" collectives={self.collectives} ({self.collectives_reason})"
            graphs, why = _device.graphs_available()
            line += " cuda_graphs=" + ("yes (stream capture)" if graphs else f"no ({why})")
        return line

    def summary(self) -> str:
        """The device and how buffers reach MPI, for the first line of a run (rank 0 prints it).

        Ends with :attr:`blas_capped` when a thread variable was capped.
        """
        capped = f"; {self.blas_capped}" if self.blas_capped else ""
        return self._where() + capped

    def _where(self) -> str:
        if self.device == "cpu":
            return "cpu" if self.device_reason == "asked for" else f"cpu ({self.device_reason})"
        share = (f"; up to {self.gpu_sharing} ranks share a GPU (slower, and each has a share of its memory)"
                 if self.gpu_sharing > 1 else "")
        if self.collectives == "nccl":
            return f"gpu (device buffers over NCCL: {self.collectives_reason}{share})"
        how = ("MPI is CUDA-aware" if self.cuda_aware
               else "MPI is not CUDA-aware: device buffers are staged through pinned host memory")
        nccl = f"; not NCCL: {self.collectives_reason}" if self.size > 1 else ""
        return f"gpu ({how}; {self.cuda_aware_reason}{share}{nccl})"

    def free(self) -> None:
        """Free the private communicator. Collective over :attr:`comm`."""
        global _RUNTIME
        if _RUNTIME is self:
            _RUNTIME = None
            _context.clear(self.comm)
        if self._owns_comm and self.comm != MPI.COMM_NULL:
            self.comm.Free()


def init(device: str = "auto", comm: MPI.Intracomm | None = None, *, blas_threads="auto",
         collectives: str = "auto") -> Runtime:
    """Start the hpcgpu runtime on this rank.

    Collective: all ranks of ``comm`` must call it. The first call makes the
    process-wide runtime that hpcgpu's functions use when no ``comm`` is
    given (its decisions are passed down to :mod:`hpcgpu.comm`, grids and
    matrices); a later call with the same arguments returns it again.

    Parameters
    ----------
    device : {"auto", "cpu", "gpu"}
        ``"gpu"`` binds the rank to a CUDA device and makes ``xp`` CuPy;
        ``"cpu"`` uses NumPy; ``"auto"`` picks the GPU when every rank has a
        usable one, the CPU otherwise (and says why in
        :attr:`Runtime.device_reason`).
    comm : mpi4py.MPI.Intracomm, optional
        The ranks of the job; ``MPI.COMM_WORLD`` when omitted. It is
        duplicated, never used directly.
    blas_threads : "auto", int or None, keyword-only
        The host BLAS threads of this process, for every BLAS loaded (NumPy's
        and SciPy's, hence the science code's own NumPy too): ``"auto"``
        gives each rank its share of the node's cores unless a variable the
        BLAS reads (``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS``, ...) says
        otherwise (eight ranks of two threads on two cores ran 50 times
        slower than of one), and such a variable is capped at the CPU set a
        rank is bound to when it asks for more (Slurm 22.05's trap, see
        :data:`OVERSUBSCRIBE_VAR`); an int sets that many; ``None`` leaves
        the process's BLAS as it is. :attr:`Runtime.blas_threads` says what
        was done.
    collectives : {"auto", "nccl", "mpi"}, keyword-only
        How device buffers travel between ranks. ``"auto"``: over NCCL when
        there are several ranks, each on a GPU of its own, and NCCL loads
        on every rank; over MPI otherwise (CUDA-aware or staged).
        ``"nccl"`` insists (an error when NCCL cannot serve), ``"mpi"``
        never uses NCCL. :attr:`Runtime.collectives_reason` says why.

    Returns
    -------
    Runtime

    Raises
    ------
    ValueError
        ``device``, ``blas_threads`` or ``collectives`` is not one of the
        choices (on every rank, before any communication);
        ``HPCGPU_CUDA_AWARE_MPI`` or ``HPCGPU_NONBLOCKING_DEVICE`` is not 0
        or 1 (agreed).
    RuntimeError
        ``device="gpu"`` and some rank has no usable GPU: the message names
        the first such rank and CuPy's reason (agreed: every rank raises it);
        ``collectives="nccl"`` and NCCL cannot serve (no GPU, ranks sharing
        a GPU, no NCCL library on some rank; agreed); or the launcher did not
        connect the ranks (see :func:`check_launch`).

    Notes
    -----
    A GPU is usable when CuPy imports, sees a device, and can allocate, run
    an elementwise kernel and a cuBLAS GEMM on it (``hpcgpu._device.check_usable``).
    The device is chosen from the launcher's node-local rank before
    ``MPI_Init`` when ``import hpcgpu`` came first (see :mod:`hpcgpu`),
    else ``local_rank % device_count`` after it. CUDA-aware MPI is decided
    here once, see :func:`detect_cuda_aware`. A stop signal keeps the
    action it had before ``MPI_Init`` from here to a Trainer's construction
    (MPICH's swallowed SIGUSR1 with a handler Python does not see; see
    ``hpcgpu._early.undo_mpi_init``), where hpcgpu was imported before
    ``mpi4py.MPI``.
    """
    global _RUNTIME
    if _PINNED is not None:
        return _PINNED
    _check_init_args(device, blas_threads, collectives)
    check_launch()
    base = MPI.COMM_WORLD if comm is None else comm
    if _RUNTIME is not None and comm is None and device in ("auto", _RUNTIME.device) and \
            collectives in ("auto", _RUNTIME.collectives):
        return _RUNTIME
    dup = base.Dup()
    local_rank, local_size = _node_rank(dup)
    try:
        path = _device_path(device, dup, local_rank)
    except BaseException:
        dup.Free()
        raise
    use_gpu = path["device"] == "gpu"
    sharing = _gpu_sharing(dup, path["device_id"]) if use_gpu else 1
    try:
        over, over_why = _collectives_path(collectives, dup, use_gpu, sharing)
    except BaseException:
        dup.Free()
        raise
    threads = _blas_decision(blas_threads, local_size)
    heap = _heap.keep_freed_memory()
    rt = Runtime(comm=dup, rank=dup.rank, size=dup.size, local_rank=local_rank, local_size=local_size,
                 host=socket.gethostname(), **path, blas_threads=threads,
                 blas_capped=_capped_line(dup, threads), host_heap=heap, mpi_library=_library_version(),
                 gpu_sharing=sharing, collectives=over, collectives_reason=over_why)
    if comm is None:
        # The one before stays usable by what holds it (a Trainer of device="cpu" beside one of "gpu"): freeing
        # its communicator here left that Trainer on MPI_COMM_NULL (found on an H200)
        _RUNTIME = rt
        _context.set(_context.Decisions(dup, rt.xp, rt.cuda_aware, rt.nonblocking_device, rt.collectives))
    return rt


def _check_init_args(device, blas_threads, collectives) -> None:
    """``init``'s arguments and the ``HPCGPU_*`` variables, the same on every rank: all raise together."""
    bad = _options.error()
    if bad is not None:
        raise agreed(bad)
    if device not in ("auto", "cpu", "gpu"):
        raise agreed(ValueError(f"device must be 'auto', 'cpu' or 'gpu', got {device!r}"))
    if collectives not in ("auto", "nccl", "mpi"):
        raise agreed(ValueError(f"collectives must be 'auto', 'nccl' or 'mpi', got {collectives!r}"))
    if not (blas_threads is None or blas_threads == "auto" or (isinstance(blas_threads, int) and blas_threads >= 1)):
        raise agreed(ValueError(f"blas_threads must be 'auto', a positive int or None, got {blas_threads!r}"))


def _node_rank(comm) -> tuple[int, int]:
    """This rank's place among the ranks of its node, and their number. Collective."""
    node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.rank)
    where = node.rank, node.size
    node.Free()
    return where


def _device_path(device: str, comm, local_rank: int) -> dict:
    """The device and how its buffers reach MPI, agreed by every rank: :class:`Runtime`'s fields. Collective."""
    def overrides():  # the environment's overrides are checked on every device: a bad value is bad input
        aware, aware_why = detect_cuda_aware(comm)
        return (aware, aware_why, *detect_nonblocking_device(aware, _library_version()))

    aware, aware_why, nonblocking, nonblocking_why = agree_call(overrides, catch=(ValueError,), comm=comm)
    use_gpu, device_id, reason, binding = _choose_device(device, comm, local_rank)
    if use_gpu:
        xp = _device.cupy_or_none()
        if not comm.allreduce(aware, op=MPI.LAND):  # every rank takes the same path; staging is the common one
            if aware:
                aware_why = "not on every rank; staging through host memory"
            aware, nonblocking = False, False
            nonblocking_why = "MPI is not CUDA-aware"
        nonblocking = bool(comm.allreduce(nonblocking, op=MPI.LAND))
    else:
        xp, nonblocking, nonblocking_why = numpy, False, "device is cpu"
        aware_why = f"device is cpu, host buffers; for GPUs this MPI would be {'yes' if aware else 'no'}: {aware_why}"
        aware = False
    return dict(device="gpu" if use_gpu else "cpu", device_id=device_id, device_reason=reason, binding=binding,
                xp=xp, cuda_aware=aware, cuda_aware_reason=aware_why, nonblocking_device=nonblocking,
                nonblocking_reason=nonblocking_why)


def _blas_decision(blas_threads, local_size: int) -> str:
    """Apply ``init``'s ``blas_threads`` and say what the BLAS runs (:attr:`Runtime.blas_threads`)."""
    if blas_threads is None:
        runs = _blas.threads()
        return f"{runs if runs is not None else 'unknown'} (left as the process had them: blas_threads=None)"
    if blas_threads != "auto":
        if not _set_blas_limit(blas_threads):
            return "not limited (threadpoolctl missing)"
        return f"{blas_threads} (blas_threads={blas_threads})"
    return _limit_blas_threads(local_size)


def _collectives_path(mode: str, comm, use_gpu: bool, sharing: int) -> tuple[str, str]:
    """``("nccl" | "mpi", why)``, the same on every rank of ``comm``. Collective.

    NCCL serves device buffers where every rank has a GPU of its own (it
    refuses two ranks on one GPU, ``ncclInvalidUsage``) and its library
    loads on every rank. At one rank no collective runs, so ``auto`` says
    so instead of choosing.
    """
    if mode == "mpi":
        return "mpi", "asked for (collectives='mpi')" if use_gpu else "device is cpu"
    if not use_gpu:
        if mode == "nccl":
            raise agreed(RuntimeError("collectives='nccl' needs a GPU on every rank, and the device is the cpu"))
        return "mpi", "device is cpu"
    ok, why = _nccl.available()
    found = comm.allgather(None if ok else why)
    missing = [(r, w) for r, w in enumerate(found) if w is not None]
    if missing:
        r, w = missing[0]
        problem = w if len(missing) == comm.size else f"rank {r}: {w}"
    elif sharing > 1:
        problem = f"ranks share a GPU (up to {sharing} on one), which NCCL refuses"
    elif comm.size == 1 and mode == "auto":
        problem = "one rank: no collective runs"
    else:
        return "nccl", (f"{why}: every rank has a GPU of its own" if mode == "auto"
                        else f"{why}: asked for (collectives='nccl')")
    if mode == "nccl":
        raise agreed(RuntimeError(f"collectives='nccl': {problem}"))
    return "mpi", problem


def _gpu_sharing(comm, device_id) -> int:
    """The most ranks that share one physical GPU (by host and PCI bus id). Collective."""
    ids = comm.allgather((socket.gethostname(), _device.pci_bus_id(device_id) or f"device {device_id}"))
    return max(ids.count(i) for i in ids)


def _choose_device(device: str, comm: MPI.Intracomm, local_rank: int) -> tuple[bool, int | None, str, str]:
    """``(use_gpu, device_id, reason, binding)``, agreed by every rank of ``comm``. Collective."""
    if device == "cpu":
        return False, None, "asked for", ""
    ngpu, problem = _device.probe()
    device_id, binding = None, ""
    if ngpu > 0:
        early = _device.EARLY_BINDING
        if early is not None:
            device_id, binding = early
        else:
            device_id = local_rank % ngpu
            binding = f"Split_type(COMM_TYPE_SHARED) local rank {local_rank}, after MPI_Init ({_device.LATE_WHY})"
            _device.bind(device_id)
        problem = _device.check_usable()
        if problem:
            problem = f"GPU {device_id} is not usable ({problem})"
    problems = comm.allgather(problem)
    bad = [(r, p) for r, p in enumerate(problems) if p]
    if not bad:
        return True, device_id, "asked for" if device == "gpu" else "auto: every rank has a usable GPU", binding
    r, p = bad[0]
    if len(bad) == comm.size and all(q == p for _, q in bad):
        where = ""  # the same on every rank: say it once
    else:
        more = f" (and {len(bad) - 1} more rank(s))" if len(bad) > 1 else ""
        where = f"rank {r}{more}: "
    if device == "gpu":
        raise agreed(RuntimeError(f"--device gpu: {where}{p}"))
    return False, None, f"auto: {where}{p}", ""


def _library_version() -> str:
    """First line of ``MPI.Get_library_version()``, without NUL bytes (Open MPI ends it with one)."""
    text = MPI.Get_library_version().replace("\x00", "")
    lines = text.strip().splitlines() or [""]
    return " ".join(lines[0].split())


def current_runtime() -> Runtime | None:
    """The process-wide runtime if :func:`init` has made one, else ``None``. Not collective."""
    return _RUNTIME


_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")
_BLAS_VARS = {"openblas": ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"),
              "mkl": ("MKL_NUM_THREADS", "OMP_NUM_THREADS"), "blis": ("BLIS_NUM_THREADS", "OMP_NUM_THREADS")}
"""The variables each BLAS reads for its thread count, first found wins (each library's documentation:
OpenBLAS's README "Setting the number of threads using environment variables", MKL's developer guide,
BLIS's docs/Multithreading.md)."""
_BLAS_LIMIT = None


def _blas_thread_vars() -> tuple[str, tuple]:
    """NumPy's BLAS's name and the variables it reads, in order (every known one when it is not recognized)."""
    lib = _blas.numpy_blas()
    api = getattr(lib.controller, "internal_api", "") if lib is not None else ""
    return api, _BLAS_VARS.get(api, _THREAD_VARS)


def _set_blas_limit(n: int) -> bool:
    """Every loaded BLAS (NumPy's, SciPy's) to ``n`` threads; False without threadpoolctl."""
    global _BLAS_LIMIT
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return False
    _load_scipy_blas()
    _BLAS_LIMIT = threadpool_limits(limits=n)
    return True


@functools.cache
def _load_scipy_blas() -> None:
    """Load SciPy's own BLAS (its wheels bring a second OpenBLAS), so that the limit covers it.

    It is loaded before SciPy is imported by hpcgpu (SUMMA's gemm without NumPy's CBLAS) or by the science
    code. A wheel's library is opened by its path (``scipy.libs/``), a ``dlopen``, because importing
    ``scipy.linalg`` costs 0.25 to 0.4 s of CPU at every start of every rank. Where there is no such file (a
    source build, a distribution's package), ``scipy.linalg.blas`` is imported to load it. Once a process.
    """
    spec = importlib.util.find_spec("scipy")
    if spec is None:
        return
    libs = glob.glob(os.path.join(os.path.dirname(os.path.dirname(spec.origin or "")), "scipy.libs",
                                  "lib*openblas*.so*"))
    try:
        if libs:
            for path in libs:
                ctypes.CDLL(path)
        else:
            import scipy.linalg.blas  # noqa: F401
    except (ImportError, OSError):
        pass


OVERSUBSCRIBE_VAR = "HPCGPU_BLAS_OVERSUBSCRIBE"
"""``HPCGPU_BLAS_OVERSUBSCRIBE=1`` keeps a thread variable's count even where it is more than the CPU set a
rank is bound to. Without it such a variable is capped at the set: since Slurm 22.05, ``srun`` no longer
reads ``SLURM_CPUS_PER_TASK``, so a job script that asks ``--cpus-per-task=8`` and exports
``OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK`` gets ranks bound to one CPU each running eight threads, unless
its ``srun`` is given ``--cpus-per-task`` (or ``SRUN_CPUS_PER_TASK`` is set)."""

_CAPPED = "capped at the CPU set"
_CAP: tuple | None = None
"""(variable, its value, CPUs of the set) when the last :func:`_limit_blas_threads` capped a variable."""
_TRAP_FIX = ("give srun --cpus-per-task (Slurm >= 22.05 no longer passes the job's on) or export "
             "SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK; " + OVERSUBSCRIBE_VAR + "=1 keeps the variable's count")


def _cores() -> tuple[int, int]:
    """This rank's CPU set size and the node's cores (:func:`hpcgpu._yield.cores`)."""
    return _yield.cores()


def _limit_blas_threads(local_size: int) -> str:
    """Keep ranks x BLAS threads within this rank's cores, unless the user chose; say what the BLAS runs.

    Eight ranks on two cores, each with a two-thread OpenBLAS, ran 50 times
    slower here than with one thread each. A rank bound to a CPU set (Slurm's
    ``--cpus-per-task`` with binding) gets the size of its set; an unbound
    rank gets its share of the node's cores. A variable that NumPy's BLAS
    reads (:data:`_BLAS_VARS`: ``OPENBLAS_NUM_THREADS`` or ``OMP_NUM_THREADS``
    for OpenBLAS, ``MKL_NUM_THREADS`` or ``OMP_NUM_THREADS`` for MKL, ...)
    wins, except where it asks for more threads than a bound rank's CPU set
    holds: that is capped at the set (Slurm 22.05's trap, :data:`OVERSUBSCRIBE_VAR`
    keeps it). The threads are reported as the library runs them; a variable
    of another BLAS (``MKL_NUM_THREADS`` with OpenBLAS) is not read by the
    library, so hpcgpu sets its share and says the variable was not read.
    A rank alone on a node it is not bound within, whose NumPy BLAS already
    runs the node's cores, is left as it is (each library's own default).
    """
    global _CAP
    _CAP = None
    api, reads = _blas_thread_vars()
    mine, total = _cores()
    for var in reads:
        value = os.environ.get(var, "").strip()
        if value:
            first = value.split(",")[0]  # OMP_NUM_THREADS=4,2: the outer level
            want = int(first) if first.isdigit() and int(first) >= 1 else None
            if want is not None and mine < total and want > mine and not _options.switch(OVERSUBSCRIBE_VAR):
                _set_blas_limit(mine)
                _CAP = (var, value, mine)
                runs = _blas.threads()
                return (f"{runs if runs is not None else mine} ({var}={value} {_CAPPED}: "
                        f"this rank is bound to {mine} of the node's {total} cores; srun --cpus-per-task or "
                        f"SRUN_CPUS_PER_TASK gives it more, {OVERSUBSCRIBE_VAR}=1 keeps {want})")
            if want is not None and _blas.threads() not in (None, want):
                _set_blas_limit(want)  # set after the library loaded (in Python): do what it says
            runs = _blas.threads()
            return f"{runs if runs is not None else value} (from {var})"
    ignored = [v for v in _THREAD_VARS if os.environ.get(v) and v not in reads]
    n = _yield.blas_share(mine, total, local_size)
    if local_size == 1 and mine == total and not ignored and _blas.threads() == n:
        # The rank has the node to itself: every BLAS's own default is the node's cores, and NumPy's runs them.
        # Nothing to limit, so no walk over the process's shared objects (0.013 s after scikit-learn's import).
        return f"{n} (the node's {total} cores, one rank on it: each library's own default)"
    if not _set_blas_limit(n):
        return "not limited (threadpoolctl missing)"
    why = f"bound to {mine} cores" if mine < total else f"{total} cores / {local_size} ranks on node"
    if ignored:
        name = {"openblas": "OpenBLAS", "mkl": "MKL", "blis": "BLIS"}.get(api, api)
        why += f"; {', '.join(ignored)} not read by {name}, NumPy's BLAS"
    return f"{n} ({why})"


def _capped_line(comm, threads: str) -> str:
    """One line for every rank when some rank's thread variable was capped (:data:`OVERSUBSCRIBE_VAR`), else "".

    Collective over ``comm``. ``threads`` is this rank's :attr:`Runtime.blas_threads`.
    """
    mine = _CAP if _CAPPED in threads else None
    capped = [(r, c) for r, c in enumerate(comm.allgather(mine)) if c is not None]
    if not capped:
        return ""
    r, (var, value, cpus) = capped[0]
    return (f"BLAS threads capped on {len(capped)} rank(s) (rank {r}: {var}={value} asks for more than the "
            f"{cpus} CPU(s) it is bound to): {_TRAP_FIX}")


def check_launch() -> None:
    """Stop N copies of a 1-rank job that should have been one N-rank job.

    Not collective. Under ``srun --mpi=none`` (or a launcher that does not
    speak the MPI library's process-management interface) every task of an
    N-task Slurm step starts its own ``MPI_COMM_WORLD`` of size 1, and the
    job silently runs N times. The same happens under the ``mpiexec`` of
    another MPI than mpi4py's (Open MPI's mpi4py under MPICH's or Intel
    MPI's Hydra). Detected from ``SLURM_STEP_NUM_TASKS``, or the launcher's
    own ``PMI_SIZE`` (Hydra), ``OMPI_COMM_WORLD_SIZE`` (Open MPI) or
    ``MV2_COMM_WORLD_SIZE`` (MVAPICH2), > 1 while ``COMM_WORLD`` has one
    rank. ``HPCGPU_IGNORE_SLURM_NTASKS=1`` turns the check off.

    Raises
    ------
    RuntimeError
        An :class:`~hpcgpu.errors.AgreedError` (each task is its own world,
        so all of them raise), silent on all tasks but Slurm's task 0, so the
        job log shows the message once.
    """
    if MPI.COMM_WORLD.Get_size() != 1 or _options.switch("HPCGPU_IGNORE_SLURM_NTASKS"):
        return
    step_tasks = os.environ.get("SLURM_STEP_NUM_TASKS", "")
    if step_tasks.isdigit() and int(step_tasks) > 1:
        raise agreed(RuntimeError(
            f"Slurm started {step_tasks} tasks (SLURM_STEP_NUM_TASKS={step_tasks}) but MPI sees a world of 1 "
            "in each: the launcher did not connect the ranks (srun --mpi=none?); launch with "
            "srun --mpi=pmi2 (or the plugin your MPI needs) or mpiexec"),
            silent=os.environ.get("SLURM_PROCID", "0") != "0")
    for size, rank in (("PMI_SIZE", "PMI_RANK"), ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"),
                       ("MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_RANK")):
        n = os.environ.get(size, "")
        if n.isdigit() and int(n) > 1:
            raise agreed(RuntimeError(
                f"the launcher started {n} processes ({size}={n}) but MPI sees a world of 1 in each: this "
                f"mpiexec is not the one of mpi4py's MPI library ({_library_version()}); "
                "launch with that library's mpiexec"),
                silent=os.environ.get(rank, "0") != "0")


def placement(comm: MPI.Intracomm) -> str:
    """Which ranks run on which host, e.g. ``"node1: ranks 0-1; node2: ranks 2-3"``.

    Collective over ``comm`` (an ``allgather`` of host names). A job's first
    line shows it when it spans several hosts, so that a launcher's report
    of a lost node or rank can be read against it.

    Parameters
    ----------
    comm : mpi4py.MPI.Intracomm

    Returns
    -------
    str
        The same on every rank; runs of consecutive ranks are written ``a-b``.
    """
    hosts = comm.allgather(socket.gethostname())
    by: dict[str, list[int]] = {}
    for r, h in enumerate(hosts):
        by.setdefault(h, []).append(r)

    def runs(rs):
        out, start = [], rs[0]
        for a, b in zip(rs, rs[1:] + [None], strict=True):
            if b != a + 1:
                out.append(str(start) if start == a else f"{start}-{a}")
                start = b
        return ",".join(out)

    return "; ".join(f"{h}: rank{'s' * (len(rs) > 1)} {runs(rs)}" for h, rs in by.items())


def get_runtime() -> Runtime:
    """The process-wide runtime, made by ``init()`` on first use (collective)."""
    return _RUNTIME if _RUNTIME is not None else init()


def detect_cuda_aware(comm: MPI.Intracomm) -> tuple[bool, str]:
    """Decide whether the MPI library accepts CUDA device pointers.

    Not collective. The first source that answers wins:

    1. ``HPCGPU_CUDA_AWARE_MPI=0|1`` in the environment (a ``1`` that the
       MPI's own answer contradicts is named as forced: a wrong override
       hands device pointers to a host-only MPI, which crashes);
    2. the MPI 4.1 info key ``mpi_memory_alloc_kinds`` of ``comm``
       (a comma-separated list; a kind ``cuda`` or ``cuda:...`` means yes);
    3. ``MPIX_Query_cuda_support()`` of the loaded MPI library, through ctypes
       (MPICH, Open MPI, MVAPICH);
    4. the variables that switch the support on: ``MPICH_GPU_SUPPORT_ENABLED``
       (Cray MPICH), ``OMPI_MCA_opal_cuda_support`` (Open MPI),
       ``MV2_USE_CUDA`` (MVAPICH2);
    5. otherwise no.

    Parameters
    ----------
    comm : mpi4py.MPI.Intracomm
        Whose info object is asked for ``mpi_memory_alloc_kinds``.

    Returns
    -------
    (bool, str)
        The answer and the reason, in words.

    Raises
    ------
    ValueError
        ``HPCGPU_CUDA_AWARE_MPI`` is set to something other than 0/1.
    """
    forced = _options.switch("HPCGPU_CUDA_AWARE_MPI")
    if forced is False:
        return False, "HPCGPU_CUDA_AWARE_MPI=0"
    if forced:
        own, why = _library_cuda_aware(comm)
        if own is False:
            return True, f"HPCGPU_CUDA_AWARE_MPI=1, forced against the MPI's own answer ({why})"
        return True, "HPCGPU_CUDA_AWARE_MPI=1"
    own, why = _library_cuda_aware(comm)
    return bool(own), why


def _library_cuda_aware(comm: MPI.Intracomm) -> tuple[bool | None, str]:
    """What the MPI library itself says (steps 2-5 of :func:`detect_cuda_aware`)."""
    kinds = _info_alloc_kinds(comm)
    if kinds is not None and _has_cuda_kind(kinds):
        return True, f"mpi_memory_alloc_kinds={kinds}"
    q = _query_cuda_support()
    if q is not None:
        return bool(q), f"MPIX_Query_cuda_support()={q}"
    for var in ("MPICH_GPU_SUPPORT_ENABLED", "OMPI_MCA_opal_cuda_support", "MV2_USE_CUDA"):
        val = os.environ.get(var)
        if val is not None:
            return val.strip().lower() in _options.TRUE, f"{var}={val}"
    if kinds is not None:
        return False, f"mpi_memory_alloc_kinds={kinds}"
    return None, "no sign of CUDA support in the MPI library"


def _has_cuda_kind(kinds: str) -> bool:
    """Whether an ``mpi_memory_alloc_kinds`` value lists CUDA memory.

    The value is a comma-separated list of ``kind[:restrictor]``
    (MPI 4.1, section 11.4.3): ``"mpi,system,cuda:device,cuda:host"``.
    """
    return any(k.strip().split(":", 1)[0].strip().lower() == "cuda" for k in kinds.split(","))


def detect_nonblocking_device(cuda_aware: bool, library: str) -> tuple[bool, str]:
    """Decide whether non-blocking collectives (``Ibcast``) may take device buffers.

    Not collective. A CUDA-aware MPI does not always take device memory in
    its non-blocking collectives: Open MPI's ``ob1``/``smcuda`` path
    documents them as unsupported for device buffers; only its UCX path
    (``OMPI_MCA_pml=ucx``) takes them. The MPICH family (MPICH, Cray MPICH,
    MVAPICH, Intel MPI) does. ``HPCGPU_NONBLOCKING_DEVICE=0|1`` overrides.

    Parameters
    ----------
    cuda_aware : bool
        The outcome of :func:`detect_cuda_aware`.
    library : str
        The MPI library's version string.

    Returns
    -------
    (bool, str)
        The answer and the reason, in words.

    Raises
    ------
    ValueError
        ``HPCGPU_NONBLOCKING_DEVICE`` is set to something other than 0/1.
    """
    forced = _options.switch("HPCGPU_NONBLOCKING_DEVICE")
    if forced is not None:
        return forced, f"HPCGPU_NONBLOCKING_DEVICE={int(forced)}"
    if not cuda_aware:
        return False, "MPI is not CUDA-aware"
    if "open mpi" in library.lower():
        pml = os.environ.get("OMPI_MCA_pml", "")
        if "ucx" in pml.lower():
            return True, f"Open MPI with UCX (OMPI_MCA_pml={pml})"
        return False, ("Open MPI without OMPI_MCA_pml=ucx: its ob1/smcuda path takes no device buffers in "
                       "non-blocking collectives, so Ibcast is staged")
    return True, "an MPICH-family MPI: non-blocking collectives take device buffers"


def _info_alloc_kinds(comm: MPI.Intracomm) -> str | None:
    try:
        info = comm.Get_info()
    except MPI.Exception:
        return None
    try:
        return info.Get("mpi_memory_alloc_kinds")
    finally:
        info.Free()


def _query_cuda_support() -> int | None:
    """``MPIX_Query_cuda_support()`` of the libmpi this process loaded."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "libmpi" in line and ".so" in line}
    except OSError:
        return None
    for path in sorted(paths):
        if not os.path.exists(path):
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        fn = getattr(lib, "MPIX_Query_cuda_support", None)
        if fn is not None:
            fn.restype = ctypes.c_int
            return int(fn())
    return None
