"""File helpers: rank-0 I/O with an agreed outcome, atomic writes, checks done before any communication."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

from .comm import agree

__all__ = ["on_root", "atomic_path", "temp_beside", "publish", "writable_error", "shared_dir_error", "open_hdf5",
           "write_attrs"]


def on_root(fn: Callable[[], Any], *, comm, root: int = 0, catch: tuple = (OSError,),
            error: Callable[[BaseException], BaseException] | None = None, bcast: bool = False) -> Any:
    """Rank ``root`` calls ``fn()``; every rank learns whether it worked.

    Collective over ``comm``. The one way hpcgpu does I/O from one rank:
    writing a result or a checkpoint, reading a checkpoint, creating a
    temporary file. An exception of a type in ``catch`` becomes an error
    every rank raises (:func:`hpcgpu.comm.agree`), so nobody waits in the
    next collective for a rank that gave up. Any other exception propagates
    on ``root`` alone: it is unexpected, and the command-line guard aborts
    the job.

    Parameters
    ----------
    fn : callable
        Called with no arguments on ``root`` only.
    comm : mpi4py.MPI.Intracomm, keyword-only
    root : int
    catch : tuple of exception types
        The failures that are the user's to fix (a path that cannot be
        written, a corrupt file).
    error : callable, optional
        Makes the error every rank raises from the caught one (to name the
        option and the path); the caught one itself by default.
    bcast : bool
        Broadcast ``fn``'s result (pickled) to every rank.

    Returns
    -------
    object
        ``fn()``'s result on ``root`` (on every rank with ``bcast``), else ``None``.

    Raises
    ------
    Exception
        The agreed error, on every rank, when ``fn`` raised one of ``catch``.
    """
    result, err = None, None
    if comm.rank == root:
        try:
            result = fn()
        except catch as e:
            err = error(e) if error is not None else e
    agree(err, comm=comm)
    return comm.bcast(result, root=root) if bcast else result


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[str]:
    """Yield a temporary file name beside ``path``; rename it to ``path`` on success.

    Not collective: the one rank that writes calls it. The temporary file
    lies in the same directory (so the rename is atomic on POSIX file
    systems) and is removed if the block raises, so a crash never leaves a
    half-written file where a good one was, and never removes the good one.

    Parameters
    ----------
    path : str or os.PathLike
        The final name.

    Yields
    ------
    str
        The temporary name to write to.
    """
    tmp = temp_beside(path)
    try:
        yield tmp
        publish(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def temp_beside(path: str | os.PathLike) -> str:
    """Create an empty temporary file ``.NAME.XXXX.tmp`` in ``path``'s directory; return its name.

    Not collective. Same directory, so :func:`publish` is an atomic rename.

    Parameters
    ----------
    path : str or os.PathLike
        The final name; its directory must exist.

    Returns
    -------
    str
        The temporary file's name (mode 0600, empty, closed); the caller
        publishes or removes it.

    Raises
    ------
    OSError
        The directory cannot be written.
    """
    path = os.fspath(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp",
                               dir=os.path.dirname(os.path.abspath(path)))
    os.close(fd)
    return tmp


def publish(tmp: str, path: str | os.PathLike) -> None:
    """Give the finished ``tmp`` the mode a plain ``open()`` would, and rename it to ``path``.

    Not collective. ``mkstemp`` makes files private (0600); the rename is
    atomic, so ``path`` is either the old file or the complete new one.

    Parameters
    ----------
    tmp : str
        The complete temporary file, normally from :func:`temp_beside`.
    path : str or os.PathLike
        The final name, on the same file system as ``tmp``; replaced if it exists.

    Raises
    ------
    OSError
        The rename failed (``tmp`` is left for the caller to remove).
    """
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    os.replace(tmp, os.fspath(path))


def writable_error(path: str | os.PathLike, what: str = "--out") -> OSError | None:
    """Check that ``path`` can be created, before any work is done.

    Creates missing parent directories and a probe file, then removes the
    probe. Not collective. Nothing is raised, so the caller can agree on the
    error first.

    Parameters
    ----------
    path : str or os.PathLike
        The file to be written later.
    what : str
        How the message names ``path`` (an option name such as ``--out``).

    Returns
    -------
    OSError or None
        An error naming ``what`` and the path, or ``None`` when writable:
        ``IsADirectoryError`` when ``path`` is a directory,
        ``PermissionError`` when its directory cannot be created or written.
    """
    path = os.fspath(path)
    d = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        return IsADirectoryError(f"{what} {path}: is a directory")
    try:
        os.makedirs(d, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".hpcgpu-probe.", dir=d)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        return PermissionError(f"{what} {path}: cannot write in {d} ({e.strerror or e})")
    return None


def shared_dir_error(path: str | os.PathLike, comm, what: str = "--out") -> OSError | None:
    """Check that every node sees the same directory for ``path``: the one rank 0 will write in.

    Collective over ``comm``; call it after rank 0's :func:`writable_error`
    passed. With all ranks on one host it returns at once. Otherwise rank 0
    creates a probe file beside ``path``, every rank looks for it, and
    rank 0 removes it. A directory that is node-local on some node (``/tmp``,
    a local scratch disk) would let a file written by several ranks be
    written in pieces on several nodes, and a checkpoint written on one node
    be missing when a requeued job's rank 0 lands on another.

    Parameters
    ----------
    path : str or os.PathLike
        The file to be written.
    comm : mpi4py.MPI.Intracomm
    what : str
        How the message names ``path``.

    Returns
    -------
    OSError or None
        The same on every rank: an error naming the first rank (and host)
        that does not see rank 0's probe, or ``None``.
    """
    import socket

    hosts = comm.allgather(socket.gethostname())
    if len(set(hosts)) == 1:
        return None
    d = os.path.dirname(os.path.abspath(os.fspath(path)))
    probe = None
    if comm.rank == 0:
        try:
            fd, probe = tempfile.mkstemp(prefix=".hpcgpu-shared.", dir=d)
            os.close(fd)
        except OSError:
            probe = None
    probe = comm.bcast(probe, root=0)
    if probe is None:
        return None  # rank 0 cannot write there: writable_error says so
    seen = comm.allgather(os.path.exists(probe))
    if comm.rank == 0:
        with contextlib.suppress(OSError):
            os.unlink(probe)
    if all(seen):
        return None
    r = seen.index(False)
    return OSError(f"{what} {os.fspath(path)}: {d} is not the same directory on every node (rank {r} on "
                   f"{hosts[r]} does not see a file rank 0 on {hosts[0]} made there): outputs and checkpoints "
                   "must be on a file system that every node shares")


def open_hdf5(path: str, what: str = ""):
    """Open ``path`` read-only for checks done before any communication.

    Not collective. Nothing is raised, so the caller can agree on the error
    first.

    Parameters
    ----------
    path : str
        The HDF5 file.
    what : str
        Start of the error message (an option name such as ``--data``),
        followed by the path; the path alone when empty.

    Returns
    -------
    (h5py.File, None) or (None, Exception)
        The open file, which the caller closes; or a ``FileNotFoundError``
        (no file) or ``ValueError`` (not HDF5) naming ``what`` and the path.
    """
    import h5py

    label = f"{what} {path}" if what else str(path)
    if not os.path.exists(path):
        return None, FileNotFoundError(f"{label}: no such file")
    try:
        return h5py.File(path, "r"), None
    except OSError as e:
        return None, ValueError(f"{label}: not a readable HDF5 file ({e})")


def write_attrs(obj, attrs: dict) -> None:
    """Write provenance ``attrs`` on an h5py file, group or dataset, so that no value breaks the write.

    Not collective. HDF5 cannot store a NUL byte in a variable-length string
    (Open MPI's version string ends with one: every training run on Open MPI
    lost its result to it): strings are cleaned of NULs, ``None`` becomes
    ``""``, and anything else h5py cannot store is written as its ``str()``.

    Parameters
    ----------
    obj : h5py.File, h5py.Group or h5py.Dataset
    attrs : dict
        Attribute name to value (str, numbers, NumPy arrays, None).
    """
    for key, value in attrs.items():
        if value is None:
            value = ""
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        if isinstance(value, str):
            value = value.replace("\x00", "")
        try:
            obj.attrs[key] = value
        except (TypeError, ValueError):
            obj.attrs[key] = str(value).replace("\x00", "")
