"""Stall watchdog: a collective that does not complete in time aborts the job.

A rank that dies, hangs in I/O or loops forever leaves the others waiting in
their next collective until the allocation ends. With a stall timeout T, each
rank runs a small thread that watches its own main thread: when that has
waited in a watched collective for T/2 seconds it tells rank 0 (a tiny
message on a private communicator). Rank 0's thread, once some rank has
waited T seconds, names the ranks that have not reported waiting in that
collective (they have not arrived), prints one report and calls
``MPI_Abort``. Horovod's stall check (``HOROVOD_STALL_CHECK_TIME_SECONDS``,
60 s) only warns; here the job ends.

Without ``MPI_THREAD_MULTIPLE`` the threads cannot talk; each rank then
aborts on its own after T seconds of waiting and names only itself.

The watchdog is on by default (:data:`DEFAULT_STALL_TIMEOUT`, 600 s): a
library call that no :class:`Watchdog` of its own watches (SUMMA, a
DistMatrix's collectives; the agreement of a collective's arguments,
:func:`hpcgpu.errors.agree_inputs`, only with ``HPCGPU_STALL_TIMEOUT`` set:
:func:`watch_entry`) waits under :func:`watch`, the process's
own watchdog, which needs no communicator: a rank that waits T seconds aborts
the job and names itself and the collective. Its thread starts at the first
watched wait and wakes every T / 4 seconds (150 s by default), so it costs
nothing measurable on a step.
"""

from __future__ import annotations

import atexit
import contextlib
import threading
import time
from contextlib import contextmanager

from mpi4py import MPI

from . import _nccl, _options
from . import errors
from .errors import abort, agreed

__all__ = ["Watchdog", "stall_timeout", "watch", "DEFAULT_STALL_TIMEOUT"]

_TAG = 7741

DEFAULT_STALL_TIMEOUT = _options.DEFAULT_STALL_TIMEOUT
"""Seconds a collective may wait when neither an option nor ``HPCGPU_STALL_TIMEOUT`` says (600: see
:data:`hpcgpu._options.DEFAULT_STALL_TIMEOUT`)."""


def stall_timeout(value: float | None = None) -> float:
    """The stall timeout in seconds: ``value``, else ``$HPCGPU_STALL_TIMEOUT``, else :data:`DEFAULT_STALL_TIMEOUT`.

    0 (the option or the variable) turns the watchdog off.

    Not collective. The one place that reads ``HPCGPU_STALL_TIMEOUT``.

    Parameters
    ----------
    value : float, optional
        An explicit timeout (the ``--stall-timeout`` option), seconds.

    Returns
    -------
    float
        Seconds, >= 0.

    Raises
    ------
    ValueError
        ``value`` is negative or not finite, or the variable is not a number
        >= 0. An :class:`~hpcgpu.errors.AgreedError`: the option and the
        environment are the same on every rank.
    """
    try:
        return _options.stall_timeout(value)
    except ValueError as e:
        raise agreed(e) from None


class Watchdog:
    """Watches this rank's collectives; aborts the job on a stall.

    Collective (construction): all ranks of ``comm`` create it together,
    with the same ``timeout`` (it duplicates ``comm``). With ``comm=None``
    not collective: a watchdog of this process alone, whose thread starts at
    the first watched wait and which names only this rank (:func:`watch`).

    Parameters
    ----------
    comm : mpi4py.MPI.Intracomm or None
    timeout : float, optional
        Seconds a collective may wait before the job is aborted; 0 turns the
        watchdog off (:meth:`watch` then costs one attribute check). By
        default ``$HPCGPU_STALL_TIMEOUT``, else :data:`DEFAULT_STALL_TIMEOUT`
        (see :func:`stall_timeout`).
    abort : callable, optional
        Called with the report instead of ``MPI.COMM_WORLD.Abort(1)``
        (tests).

    Examples
    --------
    >>> wd = Watchdog(comm, timeout=120)              # doctest: +SKIP
    >>> with wd.watch("gradient Allreduce", step):  # doctest: +SKIP
    ...     Allreduce(grad, comm=comm)
    """

    def __init__(self, comm: MPI.Intracomm | None, timeout: float | None = None, abort=None):
        self.timeout = stall_timeout(timeout)
        world = comm if comm is not None else MPI.COMM_WORLD
        self.rank, self.size = world.Get_rank(), world.Get_size()
        self._abort = abort or self._mpi_abort
        self._state = None  # (serial, name, detail, t_enter) while waiting
        self._serial = 0
        self._stop = threading.Event()
        self._thread = None
        self.on = self.timeout > 0
        self.comm = None
        self.threads = False  # whether the threads tell rank 0 (a shared communicator and MPI_THREAD_MULTIPLE)
        if not self.on:
            return
        if comm is None:
            return  # this process's own: the thread starts at the first wait (_start)
        _nccl.set_stall_timeout(self.timeout)  # NCCL's waits are on the GPU: its monitor watches those
        self.comm = comm.Dup()
        self.threads = MPI.Query_thread() == MPI.THREAD_MULTIPLE
        self._start()

    def _start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="hpcgpu-watchdog", daemon=True)
        self._thread.start()
        # On any exit (an agreed error included) the thread must be gone before
        # MPI_Finalize, which mpi4py runs after the atexit hooks.
        atexit.register(self._halt)

    def _halt(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    @contextmanager
    def watch(self, name: str, detail: str = ""):
        """Watch the enclosed block: a wait in collective ``name`` that must end in time.

        Not collective, and no communication: it only marks the start and
        end of the wait for the watchdog's thread.

        Parameters
        ----------
        name : str
            The collective, as the stall report names it ("gradient Allreduce").
        detail : str
            Where in the run ("step 12").
        """
        if not self.on:
            yield
            return
        if self._thread is None:
            self._start()
        self._serial += 1
        self._state = (self._serial, name, detail, time.monotonic())
        try:
            yield
        finally:
            self._state = None

    def close(self) -> None:
        """Stop the thread and free the communicator. Collective (not with ``comm=None``)."""
        if self._thread is not None:
            self._halt()
            atexit.unregister(self._halt)
            self._thread = None
        if self.comm is None:
            return
        self.comm.Barrier()  # no report is in flight once everyone is here
        while self.comm.Iprobe(source=MPI.ANY_SOURCE, tag=_TAG):
            self.comm.recv(source=MPI.ANY_SOURCE, tag=_TAG)
        self.comm.Free()
        self.comm = None

    # -- the thread -------------------------------------------------------------
    def _mpi_abort(self, report: str) -> None:
        abort(report)

    def _run(self) -> None:
        T = self.timeout
        reported = None  # serial of the collective this rank reported waiting in
        waiting: dict[int, tuple] = {}  # rank 0: rank -> (serial, name, detail, since)
        tick = max(0.05, T / 4)  # a report at T/2 and the verdict at T need no finer clock: wake-ups stay rare
        while not self._stop.wait(tick):
            st, now = self._state, time.monotonic()
            reported = self._tell_rank0(st, now, reported)
            if not self.threads:  # each rank judges itself; rank 0 a tick earlier, so one line usually ends it
                if st is not None and now - st[3] >= T + (tick if self.rank else 0):
                    where = f" ({st[2]})" if st[2] else ""
                    self._abort(f"hpcgpu: stall: rank {self.rank} waited {now - st[3]:.0f} s in "
                                f"{st[1]}{where}; aborting the job")
                    return
            elif self.rank == 0:
                report = self._judge(waiting, st, now)
                if report:
                    self._abort(report)
                    return

    def _tell_rank0(self, st, now: float, reported):
        """Tell rank 0 when a wait passes T/2 and when it ends; return the wait reported."""
        if reported is not None and (st is None or st[0] != reported):
            if self.threads and self.rank != 0:  # that wait is over: tell rank 0
                self.comm.send(("clear", reported), dest=0, tag=_TAG)
            reported = None
        if st is not None and now - st[3] >= self.timeout / 2 and reported != st[0]:
            reported = st[0]
            if self.threads and self.rank != 0:
                self.comm.send(("wait", st[0], st[1], st[2], now - st[3]), dest=0, tag=_TAG)
        return reported

    def _judge(self, waiting: dict, st, now: float) -> str | None:
        """Rank 0: take the reports in; the stall report once a wait has passed T, else ``None``."""
        T = self.timeout
        while self.comm.Iprobe(source=MPI.ANY_SOURCE, tag=_TAG):
            status = MPI.Status()
            msg = self.comm.recv(source=MPI.ANY_SOURCE, tag=_TAG, status=status)
            src = status.Get_source()
            if msg[0] == "wait":
                waiting[src] = (msg[1], msg[2], msg[3], now - msg[4])
            elif src in waiting and waiting[src][0] == msg[1]:
                del waiting[src]
        if st is not None and now - st[3] >= T / 2:
            waiting[0] = st
        else:
            waiting.pop(0, None)
        if not waiting:
            return None
        oldest = min(waiting.values(), key=lambda v: v[3])
        if now - oldest[3] < T:
            return None
        same = {r for r, v in waiting.items() if v[0] == oldest[0] and v[1] == oldest[1]}
        # A rank waiting in another collective has arrived somewhere: a barrier lets a rank leave once it has heard
        # from every rank, so with one rank stopped between two of them another may wait in the next one already.
        # Not arrived is waiting nowhere.
        missing = [r for r in range(self.size) if r not in waiting]
        elsewhere = "".join(f", rank {r} is waiting in {waiting[r][1]} ({waiting[r][2]})"
                            for r in sorted(waiting) if r not in same)
        return (f"hpcgpu: stall: {oldest[1]} ({oldest[2]}) has waited {now - oldest[3]:.0f} s "
                f"(stall timeout {T:g} s); ranks {missing or 'none'} have not arrived, "
                f"ranks {sorted(same)} are waiting{elsewhere}; aborting the job")


_OWN: Watchdog | None = None


def watch(name: str, detail: str = ""):
    """Watch the enclosed wait with this process's own watchdog (made at the first call). Not collective.

    For collectives that no :class:`Watchdog` of a run watches: SUMMA's panels, a DistMatrix's collectives, the
    agreement of a collective call's arguments. A wait longer than the stall timeout (:func:`stall_timeout`:
    ``$HPCGPU_STALL_TIMEOUT``, else :data:`DEFAULT_STALL_TIMEOUT`; 0 turns it off) aborts the job with one line
    naming this rank and ``name``. It costs a thread that wakes every T / 4 seconds, and per wait two attribute
    stores.

    Parameters
    ----------
    name : str
        The collective, as the stall line names it ("SUMMA panel broadcast").
    detail : str
        Where ("panel 3 of 8").

    Returns
    -------
    contextlib.AbstractContextManager

    Raises
    ------
    ValueError
        ``HPCGPU_STALL_TIMEOUT`` is not a number >= 0 (read at the first call; agreed: the environment is the same
        on every rank).
    """
    global _OWN
    if _OWN is None:
        _OWN = Watchdog(None)
    return _OWN.watch(name, detail)


def watch_entry(name: str, detail: str = ""):
    """Watch a collective's first agreement (:func:`hpcgpu.errors.agree_inputs`) only under an explicit timeout.

    Not collective. The wait there lasts as long as the other ranks' own code before their call (a rank that
    prepares the input for an hour), not hpcgpu's: the default timeout would abort a correct program, so only a
    timeout set in ``HPCGPU_STALL_TIMEOUT`` watches it (as :func:`watch` does).

    Parameters
    ----------
    name, detail : str
        As for :func:`watch`.

    Returns
    -------
    contextlib.AbstractContextManager
    """
    if _options.text("HPCGPU_STALL_TIMEOUT") is None:
        return contextlib.nullcontext()
    return watch(name, detail)


errors._watch = watch_entry  # the agreement of arguments (errors.agree_inputs) waits under it: it lives below here
