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
"""

from __future__ import annotations

import atexit
import threading
import time
from contextlib import contextmanager

from mpi4py import MPI

from . import _nccl, _options
from .errors import abort, agreed

__all__ = ["Watchdog", "stall_timeout"]

_TAG = 7741


def stall_timeout(value: float | None = None) -> float:
    """The stall timeout in seconds: ``value``, else ``$HPCGPU_STALL_TIMEOUT``, else 0 (off).

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
        return _options.seconds("HPCGPU_STALL_TIMEOUT", value, 0.0, "--stall-timeout")
    except ValueError as e:
        raise agreed(e) from None


class Watchdog:
    """Watches this rank's collectives; aborts the job on a stall.

    Collective (construction): all ranks of ``comm`` create it together,
    with the same ``timeout`` (it duplicates ``comm``).

    Parameters
    ----------
    comm : mpi4py.MPI.Intracomm
    timeout : float, optional
        Seconds a collective may wait before the job is aborted; 0 turns the
        watchdog off (:meth:`watch` then costs one attribute check). By
        default ``$HPCGPU_STALL_TIMEOUT`` (see :func:`stall_timeout`).
    abort : callable, optional
        Called with the report instead of ``MPI.COMM_WORLD.Abort(1)``
        (tests).

    Examples
    --------
    >>> wd = Watchdog(comm, timeout=120)              # doctest: +SKIP
    >>> with wd.watch("gradient Allreduce", step):  # doctest: +SKIP
    ...     Allreduce(grad, comm=comm)
    """

    def __init__(self, comm: MPI.Intracomm, timeout: float | None = None, abort=None):
        self.timeout = stall_timeout(timeout)
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self._abort = abort or self._mpi_abort
        self._state = None  # (serial, name, detail, t_enter) while waiting
        self._serial = 0
        self._stop = threading.Event()
        self._thread = None
        if self.timeout <= 0:
            self.comm = None
            return
        self.comm = comm.Dup()
        _nccl.set_stall_timeout(self.timeout)  # NCCL's waits are on the GPU: its monitor watches those
        self.threads = MPI.Query_thread() == MPI.THREAD_MULTIPLE
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
        if self.comm is None:
            yield
            return
        self._serial += 1
        self._state = (self._serial, name, detail, time.monotonic())
        try:
            yield
        finally:
            self._state = None

    def close(self) -> None:
        """Stop the thread and free the communicator. Collective."""
        if self.comm is None:
            return
        self._halt()
        atexit.unregister(self._halt)
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
        tick = max(0.05, min(1.0, T / 10))
        while not self._stop.wait(tick):
            st, now = self._state, time.monotonic()
            reported = self._tell_rank0(st, now, reported)
            if not self.threads:
                if st is not None and now - st[3] >= T:
                    self._abort(f"hpcgpu: stall: rank {self.rank} waited {now - st[3]:.0f} s in "
                                f"{st[1]} ({st[2]}); aborting the job")
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
        missing = [r for r in range(self.size) if r not in same]
        return (f"hpcgpu: stall: {oldest[1]} ({oldest[2]}) has waited {now - oldest[3]:.0f} s "
                f"(stall timeout {T:g} s); ranks {missing or 'none'} have not arrived, "
                f"ranks {sorted(same)} are waiting; aborting the job")
