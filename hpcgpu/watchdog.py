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
import os
import threading
import time
from contextlib import contextmanager

from mpi4py import MPI

__all__ = ["Watchdog", "stall_timeout_from_env"]

_TAG = 7741


def stall_timeout_from_env(default: float = 0.0) -> float:
    """``HPCGPU_STALL_TIMEOUT`` in seconds (0 or unset: off).

    Raises
    ------
    ValueError
        Not a number >= 0.
    """
    v = os.environ.get("HPCGPU_STALL_TIMEOUT", "").strip()
    if not v:
        return default
    try:
        t = float(v)
    except ValueError:
        raise ValueError(f"HPCGPU_STALL_TIMEOUT must be seconds, got {v!r}") from None
    if t < 0:
        raise ValueError(f"HPCGPU_STALL_TIMEOUT must be >= 0, got {v!r}")
    return t


class Watchdog:
    """Watches this rank's collectives; aborts the job on a stall.

    Collective (construction): all ranks of ``comm`` create it together,
    with the same ``timeout`` (it duplicates ``comm``).

    Parameters
    ----------
    comm : mpi4py.MPI.Intracomm
    timeout : float
        Seconds a collective may wait before the job is aborted; 0 turns the
        watchdog off (:meth:`collective` then costs one attribute check).
    abort : callable, optional
        Called with the report instead of ``MPI.COMM_WORLD.Abort(1)``
        (tests).

    Examples
    --------
    >>> wd = Watchdog(comm, timeout=120)              # doctest: +SKIP
    >>> with wd.collective("gradient Allreduce", step):  # doctest: +SKIP
    ...     Allreduce(grad, comm=comm)
    """

    def __init__(self, comm: MPI.Intracomm, timeout: float, abort=None):
        self.timeout = float(timeout)
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
    def collective(self, name: str, detail: str = ""):
        """Mark the enclosed block as a wait in collective ``name`` (not collective itself)."""
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
        from ._cli import abort

        abort(report)

    def _run(self) -> None:
        T = self.timeout
        reported = None  # serial of the collective this rank reported waiting in
        waiting: dict[int, tuple] = {}  # rank 0: rank -> (serial, name, detail, since)
        tick = max(0.05, min(1.0, T / 10))
        while not self._stop.wait(tick):
            st = self._state
            now = time.monotonic()
            if reported is not None and (st is None or st[0] != reported):
                if self.threads and self.rank != 0:  # that wait is over: tell rank 0
                    self.comm.send(("clear", reported), dest=0, tag=_TAG)
                reported = None
            if st is not None and now - st[3] >= T / 2 and reported != st[0]:
                reported = st[0]
                if self.threads and self.rank != 0:
                    self.comm.send(("wait", st[0], st[1], st[2], now - st[3]), dest=0, tag=_TAG)
            if not self.threads:
                if st is not None and now - st[3] >= T:
                    self._abort(f"hpcgpu: stall: rank {self.rank} waited {now - st[3]:.0f} s in "
                                f"{st[1]} ({st[2]}); aborting the job")
                    return
                continue
            if self.rank != 0:
                continue
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
                continue
            oldest = min(waiting.values(), key=lambda v: v[3])
            if now - oldest[3] < T:
                continue
            same = {r for r, v in waiting.items() if v[0] == oldest[0] and v[1] == oldest[1]}
            missing = [r for r in range(self.size) if r not in same]
            self._abort(
                f"hpcgpu: stall: {oldest[1]} ({oldest[2]}) has waited {now - oldest[3]:.0f} s "
                f"(stall timeout {T:g} s); ranks {missing or 'none'} have not arrived, "
                f"ranks {sorted(same)} are waiting; aborting the job")
            return
