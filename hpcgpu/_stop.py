"""The stop policy: SIGINT, SIGTERM, SIGUSR1, SIGHUP and a stop file are one request to stop at the next safe point.

One mechanism for one promise ("a stop loses nothing"), used by the trainer
(command line and ``fit``), the task farm and matmul, below all of them. A
program installs a :class:`StopRequest` before any communication; the first
signal only records its name; the program agrees on the request across its
ranks at its next safe point (a step boundary, a task, before C is written),
saves what it has (a checkpoint, the results so far), prints one line and
exits :data:`EXIT_STOPPED` (3: stopped, resumable). A second SIGINT (a person
pressing Ctrl-C again) ends the job at once with one line and exit 130, even
while the process waits inside MPI, and also after the stop, while the run
writes its checkpoint, returns and finalizes MPI (:func:`finish`); a second
SIGTERM, SIGUSR1 or SIGHUP takes the signal's default action. SIGHUP (a
closed terminal, a launcher's hang-up) is a stop as SIGTERM is. Importing
hpcgpu installs nothing (its programs record stop signals from their first
instant: :mod:`hpcgpu._early`; :func:`hpcgpu.run_guarded` from its main's:
:func:`guard_request`).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

__all__ = ["StopRequest", "EXIT_STOPPED", "EXIT_INTERRUPTED", "note_stopped", "stop_count", "stopped"]

EXIT_STOPPED = 3
"""A program's exit status after a clean stop: what was done is saved; rerun with ``--resume``."""
from ._early import EXIT_INTERRUPTED  # noqa: E402 - 130: a second SIGINT ended the job at once


def stop_file_check(path: str | None, files: dict, what: str = "--stop-file") -> tuple[ValueError | None, str]:
    """``(error, warning)`` for a run's stop file before it starts. Not collective.

    The error: the stop file is one of the run's own files (``files``, how each is named -> its path), which
    its appearance would stop at once and whose removal the stop's advice would ask for. The warning (a
    line, or ""): the file exists already, left from an earlier stop: the run will stop after its first
    step. The caller agrees on rank 0's answer (the rank that watches the file) and rank 0 prints the warning.

    Parameters
    ----------
    path : str or None
        The stop file; None: none asked for.
    files : dict of str to str or None
        The run's data and output files by the name messages give them (``{"--data": "d.h5"}``).
    what : str
        How messages name the stop file (``--stop-file``, ``stop_file``).

    Returns
    -------
    (ValueError or None, str)
        The error every rank must raise (agreed by the caller), and rank 0's warning line (or "").
    """
    if not path:
        return None, ""
    from . import _options
    from ._outputs import _same_file

    try:
        for name, other in files.items():
            if other and _same_file(os.fspath(path), os.fspath(other)):
                return ValueError(f"{what} {path}: is the run's {name} file: a stop file needs a path of its own"), ""
        there = os.path.lexists(path)
        # A job script's own stop file (it removed it before the launch, and names it HPCGPU_JOB_STOP_FILE) that is
        # there now was made by its trap on a warning signal during the start: a stop, not an earlier run's file.
        own = _options.text("HPCGPU_JOB_STOP_FILE")
        there = there and not (own and _same_file(os.fspath(path), own))
    except (TypeError, ValueError) as e:  # not a path at all: the caller agrees on it
        return ValueError(f"{what} {path!r}: not a file path ({e})"), ""
    return None, _stale_stop_file(path, what) if there else ""


def agree_stop_file(path: str | None, files: dict, comm, prog: str, what: str = "--stop-file", words=str) -> None:
    """:func:`stop_file_check` on rank 0, its error raised by every rank, its warning printed by rank 0. Collective.

    Parameters
    ----------
    path, files, what
        As :func:`stop_file_check`.
    comm : mpi4py.MPI.Intracomm
        The run's ranks (rank 0 watches the stop file).
    prog : str
        The warning line's program name (``hpcgpu.train``).
    words : callable, optional
        Puts a message in the caller's words (the Trainer's arguments for the command line's flags).

    Raises
    ------
    ValueError
        The stop file is one of ``files``, or not a path (agreed: every rank).
    """
    from .errors import agree

    err, warning = stop_file_check(path, files, what) if comm.rank == 0 else (None, "")
    agree(None if err is None else ValueError(words(str(err))), comm=comm)
    if warning:
        line = f"{prog}: " + words(warning)  # the message itself: _stale_stop_file
        print(line, file=sys.stderr, flush=True)


def _stale_stop_file(path: str, what: str) -> str:
    """The warning for a stop file that is there before the run starts (a message function: docs/_errors.py)."""
    return (f"warning: {what} {path} exists already: the run stops after its first step (remove it before starting; "
            "the job scripts run rm -f on it)")


def remove_first(request: StopRequest | None) -> str:
    """``"remove STOP, then "`` when ``request`` stopped for its stop file and the file is still there, else "".

    The stop line's advice starts with it, so that following the advice does not stop the next run at once.
    Not collective (rank 0, which watches the file, prints the line).

    Parameters
    ----------
    request : StopRequest or None
        The run's stop request.

    Returns
    -------
    str
    """
    path = getattr(request, "stop_file", None)
    if path and getattr(request, "reason", None) == f"stop file {path}" and os.path.lexists(path):
        return f"remove {path}, then "
    return ""


class StopRequest:
    """A request to stop at the next safe point: SIGINT, SIGTERM, SIGUSR1, SIGHUP, or a stop file.

    Not collective: each rank records its own requests; the program agrees
    on them at its next safe point (the trainer in the step's Allreduce, the
    farm between tasks, matmul before it writes), so all ranks stop
    together. A second SIGINT ends the job at once (one line from rank 0,
    exit :data:`EXIT_INTERRUPTED`), also while the main thread waits in MPI
    or a BLAS call, and after :meth:`uninstall` (the count of SIGINTs is the
    process's); a second SIGTERM or SIGHUP takes the signal's default
    action (the process ends), for a user who really means it. SIGUSR1 is
    a warning (Slurm's ``--signal``), never an end: a second one while the
    stop is under way is the same request, so the checkpoint the first one
    asked for is still written (:data:`ENDS_WHEN_REPEATED`).
    SIGHUP (a closed terminal or session, a launcher's hang-up) stops as
    SIGTERM does.

    Parameters
    ----------
    stop_file : str, optional
        A file whose appearance asks for a stop. Job scripts prefer it to
        forwarding a signal: it cannot kill a process that has not yet
        installed its handlers, and it needs no launcher to pass it on.
    check_file : bool
        Whether this rank looks for the file (rank 0 only, so a parallel
        file system sees one metadata request per second, not one per rank
        and step).
    interval : float
        Seconds between looks at the file.
    prog : str
        Names the program in the line a second SIGINT prints.

    Attributes
    ----------
    reason : str or None
        ``"SIGINT"``, ``"SIGUSR1"``, ``"SIGTERM"``, ``"SIGHUP"`` or ``"stop file PATH"`` once requested.

    Examples
    --------
    >>> stop = StopRequest().install()          # doctest: +SKIP
    >>> try:
    ...     while work_left() and not agreed_stop(stop.requested()):
    ...         do_one_unit()
    ... finally:
    ...     stop.uninstall()
    """

    SIGNALS = ("SIGINT", "SIGTERM", "SIGUSR1", "SIGHUP")

    ENDS_WHEN_REPEATED = ("SIGTERM", "SIGHUP")
    """The stop signals whose second arrival during a stop takes their default action (SIGINT has its own rule)."""

    def __init__(self, stop_file: str | None = None, check_file: bool = True, interval: float = 1.0,
                 prog: str = "hpcgpu"):
        self.reason: str | None = None
        self.stop_file, self.check_file, self.interval, self.prog = stop_file, check_file, interval, prog
        self._next_look = 0.0
        self._old: dict = {}  # what a second signal of a kind gets (its default action)
        self._restore: dict = {}  # what uninstall puts back
        self._watcher = None
        self.trainers = False  # a Trainer's own (hpcgpu.train.trainer): another Trainer never adopts it
        self.guards = False  # the guard's (guard_request): a request installed inside takes its signal over

    def _handler(self, signum, frame):
        import signal

        from . import _early

        name = signal.Signals(signum).name
        if name == "SIGINT":
            if _early.count_sigint():  # the process's second, this request's or an earlier one's
                self._end_now()
        elif self.reason == name and name in self.ENDS_WHEN_REPEATED:  # the same signal again: its default action
            signal.signal(signum, self._old.get(name, signal.SIG_DFL))
            signal.raise_signal(signum)
            return
        self.reason = self.reason or name

    def _end_now(self) -> None:
        """A second SIGINT: one line from rank 0, then this process ends (:func:`hpcgpu._early.end_now`)."""
        from . import _early

        _early.end_now(self.prog)

    def _watch_sigints(self) -> None:
        """A thread that counts SIGINTs as they arrive, so a second one ends the job while the main thread waits.

        Python runs a signal handler only between bytecodes of the main
        thread, and two signals that come while it waits inside a blocking
        MPI call (mpi4py releases the GIL) or a BLAS call run the handler
        once. Python's own C handler writes every signal's number to the
        wakeup fd at once; this thread reads them. A process whose wakeup
        fd is taken (an event loop's) keeps the handler alone.
        """
        import signal

        r, w = os.pipe()
        os.set_blocking(w, False)
        try:
            old = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        except (ValueError, OSError):
            os.close(r)
            os.close(w)
            return
        if old != -1:  # someone else's: leave theirs in place
            signal.set_wakeup_fd(old)
            os.close(r)
            os.close(w)
            return
        from . import _early

        seen = [_early.sigints()]  # its own count from here (the handler counts the same signals once more)

        def watch():
            # The thread owns the read end and closes it itself, at the end of file that closing the write end
            # (uninstall) gives: closed elsewhere, its number could be reused by another file while this thread
            # is about to read it, and that file's bytes would be taken for signals.
            try:
                while True:
                    data = os.read(r, 64)
                    if not data:
                        return
                    seen[0] += data.count(signal.SIGINT)
                    if seen[0] > 1:
                        self._end_now()
            except OSError:
                return
            finally:
                os.close(r)

        self._watcher = w
        threading.Thread(target=watch, name="hpcgpu-sigint", daemon=True).start()

    def requested(self) -> bool:
        """Whether a stop was asked for on this rank (looks at the file now and then). Not collective.

        Returns
        -------
        bool
        """
        if self.reason is None and self.stop_file and self.check_file:
            now = time.monotonic()
            if now >= self._next_look:
                self._next_look = now + self.interval
                if os.path.exists(self.stop_file):
                    self.reason = f"stop file {self.stop_file}"
        return self.reason is not None

    def install(self) -> "StopRequest":
        """Install the signal handlers (main thread only; elsewhere a no-op). Not collective.

        A stop signal the program recorded while it was starting
        (:mod:`hpcgpu._early`), or that the guard's request
        (:func:`guard_request`) recorded before this one, becomes this
        request's reason (taken from the guard: it stops one run).

        Returns
        -------
        StopRequest
            ``self``.
        """
        import signal

        from . import _early

        if threading.current_thread() is threading.main_thread():
            outer = installed_request()
            if outer is not None and outer.guards and outer.reason and not self.reason:
                self.reason, outer.reason = outer.reason, None
            for name in self.SIGNALS:
                self._restore[name] = self._old[name] = signal.signal(getattr(signal, name), self._handler)
                if self._old[name] is _early._record:  # the default action is what a second signal gets
                    self._old[name] = signal.SIG_DFL if name != "SIGINT" else signal.default_int_handler
            self.reason = self.reason or _early.received()
            self._watch_sigints()
        return self

    def uninstall(self) -> None:
        """Put the previous handlers back (a program's start-up recorder too: a late signal is kept, not fatal).

        Not collective; main thread only (elsewhere a no-op). Once the
        process has taken a SIGINT, Python's default in its place (a
        ``KeyboardInterrupt`` wherever the program is) becomes the start-up
        recorder's action, which ends the job on the next one.
        """
        import signal
        import threading

        from . import _early

        if threading.current_thread() is not threading.main_thread():
            return
        for name, h in self._restore.items():
            if name == "SIGINT" and _early.sigints() and h in (signal.default_int_handler, signal.SIG_DFL):
                h = _early._record  # a second Ctrl-C after the stop: one line and exit 130, not a traceback
            signal.signal(getattr(signal, name), h)
        self._old.clear()
        self._restore.clear()
        if self._watcher is not None:
            import contextlib

            with contextlib.suppress(ValueError, OSError):
                signal.set_wakeup_fd(-1)
            with contextlib.suppress(OSError):
                os.close(self._watcher)  # the watcher reads the end of file, closes its end and ends
            self._watcher = None

    def __enter__(self) -> "StopRequest":
        return self.install()

    def __exit__(self, *exc) -> None:
        self.uninstall()


def trainers_request(stop_file: str | None = None, check_file: bool = False) -> StopRequest:
    """A stop request a trainer installs for itself (marked ``trainers``: no other trainer adopts it)."""
    request = StopRequest(stop_file, check_file=check_file, prog="hpcgpu.train")
    request.trainers = True
    return request.install()


def guard_request(prog: str) -> StopRequest:
    """The request :func:`hpcgpu.run_guarded` installs around a program's main (main thread only). Not collective.

    A stop signal before the program's run installs its own request (the data's loading, before a
    :class:`hpcgpu.Trainer` or ``hpcgpu.tasks.map``) is recorded, not a ``KeyboardInterrupt`` or the
    process's end, and the run's request takes it over: the run stops at its first safe point. No Trainer
    adopts it (``trainers``): each installs its own, as in a program of its own. A program that installs
    no request of its own runs to its end; a second SIGINT ends it at once.

    Parameters
    ----------
    prog : str
        The program's name, which begins the line a second SIGINT prints.
    """
    request = StopRequest(prog=prog)
    request.trainers = request.guards = True
    return request.install()


_FINISHING: list = []
"""The process that registered :func:`finish` (its pid)."""


def finish_at_exit(prog: str) -> None:
    """Have :func:`finish` end this process (once, at its exit, whatever ``prog`` last ran). Not collective.

    :func:`hpcgpu.run_guarded` calls it on every rank before the program's main.
    """
    from . import _early

    _early.name_program(prog)
    if not _FINISHING:
        import atexit

        _FINISHING.append(os.getpid())
        atexit.register(finish)


def _end_stall_timeout() -> float:
    """The stall timeout (seconds, 0 for none) of :func:`finish`'s wait: ``HPCGPU_STALL_TIMEOUT`` or its default."""
    from . import _options

    try:
        return _options.stall_timeout()
    except ValueError:  # a bad variable was reported where the run began; the end keeps the default
        return _options.DEFAULT_STALL_TIMEOUT


def finish() -> None:
    """The end of a guarded process: the ranks meet, then MPI is finalized, with hpcgpu's SIGINT action. Collective.

    Run at exit (:func:`finish_at_exit`; mpi4py finalizes after Python's exit hooks, when Python has put
    SIGINT's default action back and MPI_Finalize holds the interpreter's lock, so that a Ctrl-C there killed
    the rank and the launcher printed its banner). Here every rank waits for the others in a nonblocking
    barrier, polled from Python, so a SIGINT is handled while it waits: the process's second ends the job
    (one line, exit 130, :func:`hpcgpu._early.end_now`). Once every rank is there, a SIGINT is late: the
    work is done and the job ends with its status (after MPI_Finalize the launcher ends the whole job as
    soon as one rank exits otherwise, banner and all). SIGTERM, SIGUSR1 and SIGHUP are late from the start.
    A rank that waits there longer than the stall timeout (``HPCGPU_STALL_TIMEOUT``; another rank left without
    coming, as one a second SIGINT sent to it alone ends) aborts the job with one line.
    Does nothing where MPI is not running or off the main thread.
    """
    from . import _early

    mpi = sys.modules.get("mpi4py.MPI")
    if threading.current_thread() is not threading.main_thread() or mpi is None or os.getpid() not in _FINISHING:
        return  # a process forked from a rank is no rank
    if not mpi.Is_initialized() or mpi.Is_finalized():
        return
    request, met = mpi.COMM_WORLD.Ibarrier(), [False]

    def sigint(signum, frame):  # between two polls, never inside MPI
        met[0] = met[0] or request.Test()
        if not met[0]:
            _early._record(signum, frame)

    for name in StopRequest.SIGNALS:
        signal.signal(getattr(signal, name), sigint if name == "SIGINT" else signal.SIG_IGN)
    limit = _end_stall_timeout()
    since = time.monotonic()
    while not (met[0] or request.Test()):
        if limit and time.monotonic() - since > limit:  # a rank that left without meeting (one rank's Ctrl-C twice)
            from .errors import abort

            abort(f"hpcgpu: stall: rank {mpi.COMM_WORLD.Get_rank()} waited {limit:.0f} s for the other ranks at "
                  f"the end of the job; aborting the job")
        time.sleep(0.002)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    mpi.Finalize()  # quick once every rank is here


def installed_request() -> StopRequest | None:
    """The stop request whose handlers are in force now (the command line's, another trainer's), or None."""
    handler = signal.getsignal(signal.SIGTERM)
    owner = getattr(handler, "__self__", None)
    return owner if isinstance(owner, StopRequest) else None


_STOPS: dict = {}
"""The stopped runs of this process: a key of the run's (its trainer's id) -> (sequence number, reason)."""
_SEQ = [0]


def note_stopped(key, reason: str | None) -> None:
    """Record that the run ``key`` stopped at a safe point for ``reason``, or (None) that it finished since.

    Not collective. The trainer calls it at the end of each ``fit``.
    :func:`hpcgpu.run_guarded` reads it (:func:`stopped`): a program whose
    main returns normally after a run of it stopped, and was not finished
    by a later ``fit``, exits :data:`EXIT_STOPPED`, as the command lines
    do, so a job script that requeues on 3 does so for a library program too.

    Parameters
    ----------
    key : hashable
        The run (its trainer's ``id``).
    reason : str or None
        What stopped it (``"SIGUSR1"``, ``"stop file PATH"``), or None: it ran to its end.
    """
    if reason is None:
        _STOPS.pop(key, None)
    else:
        _SEQ[0] += 1
        _STOPS[key] = (_SEQ[0], reason)


def stopped(since: int = 0) -> str | None:
    """The first reason of a run recorded stopped after sequence number ``since`` and not finished since, or None.

    Not collective.

    Parameters
    ----------
    since : int
        :func:`stop_count`'s value before the program ran (stops of earlier programs of the process are not its).
    """
    mine = sorted(v for v in _STOPS.values() if v[0] > since)
    return mine[0][1] if mine else None


def stop_count() -> int:
    """The number of stops :func:`note_stopped` has recorded in this process so far. Not collective."""
    return _SEQ[0]
