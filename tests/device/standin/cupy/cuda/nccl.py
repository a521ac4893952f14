"""Stand-in for ``cupy.cuda.nccl`` (``cupy_backends.cuda.libs.nccl`` of CuPy 14, NCCL 2.x rules).

Ranks are processes (one GPU each, as NCCL wants them); the stand-in's NCCL
moves their data through files in a directory that the unique id names,
the way NCCL bootstraps over its own sockets and never through MPI.

What it enforces, and where from
--------------------------------
- ``get_unique_id`` returns 128 bytes (CuPy 14; CuPy 13 returned a tuple),
  and ``NcclCommunicator(ndev, commId, rank)`` binds to the current device.
  Every rank waits in the constructor for all ``ndev`` ranks, as
  ``ncclCommInitRank`` does.
- One GPU a rank: two ranks of one communicator on the same device of the
  same host fail init on every rank with ``ncclInvalidUsage`` ("Duplicate
  GPU detected", NCCL ``src/init.cc``; NCCL 2.30 allows it only under
  ``NCCL_MULTI_RANK_GPU_ENABLE=1``, not modeled).
- Operations are stream-ordered: a collective reads its send buffer as the
  stream's earlier work leaves it and writes its receive buffer as a kernel
  on that stream does, so the result lands (becomes visible to MPI and host
  reads) only when that stream is synchronized (see :mod:`cupy._standin`).
  Nothing synchronizes the host.
- Ordering between streams: a collective refuses to run when its buffers
  have writes pending from another stream that nothing orders before it
  (no ``wait_event`` on an event recorded after them). On a GPU that is a
  silent race: NCCL would read or overwrite the bytes before the kernel
  lands them.
- ``groupStart``/``groupEnd``: the calls in between are issued at
  ``groupEnd``, in order; groups nest.
- Capture into a CUDA graph: a collective launched on a capturing stream is
  recorded and runs again at each replay, on the launch stream (NCCL 2.9.6
  and later support capture), through the stand-in's replay machinery.
- ``NcclError(status)`` with CuPy's message (``'<name>: <string>'``);
  ``abort``, ``destroy`` and ``check_async_error``. With
  ``HPCGPU_STANDIN_FAIL=nccl_async`` every communicator reports
  ``ncclRemoteError`` from ``check_async_error`` after its first
  collective (a peer that died mid-operation); with
  ``HPCGPU_STANDIN_FAIL=nccl`` the library is missing (``available`` is
  False and nothing else is defined, as in CuPy).

Not modeled: NCCL's algorithms and their rounding (sums are in rank order,
in the buffer's dtype), a collective that hangs for a missing peer (the
stand-in gives up after ``HPCGPU_STANDIN_NCCL_TIMEOUT`` seconds, 300 by
default, with ``ncclSystemError``), several devices a process (``initAll``).
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import socket
import tempfile
import time
import uuid

import numpy

from cupy import _standin

available = "nccl" not in _standin.FAIL

NCCL_INT8 = NCCL_CHAR = 0
NCCL_UINT8 = 1
NCCL_INT32 = NCCL_INT = 2
NCCL_UINT32 = 3
NCCL_INT64 = 4
NCCL_UINT64 = 5
NCCL_FLOAT16 = NCCL_HALF = 6
NCCL_FLOAT32 = NCCL_FLOAT = 7
NCCL_FLOAT64 = NCCL_DOUBLE = 8
NCCL_BFLOAT16 = 9
NCCL_SUM, NCCL_PROD, NCCL_MAX, NCCL_MIN, NCCL_AVG = 0, 1, 2, 3, 4

_DTYPES = {0: "int8", 1: "uint8", 2: "int32", 3: "uint32", 4: "int64", 5: "uint64", 6: "float16", 7: "float32",
           8: "float64", 9: "bfloat16"}
_ERRORS = {1: ("ncclUnhandledCudaError", "unhandled cuda error"),
           2: ("ncclSystemError", "unhandled system error"),
           3: ("ncclInternalError", "internal error"),
           4: ("ncclInvalidArgument", "invalid argument"),
           5: ("ncclInvalidUsage", "invalid usage"),
           6: ("ncclRemoteError", "remote process exited or there was a network error")}
TIMEOUT = float(os.environ.get("HPCGPU_STANDIN_NCCL_TIMEOUT", "300"))
_CALLS: list = []


class NcclError(RuntimeError):
    """A NCCL status other than success, as CuPy raises it.

    Parameters
    ----------
    status : int
        The ``ncclResult_t``.
    """

    def __init__(self, status: int):
        self.status = status
        name, text = _ERRORS.get(status, (f"ncclResult{status}", "unknown result"))
        super().__init__(f"{name}: {text} (run with NCCL_DEBUG=WARN for details)")

    def __reduce__(self):
        return (type(self), (self.status,))


def get_version() -> int:
    """``ncclGetVersion``: 2.30.7 as ``major * 10000 + minor * 100 + patch``."""
    return 23007


def get_build_version() -> int:
    """The NCCL version CuPy was built with."""
    return 23007


def get_unique_id() -> bytes:
    """``ncclGetUniqueId``: 128 bytes naming a new rendezvous."""
    token = f"hpcgpu-standin:{uuid.uuid4().hex}".encode()
    return token + b"\0" * (128 - len(token))


def calls() -> list[dict]:
    """Every collective this process issued (tests): dicts of op, count, dtype, stream, comm size."""
    return list(_CALLS)


def clear_calls() -> None:
    """Forget :func:`calls`."""
    _CALLS.clear()


_group: list = []  # [depth, calls...]: collectives held until the outermost groupEnd


def groupStart() -> None:  # noqa: N802 - NCCL's name, as CuPy spells it
    """``ncclGroupStart``: hold the following calls until :func:`groupEnd`."""
    if not _group:
        _group.append(0)
    _group[0] += 1


def groupEnd() -> None:  # noqa: N802
    """``ncclGroupEnd``: issue the held calls, in order.

    Raises
    ------
    NcclError
        ``ncclInvalidUsage`` without a ``groupStart``.
    """
    if not _group:
        raise NcclError(5)
    _group[0] -= 1
    if _group[0] == 0:
        held = _group[1:]
        _group.clear()
        for fn, args in held:
            fn(*args)


def _root_dir() -> str:
    return os.path.join(os.environ.get("HPCGPU_STANDIN_NCCL_DIR") or tempfile.gettempdir(), "hpcgpu-standin-nccl")


def _write(path: str, write) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        write(f)
    os.replace(tmp, path)


def _wait_for(paths) -> None:
    deadline, pause = time.monotonic() + TIMEOUT, 0.0002
    for p in paths:
        while not os.path.exists(p):
            if time.monotonic() > deadline:
                raise NcclError(2)
            time.sleep(pause)
            pause = min(0.01, pause * 2)


class NcclCommunicator:
    """``ncclComm_t`` of one rank, on the current device.

    Parameters
    ----------
    ndev : int
        Ranks in the communicator.
    commId : bytes
        :func:`get_unique_id` of one rank, the same on all.
    rank : int
        This rank, ``0 <= rank < ndev``.

    Raises
    ------
    NcclError
        ``ncclInvalidArgument`` for a bad rank or id; ``ncclInvalidUsage``
        when two ranks share a GPU (on every rank).
    """

    def __init__(self, ndev: int, commId, rank: int):  # noqa: N803 - CuPy's name
        if not isinstance(commId, bytes) or len(commId) != 128 or not 0 <= rank < ndev:
            raise NcclError(4)
        token = commId.rstrip(b"\0").decode().split(":", 1)[-1]
        self._dir = os.path.join(_root_dir(), token)
        os.makedirs(self._dir, exist_ok=True)
        self._rank, self._size, self._seq, self._state = int(rank), int(ndev), 0, "ok"
        self._device = _standin.ensure_context()
        me = {"host": socket.gethostname(), "device": _standin.VISIBLE[self._device], "pid": os.getpid()}
        _write(os.path.join(self._dir, f"member.{rank}"), lambda f: f.write(json.dumps(me).encode()))
        atexit.register(self._cleanup)
        members = [os.path.join(self._dir, f"member.{r}") for r in range(ndev)]
        _wait_for(members)
        seen = {}
        for r, path in enumerate(members):
            with open(path) as f:
                m = json.load(f)
            key = (m["host"], m["device"])
            if key in seen:
                self._state = "failed"
                raise NcclError(5)  # "Duplicate GPU detected: rank r and rank seen[key] both on CUDA device"
            seen[key] = r

    # -- what CuPy exposes ------------------------------------------------------
    def rank_id(self) -> int:
        """This rank."""
        return self._rank

    def size(self) -> int:
        """Ranks in the communicator."""
        return self._size

    def device_id(self) -> int:
        """The device the communicator was made on."""
        return self._device

    def destroy(self) -> None:
        """``ncclCommDestroy``."""
        self._state = "destroyed"

    def abort(self) -> None:
        """``ncclCommAbort``: pending work is dropped."""
        self._state = "destroyed"

    def check_async_error(self) -> None:
        """``ncclCommGetAsyncError``: raise the error an operation in flight met.

        Raises
        ------
        NcclError
        """
        if "nccl_async" in _standin.FAIL and self._seq > 0:
            raise NcclError(6)

    def allReduce(self, sendbuf: int, recvbuf: int, count: int, datatype: int, op: int, stream: int) -> None:  # noqa: N802
        """``ncclAllReduce`` of ``count`` elements (in place when the pointers are equal)."""
        self._issue("allReduce", [(sendbuf, count)], [(recvbuf, count)], datatype, op, None, stream)

    def bcast(self, buff: int, count: int, datatype: int, root: int, stream: int) -> None:
        """``ncclBcast``: ``root``'s ``count`` elements to every rank, in place."""
        self._issue("bcast", [(buff, count)], [(buff, count)], datatype, None, root, stream)

    def allGather(self, sendbuf: int, recvbuf: int, count: int, datatype: int, stream: int) -> None:  # noqa: N802
        """``ncclAllGather``: ``count`` elements of each rank into ``recvbuf``, rank after rank."""
        self._issue("allGather", [(sendbuf, count)], [(recvbuf, count * self._size)], datatype, None, None, stream)

    def reduceScatter(self, sendbuf: int, recvbuf: int, recvcount: int, datatype: int, op: int,  # noqa: N802
                      stream: int) -> None:
        """``ncclReduceScatter``: block ``rank`` (of ``recvcount``) of the reduction."""
        self._issue("reduceScatter", [(sendbuf, recvcount * self._size)], [(recvbuf, recvcount)], datatype, op,
                    None, stream)

    # -- the machinery ----------------------------------------------------------
    def _issue(self, kind, sends, recvs, datatype, op, root, stream_ptr) -> None:
        if self._state != "ok":
            raise NcclError(5)
        if datatype not in _DTYPES or (op is not None and op not in (0, 1, 2, 3, 4)) or \
                (root is not None and not 0 <= root < self._size):
            raise NcclError(4)
        if _standin.current_device() != self._device:
            raise NcclError(5)  # a communicator is used on its own device
        args = (kind, sends, recvs, datatype, op, root, int(stream_ptr))
        if _group:
            _group.append((_run, (self, *args)))
        else:
            _run(self, *args)

    def _region(self, ptr: int, count: int, dtype):
        from cupy._core import ndarray

        if count == 0:  # NCCL accepts a count of 0 (a no-op) whatever the pointer
            return ndarray(0, dtype)
        al, off = _standin.find_pointer(int(ptr))
        nbytes = count * dtype.itemsize
        if off + nbytes > al.nbytes:
            raise _standin.CUDARuntimeError(700)
        return ndarray._view(al, al.future[off : off + nbytes].view(dtype), None)

    def _exchange(self, data: numpy.ndarray) -> list:
        """Publish this rank's bytes of the next operation; every rank's, in rank order."""
        n = self._seq
        mine = os.path.join(self._dir, f"op{n}.{self._rank}")
        _write(mine, lambda f: f.write(data.tobytes()))
        paths = [os.path.join(self._dir, f"op{n}.{r}") for r in range(self._size)]
        _wait_for(paths)
        parts = []
        for p in paths:
            with open(p, "rb") as f:
                parts.append(numpy.frombuffer(f.read(), dtype=data.dtype))
        if n > 0:  # every rank has written op n, so every rank has read op n - 1
            try:
                os.unlink(os.path.join(self._dir, f"op{n - 1}.{self._rank}"))
            except FileNotFoundError:
                pass
        self._seq += 1
        return parts

    def _cleanup(self) -> None:
        """At exit: this rank is done; the last rank out removes the rendezvous.

        Nothing of it goes earlier: a peer may still be reading this rank's
        member file (NCCL's init returns on every rank together) or its
        last operation's bytes.
        """
        _write(os.path.join(self._dir, f"done.{self._rank}"), lambda f: None)
        if all(os.path.exists(os.path.join(self._dir, f"done.{r}")) for r in range(self._size)):
            shutil.rmtree(self._dir, ignore_errors=True)


def _unordered(stream, arrays) -> bool:
    """Whether ``arrays`` have writes pending that nothing orders before work on ``stream``."""
    ordered = _standin.launch_queue(stream)._wids
    for a in arrays:
        lo, hi = a._alloc.extent(a._f)
        for wid, (wlo, whi) in a._alloc.writes.items():
            if wlo < hi and lo < whi and wid not in ordered:
                return True
    return False


def _stream_of_call(comm, kind, sends, recvs, datatype, op, root, stream_ptr):
    from cupy.cuda.stream import stream_of_ptr

    return stream_of_ptr(stream_ptr)


@_standin.replayable(stream_of=_stream_of_call)
def _run(comm, kind, sends, recvs, datatype, op, root, stream_ptr) -> None:
    """One collective: read the send buffers in stream order, write the receive buffers as a kernel."""
    from cupy import _core
    from cupy.cuda.stream import stream_of_ptr

    if datatype == NCCL_BFLOAT16:
        import ml_dtypes

        dtype = numpy.dtype(ml_dtypes.bfloat16)
    else:
        dtype = numpy.dtype(_DTYPES[datatype])
    stream = stream_of_ptr(stream_ptr)
    send = [comm._region(p, c, dtype) for p, c in sends]
    recv = [comm._region(p, c, dtype) for p, c in recvs]
    _core._begin(send + recv, compile=False)
    st = _standin._op_state()
    if st["replay"] is None and _standin.capture_of(stream) is None and _unordered(stream, send + recv):
        raise RuntimeError(f"CuPy stand-in NCCL: {kind} on stream {stream_ptr:#x} touches device memory that "
                           "work on another stream wrote with nothing ordering it before the collective "
                           "(record an event after that work and wait_event on this stream)")
    _CALLS.append({"op": kind, "count": int(recv[0].size), "dtype": dtype.name, "stream": stream_ptr,
                   "size": comm._size})
    _standin.count("nccl_calls")
    data = send[0]._f.copy()
    if kind == "bcast" and comm._rank != root:
        data = data[:0]
    parts = comm._exchange(data)
    out = recv[0]._f
    if kind == "bcast":
        out[...] = parts[root]
    elif kind == "allGather":
        out[...] = numpy.concatenate(parts)
    else:
        reduce = {0: numpy.add, 1: numpy.multiply, 2: numpy.maximum, 3: numpy.minimum, 4: numpy.add}[op]
        acc = parts[0].copy()
        for p in parts[1:]:
            acc = reduce(acc, p).astype(dtype)
        if op == NCCL_AVG:
            acc = (acc / comm._size).astype(dtype)
        if kind == "reduceScatter":
            acc = acc[comm._rank * out.size : (comm._rank + 1) * out.size]
        out[...] = acc
    _core._end([recv[0]], stream=stream)


if not available:  # as CuPy: the library failed to load and only ``available`` is defined
    for _name in [n for n in list(globals()) if not n.startswith("__") and n not in ("available", "annotations")]:
        del globals()[_name]
    del _name
