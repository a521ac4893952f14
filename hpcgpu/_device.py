"""The only module that touches CuPy. Everything here is a no-op on NumPy.

CuPy is imported lazily, so a CPU-only install never needs it. What lives
here: finding a usable GPU (and saying why not), binding a rank to one, the
synchronize that must come before MPI touches device memory, pinned staging
buffers (one growable buffer per slot), and the cuBLAS GEMM.
"""

from __future__ import annotations

import os
import sys
import threading
from types import ModuleType

import numpy
from . import _options

# Launcher variables that give a rank's index on its node before MPI_Init,
# in the order they are trusted: Slurm's srun, Open MPI's mpiexec (PRRTE),
# MPICH's and Intel MPI's Hydra, PMIx launchers, MVAPICH2's mpirun_rsh.
LOCAL_RANK_VARS = ("SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PMI_LOCAL_RANK",
                   "PMIX_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_RANK")


def cupy_or_none() -> ModuleType | None:
    """``cupy`` when it imports, else ``None``. Not collective."""
    try:
        import cupy
    except Exception:  # ImportError, or a CUDA library missing at import
        return None
    return cupy


def _why(exc: BaseException) -> str:
    """CuPy's own words for a failure, on one line."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def probe() -> tuple[int, str]:
    """How many CUDA devices this process sees, and why none when 0. Not collective.

    Creates no CUDA context (``cudaGetDeviceCount`` does not).

    Returns
    -------
    (int, str)
        The device count, and for 0 the cause in CuPy's words: CuPy missing
        or failing to import, no driver, no device visible.
    """
    try:
        import cupy
    except ModuleNotFoundError as e:
        if e.name == "cupy":
            return 0, "CuPy is not installed"
        return 0, f"CuPy is not importable ({_why(e)})"
    except ImportError as e:
        return 0, f"CuPy is not importable ({_why(e)})"
    except Exception as e:  # a CUDA library missing at import
        return 0, f"CuPy failed to import ({_why(e)})"
    try:
        n = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as e:  # CUDARuntimeError: no driver, no device, CUDA_VISIBLE_DEVICES=""
        return 0, f"no usable CUDA device ({_why(e)})"
    if n == 0:
        return 0, "no CUDA device visible (CUDA_VISIBLE_DEVICES=" f"{os.environ.get('CUDA_VISIBLE_DEVICES', '')!r})"
    return n, ""


def device_count() -> int:
    """Number of CUDA devices CuPy sees; 0 without CuPy, a driver or a visible device. Not collective."""
    return probe()[0]


def launcher_local_rank() -> tuple[int, str] | None:
    """This process's node-local rank as the launcher gave it, before MPI_Init.

    Not collective; reads :data:`LOCAL_RANK_VARS` in order.

    Returns
    -------
    (int, str) or None
        The local rank and the variable it came from; ``None`` when no
        launcher variable is set (or none holds an integer).
    """
    for var in LOCAL_RANK_VARS:
        v = os.environ.get(var, "").strip()
        if v.isdigit():
            return int(v), var
    return None


EARLY_BINDING: tuple[int, str] | None = None
"""``(device_id, how)`` when :func:`bind_early` chose the GPU before MPI_Init."""

LATE_WHY = "no launcher variable gave the node-local rank"
"""Why the GPU was not chosen before MPI_Init (for ``info``)."""


def bind_early() -> None:
    """Choose this rank's GPU from the launcher's node-local rank, before MPI_Init.

    Not collective; called by ``import hpcgpu`` before anything imports
    ``mpi4py.MPI``. CUDA-aware MPICH, MVAPICH2 and Cray MPICH create CUDA
    resources on the current device during ``MPI_Init`` (pmodels/mpich
    issue 5810): without this, every rank of a node would also hold a
    context on GPU 0. Binds device ``local_rank % device_count`` when a
    variable of :data:`LOCAL_RANK_VARS` is set, CuPy sees a device, MPI is
    not yet initialized and ``HPCGPU_DEVICE`` is not ``cpu``; otherwise
    records why not in :data:`LATE_WHY`, and :func:`hpcgpu.init` binds
    after ``MPI_Init`` from ``Split_type``.
    """
    global EARLY_BINDING, LATE_WHY
    if EARLY_BINDING is not None:
        return
    if "mpi4py.MPI" in sys.modules:
        LATE_WHY = "MPI was initialized before hpcgpu was imported"
        return
    if (_options.text("HPCGPU_DEVICE") or "").lower() == "cpu":
        LATE_WHY = "HPCGPU_DEVICE=cpu"
        return
    found = launcher_local_rank()
    if found is None:
        return
    n, why = probe()
    if n == 0:
        LATE_WHY = why
        return
    local, var = found
    try:
        bind(local % n)
    except Exception as e:  # reported by init(), which checks the device again
        LATE_WHY = f"binding GPU {local % n} before MPI_Init failed ({_why(e)})"
        return
    EARLY_BINDING = (local % n, f"{var}={local}, before MPI_Init")


def bind(device_id: int) -> ModuleType:
    """Make ``device_id`` this process's current device; return ``cupy``. Not collective."""
    import cupy

    cupy.cuda.Device(device_id).use()
    return cupy


def current_device() -> int:
    """The CUDA device current in this process. Not collective."""
    import cupy

    return int(cupy.cuda.runtime.getDevice())


def check_usable() -> str:
    """Try what hpcgpu needs of the current device; ``""`` when all works, else why not.

    Not collective. An allocation, a small elementwise kernel (which needs
    NVRTC to compile), a cuBLAS handle and a tiny GEMM: the plain
    ``cupy-cuda12x`` wheel finds a device with only a driver installed, and
    then fails at the first kernel.
    """
    try:
        import cupy

        a = cupy.arange(4, dtype=cupy.float32)
        b = a * 2 + 1  # an elementwise kernel: compiled by NVRTC on first use
        cupy.cuda.device.get_cublas_handle()
        c = b.reshape(2, 2) @ b.reshape(2, 2)  # cuBLAS
        c.get()
        cupy.cuda.get_current_stream().synchronize()
    except Exception as e:  # CuPy's exception names the missing library
        return _why(e)
    return ""


def device_name(device_id: int | None) -> str:
    """The name of CUDA device ``device_id`` ("cpu" for ``None``). Not collective."""
    if device_id is None:
        return "cpu"
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(device_id)
    name = props["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


def pci_bus_id(device_id: int | None) -> str | None:
    """The PCI bus id of CUDA device ``device_id`` (how NVML finds it); ``None`` on the CPU. Not collective."""
    if device_id is None:
        return None
    import cupy

    try:
        return str(cupy.cuda.Device(device_id).pci_bus_id)
    except Exception:  # noqa: BLE001 - no bus id, no energy reading for it: the reader says so
        return None


def is_device_array(a) -> bool:
    """True for an array in GPU memory (anything with ``__cuda_array_interface__``)."""
    return hasattr(a, "__cuda_array_interface__")


def synchronize() -> None:
    """Wait for the current CUDA stream, so MPI reads finished data. Not collective."""
    import cupy

    cupy.cuda.get_current_stream().synchronize()


class _Slot:
    """One growable pinned host buffer, handed out as prefix views.

    Megatron-LM's ``GlobalMemoryBuffer`` pattern: a request for ``n`` bytes
    gets the first ``n`` bytes of the slot's buffer, which grows (to the
    request, rounded up) when too small; the old buffer is freed when the
    last view of it goes. ``busy`` marks a slot a non-blocking request still
    holds.
    """

    __slots__ = ("mem", "host", "busy")

    def __init__(self):
        self.mem, self.host, self.busy = None, None, False

    def view(self, nbytes: int) -> numpy.ndarray:
        if self.host is None or self.host.nbytes < nbytes:
            import cupy

            size = max(4096, 1 << max(0, nbytes - 1).bit_length())  # powers of two: few regrowths
            self.mem = cupy.cuda.alloc_pinned_memory(size)
            self.host = numpy.frombuffer(self.mem, dtype=numpy.uint8, count=size)
        return self.host[:nbytes]


_SLOTS: dict[str, _Slot] = {}


_COPY_STREAMS: dict = {}


def copy_stream():
    """This process's stream for panel copies on the current device (non-blocking, made once). Not collective.

    Non-blocking: it does not wait for the legacy default stream, so copies
    on it overlap kernels there (CUDA Programming Guide, "Implicit
    Synchronization").
    """
    import cupy

    dev = current_device()
    if dev not in _COPY_STREAMS:
        _COPY_STREAMS[dev] = cupy.cuda.Stream(non_blocking=True)
    return _COPY_STREAMS[dev]


def staging_stats() -> tuple[int, int]:
    """``(slots, bytes)`` of pinned staging memory this process holds. Not collective."""
    held = [s.host.nbytes for s in _SLOTS.values() if s.host is not None]
    return len(held), sum(held)


def free_staging() -> None:
    """Drop every staging buffer that no request holds (they are made again on use)."""
    for name in [n for n, s in _SLOTS.items() if not s.busy]:
        del _SLOTS[name]


def staging_buffer(a, slot: str) -> numpy.ndarray:
    """A pinned host array shaped like device array ``a``: a prefix of slot ``slot``'s buffer.

    Not collective. Buffers alive at the same time need different slots (the
    send and receive side of one collective, two broadcasts in flight).

    Raises
    ------
    RuntimeError
        ``slot`` is held by a non-blocking request not yet waited for.
    """
    s = _SLOTS.setdefault(slot, _Slot())
    if s.busy:
        raise RuntimeError(f"staging slot {slot!r} is held by a request not yet waited for; "
                           "give each request in flight its own slot")
    return s.view(int(a.nbytes)).view(a.dtype).reshape(a.shape)


def acquire_slot(prefix: str) -> str:
    """Mark the first free slot named ``prefix0``, ``prefix1``, ... busy and return its name."""
    i = 0
    while _SLOTS.get(f"{prefix}{i}") is not None and _SLOTS[f"{prefix}{i}"].busy:
        i += 1
    name = f"{prefix}{i}"
    _SLOTS.setdefault(name, _Slot())
    return name


def hold(slot: str, busy: bool) -> None:
    """Mark ``slot`` held by a non-blocking request (``busy``) or free again."""
    _SLOTS.setdefault(slot, _Slot()).busy = busy


def to_host(a, slot: str) -> numpy.ndarray:
    """Copy device array ``a`` into slot ``slot``'s pinned buffer and return that view.

    Not collective. CuPy's ``get`` is blocking: it waits for the current
    stream, so the copy holds every kernel queued before it.
    """
    host = staging_buffer(a, slot)
    a.get(out=host)
    return host


def from_host(host: numpy.ndarray, a) -> None:
    """Copy ``host`` back into device array ``a`` and wait for the copy. Not collective."""
    a.set(host)
    synchronize()


def asnumpy(a) -> numpy.ndarray:
    """A NumPy array holding the values of ``a`` (a copy only for device arrays). Not collective."""
    if is_device_array(a):
        return a.get()
    return numpy.asarray(a)


def cupy_tf32() -> bool:
    """Whether CuPy's own ``matmul`` uses TF32 for float32 (``CUPY_TF32=1``, read by CuPy at first use)."""
    try:
        return int(os.environ.get("CUPY_TF32", "0")) > 0
    except ValueError:
        return False


def gemm(a, b, c, alpha, beta, math_mode: str = "default") -> None:
    """``c = alpha * a @ b + beta * c`` on the device with cuBLAS (no temporary). Not collective.

    ``m``, ``n`` and ``k`` must be >= 1 (see :func:`hpcgpu._gemm.gemm`).
    ``math_mode``: ``"default"`` follows CuPy's mode as ``cupy.matmul`` does
    (TF32 for float32 and complex64 under ``CUPY_TF32=1``), ``"tf32"``
    asks for TF32 tensor cores, ``"full"`` for IEEE single precision
    whatever ``CUPY_TF32`` says. ``cupy.cublas.gemm`` alone ignores
    ``CUPY_TF32`` (it calls ``cublasSgemm``): the mode is set on the cuBLAS
    handle (``cublasSetMathMode``) for the call and put back after it.
    float16 and bfloat16 inputs go to ``cublasGemmEx`` with
    ``CUBLAS_COMPUTE_32F`` (``c`` float32 or the inputs' dtype), except the
    plain float16 product, which is ``cupy.matmul`` (the same call).
    Inside :func:`capture` every product is one ``cublasGemmEx`` called
    through ``ctypes`` on the cuBLAS library CuPy loaded, with CuPy's handle
    (:func:`_libcublas`): each of CuPy's cuBLAS wrappers sets the handle's
    stream to the current one first, which CuPy refuses while a stream
    captures. The compute type is ``CUBLAS_COMPUTE_64F``,
    ``CUBLAS_COMPUTE_32F`` or ``CUBLAS_COMPUTE_32F_FAST_TF32`` (the TF32
    choice as above), ``CUBLAS_COMPUTE_32F`` for 16-bit inputs.
    """
    import cupy
    from cupy import cublas
    from cupy.cuda import cublas as lib
    from cupy.cuda import device

    bf16 = a.dtype.name == "bfloat16"
    half = bf16 or a.dtype == numpy.float16
    tf32 = math_mode == "tf32" or (math_mode == "default" and cupy_tf32())
    if _capturing():  # every CuPy cuBLAS call sets the handle's stream, which CuPy refuses under capture
        compute = (_CUBLAS_COMPUTE_64F if a.dtype == numpy.float64 else
                   _CUBLAS_COMPUTE_32F_FAST_TF32 if tf32 and a.dtype == numpy.float32 else _CUBLAS_COMPUTE_32F)
        _gemm_ex(a, b, c, alpha, beta, compute, raw=True)
        return
    if alpha == 1 and beta == 0 and math_mode == "default" and c.dtype == a.dtype and not bf16:
        cupy.matmul(a, b, out=c)  # exactly what a CuPy user's own product does (float16: 32F compute)
        return
    if half:
        _gemm_ex(a, b, c, alpha, beta)
        return
    if not (tf32 and c.dtype.char in "fF"):
        cublas.gemm("N", "N", a, b, out=c, alpha=alpha, beta=beta)
        return
    handle = device.get_cublas_handle()
    old = lib.getMathMode(handle)
    lib.setMathMode(handle, lib.CUBLAS_TF32_TENSOR_OP_MATH)
    try:
        cublas.gemm("N", "N", a, b, out=c, alpha=alpha, beta=beta)
    finally:
        lib.setMathMode(handle, old)


# cudaDataType_t values (library_types.h); CuPy's runtime module names the first two.
_CUDA_R_32F, _CUDA_R_64F, _CUDA_R_16F, _CUDA_R_16BF = 0, 1, 2, 14
# cublasComputeType_t (cublas_api.h) and cublasGemmAlgo_t
_CUBLAS_COMPUTE_32F, _CUBLAS_COMPUTE_64F, _CUBLAS_COMPUTE_32F_FAST_TF32 = 68, 70, 77
_CUBLAS_GEMM_DEFAULT_TENSOR_OP = 99
_CUBLAS_STATUS = {1: "CUBLAS_STATUS_NOT_INITIALIZED", 3: "CUBLAS_STATUS_ALLOC_FAILED",
                  7: "CUBLAS_STATUS_INVALID_VALUE", 8: "CUBLAS_STATUS_ARCH_MISMATCH",
                  13: "CUBLAS_STATUS_EXECUTION_FAILED", 14: "CUBLAS_STATUS_INTERNAL_ERROR",
                  15: "CUBLAS_STATUS_NOT_SUPPORTED"}


def _cuda_type(dtype) -> int:
    if dtype == numpy.float32:
        return _CUDA_R_32F
    if dtype == numpy.float64:
        return _CUDA_R_64F
    if dtype == numpy.float16:
        return _CUDA_R_16F
    if dtype.name == "bfloat16":
        return _CUDA_R_16BF
    raise TypeError(f"cublasGemmEx: no CUDA data type for {dtype}")


def _gemm_ex(a, b, c, alpha, beta, compute: int = _CUBLAS_COMPUTE_32F, raw: bool = False) -> None:
    """``c = alpha * a @ b + beta * c`` by ``cublasGemmEx`` (half precision: float32 compute).

    ``compute`` is the ``cublasComputeType_t``; ``raw`` calls cuBLAS through
    :func:`_libcublas` instead of CuPy's wrapper (which sets the handle's
    stream: not under a capture).

    Row-major operands are the column-major transposes: ``c.T = b.T @ a.T``.
    A C-contiguous operand is its own transpose in column-major order
    (``CUBLAS_OP_N``); an F-contiguous one (a transposed view, as the
    backward pass's ``a.T`` and ``w.T``) is passed as it lies with
    ``CUBLAS_OP_T``, so no operand is copied; only other layouts are. ``alpha``
    and ``beta`` are float32 host scalars (the handle's default pointer mode,
    which CuPy restores after every call of its own).
    """
    import cupy
    from cupy.cuda import cublas as lib
    from cupy.cuda import device

    if not c.flags.c_contiguous:
        raise ValueError("gemm: c must be C-contiguous")

    def operand(x):
        """(array, op, ld) of a row-major operand for the swapped column-major call."""
        if x.flags.c_contiguous:
            return x, lib.CUBLAS_OP_N, max(1, x.shape[1])
        if x.flags.f_contiguous:
            return x, lib.CUBLAS_OP_T, max(1, x.shape[0])
        x = cupy.ascontiguousarray(x)
        return x, lib.CUBLAS_OP_N, max(1, x.shape[1])

    m, k = a.shape
    n = b.shape[1]
    (a, opa, lda), (b, opb, ldb) = operand(a), operand(b)
    scalar = numpy.float64 if compute == _CUBLAS_COMPUTE_64F else numpy.float32  # the compute type's precision
    al, be = numpy.array(alpha, scalar), numpy.array(beta, scalar)
    args = (device.get_cublas_handle(), opb, opa, n, m, k,
            al.ctypes.data, b.data.ptr, _cuda_type(b.dtype), ldb, a.data.ptr, _cuda_type(a.dtype), lda,
            be.ctypes.data, c.data.ptr, _cuda_type(c.dtype), max(1, n), compute, _CUBLAS_GEMM_DEFAULT_TENSOR_OP)
    if not raw:
        lib.gemmEx(*args)
        return
    status = _libcublas()[0](*args)
    if status:
        raise RuntimeError(f"cublasGemmEx failed: {_CUBLAS_STATUS.get(status, f'status {status}')}")


_LIBCUBLAS: list = []


def _libcublas():
    """``cublasGemmEx`` of the cuBLAS library CuPy loaded, through ``ctypes``; or None and why. Not collective.

    The library is the one already mapped into this process (found in
    ``/proc/self/maps`` once CuPy has made its cuBLAS handle, which loads
    it), never another copy: CuPy's handle is only valid in the library that
    made it. Cached. Needs the current device (a GPU rank after
    :func:`hpcgpu.init`).

    Returns
    -------
    (callable or None, str)
        ``cublasGemmEx`` with its C signature (cuBLAS 11 and later), or
        None and the reason (cuBLAS not loadable, not found among the
        process's libraries, no such symbol).
    """
    if _LIBCUBLAS:
        return _LIBCUBLAS[0]
    import ctypes

    found = None, "libcublas is not among this process's libraries (/proc/self/maps)"
    try:
        from cupy.cuda import device

        device.get_cublas_handle()  # the library is loaded by now, even where CuPy loads it lazily
        with open("/proc/self/maps") as f:  # address perms offset dev inode [path]
            paths = {fields[5].strip() for fields in (line.split(None, 5) for line in f) if len(fields) == 6}
        for path in sorted(paths):
            if os.path.basename(path).startswith("libcublas.so"):
                fn = ctypes.CDLL(path).cublasGemmEx
                fn.restype = ctypes.c_int
                i, p = ctypes.c_int, ctypes.c_void_p
                fn.argtypes = [p, i, i, i, i, i, p, p, i, i, p, i, i, p, p, i, i, i, i]
                found = fn, ""
                break
    except Exception as e:  # cuBLAS missing, /proc unreadable, an old cuBLAS without the symbol
        found = None, f"cuBLAS through ctypes: {_why(e)}"
    _LIBCUBLAS.append(found)
    return found


# ---------------------------------------------------------------------------
# CUDA graphs
# ---------------------------------------------------------------------------

_CAPTURE = threading.local()  # .depth > 0 inside capture(): gemm() calls cuBLAS without setting its stream


def _capturing() -> bool:
    return getattr(_CAPTURE, "depth", 0) > 0


def graphs_available() -> tuple[bool, str]:
    """Whether this process can capture CUDA graphs, and why not. Not collective.

    Returns
    -------
    (bool, str)
        True and ``""`` when CuPy has stream capture
        (``cupy.cuda.Stream.begin_capture``, CuPy 10 and later) on CUDA;
        else False and the reason (no CuPy, a CuPy without it, ROCm, no
        cuBLAS to call through ``ctypes``: :func:`_libcublas`).
    """
    cupy = cupy_or_none()
    if cupy is None:
        return False, "no CuPy"
    if not hasattr(cupy.cuda.Stream, "begin_capture"):
        return False, f"CuPy {getattr(cupy, '__version__', '?')} has no stream capture"
    if getattr(cupy.cuda.runtime, "is_hip", False):
        return False, "ROCm (CuPy does not capture on HIP)"
    fn, why = _libcublas()
    return fn is not None, why


def capture(fn, stream=None):
    """Capture the device work of ``fn()`` into a CUDA graph; nothing of it runs. Not collective.

    ``fn`` is called once, with ``stream`` (a non-blocking stream) current
    and capturing (CuPy's relaxed mode). Before the capture the cuBLAS
    handle's stream is set to it, and after it put back: CuPy's cuBLAS
    wrappers set the handle's stream to the current one on every call,
    which CuPy refuses during a capture, so :func:`gemm` calls
    ``cublasGemmEx`` itself meanwhile (:func:`_libcublas`), on the handle's
    stream. Every allocation made during the capture comes from the current
    allocator and is held for as long as the graph is (returned with it): a
    graph names raw addresses, and a block given back to the pool would be
    written by every replay after it was handed to another array.

    Parameters
    ----------
    fn : callable
        The work: kernels and cuBLAS calls only (no host synchronization, no
        copy to or from the host, no MPI; CUDA refuses a synchronization
        during a capture, and CuPy the copies).
    stream : cupy.cuda.Stream, optional
        Non-blocking; a new one by default. Capture on the same stream
        again to reuse the pool's blocks of an earlier graph.

    Returns
    -------
    graph : cupy.cuda.graph.Graph
        ``graph.launch()`` runs the work on the current stream.
    held : list of cupy.cuda.MemoryPointer
        The blocks allocated during the capture; keep them with the graph.

    Raises
    ------
    Exception
        Whatever ``fn`` or CUDA raised; the capture is ended and the handle's
        stream put back first.

    Notes
    -----
    CUDA Programming Guide, "CUDA Graphs: Creating a Graph Using Stream
    Capture"; cuBLAS documentation, "CUDA Graphs Support" (cuBLAS calls may
    be captured; host-pointer ``alpha`` and ``beta`` are read at capture).
    """
    import cupy
    from cupy.cuda import cublas as lib
    from cupy.cuda import device

    stream = stream or cupy.cuda.Stream(non_blocking=True)
    handle = device.get_cublas_handle()
    before = lib.getStream(handle)
    base = cupy.cuda.get_allocator()
    held = []

    def hold(size):
        mp = base(size)
        held.append(mp)
        return mp

    lib.setStream(handle, stream.ptr)
    try:
        with stream:
            stream.begin_capture()
            _CAPTURE.depth = getattr(_CAPTURE, "depth", 0) + 1
            try:
                with cupy.cuda.using_allocator(hold):
                    fn()
            except BaseException:
                try:
                    stream.end_capture()
                except Exception:  # the capture was invalidated by what went wrong: that error is the one
                    pass
                raise
            finally:
                _CAPTURE.depth -= 1
            graph = stream.end_capture()
    finally:
        lib.setStream(handle, before)
    return graph, held
