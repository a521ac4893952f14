"""The output policy: every file a run will write is claimed in one call, before any work.

One mechanism for one promise ("nothing a user had is lost"), used by every
program and by the library's writers. :func:`claim` refuses, with one line
naming the option and the path:

- a path that cannot be a file: a directory, a FIFO, a device or a socket (never
  opened: a FIFO would block), a dangling symbolic link, a path under a regular
  file ("not a directory"), a directory that cannot be written;
- an existing file that hpcgpu did not write (an HDF5 file without hpcgpu's
  mark, a Python source, a CSV, ...), unless the user said ``--overwrite``;
  an existing file that is not HDF5 where a dataset is to be added (``FILE:DATASET``);
- ``FILE:a/b`` where ``a`` is a dataset, or where ``a/b`` is a group, or an
  existing dataset hpcgpu did not write (without ``--overwrite``);
- an input of the run (data, model, parameter table, the task's module), or the
  same dataset of one, also where the input reaches it through a soft link, an
  HDF5 external link or a virtual dataset's source;
- an input that is a dangling symbolic link; a name too long for its temporary;
- an output another job holds: a run holds each of its outputs until it ends
  (an advisory ``flock`` on ``.NAME.lock`` beside it, holding ``host pid``);
- two outputs of one run on the same file (one replacing the whole file) or on
  the same dataset;
- a file another process holds open for writing.

Then the temporaries that a killed writer of these outputs left
(``.NAME.*.tmp``, :func:`hpcgpu.io.temp_beside`) are removed, whatever the
program. Whole files are written to a temporary name and renamed
(:func:`hpcgpu.io.atomic_path`); every file hpcgpu writes carries its mark
(:data:`MARK_ATTR` on an HDF5 file's root and on a dataset hpcgpu adds,
:data:`MARK_TEXT` near the start of a JSON, Markdown or PNG file), which is
how a later run knows the file is its own to replace.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import socket
import stat
import sys
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from ._version import __version__
from .io import MARK_ATTR

__all__ = ["Output", "Input", "claim", "claim_error", "MARK_ATTR", "MARK_TEXT", "mark_text", "written_by_hpcgpu",
           "save_figure", "write_text", "write_dataset", "lock_path", "release"]

MARK_TEXT = "written by hpcgpu"
"""The words hpcgpu puts near the start of every non-HDF5 file it writes (JSON, Markdown, PNG metadata)."""
_KINDS = ("hdf5", "json", "text", "png", "journal")
_MAGIC = {"journal": b"HPJ1"}  # the task farm's journal (hpcgpu.tasks._store) starts with its frame's magic


def mark_text() -> str:
    """The mark of a non-HDF5 file: ``"written by hpcgpu 0.1.0"``. Not collective."""
    return f"{MARK_TEXT} {__version__}"


@dataclass(frozen=True)
class Output:
    """A file (or one dataset of an HDF5 file) that a run will write.

    Parameters
    ----------
    path : str or os.PathLike
        The file.
    what : str
        How a message names it: the command line's option (``--out``,
        ``--checkpoint``, ``-o``) or the library's argument (``save_results``).
    dataset : str, optional
        The dataset the run adds to (or replaces in) ``path``, keeping the
        file's other objects; ``None``: the run replaces the whole file.
    kind : {"hdf5", "json", "text", "png", "journal"}
        What the file holds; anything but HDF5 is written whole.
    resumed : bool
        The run resumes from this file (a checkpoint under ``--resume``): it
        is an input the resume reads and judges (an unreadable one is a
        damaged checkpoint, reported and skipped), so an existing file there
        is not refused for lacking hpcgpu's mark.
    """

    path: str | os.PathLike
    what: str = "--out"
    dataset: str | None = None
    kind: str = "hdf5"
    resumed: bool = False

    def label(self) -> str:
        """``"--out r.h5"`` or ``"-o r.h5:C"``: how messages name this output."""
        return f"{self.what} {os.fspath(self.path)}" + (f":{self.dataset}" if self.dataset is not None else "")


@dataclass(frozen=True)
class Input:
    """A file (or one dataset of a file) that a run reads: never an output of the same run.

    The output policy compares every file the input reads with the outputs:
    the file by any name (soft links), and for an HDF5 file what its
    external links and virtual datasets lead to (:func:`claim_error`).

    Parameters
    ----------
    path : str or os.PathLike
        The file.
    what : str
        How a message names it (``--data``, ``--model``, ``--params``, ``MODULE``).
    dataset : str, optional
        The one dataset read; ``None``: the whole file is the input.
    """

    path: str | os.PathLike
    what: str = "--data"
    dataset: str | None = None


def _norm(name: str) -> str:
    return "/" + name.strip("/")


def _nested(a: str | None, b: str | None) -> bool:
    """Whether datasets ``a`` and ``b`` of one file overlap: the same, or one inside the other (None: all)."""
    if a is None or b is None:
        return True
    a, b = _norm(a), _norm(b)
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def _what_it_is(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "not a regular file"


def _place_error(out: Output) -> OSError | None:
    """Whether ``out.path`` can be a regular file hpcgpu creates or replaces: checked without opening anything."""
    path = os.fspath(out.path)
    if os.path.islink(path) and not os.path.exists(path):
        return FileNotFoundError(f"{out.label()}: a dangling symbolic link (to {os.readlink(path)}): remove it or "
                                 "write elsewhere")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    except NotADirectoryError:
        st = None  # a component above is a file: found below
    except OSError as e:
        return OSError(f"{out.label()}: cannot be looked at ({e.strerror or e})")
    if st is not None and stat.S_ISDIR(st.st_mode):
        return IsADirectoryError(f"{out.label()}: is a directory")
    if st is not None and not stat.S_ISREG(st.st_mode):
        return OSError(f"{out.label()}: is {_what_it_is(st.st_mode)}, not a file hpcgpu can replace: write elsewhere")
    parent = os.path.dirname(os.path.abspath(path))
    probe = parent
    while probe and not os.path.lexists(probe):  # the deepest existing ancestor must be a directory
        probe = os.path.dirname(probe)
    if probe and not os.path.isdir(probe):
        return NotADirectoryError(f"{out.label()}: {probe} is a file, not a directory")
    from .io import writable_error

    return writable_error(path, out.what)


def _open_to_read(path: str):
    """An h5py file open to read; the first open's OSError when neither way works.

    Without locking first (a file another process writes, a file system without locks); then as this
    process's own h5py has it open, if it does (HDF5 refuses a second open with other locking flags).
    """
    import h5py

    try:
        return h5py.File(path, "r", locking=False)
    except OSError as first:
        try:
            return h5py.File(path, "r")
        except OSError:
            raise first from None


def written_by_hpcgpu(path: str | os.PathLike, kind: str = "hdf5") -> bool | None:
    """Whether the existing file ``path`` carries hpcgpu's mark; ``None`` when it is not of ``kind`` at all.

    Not collective. Reads at most the file's first 64 KiB (text kinds) or
    its root attributes (HDF5).

    Parameters
    ----------
    path : str or os.PathLike
        An existing regular file.
    kind : {"hdf5", "json", "text", "png", "journal"}

    Returns
    -------
    bool or None
        True: hpcgpu wrote it; False: a file of that kind hpcgpu did not
        write; None: not an HDF5 file (``kind="hdf5"`` only).
    """
    path = os.fspath(path)
    if kind == "hdf5":
        import h5py

        try:
            if not h5py.is_hdf5(path):
                return None
        except OSError:
            return None
        try:
            with _open_to_read(path) as f:
                return MARK_ATTR in f.attrs
        except OSError:
            return None
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 16)
    except OSError:
        return False
    if kind in _MAGIC:
        return head.startswith(_MAGIC[kind])
    return MARK_TEXT.encode() in head or (kind == "json" and b'"hpcgpu_version"' in head)


def _dataset_error(out: Output, overwrite: bool) -> OSError | None:
    """For ``FILE:DATASET`` into an existing HDF5 file: every group above the dataset a group, the dataset ours."""
    import h5py

    path, name = os.fspath(out.path), _norm(out.dataset)
    try:
        f = _open_to_read(path)
    except OSError as e:
        from .io import one_line

        return OSError(f"{out.label()}: {path} exists and is not a readable HDF5 file ({one_line(e)}): it is not "
                       "replaced; remove it or write elsewhere")
    with f:
        parts = name.strip("/").split("/")
        for i in range(1, len(parts)):
            above = "/" + "/".join(parts[:i])
            obj = f.get(above, getlink=True)
            if obj is None:
                break
            obj = f.get(above)
            if isinstance(obj, h5py.Dataset):
                return OSError(f"{out.label()}: {above} is a dataset in {path}, not a group: name another dataset")
        there = f.get(name)
        if there is None:
            return None
        if not isinstance(there, h5py.Dataset):
            return OSError(f"{out.label()}: {name} is a {type(there).__name__.lower()} in {path}, not a dataset: it "
                           "is not replaced; name another dataset")
        if not overwrite and MARK_ATTR not in there.attrs:
            return FileExistsError(f"{out.label()}: {name} exists in {path} and hpcgpu did not write it: it is not "
                                   "replaced (--overwrite replaces it)")
    return None


def _existing_error(out: Output, overwrite: bool) -> OSError | None:
    """An existing file at ``out.path``: replaced only when hpcgpu wrote it, or the user said ``--overwrite``."""
    path = os.fspath(out.path)
    if not os.path.isfile(path):
        return None
    mine = written_by_hpcgpu(path, out.kind)
    if out.dataset is not None:
        if mine is None:
            return OSError(f"{out.label()}: {path} exists and is not an HDF5 file: no dataset can be added to it "
                           "(remove it or write elsewhere)")
        return _dataset_error(out, overwrite)
    if mine or overwrite or out.resumed:
        return None
    kind = "an HDF5 file" if out.kind == "hdf5" and mine is False else "a file"
    return FileExistsError(f"{out.label()}: exists and is {kind} hpcgpu did not write: it is not replaced "
                           "(--overwrite replaces it)")


def _reads(src: Input) -> list[tuple[str, str | None, str | None]]:
    """Every file (and object) input ``src`` reads: itself, and what its links and virtual datasets lead to.

    ``(file, dataset or None, the link on the way or None)``; soft links of the file system are followed by the
    comparison (:func:`_same_file`), HDF5's links and virtual sources by :func:`hpcgpu.io.linked_sources`.
    """
    from .io import linked_sources

    path = os.fspath(src.path)
    found = [(path, src.dataset, None)]
    if os.path.isfile(path):  # an HDF5 file's links: other files are read through them
        import h5py

        try:
            hdf5 = h5py.is_hdf5(path)
        except OSError:
            hdf5 = False
        if hdf5:
            found += linked_sources(path, src.dataset)
    return found


def _input_error(out: Output, inputs: Iterable[Input], reads: dict) -> ValueError | None:
    """An output that an input reads, by its name, a soft link, an external link or a virtual dataset.

    ``reads`` keeps each input's :func:`_reads` for the next output (a whole file's walk is done once).
    """
    path = os.fspath(out.path)
    if not os.path.exists(path):
        return None
    for src in inputs:
        if src.path is None:
            continue
        if src not in reads:
            reads[src] = _reads(src)
        for file, dataset, via in reads[src]:
            if not _same_file(file, path) or not (out.dataset is None or _nested(out.dataset, dataset)):
                continue
            named = os.fspath(src.path) + (f":{src.dataset}" if src.dataset is not None else "")
            through = f", through {via}" if via else ""
            return ValueError(f"{out.label()}: is also an input ({src.what} {named}{through}); writing it would "
                              "replace what is read: choose another output")
    return None


def _dangling_input_error(inputs: Iterable[Input]) -> FileNotFoundError | None:
    """An input that is a symbolic link to nothing: named with its link's target, before any work."""
    for src in inputs:
        path = os.fspath(src.path)
        if os.path.islink(path) and not os.path.exists(path):
            named = path + (f":{src.dataset}" if src.dataset is not None else "")
            return FileNotFoundError(f"{src.what} {named}: a dangling symbolic link (to {os.readlink(path)}): "
                                     "nothing to read")
    return None


def _name_error(out: Output) -> OSError | None:
    """Whether the file system takes the longest name written beside ``out``: its temporary (:data:`TEMP_EXTRA`)."""
    from .io import TEMP_EXTRA

    path = os.fspath(out.path)
    d = os.path.dirname(os.path.abspath(path))
    try:
        limit = os.pathconf(d, "PC_NAME_MAX")
    except (OSError, ValueError):
        return None  # no limit said: the write itself finds one
    longest = len(os.fsencode(os.path.basename(path))) + TEMP_EXTRA
    if limit <= 0 or longest <= limit:
        return None
    return OSError(f"{out.label()}: its name is too long to write: hpcgpu writes .NAME.XXXXXXXX.tmp beside it first, "
                   f"{longest} bytes where {d} allows {limit}; give a name of at most {limit - TEMP_EXTRA} bytes")


_HELD: dict[str, int] = {}
"""The lock files this process holds: their path to the open descriptor that holds the lock (:func:`_hold`)."""


def lock_path(path: str | os.PathLike) -> str:
    """The lock file of output ``path``: ``.NAME.lock`` beside the file it names (soft links followed). Not collective.

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    str
        An absolute path.
    """
    d, base = os.path.split(os.path.realpath(os.fspath(path)))
    return os.path.join(d, f".{base}.lock")


def _holder(fd: int) -> str:
    """What a lock file says of its holder: ``"host H, pid P"``."""
    try:
        words = os.pread(fd, 512, 0).decode("utf-8", "replace").split()
    except OSError:
        words = []
    return f"host {words[0]}, pid {words[1]}" if len(words) == 2 else "its host and pid not yet written"


def _hold(out: Output, taken: list) -> OSError | None:
    """Hold ``out`` for this process's life: an exclusive ``flock`` on :func:`lock_path`, which holds ``host pid``.

    Not collective (the rank that checks the outputs calls it). A lock this process holds already is kept; a
    lock file left by a job that ended without removing it (killed) is simply taken, since no process holds
    its lock. On a file system without locks (``flock`` fails with ENOLCK, EOPNOTSUPP...) nothing is held; any
    other failure of the lock (EIO on NFS) is returned, so that the ranks agree on it. The lock files taken are
    appended to ``taken``.
    """
    import errno
    import fcntl

    lock = lock_path(out.path)
    if lock in _HELD:
        return None
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except PermissionError:  # another user's job made it: its lock is still seen through a read-only open
            try:
                fd = os.open(lock, os.O_RDONLY | os.O_CLOEXEC)
            except OSError as e:
                return OSError(f"{out.label()}: cannot open its lock file {lock} ({e.strerror or e})")
        except OSError as e:
            return OSError(f"{out.label()}: cannot create its lock file {lock} ({e.strerror or e})")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            who = _holder(fd)
            os.close(fd)
            return OSError(f"{out.label()}: is being written by another job ({who}): wait for it to end, or "
                           "write elsewhere")
        except OSError as e:
            os.close(fd)
            if e.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                return OSError(f"{out.label()}: cannot lock its lock file {lock} ({e.strerror or e})")
            with contextlib.suppress(OSError):  # no locks on this file system: no lock file either
                os.unlink(lock)
            return None
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(lock))
        except FileNotFoundError:
            same = False
        except OSError as e:
            os.close(fd)
            return OSError(f"{out.label()}: cannot lock its lock file {lock} ({e.strerror or e})")
        if not same:  # its holder removed it between the open and the lock: take the one there now
            os.close(fd)
            continue
        with contextlib.suppress(OSError):  # a full disk: the lock holds without its words
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{socket.gethostname()} {os.getpid()}\n".encode(), 0)
        _HELD[lock] = fd
        taken.append(lock)
        return None


def _release(locks: Iterable[str] | None = None) -> None:
    """Let go of lock files (all of this process's by default): each removed, then its lock released."""
    for lock in list(_HELD) if locks is None else list(locks):
        fd = _HELD.pop(lock, None)
        if fd is None:
            continue
        with contextlib.suppress(OSError):  # removed while held: a job that opened it sees that and retries
            os.unlink(lock)
        os.close(fd)


atexit.register(_release)


def release(paths: Iterable[str | os.PathLike]) -> None:
    """Let other jobs write these outputs: the locks :func:`claim` took on them are released. Not collective.

    The locks are released when the process ends anyway; a library run that
    ends before its process does (``Trainer.close``) calls this.

    Parameters
    ----------
    paths : iterable of str or os.PathLike
        Outputs this process claimed; others are ignored.
    """
    _release([lock_path(p) for p in paths])


def _twice_error(outputs: list[Output]) -> ValueError | None:
    for i, b in enumerate(outputs):
        for a in outputs[:i]:
            pa, pb = os.fspath(a.path), os.fspath(b.path)
            same = _same_file(pa, pb) if os.path.exists(pa) and os.path.exists(pb) else \
                os.path.abspath(pa) == os.path.abspath(pb)
            if same and (a.dataset is None or b.dataset is None or _nested(a.dataset, b.dataset)):
                return ValueError(f"{b.label()}: is also {a.label()}: one would replace the other; give each output "
                                  "its own file")
    return None


def claim_error(outputs: Iterable[Output], inputs: Iterable[Input] = (), *, overwrite: bool = False,
                hold: list | None = None) -> OSError | ValueError | None:
    """Everything that would make writing ``outputs`` lose a user's file or fail; the first problem found.

    Not collective: rank 0 calls it (:func:`claim` does, then agrees).
    Nothing is written but a probe file that is removed at once, missing
    parent directories of the outputs, and with ``hold`` the lock files.
    An input is compared with the outputs as every file it reads: soft
    links followed, and an HDF5 input's external links and virtual
    datasets (:func:`hpcgpu.io.linked_sources`).

    Parameters
    ----------
    outputs : iterable of Output
        Every file (or dataset) the run will write.
    inputs : iterable of Input
        Every file (or dataset) the run reads.
    overwrite : bool
        Replace existing files (and datasets) hpcgpu did not write.
    hold : list, optional
        Hold each output for the rest of this process (an advisory lock
        beside it, :func:`lock_path`, released at the process's end or by
        :func:`release`), refusing one another job holds; the lock files
        taken are appended. None: no lock is taken or looked at.

    Returns
    -------
    OSError or ValueError or None
        ``ValueError`` when an output is an input or another output,
        ``OSError`` (``FileExistsError``, ``IsADirectoryError``,
        ``NotADirectoryError``, ``FileNotFoundError``) otherwise, with one line
        naming the option and the path; ``None`` when every output is safe.
    """
    from .io import held_error

    outputs, inputs = [o for o in outputs if o.path is not None], [i for i in inputs if i.path is not None]
    for out in outputs:
        if out.kind not in _KINDS:
            raise ValueError(f"Output.kind must be one of {_KINDS}, got {out.kind!r}")
    err = _twice_error(outputs) or _dangling_input_error(inputs)
    if err is not None:
        return err
    taken: list[str] = []
    reads: dict = {}
    for out in outputs:
        err = _place_error(out) or _name_error(out) or (_hold(out, taken) if hold is not None else None) \
            or _input_error(out, inputs, reads) or held_error(os.fspath(out.path), out.what) \
            or _existing_error(out, overwrite)
        if err is not None:
            _release(taken)
            return err
    if hold is not None:
        hold.extend(taken)
    return None


def claim(outputs: Iterable[Output], inputs: Iterable[Input] = (), *, comm, overwrite: bool = False,
          prog: str = "hpcgpu", quiet: bool = False) -> None:
    """Claim every output of a run before any work: refuse what would lose a file, remove stale temporaries.

    Collective over ``comm``: rank 0 checks (:func:`claim_error`) and holds
    each output for the rest of its process (a lock another job's claim
    sees: "is being written by another job (host H, pid P)"), every rank
    raises the same agreed error, every node must see the outputs'
    directories (:func:`hpcgpu.io.shared_dir_error`); then rank 0 removes
    the temporaries that killed writers of these outputs left beside them
    (no live writer holds the output any more) and says so on stderr (one
    line each).

    Parameters
    ----------
    outputs : iterable of Output
        Every file (or dataset) the run will write; ``path=None`` entries are skipped.
    inputs : iterable of Input
        Every file (or dataset) the run reads.
    comm : mpi4py.MPI.Intracomm, keyword-only
    overwrite : bool
        Replace existing files hpcgpu did not write (the command lines' ``--overwrite``).
    prog : str
        Names the program in the warning lines.
    quiet : bool
        Say nothing about removed temporaries.

    Raises
    ------
    OSError, ValueError
        An :class:`hpcgpu.AgreedError`, on every rank: see :func:`claim_error`.
    """
    from .errors import agree
    from .io import remove_stale_temporaries, shared_dir_error

    outputs, inputs = [o for o in outputs if o.path is not None], list(inputs)
    err = None
    if comm.rank == 0:
        try:
            err = claim_error(outputs, inputs, overwrite=overwrite, hold=[])  # held until the process ends
        except UnicodeError as e:  # a path the file system's encoding cannot hold
            err = ValueError(f"an output's path cannot be encoded ({e})")
    agree(err, comm=comm)
    for out in outputs:
        agree(shared_dir_error(out.path, comm, out.what), comm=comm)
    if comm.rank == 0:
        for out in outputs:
            for stale in remove_stale_temporaries(out.path):
                if not quiet:
                    print(f"{prog}: warning: removed {stale}, a temporary file of {out.label()} that a killed "
                          "writer left", file=sys.stderr, flush=True)


def save_figure(fig, path: str | os.PathLike, dpi: int = 110) -> None:
    """Write a matplotlib figure as a PNG, atomically, with hpcgpu's mark in its metadata. Not collective.

    Parameters
    ----------
    fig : matplotlib.figure.Figure
    path : str or os.PathLike
        The PNG file (claimed first with ``Output(path, kind="png")``).
    dpi : int
        Dots per inch.

    Raises
    ------
    OSError
        The file cannot be written (a full disk: ``"PATH: No space left on
        device: nothing was written"``); nothing is left at ``path`` but what
        was there.
    """
    from .io import atomic_path

    with _named(path), atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=dpi, metadata={"Software": mark_text()})


@contextlib.contextmanager
def _named(path):
    """A full disk met writing ``path`` as one line naming it: ``"PATH: No space left on device: ..."``."""
    from .io import no_space

    try:
        yield
    except OSError as e:
        if no_space(e) is None:
            raise
        err = OSError(f"{os.fspath(path)}: {e}")
        err.errno = e.errno
        raise err from None


def write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path``, atomically. Not collective.

    The caller puts :func:`mark_text` in it (a Markdown comment, a JSON
    field), so that a later run knows the file is hpcgpu's.

    Parameters
    ----------
    path : str or os.PathLike
        The file (claimed first).
    text : str

    Raises
    ------
    OSError
        The file cannot be written (a full disk: ``"PATH: No space left on
        device: nothing was written"``); nothing is left at ``path`` but what
        was there.
    """
    from .io import atomic_path

    with _named(path), atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write(text)


def write_dataset(path: str, name: str, gshape: tuple, local, where: tuple, *, comm, attrs: dict | None = None,
                  what: str = "output", overwrite: bool = False) -> str:
    """Write a distributed array into dataset ``name`` of ``path``, each rank its block, atomically.

    Collective over ``comm``. Rank 0 checks the output (:func:`claim_error`)
    and copies everything of an existing ``path`` but ``name`` into a
    temporary file beside it (:func:`temp_keeping`); with a parallel h5py
    (``h5py.get_config().mpi``) every rank then writes its block through
    the ``mpio`` driver, otherwise the ranks write their blocks one after
    another (``mpi4py.util.sync.Sequential``); rank 0 renames the temporary
    over ``path`` when it is complete. A failed or killed write never
    changes ``path``. ``attrs`` go on the dataset, and on the root too when
    the file is new.

    Parameters
    ----------
    path : str
        The HDF5 file: created (with missing parent directories), or an
        existing HDF5 file in which ``name`` is added or replaced.
    name : str
        The dataset's path in the file.
    gshape : tuple of int
        The global shape.
    local : numpy.ndarray
        This rank's block (host memory, of the dataset's dtype, the same on every rank).
    where : tuple of slice
        The block's place in the global array (one slice per dimension).
    comm : mpi4py.MPI.Intracomm
    attrs : dict, optional
        Provenance attributes (:func:`write_attrs`); hpcgpu's mark
        (:data:`MARK_ATTR`) is added.
    what : str
        How messages name ``path``.
    overwrite : bool
        Replace an existing dataset ``name`` that hpcgpu did not write.

    Returns
    -------
    str
        ``path``.

    Raises
    ------
    OSError
        The output policy refuses it (:func:`claim_error`:
        the path cannot be written, another process has it open for
        writing, it exists and is not HDF5, ``name`` is a group there or
        lies under a dataset, or is a dataset hpcgpu did not write), every
        rank; the file is left as it was.
    """
    from .io import SLACK, WRITE_ERRORS, on_root, one_line, reserve, temp_keeping

    label = f"{what} {path}:{name}"
    nbytes = int(np.prod(gshape, dtype=np.int64)) * np.dtype(local.dtype).itemsize
    held: list[str] = []  # the lock this call takes (none when the run's claim holds it already)

    def create():
        out = Output(path, what, dataset=name)
        err = claim_error([out], overwrite=overwrite, hold=held)
        if err is not None:
            raise err if isinstance(err, OSError) else OSError(str(err))
        new = not os.path.exists(path)
        try:
            tmp = temp_keeping(path, name, what)
        except WRITE_ERRORS as e:
            if str(e).startswith(f"{what} {path}"):  # temp_keeping's own: the file is not one to replace
                raise
            raise _no_room(e, label) or OSError(f"{what} {path}:{name}: cannot create a temporary file beside it "
                                                f"({one_line(e)})") from None
        try:  # the dataset's room before HDF5 writes it: a full disk met inside HDF5 crashes it
            reserve(tmp, os.path.getsize(tmp) + nbytes + SLACK)
        except OSError as e:
            os.unlink(tmp)
            raise _no_room(e, label) or OSError(f"{what} {path}:{name}: cannot reserve its space on the disk "
                                                f"({one_line(e)})") from None
        return tmp, new

    try:
        tmp, new = on_root(create, comm=comm, bcast=True)
        return _write_into(tmp, new, path, name, gshape, local, where, comm, attrs, what, label)
    finally:
        _release(held)


def _no_room(e: BaseException, label: str) -> OSError | None:
    """A write that failed for want of room as one line naming the output (``label``); None for other failures."""
    from .io import no_space

    full = no_space(e)
    if full is None:
        return None
    return OSError(f"{label}: {full}: nothing was written (free some space, or write elsewhere)")


def _write_into(tmp, new, path, name, gshape, local, where, comm, attrs, what, label) -> str:
    """:func:`write_dataset` once rank 0 made the temporary ``tmp``: every rank's block, then the rename."""
    import h5py

    from .errors import agree, agreed
    from .io import one_line, on_root, publish, shared_dir_error

    err = shared_dir_error(path, comm, what)  # the same on every rank
    if err is not None:
        if comm.rank == 0:
            os.unlink(tmp)
        raise agreed(err)
    meta = {MARK_ATTR: __version__, **(attrs or {})}
    try:
        writer = _write_mpio if h5py.get_config().mpi else _write_sequential
        agree(writer(tmp, name, gshape, local, where, meta, new, comm, label), comm=comm)
        on_root(lambda: publish(tmp, path), comm=comm,
                error=lambda e: OSError(f"{what} {path}:{name}: cannot rename ({one_line(e)})"))
    except BaseException:
        if comm.rank == 0 and os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def _write_mpio(tmp, name, gshape, local, where, meta, new, comm, label):
    import h5py

    from .io import WRITE_ERRORS, one_line, write_attrs

    try:
        with h5py.File(tmp, "r+", driver="mpio", comm=comm) as f:
            ds = f.create_dataset(name, shape=gshape, dtype=local.dtype, dcpl=_early())
            if local.size:
                ds[where] = local
            write_attrs(ds, meta)
            if new:
                write_attrs(f, meta)
            f.flush()  # a failure said here, not swallowed by the close
    except WRITE_ERRORS as e:
        return _no_room(e, label) or OSError(f"{label}: parallel write failed ({one_line(e)})")
    return None


def _early():
    """A dataset's creation properties: its space allocated at its creation, no fill values written.

    The space lies inside what :func:`hpcgpu.io.reserve` holds; every element is written by a rank.
    """
    from h5py import h5d, h5p

    dcpl = h5p.create(h5p.DATASET_CREATE)
    dcpl.set_alloc_time(h5d.ALLOC_TIME_EARLY)
    dcpl.set_fill_time(h5d.FILL_TIME_NEVER)
    return dcpl


def _write_sequential(tmp, name, gshape, local, where, meta, new, comm, label):
    import h5py
    from mpi4py.util.sync import Sequential

    from .errors import agree
    from .io import WRITE_ERRORS, one_line, write_attrs

    err = None
    if comm.rank == 0:
        try:
            with h5py.File(tmp, "r+") as f:
                ds = f.create_dataset(name, shape=gshape, dtype=local.dtype, dcpl=_early())
                write_attrs(ds, meta)
                if new:
                    write_attrs(f, meta)
                f.flush()  # a failure said here, not swallowed by the close
        except WRITE_ERRORS as e:
            err = _no_room(e, label) or OSError(f"{label}: cannot create ({one_line(e)})")
    agree(err, comm=comm)
    with Sequential(comm):
        try:
            if local.size:
                with h5py.File(tmp, "r+") as f:
                    f[name][where] = local
                    f.flush()
        except WRITE_ERRORS as e:
            err = _no_room(e, label) or OSError(f"{label}: rank {comm.rank} cannot write its block ({one_line(e)})")
    return err
