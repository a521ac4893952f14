"""Buffer collectives on ``xp`` arrays, and collective error agreement.

A NumPy array goes to MPI as it is. A CuPy array goes to MPI directly when the
runtime found MPI CUDA-aware, after the current stream is synchronized (MPI
must not read a buffer a kernel is still writing); otherwise it is staged
through a pinned host buffer and copied back. The choice is made here, once,
so the trainer and the matrix multiply never see it.

All functions are collective over ``comm`` (keyword-only, the runtime's
private communicator by default) and follow MPI's argument names.
"""

from __future__ import annotations

from mpi4py import MPI

from . import _device

__all__ = ["Allreduce", "Bcast", "Ibcast", "Allgather", "agree", "default_comm"]


def default_comm() -> MPI.Intracomm:
    """The runtime's private communicator (``init()`` on first use)."""
    from .runtime import get_runtime

    return get_runtime().comm


def _cuda_aware() -> bool:
    from .runtime import get_runtime

    return get_runtime().cuda_aware


def _check_contiguous(name: str, a) -> None:
    flags = getattr(a, "flags", None)
    if flags is not None and not flags["C_CONTIGUOUS"]:
        raise ValueError(f"{name} must be C-contiguous")


def Allreduce(sendbuf, recvbuf=None, *, op: MPI.Op = MPI.SUM, comm: MPI.Intracomm | None = None):
    """Reduce ``sendbuf`` over all ranks; every rank gets the result.

    Collective: all ranks of ``comm`` must call it with arrays of the same
    shape and dtype.

    Parameters
    ----------
    sendbuf : xp.ndarray
        C-contiguous local contribution, any shape.
    recvbuf : xp.ndarray, optional
        Where the result goes, same shape and dtype as ``sendbuf``. When
        omitted the reduction is in place (``MPI.IN_PLACE``) in ``sendbuf``.
    op : mpi4py.MPI.Op
        ``MPI.SUM`` by default.
    comm : mpi4py.MPI.Intracomm, keyword-only

    Returns
    -------
    xp.ndarray
        ``recvbuf`` (or ``sendbuf`` when in place).
    """
    comm = default_comm() if comm is None else comm
    inplace = recvbuf is None
    _check_contiguous("sendbuf", sendbuf)
    if not _device.is_device_array(sendbuf):
        comm.Allreduce(MPI.IN_PLACE if inplace else sendbuf, sendbuf if inplace else recvbuf, op=op)
        return sendbuf if inplace else recvbuf
    out = sendbuf if inplace else recvbuf
    if _cuda_aware():
        _device.synchronize()
        comm.Allreduce(MPI.IN_PLACE if inplace else sendbuf, out, op=op)
        return out
    host = _device.to_host(sendbuf, "send")
    comm.Allreduce(MPI.IN_PLACE, host, op=op)
    _device.from_host(host, out)
    return out


def Bcast(buf, *, root: int = 0, comm: MPI.Intracomm | None = None):
    """Copy ``buf`` of rank ``root`` into ``buf`` of every rank, in place.

    Collective: all ranks of ``comm`` must call it with arrays of the same
    shape and dtype.

    Parameters
    ----------
    buf : xp.ndarray
        C-contiguous; read on ``root``, overwritten elsewhere.
    root : int
    comm : mpi4py.MPI.Intracomm, keyword-only

    Returns
    -------
    xp.ndarray
        ``buf``.
    """
    comm = default_comm() if comm is None else comm
    _check_contiguous("buf", buf)
    if not _device.is_device_array(buf):
        comm.Bcast(buf, root=root)
        return buf
    if _cuda_aware():
        _device.synchronize()
        comm.Bcast(buf, root=root)
        return buf
    host = _device.to_host(buf, "bcast") if comm.rank == root else _device.staging_buffer(buf, "bcast")
    comm.Bcast(host, root=root)
    if comm.rank != root:
        _device.from_host(host, buf)
    return buf


class Request:
    """A pending non-blocking collective; ``Wait()`` completes it.

    For a staged device buffer, ``Wait`` also copies the host buffer back to
    the device, so the array holds the result only after ``Wait``.
    """

    def __init__(self, req: MPI.Request, host=None, buf=None):
        self._req, self._host, self._buf = req, host, buf

    def Wait(self) -> None:
        """Block until the operation is done (and the device copy made)."""
        self._req.Wait()
        if self._host is not None:
            _device.from_host(self._host, self._buf)
            self._host = None

    def Test(self) -> bool:
        """True when done; then as ``Wait``."""
        if self._req.Test():
            self.Wait()
            return True
        return False


def Ibcast(buf, *, root: int = 0, comm: MPI.Intracomm | None = None, slot: str = "ibcast") -> Request:
    """Start a broadcast of ``buf`` from ``root``; returns a :class:`Request`.

    Collective (non-blocking): all ranks of ``comm`` must call it, in the
    same order as their other collectives on ``comm``. ``buf`` must not be
    touched until ``Wait``.

    Parameters
    ----------
    buf : xp.ndarray
        C-contiguous; read on ``root``, overwritten elsewhere after ``Wait``.
    root : int
    comm : mpi4py.MPI.Intracomm, keyword-only
    slot : str
        Staging-buffer name for a non-CUDA-aware MPI: broadcasts in flight at
        the same time need different slots.
    """
    comm = default_comm() if comm is None else comm
    _check_contiguous("buf", buf)
    if not _device.is_device_array(buf):
        return Request(comm.Ibcast(buf, root=root))
    if _cuda_aware():
        _device.synchronize()
        return Request(comm.Ibcast(buf, root=root))
    if comm.rank == root:
        host = _device.to_host(buf, slot)
        return Request(comm.Ibcast(host, root=root))
    host = _device.staging_buffer(buf, slot)
    return Request(comm.Ibcast(host, root=root), host, buf)


def Allgather(sendbuf, recvbuf, *, comm: MPI.Intracomm | None = None):
    """Gather equal-size ``sendbuf`` of every rank into ``recvbuf`` on all ranks.

    Collective: all ranks of ``comm`` must call it.

    Parameters
    ----------
    sendbuf : xp.ndarray
        Local contribution, shape ``s``.
    recvbuf : xp.ndarray
        Shape ``(comm.size, *s)``, same dtype; rank ``r``'s part at ``[r]``.

    Returns
    -------
    xp.ndarray
        ``recvbuf``.
    """
    comm = default_comm() if comm is None else comm
    _check_contiguous("sendbuf", sendbuf)
    _check_contiguous("recvbuf", recvbuf)
    if not _device.is_device_array(sendbuf):
        comm.Allgather(sendbuf, recvbuf)
        return recvbuf
    if _cuda_aware():
        _device.synchronize()
        comm.Allgather(sendbuf, recvbuf)
        return recvbuf
    host_s = _device.to_host(sendbuf, "send")
    host_r = _device.staging_buffer(recvbuf, "recv")
    comm.Allgather(host_s, host_r)
    _device.from_host(host_r, recvbuf)
    return recvbuf


def agree(error: BaseException | None, *, comm: MPI.Intracomm | None = None) -> None:
    """Make every rank raise the same error when any rank has one.

    Collective: all ranks of ``comm`` must call it, each with the error it
    found in its own checks (or ``None``). When no rank has an error, all
    return. Otherwise every rank raises an exception of the type of the
    lowest failing rank's error, with that rank's message; its attribute
    ``collective`` is ``True``, which tells the command-line guard that all
    ranks know and a clean exit (status 2) is safe.

    Parameters
    ----------
    error : BaseException or None
    comm : mpi4py.MPI.Intracomm, keyword-only

    Raises
    ------
    Exception
        As described above.
    """
    comm = default_comm() if comm is None else comm
    mine = None if error is None else (type(error), str(error))
    for found in comm.allgather(mine):
        if found is None:
            continue
        cls, msg = found
        try:
            exc = cls(msg)
        except Exception:
            exc = RuntimeError(msg)
        exc.collective = True
        if error is not None and type(error) is cls and str(error) == msg:
            raise exc from error
        raise exc
