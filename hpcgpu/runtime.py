"""The runtime: communicator, rank-to-GPU binding, the array module ``xp``.

One process is one MPI rank and drives at most one GPU. :func:`init` builds a
:class:`Runtime` once per process; every other layer of hpcgpu takes its
communicator and array module from it.
"""

from __future__ import annotations

import ctypes
import os
import socket
from dataclasses import dataclass, field
from types import ModuleType

import numpy
from mpi4py import MPI

from . import _device

__all__ = ["Runtime", "init", "get_runtime", "detect_cuda_aware", "check_launch"]

_RUNTIME: Runtime | None = None

_TRUE = {"1", "yes", "true", "on"}
_FALSE = {"0", "no", "false", "off"}


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
        The CUDA device this rank is bound to (``local_rank % device_count``),
        ``None`` on the CPU.
    xp : module
        ``cupy`` on a GPU, ``numpy`` otherwise.
    cuda_aware : bool
        Whether device buffers go straight to MPI. Always ``False`` on the CPU.
    cuda_aware_reason : str
        How ``cuda_aware`` was decided, in words.
    mpi_library : str
        First line of ``MPI.Get_library_version()``.
    blas_threads : str
        The host BLAS/OpenMP thread limit this rank set, and why.
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
    _owns_comm: bool = field(default=True, repr=False)

    def describe(self) -> str:
        """One line about this rank, as ``python -m hpcgpu info`` prints it."""
        if self.device == "gpu":
            dev = f"gpu:{self.device_id} ({_device.device_name(self.device_id)})"
        else:
            dev = "cpu"
        xp_version = getattr(self.xp, "__version__", "?")
        mpi_version = "%d.%d" % MPI.Get_version()
        aware = "yes" if self.cuda_aware else "no"
        return (
            f"[{self.rank}/{self.size}] host={self.host} "
            f"local_rank={self.local_rank}/{self.local_size} device={dev} "
            f"xp={self.xp.__name__} {xp_version} "
            f"mpi={self.mpi_library} (MPI {mpi_version}) blas_threads={self.blas_threads} "
            f"cuda_aware={aware} ({self.cuda_aware_reason})"
        )

    def free(self) -> None:
        """Free the private communicator. Collective over ``comm``."""
        global _RUNTIME
        if self._owns_comm and self.comm != MPI.COMM_NULL:
            self.comm.Free()
        if _RUNTIME is self:
            _RUNTIME = None


def init(device: str = "auto", comm: MPI.Intracomm | None = None) -> Runtime:
    """Start the hpcgpu runtime on this rank.

    Collective: all ranks of ``comm`` must call it. The first call makes the
    process-wide runtime that hpcgpu's functions use when no ``comm`` is
    given; a later call with the same arguments returns it again.

    Parameters
    ----------
    device : {"auto", "cpu", "gpu"}
        ``"gpu"`` binds the rank to CUDA device ``local_rank % device_count``
        and makes ``xp`` CuPy; ``"cpu"`` uses NumPy; ``"auto"`` picks the GPU
        when CuPy sees one on every rank, the CPU otherwise.
    comm : mpi4py.MPI.Intracomm, optional
        The ranks of the job; ``MPI.COMM_WORLD`` when omitted. It is
        duplicated, never used directly.

    Returns
    -------
    Runtime

    Raises
    ------
    ValueError
        ``device`` is not one of the choices (on every rank, before any
        communication).
    RuntimeError
        ``device="gpu"`` and some rank has no usable GPU (on every rank);
        or the launcher did not connect the ranks (see :func:`check_launch`).

    Notes
    -----
    CUDA-aware MPI is decided here once, see :func:`detect_cuda_aware`.
    """
    global _RUNTIME
    if device not in ("auto", "cpu", "gpu"):
        raise ValueError(f"device must be 'auto', 'cpu' or 'gpu', got {device!r}")
    check_launch()
    base = MPI.COMM_WORLD if comm is None else comm
    if _RUNTIME is not None and comm is None and device in ("auto", _RUNTIME.device):
        return _RUNTIME

    dup = base.Dup()
    node = dup.Split_type(MPI.COMM_TYPE_SHARED, key=dup.rank)
    local_rank, local_size = node.rank, node.size
    node.Free()

    ngpu = _device.device_count() if device in ("auto", "gpu") else 0
    # Every rank must agree on the device, or the collectives below would mix
    # host and device buffers. The smallest count decides.
    min_gpus = dup.allreduce(ngpu, op=MPI.MIN)
    if device == "gpu" and min_gpus == 0:
        bad = [r for r, n in enumerate(dup.allgather(ngpu)) if n == 0]
        dup.Free()
        raise RuntimeError(
            f"device='gpu' but ranks {bad} see no CUDA device (is CuPy installed "
            "and CUDA_VISIBLE_DEVICES set?)"
        )
    use_gpu = device == "gpu" or (device == "auto" and min_gpus > 0)

    if use_gpu:
        device_id = local_rank % ngpu
        xp = _device.bind(device_id)
        cuda_aware, reason = detect_cuda_aware(dup)
        # All ranks must take the same path; staging is the safe common one.
        if not dup.allreduce(cuda_aware, op=MPI.LAND):
            if cuda_aware:
                reason = "not on every rank; staging through host memory"
            cuda_aware = False
    else:
        device_id, xp = None, numpy
        would, why = detect_cuda_aware(dup)
        cuda_aware = False
        reason = f"device is cpu, host buffers; for GPUs this MPI would be {'yes' if would else 'no'}: {why}"

    blas = _limit_blas_threads(local_size)
    rt = Runtime(
        comm=dup,
        rank=dup.rank,
        size=dup.size,
        local_rank=local_rank,
        local_size=local_size,
        host=socket.gethostname(),
        device="gpu" if use_gpu else "cpu",
        device_id=device_id,
        xp=xp,
        cuda_aware=cuda_aware,
        cuda_aware_reason=reason,
        blas_threads=blas,
        mpi_library=" ".join(MPI.Get_library_version().splitlines()[0].split()),
    )
    if use_gpu and not cuda_aware and rt.rank == 0:
        import warnings

        warnings.warn(
            f"hpcgpu: MPI is not CUDA-aware ({reason}); device buffers are "
            "staged through pinned host memory",
            RuntimeWarning,
            stacklevel=2,
        )
    if comm is None:
        if _RUNTIME is not None:
            _RUNTIME.free()
        _RUNTIME = rt
    return rt


_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")
_BLAS_LIMIT = None


def _limit_blas_threads(local_size: int) -> str:
    """Keep ranks x BLAS threads within this rank's cores, unless the user chose.

    Eight ranks on two cores, each with a two-thread OpenBLAS, ran 50 times
    slower here than with one thread each. A rank bound to a CPU set (Slurm's
    ``--cpus-per-task`` with binding) gets the size of its set; an unbound
    rank gets its share of the node's cores. An explicit ``OMP_NUM_THREADS``
    (or ``OPENBLAS_``/``MKL_``/``BLIS_NUM_THREADS``) always wins.
    """
    global _BLAS_LIMIT
    for var in _THREAD_VARS:
        if os.environ.get(var):
            return f"{os.environ[var]} (from {var})"
    try:
        mine = len(os.sched_getaffinity(0))
    except AttributeError:
        mine = os.cpu_count() or 1
    total = os.cpu_count() or mine
    n = mine if mine < total else max(1, total // max(1, local_size))
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return "not limited (threadpoolctl missing)"
    try:  # SciPy brings its own OpenBLAS (SUMMA's gemm, the SGD update): load it now so it is limited too
        import scipy.linalg.blas  # noqa: F401
    except ImportError:
        pass
    _BLAS_LIMIT = threadpool_limits(limits=n)
    why = f"bound to {mine} cores" if mine < total else f"{total} cores / {local_size} ranks on node"
    return f"{n} ({why})"


def check_launch() -> None:
    """Stop N copies of a 1-rank job that should have been one N-rank job.

    Not collective. Under ``srun --mpi=none`` (or a launcher that does not
    speak the MPI library's process-management interface) every task of an
    N-task Slurm step starts its own ``MPI_COMM_WORLD`` of size 1, and the
    job silently runs N times. Detected from ``SLURM_STEP_NUM_TASKS`` > 1
    while ``COMM_WORLD`` has one rank. ``HPCGPU_IGNORE_SLURM_NTASKS=1``
    turns the check off.

    Raises
    ------
    RuntimeError
        With attribute ``collective`` (each task is its own world, so all of
        them raise), and ``silent`` on all tasks but Slurm's task 0, so the
        job log shows the message once.
    """
    step_tasks = os.environ.get("SLURM_STEP_NUM_TASKS", "")
    if (MPI.COMM_WORLD.Get_size() == 1 and step_tasks.isdigit() and int(step_tasks) > 1
            and os.environ.get("HPCGPU_IGNORE_SLURM_NTASKS", "").lower() not in _TRUE):
        err = RuntimeError(
            f"Slurm started {step_tasks} tasks (SLURM_STEP_NUM_TASKS={step_tasks}) but MPI sees a world of 1 "
            "in each: the launcher did not connect the ranks (srun --mpi=none?); launch with "
            "srun --mpi=pmi2 (or the plugin your MPI needs) or mpiexec")
        err.collective = True
        err.silent = os.environ.get("SLURM_PROCID", "0") != "0"
        raise err


def get_runtime() -> Runtime:
    """The process-wide runtime, made by ``init()`` on first use (collective)."""
    return _RUNTIME if _RUNTIME is not None else init()


def detect_cuda_aware(comm: MPI.Intracomm) -> tuple[bool, str]:
    """Decide whether the MPI library accepts CUDA device pointers.

    Not collective. The first source that answers wins:

    1. ``HPCGPU_CUDA_AWARE_MPI=0|1`` in the environment;
    2. the MPI 4.1 info key ``mpi_memory_alloc_kinds`` of ``comm``
       (``cuda`` listed means yes);
    3. ``MPIX_Query_cuda_support()`` of the loaded MPI library, through ctypes
       (MPICH, Open MPI, MVAPICH);
    4. the variables that switch the support on: ``MPICH_GPU_SUPPORT_ENABLED``
       (Cray MPICH), ``OMPI_MCA_opal_cuda_support`` (Open MPI),
       ``MV2_USE_CUDA`` (MVAPICH2);
    5. otherwise no.

    Parameters
    ----------
    comm : mpi4py.MPI.Intracomm

    Returns
    -------
    (bool, str)
        The answer and the reason, in words.

    Raises
    ------
    ValueError
        ``HPCGPU_CUDA_AWARE_MPI`` is set to something other than 0/1.
    """
    env = os.environ.get("HPCGPU_CUDA_AWARE_MPI")
    if env is not None and env.strip() != "":
        v = env.strip().lower()
        if v in _TRUE:
            return True, "HPCGPU_CUDA_AWARE_MPI=1"
        if v in _FALSE:
            return False, "HPCGPU_CUDA_AWARE_MPI=0"
        raise ValueError(f"HPCGPU_CUDA_AWARE_MPI must be 0 or 1, got {env!r}")

    kinds = _info_alloc_kinds(comm)
    if kinds is not None and "cuda" in kinds:
        return True, f"mpi_memory_alloc_kinds={kinds}"

    q = _query_cuda_support()
    if q is not None:
        return bool(q), f"MPIX_Query_cuda_support()={q}"

    for var in ("MPICH_GPU_SUPPORT_ENABLED", "OMPI_MCA_opal_cuda_support", "MV2_USE_CUDA"):
        val = os.environ.get(var)
        if val is not None:
            return val.strip().lower() in _TRUE, f"{var}={val}"
    if kinds is not None:
        return False, f"mpi_memory_alloc_kinds={kinds}"
    return False, "no sign of CUDA support in the MPI library"


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
