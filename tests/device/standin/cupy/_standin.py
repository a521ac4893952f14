"""State and test hooks of the CuPy stand-in (a test harness; no GPU needed).

What it models
--------------
Every device allocation is two host byte buffers. ``future`` is where the
stand-in's "kernels" compute, eagerly, in stream order. ``landed`` is what
anything outside the stream sees: the pointer of ``__cuda_array_interface__``
(what MPI reads and writes) and host reads (``get``). A write by a kernel is
queued on the current stream and reaches ``landed`` only when that stream
(or an event recorded after it, or the device) is synchronized. New memory
is poisoned (NaN for floating kinds, 0x5A bytes otherwise). An allocation
whose pointer was handed out is *exposed*: before a kernel touches it, the
bytes that no kernel has pending are re-read from ``landed`` (MPI may have
written there).

What was mirrored from where (CuPy v13.6.0 and main, mpi4py main)
-----------------------------------------------------------------
- ``cupy/_core/core.pyx``: ``get`` (argument checks, their messages and
  order; sync of the given or current stream; no sync for size 0),
  ``set``, ``__array__`` (TypeError), ``__cuda_array_interface__`` (v3,
  ``strides`` None when C-contiguous, ``data`` (0, False) when empty,
  ``stream`` = current stream pointer, 1 for the legacy null stream),
  ``fill`` (memset only for 0 on C-contiguous arrays), ``__nonzero__``,
  ``__iter__``, ``__len__``, ``item``, ``__int__``/``__float__`` (allowed,
  they call ``get()``), ``__array_ufunc__``/``__array_function__`` dispatch,
  contiguity flags of empty arrays.
- ``cupy/_core/_kernel.pyx``: ``Unsupported type <class ...>`` for host
  arrays in kernels, ``Output arguments must be cupy.ndarray``, the peer
  access check between devices.
- ``cupy/_core/_routines_indexing.pyx``: ``a[...] = v`` with a non-cupy
  ``v`` goes to ``fill`` (ValueError for non-scalar NumPy arrays); host
  arrays are accepted as (advanced) indices.
- ``cupy/cublas.py``: ``gemm``, ``_decide_ld_and_trans``,
  ``_change_order_if_necessary``, ``_get_scalar_ptr``, ``_trans_to_cublas_op``
  (m, n, k, lda, ldb, ldc and the operand swap for C-ordered output).
- ``cupy_backends/cuda/libs/cublas.pyx``: ``CUBLASError(status)`` text.
- ``cupy/_core/_routines_linalg.pyx``: ``get_compute_type`` (``CUPY_TF32``
  read once per dtype class at first use, 'fF' only),
  ``tensordot_core_v11`` (cublas compute type), ``dot``/``matmul`` (empty
  operands: zero fill without cuBLAS; 1x1 results and integers: kernels).
- ``cupy_backends/cuda/api/runtime.pyx``: ``CUDARuntimeError`` text
  ``'<name>: <string>'``.
- ``cupy_backends/cuda/_softlink.pyx`` and ``libs/_cnvrtc.pxi``: the NVRTC
  load failure message.
- ``cupy/__init__.py`` and ``cupy/_environment.py``: the import failure text.
- ``cupy/cuda/pinned_memory.pyx``: pool rounding (512-byte units, next power
  of two), ``PinnedMemoryPointer`` (buffer protocol, ``ptr``, ``size()``),
  ``n_free_blocks``/``free_all_blocks``.
- ``cupy/cuda/memory.pyx``: ``OutOfMemoryError`` text, 512-byte rounding;
  ``MemoryPool.malloc``, ``get_allocator``, ``using_allocator``; the
  refusal of host-to-device and device-to-host copies on a capturing stream.
- ``cupy/cuda/stream.pyx`` and ``graph.pyx``: ``begin_capture`` (not on the
  legacy stream), ``end_capture``, ``is_capturing``, ``Graph.launch`` on the
  current or a given stream; ``cupy_backends/cuda/libs/cublas.pyx``:
  ``setStream`` raising ``NotImplementedError`` on a capturing stream (so
  ``cupy.matmul`` does), ``getStream``; ``cupy/cublas.py``: ``gemm`` never
  sets the handle's stream (it runs on the handle's last one). CUDA's
  ``cudaErrorStreamCaptureUnsupported`` for a synchronization during a
  capture, which invalidates it. See "CUDA graphs" below.
- ``cupy/cuda/device.pyx``: ``Device`` (``compute_capability`` sets the
  device, so it creates a context).
- mpi4py ``src/mpi4py/MPI.src/asbuffer.pxi``, ``ascaibuf.pxi``,
  ``asdlpack.pxi``: buffer protocol first, then ``__dlpack__`` (called with
  ``stream=-1``: no synchronization), then ``__cuda_array_interface__``
  (the ``stream`` key is ignored, strides must be contiguous). So neither
  real CuPy nor the stand-in is synchronized by mpi4py.

Not modeled
-----------
- Races between streams on the same bytes: kernels read ``future`` whatever
  stream wrote it, and landing a range copies its latest bytes.
- Pinned-memory races: ``set`` reads the host array at the call; only
  ``get(blocking=False)`` is deferred to the stream's synchronize.
- Work finishing on its own: nothing lands without a synchronize, except
  that polling ``Stream.done`` / ``Event.done`` finishes it.
- GPU numerics (reduction order, FMA, cuBLAS algorithms); only TF32 input
  rounding of ``CUPY_TF32`` matmuls is emulated.
- Out-of-bounds ``take``/fancy indices raise ``IndexError`` (a GPU wraps or
  reads garbage); same-dtype copies need no NVRTC here (CuPy compiles
  ``elementwise_copy``); batched-GEMM specifics, IPC, peer access, streams of
  one device used on another.

The public helpers of this module are for tests: :func:`contexts`,
:func:`pinned_stats`, :func:`pinned_allocations_total`,
:func:`peak_device_bytes`, :func:`reset_peak`, :func:`gemm_log`,
:func:`clear_gemm_log`, :func:`counters`, :func:`reset_counters`.
"""

from __future__ import annotations

import itertools
import os
import threading
import weakref

import numpy

# ---------------------------------------------------------------------------
# configuration, read once at ``import cupy`` (CUDA reads its variables at
# initialization, once per process)
# ---------------------------------------------------------------------------

FAIL = frozenset(s.strip() for s in os.environ.get("HPCGPU_STANDIN_FAIL", "").split(",") if s.strip())
N_PHYSICAL = int(os.environ.get("HPCGPU_STANDIN_DEVICES", "1"))
DEVICE_MEMORY = int(os.environ.get("HPCGPU_STANDIN_MEMORY", str(16 << 30)))
PTDS = os.environ.get("CUPY_CUDA_PER_THREAD_DEFAULT_STREAM", "0") == "1"
STRICT_HOST = os.environ.get("HPCGPU_STANDIN_STRICT_HOST", "0") == "1"
COMPUTE_CAPABILITY = (9, 0)
RUNTIME_VERSION = 12080
DRIVER_VERSION = 12080 if "driver" not in FAIL else 11040

NVRTC_MESSAGE = ("CuPy failed to load libnvrtc.so.12: OSError: libnvrtc.so.12: "
                 "cannot open shared object file: No such file or directory")
CUBLAS_MESSAGE = "libcublas.so.12: cannot open shared object file: No such file or directory"


def _parse_visible(n: int) -> list[int]:
    # CUDA: the listed ordinals up to the first invalid (or repeated) one.
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return list(range(n))
    out: list[int] = []
    for tok in value.split(","):
        try:
            i = int(tok.strip())
        except ValueError:
            break
        if i < 0 or i >= n or i in out:
            break
        out.append(i)
    return out


VISIBLE = _parse_visible(N_PHYSICAL)

# ---------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------

_CUDA_ERRORS = {
    2: ("cudaErrorMemoryAllocation", "out of memory"),
    35: ("cudaErrorInsufficientDriver", "CUDA driver version is insufficient for CUDA runtime version"),
    100: ("cudaErrorNoDevice", "no CUDA-capable device is detected"),
    101: ("cudaErrorInvalidDevice", "invalid device ordinal"),
    400: ("cudaErrorInvalidResourceHandle", "invalid resource handle"),
    600: ("cudaErrorNotReady", "device not ready"),
    401: ("cudaErrorIllegalState", "the operation cannot be performed in the present state"),
    700: ("cudaErrorIllegalAddress", "an illegal memory access was encountered"),
    900: ("cudaErrorStreamCaptureUnsupported", "operation not permitted when stream is capturing"),
    901: ("cudaErrorStreamCaptureInvalidated", "operation failed due to a previous error during capture"),
}


class CUDARuntimeError(RuntimeError):
    """A CUDA runtime error, as ``cupy_backends.cuda.api.runtime.CUDARuntimeError``.

    Parameters
    ----------
    status : int
        The ``cudaError_t`` value.
    """

    def __init__(self, status: int):
        self.status = status
        name, msg = _CUDA_ERRORS.get(status, (f"cudaError{status}", "unknown error"))
        super().__init__(f"{name}: {msg}")

    def __reduce__(self):
        return (type(self), (self.status,))


def check_host_conversion(what: str) -> None:
    """With ``HPCGPU_STANDIN_STRICT_HOST=1``, refuse what CuPy allows: ``float(a)``, ``bool(a)``, ``iter(a)``..."""
    if STRICT_HOST:
        raise TypeError(f"{what} of a device array (refused by HPCGPU_STANDIN_STRICT_HOST=1; "
                        "use .get() or .item() explicitly)")


def check_nvrtc() -> None:
    """Raise as CuPy does when a kernel must be compiled and NVRTC is missing."""
    if "nvrtc" in FAIL:
        raise RuntimeError(NVRTC_MESSAGE)


def check_cublas() -> None:
    """Raise as CuPy v13 does when ``libcublas`` cannot be loaded (on every use)."""
    if "cublas" in FAIL:
        raise ImportError(CUBLAS_MESSAGE)


# ---------------------------------------------------------------------------
# devices and contexts
# ---------------------------------------------------------------------------

_tls = threading.local()
_contexts: set[int] = set()


def device_count() -> int:
    """``cudaGetDeviceCount``: raises for a bad driver or no visible device."""
    if "driver" in FAIL:
        raise CUDARuntimeError(35)
    if not VISIBLE:
        raise CUDARuntimeError(100)
    return len(VISIBLE)


def check_device(i: int) -> int:
    """Raise ``cudaErrorInvalidDevice`` unless ``i`` is a visible ordinal."""
    n = device_count()
    if not 0 <= int(i) < n:
        raise CUDARuntimeError(101)
    return int(i)


def current_device() -> int:
    """This thread's current device ordinal (0 until set)."""
    return getattr(_tls, "device", 0)


def set_current_device(i: int) -> None:
    """``cudaSetDevice``: since CUDA 12 it also creates the primary context."""
    ensure_context(i)
    _tls.device = int(i)


def ensure_context(i: int | None = None) -> int:
    """Create (record) the primary context of device ``i`` (current by default)."""
    i = current_device() if i is None else i
    check_device(i)
    _contexts.add(int(i))
    return int(i)


def contexts(physical: bool = False) -> list[int]:
    """Devices on which this process created a CUDA context, sorted.

    Parameters
    ----------
    physical : bool
        Map the ordinals through ``CUDA_VISIBLE_DEVICES`` to the node's
        device numbers.
    """
    return sorted(VISIBLE[i] for i in _contexts) if physical else sorted(_contexts)


# ---------------------------------------------------------------------------
# allocations, streams, landing
# ---------------------------------------------------------------------------

_write_ids = itertools.count(1)


def poison(buf: numpy.ndarray, dtype) -> None:
    """Fill byte buffer ``buf`` with NaN (floating kinds) or 0x5A bytes."""
    dtype = numpy.dtype(dtype)
    if buf.size and dtype.kind in "fc" and buf.size % dtype.itemsize == 0:
        buf.view(dtype)[...] = numpy.nan
    else:
        buf[...] = 0x5A


_allocs: weakref.WeakSet = weakref.WeakSet()  # every live allocation, for raw device pointers


def find_pointer(ptr: int) -> tuple[Alloc, int]:
    """The allocation holding device address ``ptr`` (as ``data.ptr`` gives it) and the byte offset.

    Raises
    ------
    CUDARuntimeError
        ``cudaErrorIllegalAddress``: no live allocation holds ``ptr``.
    """
    for al in list(_allocs):
        base = al.landed.__array_interface__["data"][0]
        if base <= ptr < base + al.nbytes:
            return al, ptr - base
    raise CUDARuntimeError(700)


class Alloc:
    """One device allocation: ``future`` (kernels) and ``landed`` (outside) bytes.

    Parameters
    ----------
    nbytes : int
    dtype : numpy.dtype
        Decides the poison.
    device : int
    """

    __slots__ = ("future", "landed", "nbytes", "device", "exposed", "writes", "__weakref__")

    def __init__(self, nbytes: int, dtype, device: int):
        self.nbytes, self.device = int(nbytes), int(device)
        self.future = numpy.empty(self.nbytes, numpy.uint8)
        self.landed = numpy.empty(self.nbytes, numpy.uint8)
        poison(self.future, dtype)
        poison(self.landed, dtype)
        self.exposed = False
        self.writes: dict[int, tuple[int, int]] = {}  # write id -> byte range, not landed yet
        if self.nbytes:
            _allocs.add(self)
            if _captures:
                new_alloc(self)

    def extent(self, view: numpy.ndarray) -> tuple[int, int]:
        """Byte range ``[lo, hi)`` of ``view`` (of ``future``) in this allocation."""
        if view.size == 0:
            return (0, 0)
        start = view.__array_interface__["data"][0] - self.future.__array_interface__["data"][0]
        lo = hi = start
        for n, s in zip(view.shape, view.strides, strict=True):
            if s < 0:
                lo += (n - 1) * s
            else:
                hi += (n - 1) * s
        return (lo, hi + view.itemsize)

    def land(self, wid: int) -> None:
        """Make write ``wid`` visible outside (copy its bytes ``future -> landed``)."""
        r = self.writes.pop(wid, None)
        if r is not None:
            self.landed[r[0]:r[1]] = self.future[r[0]:r[1]]

    def refresh(self) -> None:
        """Exposed memory: take bytes no kernel has pending from ``landed``."""
        if not self.exposed or not self.nbytes:
            return
        if not self.writes:
            self.future[...] = self.landed
            return
        pos = 0
        for lo, hi in sorted(self.writes.values()):
            if lo > pos:
                self.future[pos:lo] = self.landed[pos:lo]
            pos = max(pos, hi)
        if pos < self.nbytes:
            self.future[pos:] = self.landed[pos:]


class Queue:
    """The work of one stream on one device not yet synchronized."""

    def __init__(self, key, blocking: bool):
        self.key, self.blocking = key, blocking
        self.pending: list[tuple[weakref.ref, int]] = []
        self._wids: set[int] = set()
        self.deferred: list = []  # host copies (get(blocking=False)) done at the next sync
        self.syncs = 0
        self.records = 0  # events recorded on the stream so far
        self.done_record = -1  # the last of them waited for: every event recorded before it is complete too

    def add(self, entries) -> None:
        """Queue writes ``(weakref(alloc), write id)`` (each write once)."""
        for e in entries:
            if e[1] not in self._wids:
                self._wids.add(e[1])
                self.pending.append(e)

    def land(self) -> None:
        """Synchronize: every queued write becomes visible, deferred copies run."""
        pending, self.pending = self.pending, []
        self._wids = set()
        for ref, wid in pending:
            alloc = ref()
            if alloc is not None:
                alloc.land(wid)
        deferred, self.deferred = self.deferred, []
        for fn in deferred:
            fn()
        self.syncs += 1


_queues: dict = {}  # (stream uid, device) -> Queue; kept after a stream dies (its work still lands)
NULL_UID = 0


def queue(uid: int, device: int, blocking: bool = True) -> Queue:
    """The queue of stream ``uid`` on ``device``."""
    key = (uid, device)
    q = _queues.get(key)
    if q is None:
        q = _queues[key] = Queue(key, blocking)
    return q


def record_writes(q: Queue, arrays) -> None:
    """Queue on ``q`` the writes of a kernel to ``arrays`` (ndarray stand-ins)."""
    entries = []
    for a in arrays:
        alloc = a._alloc
        lo, hi = alloc.extent(a._f)
        if hi > lo:
            wid = next(_write_ids)
            alloc.writes[wid] = (lo, hi)
            entries.append((weakref.ref(alloc), wid))
    q.add(entries)


def launch_queue(stream) -> Queue:
    """The queue a kernel on ``stream`` goes to, with the legacy stream's implicit ordering.

    A kernel on the legacy null stream waits for earlier work of every
    blocking stream of the device, and a kernel on a blocking stream waits
    for earlier null-stream work (CUDA's legacy default stream semantics;
    off with ``CUPY_CUDA_PER_THREAD_DEFAULT_STREAM=1``).
    """
    dev = current_device() if stream._device is None else stream._device
    q = queue(stream._uid, dev, stream._blocking)
    if PTDS:
        return q
    if stream._uid == NULL_UID:
        for (uid, d), other in _queues.items():
            if d == dev and uid != NULL_UID and other.blocking and other.pending:
                q.add(other.pending)
    elif stream._blocking:
        null = _queues.get((NULL_UID, dev))
        if null is not None and null.pending:
            q.add(null.pending)
    return q


def device_synchronize(dev: int) -> None:
    """Land the work of every stream of device ``dev``."""
    if _captures and capturing_any(dev):
        invalidate_captures(dev)
    count("host_syncs")
    for (_, d), q in list(_queues.items()):
        if d == dev:
            q.land()


def current_stream_stack(dev: int | None = None) -> list:
    """This thread's stack of current streams of device ``dev``."""
    stacks = getattr(_tls, "streams", None)
    if stacks is None:
        stacks = _tls.streams = {}
    return stacks.setdefault(current_device() if dev is None else dev, [])


# ---------------------------------------------------------------------------
# pinned and device memory statistics
# ---------------------------------------------------------------------------

_pinned = {"live": 0, "bytes": 0, "total": 0}
_device_bytes = {"used": {}, "peak": 0}


def pinned_stats() -> tuple[int, int]:
    """``(count, nbytes)`` of live pinned allocations (nbytes rounded as CuPy's pool does)."""
    return (_pinned["live"], _pinned["bytes"])


def pinned_allocations_total() -> int:
    """Number of ``alloc_pinned_memory`` calls (non-empty) ever made by this process."""
    return _pinned["total"]


def device_bytes_in_use() -> int:
    """Bytes of live device allocations on all devices (rounded to 512)."""
    return sum(_device_bytes["used"].values())


def peak_device_bytes() -> int:
    """Highest :func:`device_bytes_in_use` since import or :func:`reset_peak`."""
    return _device_bytes["peak"]


def reset_peak() -> None:
    """Start a new peak at the current use."""
    _device_bytes["peak"] = device_bytes_in_use()


# ---------------------------------------------------------------------------
# what a step costs: launches, host synchronizations, copies to the host
# ---------------------------------------------------------------------------

_counts = {"launches": 0, "host_syncs": 0, "device_to_host": 0, "graph_launches": 0, "nccl_calls": 0}


def count(kind: str) -> None:
    """Add one to counter ``kind``."""
    _counts[kind] += 1


def counters() -> dict:
    """``launches`` (kernels, cuBLAS calls and host-to-device copies enqueued), ``host_syncs``
    (stream, event or device synchronizations the host waited for, blocking ``get`` included)
    , ``device_to_host`` (``get`` calls that copied bytes) and ``graph_launches`` (CUDA graphs
    replayed, each also one launch) and ``nccl_calls`` (NCCL collectives run), since
    :func:`reset_counters`."""
    return dict(_counts)


def reset_counters() -> None:
    """Set every counter to 0."""
    for k in _counts:
        _counts[k] = 0


# ---------------------------------------------------------------------------
# cuBLAS bookkeeping
# ---------------------------------------------------------------------------

_gemm_log: list[dict] = []
_compute_types: list = [None, None, None, None]  # bfloat16, float16, float32, float64 (CuPy's indices)


def log_gemm(entry: dict) -> None:
    """Record one cuBLAS GEMM."""
    _gemm_log.append(entry)


def gemm_log() -> list[dict]:
    """Every cuBLAS GEMM so far: dicts with api, dtype, m, n, k, compute_type, math_mode, ..."""
    return list(_gemm_log)


def clear_gemm_log() -> None:
    """Forget the recorded GEMMs."""
    _gemm_log.clear()


def compute_type(dtype) -> str:
    """CuPy's per-dtype compute type, fixed at first use (``CUPY_TF32`` for 'fF')."""
    char = numpy.dtype(dtype).char
    index = {"e": 1, "f": 2, "F": 2, "d": 3, "D": 3}.get(char)
    if index is None:
        raise TypeError(f"dtype is not supported: {dtype}")
    if _compute_types[index] is None:
        ct = "COMPUTE_TYPE_DEFAULT"
        if char in "fF" and int(os.getenv("CUPY_TF32", "0")) > 0:
            ct = "COMPUTE_TYPE_TF32"  # compute capability >= 8.0
        _compute_types[index] = ct
    return _compute_types[index]


# ---------------------------------------------------------------------------
# CUDA graphs: stream capture and replay
# ---------------------------------------------------------------------------
#
# As on a GPU, nothing captured runs: an operation launched on a capturing
# stream is recorded (the function and its arguments, device arrays held by
# their allocation, weakly) and computed only to get its outputs' shapes; at
# end_capture every byte it wrote is put back as it was. A replay
# (``Graph.launch``) calls each recorded operation again on the same memory,
# on the launch stream: one launch, whatever it holds. A replay that reaches
# memory freed since the capture raises cudaErrorIllegalAddress (on a GPU the
# pool may have handed it to another array: a silent corruption). Only
# operations marked replayable can be captured; any other kernel on a
# capturing stream raises, so that a gap in the stand-in is never a silent
# pass. Synchronizing a capturing stream, or the device, invalidates the
# capture (cudaErrorStreamCaptureUnsupported), as CUDA does.

_captures: dict = {}  # stream uid -> _Capture


class _Capture:
    """One stream's capture: the recorded operations and the bytes to put back."""

    def __init__(self, stream):
        self.stream = stream
        self.records: list = []
        self.saved: dict = {}  # id(alloc) -> (weakref, bytes before the capture)
        self.touched: set = set()
        self.invalid = False
        for al in list(_allocs):
            self.save(al)

    def save(self, al) -> None:
        if id(al) not in self.saved:
            self.saved[id(al)] = (weakref.ref(al), al.future.copy())


def capture_of(stream):
    """The capture in progress on ``stream``, or None."""
    return _captures.get(stream._uid) if _captures else None


def capturing_any(dev: int) -> bool:
    """Whether a stream of device ``dev`` is capturing."""
    return any(c.stream.device_id == dev for c in _captures.values())


def invalidate_captures(dev: int) -> None:
    """A forbidden call during capture: CUDA invalidates the capture and fails the call (900)."""
    for c in _captures.values():
        if c.stream.device_id == dev:
            c.invalid = True
    raise CUDARuntimeError(900)


def _op_state():
    st = getattr(_tls, "op", None)
    if st is None:
        st = _tls.op = {"depth": 0, "replay": None}
    return st


class _Ref:
    """A device array in a record: its allocation (weakly) and the view's bytes."""

    __slots__ = ("alloc", "f")

    def __init__(self, a):
        self.alloc, self.f = weakref.ref(a._alloc), a._f

    def thaw(self):
        from cupy._core import ndarray

        al = self.alloc()
        if al is None:
            raise CUDARuntimeError(700)  # the graph reaches memory freed after its capture
        return ndarray._view(al, self.f, None)


def _freeze(x):
    from cupy._core import ndarray

    if isinstance(x, ndarray):
        return _Ref(x)
    if isinstance(x, (tuple, list)):
        return type(x)(_freeze(v) for v in x)
    if isinstance(x, dict):
        return {k: _freeze(v) for k, v in x.items()}
    return x


def _thaw(x):
    if isinstance(x, _Ref):
        return x.thaw()
    if isinstance(x, (tuple, list)):
        return type(x)(_thaw(v) for v in x)
    if isinstance(x, dict):
        return {k: _thaw(v) for k, v in x.items()}
    return x


def replayable(stream_of=None):
    """Decorator: the operation is recorded when launched on a capturing stream.

    ``stream_of(*args, **kwargs)`` gives the stream it launches on (default:
    the current stream; cuBLAS: its handle's stream).
    """
    import functools

    def deco(fn):
        @functools.wraps(fn)
        def op(*args, **kwargs):
            st = _op_state()
            if st["depth"] or not _captures:
                return fn(*args, **kwargs)
            if stream_of is not None:
                stream = stream_of(*args, **kwargs)
            else:
                from cupy.cuda import stream as _stream

                stream = _stream.get_current_stream()
            cap = capture_of(stream)
            if cap is None:
                return fn(*args, **kwargs)
            frozen = _freeze((args, kwargs))
            st["depth"] += 1
            try:
                res = fn(*args, **kwargs)
            finally:
                st["depth"] -= 1
            cap.records.append((fn, frozen, _freeze(res)))
            return res

        return op

    return deco


def kernel_done(stream, written) -> bool:
    """Account for a kernel on ``stream`` that wrote ``written``; False when it is only being captured."""
    st = _op_state()
    if st["replay"] is not None:
        record_writes(launch_queue(st["replay"]), written)
        return False
    cap = capture_of(stream)
    if cap is None:
        return True
    if not st["depth"]:
        raise RuntimeError("CuPy stand-in: this kernel cannot be captured in a CUDA graph by the stand-in "
                           "(not a replayable operation); add it to the stand-in or launch it outside the "
                           "capture")
    for a in written:
        cap.touched.add(id(a._alloc))
    return False


def begin_capture(stream) -> None:
    """``cudaStreamBeginCapture`` on ``stream``."""
    if stream._uid in _captures:
        raise CUDARuntimeError(401)  # cudaErrorIllegalState
    _captures[stream._uid] = _Capture(stream)


def new_alloc(al) -> None:
    """A new allocation during a capture: its poison is what the capture puts back."""
    for c in _captures.values():
        c.save(al)


def end_capture(stream) -> list:
    """``cudaStreamEndCapture``: the records; every byte the captured work wrote put back."""
    cap = _captures.pop(stream._uid, None)
    if cap is None:
        raise CUDARuntimeError(401)
    for key in cap.touched:
        ref, data = cap.saved.get(key, (None, None))
        al = ref() if ref is not None else None
        if al is not None:
            al.future[...] = data
    if cap.invalid:
        raise CUDARuntimeError(901)  # cudaErrorStreamCaptureInvalidated
    return cap.records


def replay(records, stream) -> None:
    """One launch of a captured graph on ``stream``."""
    from cupy._core import ndarray
    from cupy.cuda import stream as _stream

    if capture_of(stream) is not None:
        raise CUDARuntimeError(900)  # not modeled: a graph launched into a capture
    count("launches")
    count("graph_launches")
    st = _op_state()
    st["depth"] += 1
    st["replay"] = stream
    try:
        with stream:
            for fn, frozen, res in records:
                args, kwargs = _thaw(frozen)
                out = fn(*args, **kwargs)
                if isinstance(res, _Ref) and isinstance(out, ndarray) and out._alloc is not res.alloc():
                    dst = res.thaw()  # the capture's new output: the replay writes there
                    dst._f[...] = out._f
                    record_writes(launch_queue(stream), [dst])
    finally:
        st["depth"] -= 1
        st["replay"] = None
