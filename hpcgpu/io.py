"""HDF5 helpers: atomic writes and checks done before any communication."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator

__all__ = ["atomic_path", "temp_beside", "publish", "writable_error", "open_hdf5"]


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
    probe. Not collective.

    Returns
    -------
    OSError or None
        An error naming ``what`` and the path, or ``None`` when writable.
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


def open_hdf5(path: str, what: str = ""):
    """Open ``path`` read-only for checks done before any communication.

    Not collective. Returns ``(h5py.File, None)``, or ``(None, error)`` with
    a ``FileNotFoundError`` (no file) or ``ValueError`` (not HDF5) whose
    message starts with ``what`` (an option name such as ``--data``) and the
    path; nothing is raised, so the caller can agree on the error first.
    """
    import h5py

    label = f"{what} {path}" if what else str(path)
    if not os.path.exists(path):
        return None, FileNotFoundError(f"{label}: no such file")
    try:
        return h5py.File(path, "r"), None
    except OSError as e:
        return None, ValueError(f"{label}: not a readable HDF5 file ({e})")
