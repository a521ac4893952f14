"""Buffer collectives on ``xp`` arrays (the one CPU, NCCL, CUDA-aware or staged dispatch).

A NumPy array goes to MPI as it is. CuPy arrays go over NCCL when the
runtime chose it (``collectives="nccl"``: every rank has a GPU of its own;
``hpcgpu._nccl``), stream-ordered with no host synchronization, unless
NCCL cannot serve that call (a dtype or ``op`` it lacks) or ``cuda_aware``
was given. Otherwise a CuPy array goes to MPI directly when MPI
is CUDA-aware, after the current stream is synchronized (MPI must not read a
buffer a kernel is still writing); otherwise it is staged through pinned host
memory and copied back. That branch is written once, in :func:`_dispatch`;
each collective only says which of its buffers MPI reads and which it writes.
The CUDA-awareness comes from the runtime (:func:`hpcgpu.init`), or from the
``cuda_aware`` argument: a collective never starts the runtime on its own
for a device buffer.

All functions are collective over ``comm`` (keyword-only, the runtime's
private communicator by default) and follow MPI's argument names. At one
rank no MPI call is made.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from . import _context, _device, _nccl

__all__ = ["Allreduce", "Iallreduce", "Reduce_scatter_block", "Bcast", "Ibcast", "Allgather", "Alltoallv",
           "Request", "default_comm", "cuda_awareness", "device_path", "traffic", "reset_traffic"]

IN, OUT, INOUT = "in", "out", "inout"  # what MPI does with a buffer: reads, writes, both

_TRAFFIC = {"sent": 0, "received": 0}


def traffic() -> dict:
    """Bytes this rank's buffer collectives have moved since import or :func:`reset_traffic`. Not collective.

    Counted in this module, per call, from the buffers (not from the MPI's
    algorithm, which may forward data through other ranks): ``sent`` is the
    data read from this rank's buffers for other ranks, once per buffer
    (a broadcast's root: the buffer; an Allgather: this rank's block; an
    Alltoallv: what goes to the others), ``received`` the data written into
    this rank's buffers from other ranks (a broadcast's other ranks: the
    buffer; an Allgather: the others' blocks). An Allreduce (blocking or
    not) counts its buffer both ways, a Reduce_scatter the others' blocks
    sent and this rank's block received. Nothing at one rank, and nothing
    for ``agree``, object collectives and raw mpi4py calls.

    Returns
    -------
    dict
        ``{"sent": int, "received": int}``, bytes.
    """
    return dict(_TRAFFIC)


def reset_traffic() -> None:
    """Set :func:`traffic`'s counters to 0. Not collective."""
    _TRAFFIC["sent"] = _TRAFFIC["received"] = 0


def _count(sent: int, received: int) -> None:
    _TRAFFIC["sent"] += int(sent)
    _TRAFFIC["received"] += int(received)
_HALF = ("float16", "bfloat16")


def default_comm() -> MPI.Intracomm:
    """The runtime's private communicator, every collective's default ``comm``. Not collective.

    Returns
    -------
    mpi4py.MPI.Intracomm

    Raises
    ------
    RuntimeError
        Before :func:`hpcgpu.init`: pass ``comm=``, or call ``init`` (collective) first.
    """
    return _context.comm()


def _check_contiguous(name: str, a) -> None:
    flags = getattr(a, "flags", None)
    if flags is not None and not flags["C_CONTIGUOUS"]:
        raise ValueError(f"{name} must be C-contiguous")


def cuda_awareness(cuda_aware: bool | None = None) -> tuple[bool, bool]:
    """Whether device buffers go straight to MPI: ``(blocking collectives, non-blocking ones too)``. Not collective.

    Parameters
    ----------
    cuda_aware : bool, optional
        An explicit decision; by default the runtime's (:func:`hpcgpu.init`).

    Returns
    -------
    (bool, bool)

    Raises
    ------
    ValueError
        No decision: no ``cuda_aware`` and no runtime yet.
    """
    rt = _context.current()
    if cuda_aware is not None:
        return bool(cuda_aware), bool(cuda_aware) and (rt is None or rt.nonblocking_device)
    if rt is None:
        raise ValueError("a collective on a device array needs the runtime's decision on CUDA-aware MPI: "
                         "call hpcgpu.init() first, or pass cuda_aware=True/False")
    return rt.cuda_aware, rt.cuda_aware and rt.nonblocking_device


def device_path(*, nonblocking: bool = False, cuda_aware: bool | None = None) -> str:
    """How device buffers travel in this process's collectives. Not collective.

    Parameters
    ----------
    nonblocking : bool, keyword-only
        For ``Ibcast`` and ``Iallreduce`` (a CUDA-aware MPI may stage those).
    cuda_aware : bool, optional
        An explicit decision, as the collectives take it (then MPI).

    Returns
    -------
    {"nccl", "aware", "staged"}
        ``"nccl"``: over NCCL (for every dtype and ``op`` it serves);
        ``"aware"``: device pointers to MPI; ``"staged"``: through pinned
        host memory.

    Raises
    ------
    ValueError
        No decision: no ``cuda_aware`` and no runtime yet.
    """
    rt = _context.current()
    if cuda_aware is None and rt is not None and rt.collectives == "nccl":
        return "nccl"
    aware, aware_nonblocking = cuda_awareness(cuda_aware)
    return "aware" if (aware_nonblocking if nonblocking else aware) else "staged"


def _over_nccl(comm, kind: str, send, recv, *, op=None, root=None, nonblocking=False, cuda_aware=None,
               what: str = ""):
    """The collective over NCCL when the runtime chose NCCL and it serves this call; None otherwise."""
    if cuda_aware is not None or not (_device.is_device_array(send) and _device.is_device_array(recv)):
        return None
    rt = _context.current()
    if rt is None or rt.collectives != "nccl":
        return None
    return _nccl.issue(comm, kind, send, recv, op=op, root=root, nonblocking=nonblocking, what=what)


def movable(a):
    """``a`` as a buffer MPI can move: 16-bit floats as their bit patterns (a ``uint16`` view), else ``a``.

    Not collective. bfloat16 (``ml_dtypes``) has no MPI datatype and NumPy
    does not export it through the buffer protocol; float16 has one in
    MPICH (``MPIX_C_FLOAT16``) but not in Open MPI 4 (``MPI_ERR_TYPE``).
    Copying bit patterns is exact for every operation that moves data
    (broadcast, send, gather); :func:`Allreduce` reduces them in float32.
    """
    return a.view(np.uint16) if a.dtype.name in _HALF else a


def _dispatch(call, bufs, *, cuda_aware: bool | None, nonblocking: bool = False, slot: str | None = None):
    """Call ``call(*buffers)`` with buffers MPI can take: the one CPU / CUDA-aware / staged branch.

    ``bufs`` is ``[(array, IN | OUT | INOUT), ...]``. Host arrays go as they
    are. Device arrays go as they are when MPI is CUDA-aware (for a
    non-blocking call: when it takes device memory in non-blocking
    collectives too), after the current stream is synchronized. Otherwise
    each is copied to its own pinned staging slot (the ones MPI reads), MPI
    runs on the host copies, and the ones MPI wrote are copied back: at once
    for a blocking call, at ``Wait`` for a non-blocking one (whose slots stay
    held until then). Returns ``call``'s result, or a :class:`Request` when
    ``nonblocking``.
    """
    bufs = [(movable(a), role) for a, role in bufs]  # Allreduce widens 16-bit floats before it gets here
    arrays = [a for a, _ in bufs]
    on_device = [_device.is_device_array(a) for a in arrays]
    if not any(on_device):
        result = call(*arrays)
        return Request(result) if nonblocking else result
    if not all(on_device):
        raise ValueError("buffers of one collective must all be host arrays or all device arrays")
    aware, aware_nonblocking = cuda_awareness(cuda_aware)
    if aware_nonblocking or (aware and not nonblocking):
        _device.synchronize()  # MPI reads memory, not the stream: every queued kernel must have landed
        result = call(*arrays)
        return Request(result) if nonblocking else result
    hosts, back, held = [], [], []
    for i, (a, role) in enumerate(bufs):
        if nonblocking:
            name = slot if (slot is not None and i == 0) else _device.acquire_slot(f"{slot or 'nb'}.")
        else:
            name = f"blocking{i}"
        h = _device.to_host(a, name) if role in (IN, INOUT) else _device.staging_buffer(a, name)
        hosts.append(h)
        if role in (OUT, INOUT):
            back.append((h, a))
        if nonblocking:
            _device.hold(name, True)
            held.append(name)
    result = call(*hosts)
    if nonblocking:
        return Request(result, back, held)
    for h, a in back:
        _device.from_host(h, a)
    return result


class Request:
    """A pending non-blocking collective; ``Wait()`` completes it.

    For staged device buffers, ``Wait`` also copies the host buffers back to
    the device and frees their staging slots, so the array holds the result
    only after ``Wait``.

    Parameters
    ----------
    req : mpi4py.MPI.Request, hpcgpu._nccl.Pending or None
        The MPI request, or a NCCL operation in flight (whose ``Wait``
        orders the current stream after it, without a host wait); ``None``:
        already complete, as at one rank.
    back : list of (numpy.ndarray, xp.ndarray)
        Host staging buffers to copy into device arrays at completion.
    held : list of str
        Staging slots to free at completion.
    """

    def __init__(self, req: MPI.Request | None, back=(), held=()):
        self._req, self._back, self._held = req, list(back), list(held)

    def Wait(self) -> None:
        """Complete the operation. Not collective.

        MPI: block until it is done (and the device copies made). NCCL:
        order the current stream after it, without a host wait.
        """
        if self._req is not None:
            self._req.Wait()
            self._req = None
        self._finish()

    def Test(self) -> bool:
        """True when done (then as ``Wait``); never blocks. Not collective."""
        if self._req is not None and not self._req.Test():
            return False
        self._req = None
        self._finish()
        return True

    def _finish(self) -> None:
        for h, a in self._back:
            _device.from_host(h, a)
        for name in self._held:
            _device.hold(name, False)
        self._back, self._held = [], []


def Allreduce(sendbuf, recvbuf=None, *, op: MPI.Op = MPI.SUM, comm: MPI.Intracomm | None = None,
              cuda_aware: bool | None = None):
    """Reduce ``sendbuf`` over all ranks; every rank gets the result.

    Collective: all ranks of ``comm`` must call it with arrays of the same
    shape and dtype.

    float16 and bfloat16 are reduced in float32 (widened exactly, rounded
    once at the end), so the result is the same under every MPI: Open MPI 4
    has no float16 datatype and no MPI has bfloat16. That moves twice the
    bytes of the 16-bit data.

    Parameters
    ----------
    sendbuf : xp.ndarray
        C-contiguous local contribution, any shape.
    recvbuf : xp.ndarray, optional
        Where the result goes, same shape and dtype as ``sendbuf``, on the
        same side (host or device). When omitted the reduction is in place
        (``MPI.IN_PLACE``) in ``sendbuf``.
    op : mpi4py.MPI.Op
        ``MPI.SUM`` by default.
    comm : mpi4py.MPI.Intracomm, keyword-only
        The runtime's private communicator by default.
    cuda_aware : bool, optional
        Whether device buffers may go straight to MPI; the runtime's
        decision by default (then :func:`hpcgpu.init` must have run). Given,
        device buffers go over MPI even where the runtime chose NCCL.

    Returns
    -------
    xp.ndarray
        ``recvbuf`` (or ``sendbuf`` when in place).

    Raises
    ------
    ValueError
        A buffer is not C-contiguous; host and device buffers are mixed; a
        device buffer without a runtime or ``cuda_aware``.
    """
    comm = default_comm() if comm is None else comm
    _check_contiguous("sendbuf", sendbuf)
    if recvbuf is not None:
        _check_contiguous("recvbuf", recvbuf)
    if sendbuf.dtype.name in _HALF and comm.Get_size() > 1:
        wide = Allreduce(sendbuf.astype(np.float32), op=op, comm=comm, cuda_aware=cuda_aware)
        out = sendbuf if recvbuf is None else recvbuf
        out[...] = wide.astype(out.dtype)
        return out
    if recvbuf is None:
        if comm.Get_size() > 1:
            if not _over_nccl(comm, "allReduce", sendbuf, sendbuf, op=op, cuda_aware=cuda_aware, what="Allreduce"):
                _dispatch(lambda b: comm.Allreduce(MPI.IN_PLACE, b, op=op), [(sendbuf, INOUT)],
                          cuda_aware=cuda_aware)
            _count(sendbuf.nbytes, sendbuf.nbytes)
        return sendbuf
    if comm.Get_size() == 1:
        recvbuf[...] = sendbuf
        return recvbuf
    if not _over_nccl(comm, "allReduce", sendbuf, recvbuf, op=op, cuda_aware=cuda_aware, what="Allreduce"):
        _dispatch(lambda s, r: comm.Allreduce(s, r, op=op), [(sendbuf, IN), (recvbuf, OUT)], cuda_aware=cuda_aware)
    _count(sendbuf.nbytes, recvbuf.nbytes)
    return recvbuf


def Iallreduce(buf, *, op: MPI.Op = MPI.SUM, comm: MPI.Intracomm | None = None, slot: str | None = None,
               cuda_aware: bool | None = None) -> Request:
    """Start an in-place reduction of ``buf`` over all ranks; returns a :class:`Request`.

    Collective (non-blocking): all ranks of ``comm`` must call it, in the
    same order as their other collectives on ``comm``. ``buf`` must not be
    touched until ``Wait``; it holds the reduction after ``Wait``.

    Parameters
    ----------
    buf : xp.ndarray
        C-contiguous, any shape; float16 and bfloat16 are refused (no MPI
        sums them: use :func:`Allreduce`, which widens them).
    op : mpi4py.MPI.Op
        ``MPI.SUM`` by default.
    comm : mpi4py.MPI.Intracomm, keyword-only
        The runtime's private communicator by default.
    slot : str, optional
        Staging-buffer name for a device buffer that must be staged (see
        :func:`Ibcast`).
    cuda_aware : bool, optional
        As in :func:`Ibcast`.

    Returns
    -------
    Request

    Raises
    ------
    ValueError
        As in :func:`Allreduce`, and for a 16-bit float ``buf``.
    RuntimeError
        ``slot`` is held by a request not yet waited for.
    """
    comm = default_comm() if comm is None else comm
    _check_contiguous("buf", buf)
    if buf.dtype.name in _HALF:
        raise ValueError(f"Iallreduce: no MPI sums {buf.dtype.name}; use Allreduce, which reduces it in float32")
    if comm.Get_size() == 1:
        return Request(None)
    _count(buf.nbytes, buf.nbytes)
    pending = _over_nccl(comm, "allReduce", buf, buf, op=op, nonblocking=True, cuda_aware=cuda_aware,
                         what="Iallreduce")
    if pending is not None:
        return Request(pending)
    return _dispatch(lambda b: comm.Iallreduce(MPI.IN_PLACE, b, op=op), [(buf, INOUT)], cuda_aware=cuda_aware,
                     nonblocking=True, slot=slot)


def Reduce_scatter_block(sendbuf, recvbuf, *, op: MPI.Op = MPI.SUM, comm: MPI.Intracomm | None = None,
                         cuda_aware: bool | None = None):
    """Reduce ``sendbuf`` over all ranks and leave block ``rank`` of the result in ``recvbuf``.

    Collective: all ranks of ``comm`` must call it, ``sendbuf`` of ``P``
    times ``recvbuf``'s size on every rank (the first block goes to rank 0).
    float16 and bfloat16 are refused (no MPI sums them).

    Parameters
    ----------
    sendbuf : xp.ndarray, shape (P * m,)
        C-contiguous; the local contribution.
    recvbuf : xp.ndarray, shape (m,)
        C-contiguous, same dtype and side (host or device).
    op : mpi4py.MPI.Op
        ``MPI.SUM`` by default.
    comm : mpi4py.MPI.Intracomm, keyword-only
        The runtime's private communicator by default.
    cuda_aware : bool, optional
        As in :func:`Allreduce`.

    Returns
    -------
    xp.ndarray
        ``recvbuf``.

    Raises
    ------
    ValueError
        As in :func:`Allreduce`; sizes that do not match; a 16-bit float.

    References
    ----------
    ZeRO stage 1 (Rajbhandari et al., SC 2020, section 5.1) reduces the
    gradient this way, each rank keeping the block it updates.
    """
    comm = default_comm() if comm is None else comm
    _check_contiguous("sendbuf", sendbuf)
    _check_contiguous("recvbuf", recvbuf)
    if sendbuf.size != comm.Get_size() * recvbuf.size:
        raise ValueError(f"Reduce_scatter_block: sendbuf of {sendbuf.size} elements is not {comm.Get_size()} "
                         f"blocks of {recvbuf.size}")
    if sendbuf.dtype.name in _HALF:
        raise ValueError(f"Reduce_scatter_block: no MPI sums {sendbuf.dtype.name}")
    if comm.Get_size() == 1:
        recvbuf[...] = sendbuf.reshape(recvbuf.shape)
        return recvbuf
    if not _over_nccl(comm, "reduceScatter", sendbuf, recvbuf, op=op, cuda_aware=cuda_aware,
                      what="Reduce_scatter_block"):
        _dispatch(lambda s, r: comm.Reduce_scatter_block(s, r, op=op), [(sendbuf, IN), (recvbuf, OUT)],
                  cuda_aware=cuda_aware)
    _count(sendbuf.nbytes - recvbuf.nbytes, recvbuf.nbytes)
    return recvbuf


def Bcast(buf, *, root: int = 0, comm: MPI.Intracomm | None = None, cuda_aware: bool | None = None):
    """Copy ``buf`` of rank ``root`` into ``buf`` of every rank, in place.

    Collective: all ranks of ``comm`` must call it with arrays of the same
    shape and dtype.

    Parameters
    ----------
    buf : xp.ndarray
        C-contiguous; read on ``root``, overwritten elsewhere.
    root : int
        Rank in ``comm`` that holds the data.
    comm : mpi4py.MPI.Intracomm, keyword-only
        The runtime's private communicator by default.
    cuda_aware : bool, optional
        As in :func:`Allreduce`.

    Returns
    -------
    xp.ndarray
        ``buf``.

    Raises
    ------
    ValueError
        As in :func:`Allreduce`.
    """
    comm = default_comm() if comm is None else comm
    _check_contiguous("buf", buf)
    if comm.Get_size() > 1:
        role = IN if comm.Get_rank() == root else OUT
        if not _over_nccl(comm, "bcast", buf, buf, root=root, cuda_aware=cuda_aware, what="Bcast"):
            _dispatch(lambda b: comm.Bcast(b, root=root), [(buf, role)], cuda_aware=cuda_aware)
        _count(buf.nbytes if role == IN else 0, buf.nbytes if role == OUT else 0)
    return buf


def Ibcast(buf, *, root: int = 0, comm: MPI.Intracomm | None = None, slot: str | None = None,
           cuda_aware: bool | None = None) -> Request:
    """Start a broadcast of ``buf`` from ``root``; returns a :class:`Request`.

    Collective (non-blocking): all ranks of ``comm`` must call it, in the
    same order as their other collectives on ``comm``. ``buf`` must not be
    touched until ``Wait``.

    Parameters
    ----------
    buf : xp.ndarray
        C-contiguous; read on ``root``, overwritten elsewhere after ``Wait``.
    root : int
        Rank in ``comm`` that holds the data.
    comm : mpi4py.MPI.Intracomm, keyword-only
        The runtime's private communicator by default.
    slot : str, optional
        Staging-buffer name for a device buffer that must be staged. By
        default each request takes a free slot of its own (one growable
        pinned buffer each, reused once the request is complete); a named
        slot that a request still holds is an error.
    cuda_aware : bool, optional
        As in :func:`Allreduce`. Even a CUDA-aware MPI gets staged buffers
        here when it does not take device memory in non-blocking collectives
        (see ``hpcgpu.Runtime.nonblocking_device``).

    Returns
    -------
    Request

    Raises
    ------
    ValueError
        As in :func:`Allreduce`.
    RuntimeError
        ``slot`` is held by a request not yet waited for.
    """
    comm = default_comm() if comm is None else comm
    _check_contiguous("buf", buf)
    if comm.Get_size() == 1:
        return Request(None)
    role = IN if comm.Get_rank() == root else OUT
    _count(buf.nbytes if role == IN else 0, buf.nbytes if role == OUT else 0)
    pending = _over_nccl(comm, "bcast", buf, buf, root=root, nonblocking=True, cuda_aware=cuda_aware, what="Ibcast")
    if pending is not None:
        return Request(pending)
    return _dispatch(lambda b: comm.Ibcast(b, root=root), [(buf, role)], cuda_aware=cuda_aware,
                     nonblocking=True, slot=slot)


def Allgather(sendbuf, recvbuf, *, comm: MPI.Intracomm | None = None, cuda_aware: bool | None = None):
    """Gather equal-size ``sendbuf`` of every rank into ``recvbuf`` on all ranks.

    Collective: all ranks of ``comm`` must call it.

    Parameters
    ----------
    sendbuf : xp.ndarray
        Local contribution, shape ``s``, C-contiguous.
    recvbuf : xp.ndarray
        Shape ``(comm.size, *s)``, same dtype and side; rank ``r``'s part at ``[r]``.
    comm : mpi4py.MPI.Intracomm, keyword-only
        The runtime's private communicator by default.
    cuda_aware : bool, optional
        As in :func:`Allreduce`.

    Returns
    -------
    xp.ndarray
        ``recvbuf``.

    Raises
    ------
    ValueError
        As in :func:`Allreduce`.
    """
    comm = default_comm() if comm is None else comm
    _check_contiguous("sendbuf", sendbuf)
    _check_contiguous("recvbuf", recvbuf)
    if comm.Get_size() == 1:
        recvbuf[0] = sendbuf
        return recvbuf
    if not _over_nccl(comm, "allGather", sendbuf, recvbuf, cuda_aware=cuda_aware, what="Allgather"):
        _dispatch(lambda s, r: comm.Allgather(s, r), [(sendbuf, IN), (recvbuf, OUT)], cuda_aware=cuda_aware)
    _count(sendbuf.nbytes, recvbuf.nbytes - sendbuf.nbytes)
    return recvbuf


def Alltoallv(sendbuf, sendcounts, recvbuf, recvcounts, *, comm: MPI.Intracomm | None = None,
              cuda_aware: bool | None = None):
    """Every rank sends ``sendcounts[q]`` elements to rank ``q``, packed in rank order.

    Collective: all ranks of ``comm`` must call it; ``sendcounts[q]`` on rank
    ``p`` must equal ``recvcounts[p]`` on rank ``q``.

    Parameters
    ----------
    sendbuf : xp.ndarray, 1-D
        C-contiguous; rank ``q``'s elements at ``sum(sendcounts[:q])``.
    sendcounts : sequence of int, length P
        Elements for each rank (its own included: it is copied through MPI).
    recvbuf : xp.ndarray, 1-D
        C-contiguous, same dtype and side (host or device); rank ``p``'s
        elements arrive at ``sum(recvcounts[:p])``.
    recvcounts : sequence of int, length P
    comm : mpi4py.MPI.Intracomm, keyword-only
        The runtime's private communicator by default.
    cuda_aware : bool, optional
        As in :func:`Allreduce`.

    Returns
    -------
    xp.ndarray
        ``recvbuf``.

    Raises
    ------
    ValueError
        As in :func:`Allreduce`; counts that do not fit the buffers.
    """
    comm = default_comm() if comm is None else comm
    _check_contiguous("sendbuf", sendbuf)
    _check_contiguous("recvbuf", recvbuf)
    sc, rc = np.asarray(sendcounts, np.int64), np.asarray(recvcounts, np.int64)
    if sc.size != comm.Get_size() or rc.size != comm.Get_size() or sc.sum() > sendbuf.size \
            or rc.sum() > recvbuf.size:
        raise ValueError(f"Alltoallv: counts {sc.tolist()} / {rc.tolist()} do not fit buffers of {sendbuf.size} "
                         f"and {recvbuf.size} elements over {comm.Get_size()} ranks")
    sd, rd = np.concatenate([[0], np.cumsum(sc)[:-1]]), np.concatenate([[0], np.cumsum(rc)[:-1]])
    if comm.Get_size() == 1:
        recvbuf[: rc[0]] = sendbuf[: sc[0]]
        return recvbuf
    _dispatch(lambda s, r: comm.Alltoallv([s, (sc, sd)], [r, (rc, rd)]), [(sendbuf, IN), (recvbuf, OUT)],
              cuda_aware=cuda_aware)
    me, item = comm.Get_rank(), sendbuf.itemsize
    _count((sc.sum() - sc[me]) * item, (rc.sum() - rc[me]) * item)
    return recvbuf


