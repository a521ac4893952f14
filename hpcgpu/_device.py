"""The only module that touches CuPy. Everything here is a no-op on NumPy.

CuPy is imported lazily, so a CPU-only install never needs it. What lives
here: finding a usable GPU (and saying why not), binding a rank to one, the
synchronize that must come before MPI touches device memory, pinned staging
buffers (one growable buffer per slot), the cuBLAS GEMM, and the capture
of CUDA graphs (with hpcgpu's own cuBLAS handle, through nvmath-python).
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

    Inside :func:`capture` every product is one ``cublasGemmEx`` on
    hpcgpu's own cuBLAS handle (:class:`CaptureBlas`, through
    nvmath-python), whose stream is the capturing one; no CuPy cuBLAS
    function is called then: each of CuPy's wrappers sets the handle's
    stream to the current one first, which CuPy refuses while a stream
    captures. The compute type is ``CUBLAS_COMPUTE_64F``,
    ``CUBLAS_COMPUTE_32F`` or ``CUBLAS_COMPUTE_32F_FAST_TF32`` (the TF32
    choice as above), ``CUBLAS_COMPUTE_32F`` for 16-bit inputs.

    Raises
    ------
    TypeError
        Under a capture, a dtype ``cublasGemmEx`` is not called with here
        (complex).
    nvmath.bindings.cublas.cuBLASError
        Under a capture, a status cuBLAS returned.
    """
    bf16 = a.dtype.name == "bfloat16"
    half = bf16 or a.dtype == numpy.float16
    tf32 = math_mode == "tf32" or (math_mode == "default" and cupy_tf32())
    blas = getattr(_CAPTURE, "blas", None)
    if blas is not None:  # every CuPy cuBLAS call sets the handle's stream, which CuPy refuses under capture
        compute = (_CUBLAS_COMPUTE_64F if a.dtype == numpy.float64 else
                   _CUBLAS_COMPUTE_32F_FAST_TF32 if tf32 and a.dtype == numpy.float32 else _CUBLAS_COMPUTE_32F)
        _gemm_ex(a, b, c, alpha, beta, compute, blas=blas)
        return
    import cupy
    from cupy import cublas
    from cupy.cuda import cublas as lib
    from cupy.cuda import device

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
    lib.setMathMode(handle, _CUBLAS_TF32_TENSOR_OP_MATH)  # CuPy names only DEFAULT and TENSOR_OP
    try:
        cublas.gemm("N", "N", a, b, out=c, alpha=alpha, beta=beta)
    finally:
        lib.setMathMode(handle, old)


# cudaDataType_t values (library_types.h); CuPy's runtime module names the first two.
_CUDA_R_32F, _CUDA_R_64F, _CUDA_R_16F, _CUDA_R_16BF = 0, 1, 2, 14
# cublasOperation_t, cublasComputeType_t, cublasGemmAlgo_t and cublasMath_t (cublas_api.h); nvmath-python's
# nvmath.bindings.cublas names them Operation, ComputeType, GemmAlgo and Math.
_CUBLAS_OP_N, _CUBLAS_OP_T = 0, 1
_CUBLAS_COMPUTE_32F, _CUBLAS_COMPUTE_64F, _CUBLAS_COMPUTE_32F_FAST_TF32 = 68, 70, 77
_CUBLAS_GEMM_DEFAULT_TENSOR_OP = 99
_CUBLAS_DEFAULT_MATH, _CUBLAS_TF32_TENSOR_OP_MATH = 0, 3


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


def _gemm_ex(a, b, c, alpha, beta, compute: int = _CUBLAS_COMPUTE_32F, blas: CaptureBlas | None = None) -> None:
    """``c = alpha * a @ b + beta * c`` by ``cublasGemmEx`` (half precision: float32 compute).

    ``compute`` is the ``cublasComputeType_t``. ``blas`` calls cuBLAS on
    hpcgpu's own handle through nvmath-python (inside :func:`capture`)
    instead of CuPy's wrapper on CuPy's handle (which sets the handle's
    stream: refused under a capture).

    Row-major operands are the column-major transposes: ``c.T = b.T @ a.T``.
    A C-contiguous operand is its own transpose in column-major order
    (``CUBLAS_OP_N``); an F-contiguous one (a transposed view, as the
    backward pass's ``a.T`` and ``w.T``) is passed as it lies with
    ``CUBLAS_OP_T``, so no operand is copied; only other layouts are. ``alpha``
    and ``beta`` are host scalars of the compute type's precision (the
    handle's default pointer mode, which CuPy restores after every call of
    its own and hpcgpu's handle never leaves), read by cuBLAS during the
    call: under a capture their values are part of the graph.
    """
    import cupy

    if not c.flags.c_contiguous:
        raise ValueError("gemm: c must be C-contiguous")

    def operand(x):
        """(array, op, ld) of a row-major operand for the swapped column-major call."""
        if x.flags.c_contiguous:
            return x, _CUBLAS_OP_N, max(1, x.shape[1])
        if x.flags.f_contiguous:
            return x, _CUBLAS_OP_T, max(1, x.shape[0])
        x = cupy.ascontiguousarray(x)
        return x, _CUBLAS_OP_N, max(1, x.shape[1])

    m, k = a.shape
    n = b.shape[1]
    (a, opa, lda), (b, opb, ldb) = operand(a), operand(b)
    scalar = numpy.float64 if compute == _CUBLAS_COMPUTE_64F else numpy.float32  # the compute type's precision
    al, be = numpy.array(alpha, scalar), numpy.array(beta, scalar)  # alive until cuBLAS has read them
    args = (opb, opa, n, m, k,
            al.ctypes.data, b.data.ptr, _cuda_type(b.dtype), ldb, a.data.ptr, _cuda_type(a.dtype), lda,
            be.ctypes.data, c.data.ptr, _cuda_type(c.dtype), max(1, n), compute, _CUBLAS_GEMM_DEFAULT_TENSOR_OP)
    if blas is not None:
        blas.lib.gemm_ex(blas.handle, *args)
        return
    from cupy.cuda import cublas as lib
    from cupy.cuda import device

    lib.gemmEx(device.get_cublas_handle(), *args)


# ---------------------------------------------------------------------------
# CUDA graphs
# ---------------------------------------------------------------------------

NO_NVMATH = "no nvmath-python (pip install 'hpcgpu[gpu]')"

WORKSPACE_HOPPER = 32 << 20
"""Bytes of :class:`CaptureBlas`'s cuBLAS workspace on compute capability 9.0 and newer.

cuBLAS documentation, ``cublasSetWorkspace``: the recommended user workspace is 32 MiB on Hopper, 4 MiB
(:data:`WORKSPACE_OTHER`) on other architectures; newer architectures get Hopper's size.
"""
WORKSPACE_OTHER = 4 << 20
"""Bytes of :class:`CaptureBlas`'s cuBLAS workspace before compute capability 9.0 (see :data:`WORKSPACE_HOPPER`)."""


def _nvcublas():
    """nvmath-python's cuBLAS binding, ``nvmath.bindings.cublas``, or None and why not. Not collective.

    Returns
    -------
    (module or None, str)
        The module and ``""``; or None and the reason: nvmath-python not
        installed (:data:`NO_NVMATH`), or its import failing (a CUDA
        library or a dependency missing), in its own words.
    """
    try:
        from nvmath.bindings import cublas as nvcublas
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] == "nvmath":
            return None, NO_NVMATH
        return None, f"nvmath-python does not import ({_why(e)})"
    except Exception as e:  # noqa: BLE001 - a library missing at import, a broken install: the reason says it
        return None, f"nvmath-python does not import ({_why(e)})"
    return nvcublas, ""


class CaptureBlas:
    """The cuBLAS handle hpcgpu owns on one device, for the GEMMs captured by :func:`capture`. Not collective.

    A cuBLAS handle made with nvmath-python's low-level binding
    (``nvmath.bindings.cublas``: plain integers for handles, pointers and
    enums, and no check of its own on a capturing stream, unlike CuPy's
    wrappers), the default math mode (so the compute type alone decides on
    TF32), and a workspace from CuPy's pool (:data:`WORKSPACE_HOPPER` or
    :data:`WORKSPACE_OTHER` bytes) that the handle uses for every call:
    inside a capture cuBLAS would otherwise take its workspace with
    stream-ordered allocations, which become memory nodes of the graph. Made on first use by :func:`capture`
    (:func:`capture_blas`), one per device, and kept, workspace included,
    for the life of the process: the graphs captured with it use its
    workspace at every replay, so graphs captured on one device should not
    be replayed concurrently on several streams.

    Parameters
    ----------
    device_id : int
        The current CUDA device.

    Attributes
    ----------
    lib : module
        ``nvmath.bindings.cublas``.
    handle : int
        The ``cublasHandle_t``.
    workspace : cupy.ndarray
        ``nbytes`` bytes (uint8).
    nbytes : int
    device_id : int

    Raises
    ------
    ImportError
        nvmath-python is not installed, or does not import.
    nvmath.bindings.cublas.cuBLASError
        cuBLAS refused to make the handle (``CUBLAS_STATUS_NOT_INITIALIZED``:
        no CUDA context or cuBLAS library).
    cupy.cuda.memory.OutOfMemoryError
        No room for the workspace.

    Notes
    -----
    cuBLAS documentation, "CUDA Graphs Support" (cuBLAS calls may be
    captured; with ``CUBLAS_POINTER_MODE_HOST`` the values of ``alpha`` and
    ``beta`` are captured; ``cublasSetWorkspace`` keeps cuBLAS from
    allocating during a capture) and ``cublasSetWorkspace`` (the recommended
    sizes; ``cublasSetStream`` resets the workspace to cuBLAS's own pool);
    nvmath-python documentation, "nvmath.bindings.cublas".
    """

    def __init__(self, device_id: int):
        import cupy
        from nvmath.bindings import cublas as nvcublas

        major = int(cupy.cuda.Device(device_id).compute_capability) // 10
        self.nbytes = WORKSPACE_HOPPER if major >= 9 else WORKSPACE_OTHER
        self.workspace = cupy.empty(self.nbytes, dtype=cupy.uint8)
        self.lib = nvcublas
        self.device_id = device_id
        self.handle = nvcublas.create()
        try:
            nvcublas.set_math_mode(self.handle, _CUBLAS_DEFAULT_MATH)
        except BaseException:
            nvcublas.destroy(self.handle)
            raise

    def stream(self) -> int:
        """The pointer of the handle's stream (``cublasGetStream``; 0 for the legacy default stream)."""
        return int(self.lib.get_stream(self.handle))

    def use_stream(self, stream_ptr: int) -> None:
        """Run the handle's calls on the stream ``stream_ptr``, with the workspace.

        The workspace is set after the stream: ``cublasSetStream`` puts the
        handle back on cuBLAS's own workspace pool.

        Parameters
        ----------
        stream_ptr : int
            ``cupy.cuda.Stream.ptr`` (0 for the legacy default stream).
        """
        self.lib.set_stream(self.handle, stream_ptr)
        self.lib.set_workspace(self.handle, self.workspace.data.ptr, self.nbytes)


_BLAS: dict[int, CaptureBlas] = {}
_BLAS_LOCK = threading.Lock()


def capture_blas() -> CaptureBlas:
    """The cuBLAS handle hpcgpu owns on the current device (:class:`CaptureBlas`), made on first use. Not collective.

    Raises
    ------
    ImportError, nvmath.bindings.cublas.cuBLASError, cupy.cuda.memory.OutOfMemoryError
        As :class:`CaptureBlas`; nothing is kept, the next call tries again.
    """
    dev = current_device()
    with _BLAS_LOCK:
        blas = _BLAS.get(dev)
        if blas is None:
            blas = _BLAS[dev] = CaptureBlas(dev)
    return blas


_CAPTURE = threading.local()  # .blas inside capture(): the handle gemm() calls cuBLAS on


def _capturing() -> bool:
    return getattr(_CAPTURE, "blas", None) is not None


def graphs_available() -> tuple[bool, str]:
    """Whether this process can capture CUDA graphs, and why not. Not collective.

    Returns
    -------
    (bool, str)
        True and ``""`` when CuPy has stream capture
        (``cupy.cuda.Stream.begin_capture``, CuPy 10 and later) on CUDA and
        nvmath-python's cuBLAS binding imports (the GEMMs of a capture go
        through it: :class:`CaptureBlas`); else False and the reason (no
        CuPy, a CuPy without it, ROCm, :data:`NO_NVMATH`, nvmath-python
        failing to import).
    """
    cupy = cupy_or_none()
    if cupy is None:
        return False, "no CuPy"
    if not hasattr(cupy.cuda.Stream, "begin_capture"):
        return False, f"CuPy {getattr(cupy, '__version__', '?')} has no stream capture"
    if getattr(cupy.cuda.runtime, "is_hip", False):
        return False, "ROCm (CuPy does not capture on HIP)"
    lib, why = _nvcublas()
    return lib is not None, why


def capture(fn, stream=None):
    """Capture the device work of ``fn()`` into a CUDA graph; nothing of it runs. Not collective.

    ``fn`` is called once, with ``stream`` (a non-blocking stream) current
    and capturing (CuPy's relaxed mode). Before the capture begins, hpcgpu's
    own cuBLAS handle (:func:`capture_blas`) is put on ``stream`` with its
    workspace, and after it ends back on the stream it had: CuPy's cuBLAS
    wrappers set their handle's stream to the current one on every call,
    which CuPy refuses during a capture, so :func:`gemm` calls
    ``cublasGemmEx`` on hpcgpu's handle meanwhile, through nvmath-python.
    Every allocation made during the capture comes from the current
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
    ImportError
        nvmath-python is not installed or does not import
        (:func:`graphs_available` says so beforehand).
    Exception
        Whatever ``fn``, cuBLAS or CUDA raised; the capture is ended and
        the handle's stream put back first.

    Notes
    -----
    CUDA Programming Guide, "CUDA Graphs: Creating a Graph Using Stream
    Capture"; cuBLAS documentation, "CUDA Graphs Support" (cuBLAS calls may
    be captured; host-pointer ``alpha`` and ``beta`` are read at capture;
    a user workspace keeps cuBLAS from allocating in the graph).
    """
    import cupy

    stream = stream or cupy.cuda.Stream(non_blocking=True)
    blas = capture_blas()
    before = blas.stream()
    base = cupy.cuda.get_allocator()
    held = []

    def hold(size):
        mp = base(size)
        held.append(mp)
        return mp

    blas.use_stream(stream.ptr)
    try:
        with stream:
            stream.begin_capture()
            outer, _CAPTURE.blas = getattr(_CAPTURE, "blas", None), blas
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
                _CAPTURE.blas = outer
            graph = stream.end_capture()
    finally:
        blas.use_stream(before)
    return graph, held
