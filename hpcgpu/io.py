"""File helpers: rank-0 I/O with an agreed outcome, atomic writes, checks done before any communication."""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

from .errors import agree

__all__ = ["on_root", "atomic_path", "temp_beside", "publish", "writable_error", "held_error",
           "shared_dir_error", "open_hdf5", "write_attrs", "temp_keeping", "one_line",
           "remove_stale_temporaries", "split_spec", "new_hdf5", "WRITE_ERRORS", "source_error", "MARK_ATTR",
           "read_weights", "reserve", "no_space", "linked_sources", "TEMP_EXTRA", "SLACK"]

MARK_ATTR = "hpcgpu_version"
"""The root attribute of every HDF5 file hpcgpu writes (and the attribute of a dataset it adds to a file): the
output policy (``hpcgpu._outputs``) replaces only what carries it, unless the user says ``--overwrite``."""

WRITE_ERRORS = (OSError, RuntimeError)
"""What writing a file raises when the file system fails it: ``OSError``, and ``RuntimeError`` from h5py for some
of HDF5's (a full disk or a file-size limit at a flush or close: "unable to extend file properly")."""


def on_root(fn: Callable[[], Any], *, comm, root: int = 0, catch: tuple = (OSError,),
            error: Callable[[BaseException], BaseException] | None = None, bcast: bool = False) -> Any:
    """Rank ``root`` calls ``fn()``; every rank learns whether it worked.

    Collective over ``comm``. The one way hpcgpu does I/O from one rank:
    writing a result or a checkpoint, reading a checkpoint, creating a
    temporary file. An exception of a type in ``catch`` becomes an error
    every rank raises (:func:`hpcgpu.errors.agree`), so nobody waits in the
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

    Raises
    ------
    OSError
        What the block raised; a full disk (or quota) as ``"No space left
        on device: nothing was written"``, for the caller to name the file.
    """
    tmp = temp_beside(path)
    try:
        yield tmp
        publish(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        full = no_space(e)
        if full is not None:  # one line, without the temporary's name: the caller names the file
            err = OSError(f"{full}: nothing was written")
            err.errno = errno.ENOSPC
            raise err from None
        raise


@contextlib.contextmanager
def new_hdf5(path: str | os.PathLike) -> Iterator[Any]:
    """Create the HDF5 file ``path`` (mode ``"w"``) and yield it; a write the file system refuses is an error.

    Not collective: the one rank that writes calls it, usually on :func:`atomic_path`'s temporary name.
    The file is built as an image in memory (``h5py.File`` on a :class:`io.BytesIO`) and written to
    ``path`` as plain bytes when the block ends: HDF5 (1.10 and 2.0 alike) crashes (SIGSEGV, after
    "Can't decrement id ref count") when the objects of a file whose write failed on a full disk are
    released, where the process must instead end with one line and the old file intact. The cost is the
    file's size in memory while it is written.

    Parameters
    ----------
    path : str or os.PathLike
        The file to create (replaced if it exists).

    Yields
    ------
    h5py.File
        Open for writing, with hpcgpu's mark on its root (:data:`MARK_ATTR`).

    Raises
    ------
    OSError
        ``path`` cannot be written (a full disk, no permission).
    """
    import io as _io

    import h5py

    from ._version import __version__

    image = _io.BytesIO()
    with h5py.File(image, "w") as f:
        f.attrs[MARK_ATTR] = __version__  # the output policy's mark: hpcgpu wrote this file
        yield f
    with open(path, "wb") as out:
        out.write(image.getbuffer())


TEMP_EXTRA = len(".") + len(".XXXXXXXX.tmp")
"""How much longer than its file's name a temporary of :func:`temp_beside` is: ``.NAME.`` and 8 random
characters and ``.tmp`` (``tempfile.mkstemp``'s)."""


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


_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)  # the file system has no room for what is written


def no_space(e: BaseException) -> str | None:
    """Whether a write failed for want of room: the words of its ``errno``, or None. Not collective.

    Parameters
    ----------
    e : BaseException
        What the write raised: an ``OSError`` with ``errno`` ENOSPC, EDQUOT
        or EFBIG, or an h5py error (``OSError``, ``RuntimeError``) whose text
        names one of them.

    Returns
    -------
    str or None
        ``"No space left on device"``, ``"Disk quota exceeded"`` or ``"File
        too large"``; None for any other failure.
    """
    if not isinstance(e, (OSError, RuntimeError)):
        return None
    if getattr(e, "errno", None) in _FULL:
        return os.strerror(e.errno)
    return next((os.strerror(c) for c in _FULL if os.strerror(c) in str(e)), None)


def reserve(path: str, nbytes: int) -> None:
    """Allocate the first ``nbytes`` of the existing file ``path`` on its disk before HDF5 writes into it.

    Not collective. HDF5 (1.10 to 2.0) crashes (SIGSEGV) when a file whose
    write failed for want of space is closed or its objects released, and
    h5py reports a close that failed so only as an ignored exception, after
    which a half-written file looks whole. Blocks allocated first
    (``posix_fallocate``) cannot run out: a full disk is found here, before
    HDF5 writes anything. HDF5 truncates the file to its end of data when it
    closes it, so the space a dataset created with early allocation occupies
    stays allocated for the ranks that write into it later. A file system
    without ``fallocate`` (glibc then writes zeros) or one that refuses it
    (``EOPNOTSUPP``) reserves nothing: the file is written without a reservation.

    Parameters
    ----------
    path : str
        The temporary file HDF5 will write (:func:`temp_beside`).
    nbytes : int
        Its size when written, at least.

    Raises
    ------
    OSError
        ``errno`` ENOSPC (or EDQUOT, EFBIG): there is no room.
    """
    fd = os.open(path, os.O_RDWR)
    try:
        os.posix_fallocate(fd, 0, max(1, int(nbytes)))
    except OSError as e:
        if e.errno not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            raise
    finally:
        os.close(fd)


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


def _file_locking() -> bool:
    """Whether HDF5 locks the files it opens here (``HDF5_USE_FILE_LOCKING`` not FALSE, as HDF5 reads it)."""
    return os.environ.get("HDF5_USE_FILE_LOCKING", "").strip().upper() not in ("FALSE", "0")


def _writers_on_this_node(path: str) -> list[int]:
    """PIDs of this node's other processes that have ``path`` open for writing (Linux ``/proc``; [] elsewhere)."""
    try:
        target = os.stat(path)
        pids = [p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]
    except OSError:
        return []
    found = []
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:  # gone, or another user's: not visible
            continue
        for fd in fds:
            try:
                st = os.stat(f"/proc/{pid}/fd/{fd}")
                if (st.st_dev, st.st_ino) != (target.st_dev, target.st_ino):
                    continue
                with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                    flags = next(int(line.split()[1], 8) for line in f if line.startswith("flags:"))
            except (OSError, StopIteration, ValueError, IndexError):
                continue
            if flags & os.O_ACCMODE in (os.O_WRONLY, os.O_RDWR):
                found.append(int(pid))
                break
    return found


def held_error(path: str | os.PathLike, what: str = "--out") -> OSError | None:
    """Whether another process holds ``path`` open for writing: replacing it would lose what it writes.

    Not collective (rank 0 calls it before any work). An HDF5 writer holds
    an exclusive lock on its file (``flock``, HDF5 >= 1.10), which a shared
    lock request sees on any node where the file system supports locks.
    Where the site turned HDF5's locking off (``HDF5_USE_FILE_LOCKING=FALSE``),
    or the file system has no locks, writers take none: then this node's
    processes are looked at instead (``/proc/PID/fdinfo``, Linux), and a
    writer on another node cannot be seen. A process that has the file open
    for reading does not stop a write: the new file replaces the name, and
    the reader keeps the old one whole.

    Parameters
    ----------
    path : str or os.PathLike
        The output file; nothing is checked when it does not exist or is not
        a regular file (``/dev/null``).
    what : str
        How the message names ``path`` (an option such as ``--out``).

    Returns
    -------
    OSError or None
        An error naming ``what``, the path and how the writer was seen; ``None``.
    """
    import fcntl

    path = os.fspath(path)
    if not os.path.isfile(path):  # nothing to lose: no file, or a device (/dev/null) many processes write
        return None
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None  # unreadable: writable_error and the write itself say so
    locks = _file_locking()
    try:
        if locks:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                fcntl.flock(fd, fcntl.LOCK_UN)
            except BlockingIOError:
                return OSError(f"{what} {path}: another process has it open for writing (its HDF5 file lock is "
                               "held): close it there first, or write elsewhere")
            except OSError as e:
                if e.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                    raise
                locks = False  # a file system without locks: look at this node's processes
    finally:
        os.close(fd)
    if not locks:
        pids = _writers_on_this_node(path)
        if pids:
            return OSError(f"{what} {path}: process {pids[0]} on this node has it open for writing "
                           "(HDF5_USE_FILE_LOCKING=FALSE or no file locks: only this node's processes are seen): "
                           "close it there first, or write elsewhere")
    return None


def remove_stale_temporaries(path: str | os.PathLike) -> list[str]:
    """Remove the temporary files a killed writer of ``path`` left beside it; return their names.

    Not collective: the rank that writes ``path`` (rank 0) calls it before
    its run. The temporaries are :func:`temp_beside`'s, ``.NAME.*.tmp`` in
    ``path``'s directory; one that another process holds open for writing
    (a writer of the same output that is still alive) is left alone.

    Parameters
    ----------
    path : str or os.PathLike
        An output of this run.

    Returns
    -------
    list of str
        The files removed.
    """
    import glob

    path = os.fspath(path)
    d = os.path.dirname(os.path.abspath(path))
    removed = []
    for stale in sorted(glob.glob(os.path.join(glob.escape(d), f".{glob.escape(os.path.basename(path))}.*.tmp"))):
        if held_error(stale) is None:
            with contextlib.suppress(OSError):
                os.unlink(stale)
                removed.append(stale)
    return removed


def split_spec(spec: str, default: str | None) -> tuple[str, str | None]:
    """Split a command line's ``FILE[:DATASET]``. Not collective.

    ``"a.h5:/X"`` gives ``("a.h5", "/X")`` and ``"a.h5"`` gives ``("a.h5", default)``; a path that exists as
    given is a file, colon and all.

    Parameters
    ----------
    spec : str
        ``FILE`` or ``FILE:DATASET``.
    default : str or None
        The dataset when ``spec`` names none (or ends with a colon).

    Returns
    -------
    tuple of (str, str or None)
        The file's path and the dataset's name.
    """
    if ":" in spec and not os.path.exists(spec):
        path, name = spec.rsplit(":", 1)
        return path, (name or default)
    return spec, default


def temp_keeping(path: str | os.PathLike, dataset: str, what: str = "output") -> str:
    """A temporary file beside ``path`` holding everything of ``path`` except ``dataset``. Not collective.

    The first half of adding or replacing one dataset atomically: the
    caller writes ``dataset`` into the temporary, then :func:`publish`
    renames it over ``path``. The file's other objects are copied with
    their attributes (HDF5's ``H5Ocopy``), soft and external links as
    links, the root attributes as they were; a replaced dataset's space is
    not carried over. Without ``path`` the temporary is a new, empty HDF5
    file. Costs a copy of the file's other objects: one file of many large
    matrices is best written once each, not rewritten for every one.

    Parameters
    ----------
    path : str or os.PathLike
        The final file; it may not exist yet.
    dataset : str
        The path of the dataset that will be written (and is not copied);
        the groups above it are kept, with their attributes.
    what : str
        How the message names ``path``.

    Returns
    -------
    str
        The temporary file's name (closed).

    Raises
    ------
    OSError
        ``path`` exists but is not HDF5 (it is never replaced then), or
        the temporary cannot be written; nothing is left behind.
    """
    import h5py

    path = os.fspath(path)
    tmp = temp_beside(path)
    try:
        if not os.path.exists(path):
            _empty_hdf5(tmp, 0)  # the dataset's room is its writer's to reserve
            return tmp
        try:
            src = h5py.File(path, "r")
        except OSError as e:
            raise OSError(f"{what} {path}: exists and is not a readable HDF5 file ({one_line(e)}): it is not "
                          "replaced; remove it or write elsewhere") from None
        with src:
            there = src.get(dataset)
            if there is not None and not isinstance(there, h5py.Dataset):
                raise OSError(f"{what} {path}:{dataset}: is a {type(there).__name__.lower()} in that file, not a "
                              "dataset: it is not replaced; name another dataset")
            _empty_hdf5(tmp, os.path.getsize(path) + SLACK)  # the copy's room first: HDF5 never finds a full disk
            with h5py.File(tmp, "r+") as dst:
                _copy_group(src["/"], dst["/"], "/" + dataset.strip("/"))
        return tmp
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


SLACK = 256 << 10
"""Bytes reserved (:func:`reserve`) beyond the data HDF5 writes: the file's metadata, a dataset's header and
attributes."""


def _empty_hdf5(tmp: str, room: int) -> None:
    """Make the empty file ``tmp`` an empty HDF5 file, ``room`` bytes (if any) allocated on its disk. Not collective.

    The file is built in memory and written as bytes into the reserved space (HDF5's own create would truncate
    the file and give the reservation back), so that no HDF5 write meets a full disk (:func:`reserve`).
    """
    import io as _io

    import h5py

    if room:
        reserve(tmp, room)
    image = _io.BytesIO()
    with h5py.File(image, "w"):
        pass
    with open(tmp, "r+b") as f:
        f.write(image.getbuffer())


def _copy_group(src, dst, skip: str) -> None:
    """Copy ``src``'s attributes and members into ``dst``, all but the object at ``skip`` (groups above it kept)."""
    import h5py

    for k in src.attrs:
        dst.attrs[k] = src.attrs[k]
    for name in src:
        here = src.name.rstrip("/") + "/" + name
        if here == skip:
            continue
        link = src.get(name, getlink=True)
        if isinstance(link, h5py.SoftLink):
            dst[name] = h5py.SoftLink(link.path)
        elif isinstance(link, h5py.ExternalLink):
            dst[name] = h5py.ExternalLink(link.filename, link.path)
        elif skip.startswith(here + "/") and isinstance(src[name], h5py.Group):
            _copy_group(src[name], dst.create_group(name), skip)
        else:
            src.copy(name, dst, name=name)


def one_line(e: BaseException | str) -> str:
    """An exception's message (or a text) on one line: libraries' messages (HDF5's) may hold newlines.

    Not collective.

    Parameters
    ----------
    e : BaseException or str

    Returns
    -------
    str
        The lines joined by ``"; "``, blank ones dropped.
    """
    import re

    text = str(e)
    # HDF5's file-driver failures carry a time stamp, a descriptor and a buffer address around the one fact a
    # user needs: "Can't close file (file write failed: time = ..., error message = 'No space left on device', ...)"
    m = re.search(r"^(.*?)\s*\(file (?:write|read) failed: .*?error message = '([^']*)'", text, re.S)
    if m:
        text = f"{m.group(1).strip()}: {m.group(2)}"
    return "; ".join(part.strip() for part in text.splitlines() if part.strip())


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
    import stat

    import h5py

    label = f"{what} {path}" if what else str(path)
    if os.path.islink(path) and not os.path.exists(path):
        return None, FileNotFoundError(f"{label}: a dangling symbolic link (to {os.readlink(path)})")
    if not os.path.exists(path):
        return None, FileNotFoundError(f"{label}: no such file")
    if os.path.isdir(path):
        return None, IsADirectoryError(f"{label}: is a directory, not an HDF5 file")
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):  # a FIFO would block the open forever, a device would be read to its end
        kind = "a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a device or socket"
        return None, ValueError(f"{label}: is {kind}, not an HDF5 file")
    try:
        return h5py.File(path, "r"), None
    except OSError as e:
        return None, ValueError(f"{label}: not a readable HDF5 file ({one_line(e)})")


def source_error(path: str, ds, label: str) -> FileNotFoundError | None:
    """Whether HDF5 dataset ``ds`` of file ``path`` reads data that is not there. Not collective.

    A virtual dataset whose source file (or source dataset) is missing reads
    as its fill value, zeros by default, without an error; such a dataset is
    refused naming the missing file. Source names with printf-style patterns
    (``%b``) are not checked.

    Parameters
    ----------
    path : str
        The file that holds ``ds``.
    ds : h5py.Dataset
    label : str
        How the message names the dataset (``--data d.h5:/train/X``).

    Returns
    -------
    FileNotFoundError or None
    """
    import h5py

    if not ds.is_virtual:
        return None
    for vs in ds.virtual_sources():
        name, dset = vs.file_name, vs.dset_name
        if "%" in name:
            continue
        found = _linked_file(path, name, "HDF5_VDS_PREFIX")
        if found is None:
            return FileNotFoundError(f"{label}: a virtual dataset whose source file {name} is missing (its rows "
                                     "would read as fill values)")
        try:
            with h5py.File(found, "r") as src:
                if not isinstance(src.get(dset), h5py.Dataset):
                    return FileNotFoundError(f"{label}: a virtual dataset whose source {name}:{dset} is missing")
        except OSError as e:
            return FileNotFoundError(f"{label}: a virtual dataset whose source file {name} cannot be read "
                                     f"({one_line(e)})")
    return None


def _linked_file(path: str, name: str, prefix_var: str) -> str | None:
    """The file an external link's or a virtual dataset's source ``name`` in file ``path`` opens, as HDF5 finds it.

    Not collective. ``"."`` is ``path`` itself; an absolute name is tried as it is; a relative one, or an absolute
    one that is missing by its file name alone (HDF5's ``H5F_prefix_open_file``), is tried under each directory
    of ``$HDF5_EXT_PREFIX`` (links) or ``$HDF5_VDS_PREFIX`` (virtual datasets), then in ``path``'s directory,
    then (links) in the working directory. None when no such file exists.
    """
    if name == ".":
        return os.path.abspath(path)
    if os.path.isabs(name):
        if os.path.isfile(name):
            return os.path.abspath(name)
        name = os.path.basename(name)
    dirs = [d for d in os.environ.get(prefix_var, "").split(os.pathsep) if d]
    dirs.append(os.path.dirname(os.path.abspath(path)))
    if prefix_var == "HDF5_EXT_PREFIX":
        dirs.append(os.getcwd())
    tries = [os.path.join(d, name) for d in dirs]
    return next((os.path.abspath(t) for t in tries if os.path.isfile(t)), None)


def linked_sources(path: str, dataset: str | None = None, limit: int = 10000) -> list[tuple[str, str, str]]:
    """Every file (and object in it) that reading ``path`` (or its ``dataset``) reads through a link. Not collective.

    An HDF5 file's object may be an external link into another file, a soft
    link to another object of the same file, or a virtual dataset whose
    rows come from other files: reading it reads those. The named object
    (the whole file when ``dataset`` is None) is walked, groups to their
    members, and each link and virtual source is followed (a relative name,
    or a missing absolute one by its file name alone, as HDF5 finds it:
    under ``$HDF5_EXT_PREFIX`` or ``$HDF5_VDS_PREFIX``, then in the linking
    file's directory; a link's also in the working
    directory), so that the output policy can refuse an output that a link
    leads back to. Files
    that are missing or not HDF5 end the walk there (reading them says
    why); at most ``limit`` objects are visited.

    Parameters
    ----------
    path : str
        The input file.
    dataset : str, optional
        The object read; None: the whole file.
    limit : int
        The most objects visited (a file of many objects, or a cycle of links).

    Returns
    -------
    list of (str, str, str)
        ``(file, object, via)``: the absolute path of a file read, the
        object's path in it, and the link that leads there
        (``"the external link ext.h5:/train/X"``, ``"the virtual dataset
        v.h5:/X"``, ``"the soft link a.h5:/L"``: the first link on the way).
        Empty when nothing is read through a link.
    """
    walk = _LinkWalk(limit)
    walk.visit(os.path.abspath(path), "/" + (dataset or "").strip("/"), None)
    return walk.found


class _LinkWalk:
    """:func:`linked_sources`' walk: the files and objects reached, each visited once."""

    def __init__(self, limit: int):
        self.found: list[tuple[str, str, str]] = []
        self.seen: set = set()
        self.limit = limit

    def first(self, file: str, name: str) -> bool:
        """Whether ``file``'s object ``name`` is seen for the first time (and within the limit)."""
        key = (os.path.realpath(file), name)
        if key in self.seen or len(self.seen) >= self.limit:
            return False
        self.seen.add(key)
        return True

    def visit(self, file: str, name: str, via: str | None) -> None:
        import h5py

        if not self.first(file, name) or not os.path.isfile(file):  # never a FIFO or a device: reading says so
            return
        try:
            f = h5py.File(file, "r", locking=False)
        except OSError:
            try:
                f = h5py.File(file, "r")  # this process has it open with HDF5's locking
            except OSError:
                return
        with f:
            self.walk(f, file, name, via)

    def reach(self, file: str, name: str, via: str | None, how: str) -> None:
        """A link leads to ``file``'s object ``name``: it is read, and so is all it links to."""
        self.found.append((file, name, via or how))
        self.visit(file, name, via or how)

    def walk(self, f, file: str, name: str, via: str | None) -> None:
        """Follow ``name`` in the open file ``f`` component by component, then what it names."""
        import h5py

        parts = [p for p in name.split("/") if p]
        here = ""
        for i, part in enumerate(parts):
            here += "/" + part
            try:
                link = f.get(here, getlink=True)
            except (KeyError, OSError, RuntimeError, ValueError):
                return
            rest = "/".join(parts[i + 1:])
            if isinstance(link, h5py.ExternalLink):
                target = _linked_file(file, link.filename, "HDF5_EXT_PREFIX")
                if target is not None:
                    self.reach(target, _join(link.path, rest), via, f"the external link {file}:{here}")
                return
            if isinstance(link, h5py.SoftLink):
                to = link.path if link.path.startswith("/") else here.rsplit("/", 1)[0] + "/" + link.path
                self.reach(os.path.abspath(file), _join(to, rest), via, f"the soft link {file}:{here}")
                return
            if link is None:
                return
        try:
            self.object(f, f.get(here or "/"), file, here, via)
        except (KeyError, OSError, RuntimeError, ValueError):
            return

    def object(self, f, obj, file: str, here: str, via: str | None) -> None:
        """A virtual dataset's sources; a group's members."""
        import h5py

        if isinstance(obj, h5py.Dataset) and obj.is_virtual:
            for vs in obj.virtual_sources():
                target = None if "%" in vs.file_name else _linked_file(file, vs.file_name, "HDF5_VDS_PREFIX")
                if target is not None:
                    self.reach(target, _join(vs.dset_name, ""), via, f"the virtual dataset {file}:{here}")
        elif isinstance(obj, h5py.Group):
            for member in obj:
                if self.first(file, f"{here}/{member}"):
                    self.walk(f, file, f"{here}/{member}", via)


def _join(name: str, rest: str) -> str:
    """``/name/rest`` of an HDF5 path and what follows it."""
    return "/" + "/".join(p for p in (name.strip("/"), rest) if p)


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
            value = _storable(value.replace("\x00", ""))
        try:
            obj.attrs[key] = value
        except (TypeError, ValueError, UnicodeError):
            obj.attrs[key] = _storable(str(value).replace("\x00", ""))


def _storable(text: str) -> str | bytes:
    """``text``, or its bytes where it cannot be UTF-8.

    A path with a byte of another encoding (a Latin-1 file system) comes from ``os.fsdecode`` with
    surrogates, which HDF5's UTF-8 strings cannot hold.
    """
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogateescape")


def read_weights(path: str, into: dict, what: str = "load_weights", buffers: dict | None = None) -> None:
    """A results file's parameters, by name, into the arrays ``into``. Not collective.

    Parameters
    ----------
    path : str
        A results file (``Trainer.save_results``, the command line's ``--out``): its ``/model`` group.
    into : dict of str to numpy.ndarray
        The model's unsplit parameters by name (views of one flat buffer);
        each is filled from the dataset of its name.
    what : str
        How messages name the call.
    buffers : dict of str to array, optional
        The model's buffers (BatchNorm's running statistics) by name, each
        filled from the file's ``/buffers`` group, which must hold them all.

    Raises
    ------
    FileNotFoundError
        No file.
    ValueError
        Not a results file; a parameter (or buffer) the model has and the
        file lacks, one the file has and the model lacks, or one of another
        shape (the first of them, by name); one that holds NaN or inf (the
        message names its dataset).
    """
    import h5py
    import numpy as np

    f, err = open_hdf5(path, what)
    if err is not None:
        raise err
    try:
        with f:
            if "model" not in f or not isinstance(f["model"], h5py.Group):
                raise ValueError(f"{what} {path}: not a results file of python -m hpcgpu.train (no /model)")
            groups = [("parameter", f["model"], into)]
            if buffers:
                if "buffers" not in f or not isinstance(f["buffers"], h5py.Group):
                    raise ValueError(f"{what} {path}: no /buffers: the file holds no buffer of the model's "
                                     f"({', '.join(list(buffers)[:3])})")
                groups.append(("buffer", f["buffers"], buffers))
            for kind, g, arrays in groups:
                missing = [k for k in arrays if k not in g]
                if missing:
                    raise ValueError(f"{what} {path}: this model's {kind} {missing[0]} is not in the file: the "
                                     f"file holds another model's weights")
                extra = [k for k in g if k not in arrays]
                if extra:
                    raise ValueError(f"{what} {path}: the file's {kind} {extra[0]} is not in this model: the "
                                     f"file holds another model's weights")
                for name, dst in arrays.items():
                    if g[name].shape != dst.shape:
                        raise ValueError(f"{what} {path}: {kind} {name} has shape {g[name].shape} in the file, "
                                         f"{dst.shape} in this model")
                    src = g[name][()]
                    if src.dtype.kind in "fc" and not np.isfinite(src).all():  # they would predict NaN for every row
                        raise ValueError(f"{what} {path}:{g[name].name} holds "
                                         f"{'NaN' if np.isnan(src).any() else 'inf'}: these weights predict nothing")
                    dst[...] = src
    except OSError as e:
        raise ValueError(f"{what} {path}: not a readable HDF5 file ({one_line(e)})") from None
