"""NCCL for device buffers: one NCCL communicator per MPI communicator, stream-ordered collectives.

Where every rank of a job drives a GPU of its own, hpcgpu's collectives on
device arrays go over NCCL (CuPy's ``cupy.cuda.nccl``) instead of MPI: the
data stays on the GPUs (NVLink, or the network through GPUDirect), and
nothing waits on the host. This module is the one place that talks to NCCL;
:mod:`hpcgpu.comm` decides per call whether NCCL serves it.

How a collective runs (the shape of PyTorch's ``ProcessGroupNCCL`` and
Horovod's NCCL operations):

1. each MPI communicator that carries device data gets, on its first device
   collective, a NCCL communicator of the same ranks: rank 0 makes the
   unique id, mpi4py broadcasts it over *that* communicator, every rank
   calls ``ncclCommInitRank`` (collective). It is cached as an MPI attribute
   of the communicator and destroyed when the communicator is freed;
2. every operation of one NCCL communicator runs on that communicator's own
   non-blocking stream, in the order the ranks issue them (NCCL needs the
   same order on every rank; one stream keeps it on the GPU too);
3. that stream first waits for an event recorded on the caller's current
   stream (the kernels that wrote the send buffer), and the caller's stream
   then waits for an event recorded after the operation: at once for a
   blocking collective, at ``Wait`` for a non-blocking one. No host
   synchronization; the host sees the result when it synchronizes, as for
   any kernel.

Errors: a NCCL error at issue, an asynchronous one (``ncclCommGetAsyncError``,
a peer that died), or an operation that has not completed after the stall
timeout (``HPCGPU_STALL_TIMEOUT`` / ``--stall-timeout``) ends the job with
one line (:func:`hpcgpu.errors.abort`), as MPI errors do. A monitor thread
polls the communicators and the operations in flight (``cudaEventQuery``,
which never blocks) while any NCCL communicator exists.

References
----------
NCCL documentation, "Creating a communicator", "CUDA stream semantics",
"Group calls" and "Fault tolerance" (``ncclCommGetAsyncError``,
``ncclCommAbort``); PyTorch ``torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp``
(a stream per communicator, event ordering, the watchdog thread).
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque

import numpy as np

from . import _options
from .errors import abort

__all__ = ["available", "version", "communicator", "supports", "issue", "Pending", "set_stall_timeout"]

# NCCL's ncclDataType_t and ncclRedOp_t (nccl.h), as cupy.cuda.nccl names them.
_INT8, _UINT8, _INT32, _UINT32, _INT64, _UINT64, _FLOAT16, _FLOAT32, _FLOAT64, _BFLOAT16 = range(10)
_TYPES = {"int8": (_INT8, 1), "uint8": (_UINT8, 1), "int32": (_INT32, 1), "uint32": (_UINT32, 1),
          "int64": (_INT64, 1), "uint64": (_UINT64, 1), "float16": (_FLOAT16, 1), "float32": (_FLOAT32, 1),
          "float64": (_FLOAT64, 1), "bfloat16": (_BFLOAT16, 1),
          "complex64": (_FLOAT32, 2), "complex128": (_FLOAT64, 2)}
"""dtype name -> (NCCL type, elements of it per element): complex is its real and imaginary parts."""
_SUM, _PROD, _MAX, _MIN = 0, 1, 2, 3
_MOVES = ("bcast", "allGather")  # move bytes without arithmetic: any dtype, sent as uint8


def _nccl_module():
    """``cupy.cuda.nccl``, or None and why not. Not collective."""
    try:
        from cupy.cuda import nccl
    except Exception as e:  # ImportError, or a CUDA library CuPy could not load
        return None, f"cupy.cuda.nccl does not import ({type(e).__name__}: {' '.join(str(e).split())})"
    if not getattr(nccl, "available", False):
        return None, ("CuPy found no NCCL library (pip install nvidia-nccl-cu12 or -cu13, as the 'gpu' extras "
                      "do)")
    return nccl, ""


def available() -> tuple[bool, str]:
    """Whether this process can use NCCL, and why not. Not collective.

    Returns
    -------
    (bool, str)
        True and ``"NCCL x.y.z"``, or False and the reason (no CuPy, no
        NCCL library).
    """
    nccl, why = _nccl_module()
    if nccl is None:
        return False, why
    return True, f"NCCL {version()}"


def version() -> str:
    """The loaded NCCL's version, ``"2.30.7"`` (``ncclGetVersion``); ``"?"`` when it cannot be told."""
    nccl, _ = _nccl_module()
    try:
        v = int(nccl.get_version())
    except Exception:  # noqa: BLE001 - only for the message
        return "?"
    major, rest = (v // 10000, v % 10000) if v >= 10000 else (v // 1000, v % 1000)  # 2.9+: 2*10000+minor*100+patch
    return f"{major}.{rest // 100}.{rest % 100}"


def supports(kind: str, dtype, op=None) -> tuple[int, int] | None:
    """``(NCCL type, count factor)`` when NCCL can run collective ``kind`` on ``dtype`` with ``op``, else None.

    Not collective, the same answer on every rank (the arguments are).
    Broadcasts and gathers move bytes (any dtype, as ``uint8``);
    reductions need a NCCL type (8-, 32- and 64-bit integers, float16,
    bfloat16, float32, float64; complex as its two float parts, for sums
    only) and ``MPI.SUM``, ``PROD``, ``MAX`` or ``MIN``. Anything else
    (bool, 16-bit integers, a logical or user ``op``) goes over MPI.

    Parameters
    ----------
    kind : {"allReduce", "reduceScatter", "bcast", "allGather"}
    dtype : numpy.dtype
    op : mpi4py.MPI.Op, optional
        For reductions.

    Returns
    -------
    (int, int) or None
    """
    if kind in _MOVES:
        return _UINT8, np.dtype(dtype).itemsize
    found = _TYPES.get(np.dtype(dtype).name)
    code = _op_code(op)
    if found is None or code is None or (found[1] == 2 and code != _SUM):
        return None
    return found


def _op_code(op) -> int | None:
    from mpi4py import MPI

    for mpi_op, code in ((MPI.SUM, _SUM), (MPI.PROD, _PROD), (MPI.MAX, _MAX), (MPI.MIN, _MIN)):
        if op == mpi_op:
            return code
    return None


# ---------------------------------------------------------------------------
# One NCCL communicator per MPI communicator
# ---------------------------------------------------------------------------

class _Comm:
    """A NCCL communicator of the ranks of one MPI communicator, its stream and its device."""

    def __init__(self, nccl_comm, stream, device: int, size: int):
        self.nccl, self.stream, self.device, self.size = nccl_comm, stream, device, size
        self.alive = True

    def destroy(self) -> None:
        if not self.alive:
            return
        self.alive = False
        _MONITOR.forget(self)
        try:
            self.stream.synchronize()  # no operation of it may be in flight when it goes
            self.nccl.destroy()
        except Exception:  # noqa: BLE001 - the communicator's MPI handle is going; nothing more can be done
            pass


_KEYVAL = None


def _keyval() -> int:
    """The MPI attribute key under which a communicator keeps its NCCL communicator (made once)."""
    global _KEYVAL
    if _KEYVAL is None:
        from mpi4py import MPI

        def delete(comm, keyval, value):  # MPI calls it when the communicator is freed
            value.destroy()

        _KEYVAL = MPI.Comm.Create_keyval(delete_fn=delete)
    return _KEYVAL


def communicator(comm) -> _Comm:
    """The NCCL communicator of ``comm``'s ranks, made on first use.

    Collective on first use for ``comm`` (all its ranks must call it then:
    :mod:`hpcgpu.comm` does so from inside a collective); later calls are
    local. The NCCL rank is the MPI rank. The unique id goes from rank 0 to
    the others over ``comm`` itself (``comm.bcast``), so sub-communicators
    (a process grid's rows and columns, data and tensor groups) get their
    own NCCL communicators and none is bootstrapped through ``COMM_WORLD``.

    Parameters
    ----------
    comm : mpi4py.MPI.Intracomm
        Every rank on a GPU of its own (NCCL refuses two ranks on one GPU:
        ``ncclInvalidUsage``), the current device the rank's.

    Returns
    -------
    _Comm
        Cached as an attribute of ``comm``; destroyed by ``comm.Free()``.

    Raises
    ------
    RuntimeError
        Agreed by every rank: NCCL is missing on some rank, or
        ``ncclCommInitRank`` failed (the message has NCCL's words).
    """
    found = comm.Get_attr(_keyval())
    if found is not None:
        return found
    from .errors import agree

    nccl, why = _nccl_module()
    err = None if nccl is not None else RuntimeError(f"NCCL: {why}")
    agree(err, comm=comm)
    uid = nccl.get_unique_id() if comm.Get_rank() == 0 else None
    uid = comm.bcast(uid, root=0)
    import cupy

    err, made = None, None
    try:
        made = nccl.NcclCommunicator(comm.Get_size(), uid, comm.Get_rank())
    except Exception as e:  # NcclError: a duplicate GPU, a network that does not connect
        err = RuntimeError(f"NCCL: no communicator of {comm.Get_size()} ranks could be made "
                           f"({' '.join(str(e).split())})")
    agree(err, comm=comm)
    device = int(cupy.cuda.runtime.getDevice())
    c = _Comm(made, cupy.cuda.Stream(non_blocking=True), device, comm.Get_size())
    comm.Set_attr(_keyval(), c)
    _MONITOR.add(c)
    return c


# ---------------------------------------------------------------------------
# Collectives
# ---------------------------------------------------------------------------

class Pending:
    """A NCCL collective in flight: ``Wait`` orders the current stream after it.

    Holds the buffers until then, so that the memory pool cannot hand
    their blocks to another array while NCCL still reads or writes them.

    Parameters
    ----------
    done : cupy.cuda.Event
        Recorded on the NCCL communicator's stream after the operation.
    arrays : sequence of cupy.ndarray
        The buffers the operation reads and writes.
    """

    def __init__(self, done, arrays):
        self._done, self._arrays = done, list(arrays)

    def Wait(self) -> None:
        """Make the current stream wait for the operation (no host wait). Not collective."""
        if self._done is not None:
            import cupy

            cupy.cuda.get_current_stream().wait_event(self._done)
            self._done, self._arrays = None, []

    def Test(self) -> bool:
        """True when the operation has completed (``cudaEventQuery``, never blocking), then as :meth:`Wait`.

        Not collective. False leaves the current stream free to run ahead
        (the backward pass's kernels while a bucket is reduced).
        """
        if self._done is None:
            return True
        import cupy

        if cupy.cuda.runtime.eventQuery(self._done.ptr) != 0:  # 600: cudaErrorNotReady
            return False
        self.Wait()
        return True


def issue(comm, kind: str, send, recv, *, op=None, root: int | None = None, nonblocking: bool = False,
          what: str = ""):
    """Run NCCL collective ``kind`` of device arrays over ``comm``; None when NCCL cannot serve it.

    Collective: all ranks of ``comm`` must call it alike (the NCCL
    communicator is made on the first call). The operation is queued on the
    NCCL communicator's stream after the work queued so far on the current
    stream; a blocking call makes the current stream wait for it before it
    returns, a non-blocking one at :meth:`Pending.Wait`. Nothing waits on
    the host.

    Parameters
    ----------
    comm : mpi4py.MPI.Intracomm
    kind : {"allReduce", "reduceScatter", "bcast", "allGather"}
        NCCL's operation: ``send`` and ``recv`` as ``ncclAllReduce`` (same
        size; the same array for in place), ``ncclReduceScatter`` (``send``
        P times ``recv``), ``ncclBcast`` (one buffer, ``send is recv``) and
        ``ncclAllGather`` (``recv`` P times ``send``).
    send, recv : cupy.ndarray
        C-contiguous device arrays on the rank's device, of one dtype.
    op : mpi4py.MPI.Op, optional
        The reduction.
    root : int, optional
        The broadcast's root.
    nonblocking : bool
        Return a :class:`Pending` instead of joining the current stream.
    what : str
        The collective as the user called it ("Allreduce"), for messages.

    Returns
    -------
    Pending, True or None
        None when :func:`supports` says no (the caller goes over MPI);
        True for a blocking collective; a :class:`Pending` otherwise.

    Notes
    -----
    A NCCL error ends the job (:func:`hpcgpu.errors.abort`): the other
    ranks may already wait for this rank's part on their GPUs.
    """
    spec = supports(kind, send.dtype, op)
    if spec is None:
        return None
    import cupy

    c = communicator(comm)
    dtype, factor = spec
    count = (recv.size if kind == "reduceScatter" else send.size) * factor
    if count == 0:  # the same on every rank (same shapes): nothing to move
        return Pending(None, ()) if nonblocking else True
    current = cupy.cuda.get_current_stream()
    c.stream.wait_event(current.record())
    s, r, ptr = send.data.ptr, recv.data.ptr, c.stream.ptr
    _MONITOR.entering(what or kind, c)
    try:
        if kind == "allReduce":
            c.nccl.allReduce(s, r, count, dtype, _op_code(op), ptr)
        elif kind == "reduceScatter":
            c.nccl.reduceScatter(s, r, count, dtype, _op_code(op), ptr)
        elif kind == "bcast":
            c.nccl.bcast(r, count, dtype, root, ptr)
        else:
            c.nccl.allGather(s, r, count, dtype, ptr)
    except Exception as e:  # NcclError (CuPy's name table has no entry for some codes: catch broadly)
        _fatal(f"{what or kind} over {c.size} ranks failed: {' '.join(str(e).split())}")
    finally:
        _MONITOR.left()
    done = c.stream.record()
    _MONITOR.track(done, what or kind, c)
    if nonblocking:
        return Pending(done, (send, recv))
    current.wait_event(done)
    return True


def _fatal(message: str) -> None:
    from mpi4py import MPI

    abort(f"hpcgpu: NCCL error on rank {MPI.COMM_WORLD.Get_rank()}: {message}; aborting the job")


# ---------------------------------------------------------------------------
# The monitor: asynchronous errors and operations that do not complete
# ---------------------------------------------------------------------------

class _Monitor:
    """A thread that ends the job on a NCCL error no call reports, or on an operation stuck past the timeout.

    It starts with the first NCCL communicator. Every ``tick`` seconds it
    asks each communicator for an asynchronous error
    (``ncclCommGetAsyncError``) and the oldest operations in flight whether
    their event has completed (``cudaEventQuery``, which never blocks). With
    a stall timeout T > 0 (``HPCGPU_STALL_TIMEOUT``, the trainer's
    ``--stall-timeout``), an operation not completed T seconds after it was
    issued, or a host thread inside a NCCL call for T seconds, aborts the
    job. Without one only errors are watched.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._comms: list[_Comm] = []
        self._ops: deque = deque()  # (event, t_issue, what, comm), oldest first
        self._inside = None  # (what, t_enter) while the host is in a NCCL call
        self._thread = None
        self.timeout: float | None = None  # seconds; None: HPCGPU_STALL_TIMEOUT, read when the thread starts

    def add(self, c: _Comm) -> None:
        with self._lock:
            self._comms.append(c)
            if self._thread is None:
                if self.timeout is None:
                    try:
                        self.timeout = _options.seconds("HPCGPU_STALL_TIMEOUT", None, 0.0, "--stall-timeout")
                    except ValueError:  # the watchdog, which reads the same variable, reports it
                        self.timeout = 0.0
                self._thread = threading.Thread(target=self._run, args=(c.device,), name="hpcgpu-nccl",
                                                daemon=True)
                self._thread.start()

    def forget(self, c: _Comm) -> None:
        with self._lock:
            self._comms = [x for x in self._comms if x is not c]
            self._ops = deque(op for op in self._ops if op[3] is not c)

    def entering(self, what: str, c: _Comm) -> None:
        self._inside = (what, time.monotonic(), c)

    def left(self) -> None:
        self._inside = None

    def track(self, event, what: str, c: _Comm) -> None:
        if self.timeout:
            with self._lock:
                self._ops.append((event, time.monotonic(), what, c))

    def _run(self, device: int) -> None:
        import cupy

        try:
            cupy.cuda.Device(device).use()
        except Exception:  # noqa: BLE001 - event queries still work on the primary context
            pass
        while True:
            time.sleep(min(1.0, max(0.05, self.timeout / 10)) if self.timeout else 1.0)
            with self._lock:
                if not self._comms:  # every communicator was freed: the next one starts a thread again
                    self._thread = None
                    return
            message = self._check(cupy)
            if message:
                for c in list(self._comms):
                    try:
                        c.nccl.abort()  # ncclCommAbort: the GPU's waiting kernels return
                    except Exception:  # noqa: BLE001 - the job ends anyway
                        pass
                try:
                    _fatal(message)
                finally:  # at one rank abort() exits with SystemExit, which ends only this thread
                    os._exit(1)

    def _check(self, cupy) -> str | None:
        for c in list(self._comms):
            try:
                c.nccl.check_async_error()
            except Exception as e:  # noqa: BLE001 - NcclError, or CuPy's KeyError on codes it cannot name
                return f"asynchronous error of a communicator of {c.size} ranks: {' '.join(str(e).split())}"
        now, T = time.monotonic(), self.timeout or 0.0
        if T <= 0:
            return None
        inside = self._inside
        if inside is not None and now - inside[1] >= T:
            return (f"{inside[0]} over {inside[2].size} ranks has been issuing for {now - inside[1]:.0f} s "
                    f"(stall timeout {T:g} s): a rank has not arrived")
        with self._lock:
            while self._ops:
                event, t0, what, c = self._ops[0]
                if cupy.cuda.runtime.eventQuery(event.ptr) == 0:  # cudaSuccess; 600 is cudaErrorNotReady
                    self._ops.popleft()
                    continue
                if now - t0 >= T:
                    return (f"{what} over {c.size} ranks has not completed {now - t0:.0f} s after it was issued "
                            f"(stall timeout {T:g} s): a rank has not arrived or the network failed")
                break
        return None


_MONITOR = _Monitor()


def set_stall_timeout(seconds: float) -> None:
    """Abort the job when a NCCL operation has not completed ``seconds`` after it was issued. Not collective.

    The stall watchdog (:class:`hpcgpu.watchdog.Watchdog`) passes its
    timeout here, so ``--stall-timeout`` covers NCCL's waits on the GPU as
    it covers MPI's on the host; by default ``HPCGPU_STALL_TIMEOUT`` is
    read when the first NCCL communicator is made.

    Parameters
    ----------
    seconds : float
        > 0; 0 watches for errors only.
    """
    _MONITOR.timeout = float(seconds)

