"""Where the time goes: seconds per phase of a loop on each rank, reduced over ranks, and a Chrome trace.

A :class:`PhaseTimer` is told when a phase begins (:meth:`PhaseTimer.mark`);
the previous one ends there, so the phases tile the loop and their sum is its
time (nothing counted twice, nothing left out). On the CPU each mark reads
the host clock. On a GPU each mark records a CUDA event on the current
stream, and the phases are the gaps between consecutive events on the
device's timeline, read once when the seconds are collected: the time a
kernel ran, not the time it took to launch, and no synchronization inside
the loop. A phase the host spends in MPI appears there as the device idling
between the events around it.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Sequence

import numpy as np
from mpi4py import MPI

__all__ = ["PhaseTimer", "reduce_phases", "write_trace"]


class PhaseTimer:
    """Seconds per phase on this rank, from consecutive marks.

    Not collective.

    Parameters
    ----------
    phases : sequence of str
        The phase names, e.g. ``("data", "compute", "comm", "io")``.
    cupy : module, optional
        CuPy (or its stand-in) when the work runs on a GPU: marks are CUDA
        events; ``None`` on the CPU: marks are ``time.perf_counter()``.
    trace : bool
        Keep every phase interval (start, duration) for :func:`write_trace`.
    on : bool
        ``False`` makes every call a no-op (the overhead benchmark's baseline).

    Attributes
    ----------
    events : list of tuple
        With ``trace``: ``(phase, start, seconds, label)`` per interval;
        ``start`` in seconds of this process's ``perf_counter`` (the trace
        aligns the ranks' clocks).
    """

    def __init__(self, phases: Sequence[str], cupy=None, trace: bool = False, on: bool = True):
        self.phases, self.cupy, self.trace, self.on = tuple(phases), cupy, trace, on
        self.totals = dict.fromkeys(self.phases, 0.0)
        self.events: list[tuple] = []
        self._current: str | None = None
        self._t = 0.0
        self._label = ""
        self._pending: list = []  # GPU: (phase, event, host time at record, label) not yet read
        self._pool: list = []

    def mark(self, phase: str | None, label: str = "") -> None:
        """End the running phase here and start ``phase`` (``None``: start none).

        Parameters
        ----------
        phase : str or None
            One of :attr:`phases`, or ``None`` to pause.
        label : str
            Shown with the interval in the trace (e.g. ``"step 12"``).
        """
        if not self.on:
            return
        if self.cupy is None:
            now = time.perf_counter()
            if self._current is not None:
                dt = now - self._t
                self.totals[self._current] += dt
                if self.trace:
                    self.events.append((self._current, self._t, dt, self._label))
            self._current, self._t, self._label = phase, now, label
            return
        ev = self._pool.pop() if self._pool else self.cupy.cuda.Event()
        ev.record()
        self._pending.append((phase, ev, time.perf_counter(), label))

    def collect(self) -> dict:
        """The seconds per phase since the last collect (waits for the device's last mark).

        Returns
        -------
        dict of str to float
            Seconds per phase (every phase of :attr:`phases`, 0.0 when it did not run).
        """
        if self.on and self.cupy is not None and self._pending:
            self._drain_events()
        out, self.totals = self.totals, dict.fromkeys(self.phases, 0.0)
        return out

    def _drain_events(self) -> None:
        pend = self._pending
        last = pend[-1][1]
        last.synchronize()
        t0_host = pend[0][2]  # the device timeline anchored at the first mark's host time
        elapsed = self.cupy.cuda.get_elapsed_time
        start_ms = 0.0
        for (phase, ev, _, label), (_, nxt, _, _) in zip(pend[:-1], pend[1:], strict=True):
            dt = elapsed(ev, nxt) / 1e3
            if phase is not None:
                self.totals[phase] += dt
                if self.trace:
                    self.events.append((phase, t0_host + start_ms / 1e3, dt, label))
            start_ms += dt * 1e3
        # The last mark starts the next interval: keep it, recycle the others.
        self._pool.extend(ev for _, ev, _, _ in pend[:-1])
        self._pending = [pend[-1]]


def reduce_phases(seconds: dict, comm: MPI.Intracomm) -> dict:
    """Min, mean and max over the ranks of each phase's seconds.

    Collective over ``comm``: every rank passes its dict with the same keys
    in the same order.

    Parameters
    ----------
    seconds : dict of str to float
        This rank's seconds per phase.
    comm : mpi4py.MPI.Intracomm

    Returns
    -------
    dict of str to tuple of float
        ``{phase: (min, mean, max)}`` in seconds, the same on every rank.
    """
    v = np.array(list(seconds.values()), dtype=np.float64)
    if comm.size == 1:
        return {k: (x, x, x) for k, x in zip(seconds, v.tolist(), strict=True)}
    lo, tot, hi = np.empty_like(v), np.empty_like(v), np.empty_like(v)
    comm.Allreduce(v, lo, op=MPI.MIN)
    comm.Allreduce(v, tot, op=MPI.SUM)
    comm.Allreduce(v, hi, op=MPI.MAX)
    return {k: (a, b / comm.size, c) for k, a, b, c in zip(seconds, lo.tolist(), tot.tolist(), hi.tolist(),
                                                           strict=True)}


def write_trace(path: str, events: list, comm: MPI.Intracomm, clock0: float, root: int = 0) -> None:
    """Write every rank's phase intervals as one Chrome trace (``chrome://tracing``, Perfetto), one track a rank.

    Collective over ``comm``: the events are gathered (pickled) to ``root``,
    which writes the JSON atomically; every rank learns whether that worked.

    Parameters
    ----------
    path : str
        The JSON file.
    events : list of tuple
        This rank's ``(phase, start, seconds, label)`` (:attr:`PhaseTimer.events`).
    comm : mpi4py.MPI.Intracomm
    clock0 : float
        This rank's ``perf_counter()`` at an instant that all ranks shared
        (right after a barrier), which becomes time 0 of every track.
    root : int
        The writing rank.

    Raises
    ------
    OSError
        ``path`` cannot be written (every rank).

    Notes
    -----
    The format: Google's "Trace Event Format" (complete events, ``"ph":
    "X"``, microseconds; a ``process_name`` metadata event names each
    rank's track). Clocks: ``perf_counter`` is the node's monotonic clock, so
    tracks of one node line up exactly; across nodes the barrier aligns them
    to within its own latency.
    """
    from .io import WRITE_ERRORS, atomic_path, on_root, one_line

    mine = {"rank": comm.rank, "host": socket.gethostname(),
            "events": [(p, round((s - clock0) * 1e6, 3), round(d * 1e6, 3), lab) for p, s, d, lab in events]}
    everyone = comm.gather(mine, root=root)

    def write():
        out = []
        for r in everyone:
            out.append({"name": "process_name", "ph": "M", "pid": r["rank"], "tid": 0,
                        "args": {"name": f"rank {r['rank']} ({r['host']})"}})
            out.append({"name": "process_sort_index", "ph": "M", "pid": r["rank"], "tid": 0,
                        "args": {"sort_index": r["rank"]}})
            for p, ts, dur, lab in r["events"]:
                ev = {"name": p, "ph": "X", "ts": ts, "dur": dur, "pid": r["rank"], "tid": 0, "cat": "phase"}
                if lab:
                    ev["args"] = {"at": lab}
                out.append(ev)
        with atomic_path(path) as tmp, open(tmp, "w") as f:
            json.dump({"traceEvents": out, "displayTimeUnit": "ms"}, f)

    on_root(write, comm=comm, root=root, catch=WRITE_ERRORS,
            error=lambda e: OSError(f"--trace {path}: cannot write ({one_line(e)})"))
