"""Where the time goes: seconds per phase of a loop on each rank, reduced over ranks, and a Chrome trace.

Two clocks for two shapes of work. A :class:`PhaseTimer` is told when a phase begins (:meth:`PhaseTimer.mark`);
the previous one ends there, so the phases tile the loop and their sum is its
time (nothing counted twice, nothing left out). On the CPU each mark reads
the host clock. On a GPU each mark records a CUDA event on the current
stream, and the phases are the gaps between consecutive events on the
device's timeline, read once when the seconds are collected: the time a
kernel ran, not the time it took to launch, and no synchronization inside
the loop. A phase the host spends in MPI appears there as the device idling
between the events around it.

A :class:`SpanTimer` times an overlapped schedule instead (SUMMA's
lookahead: the broadcasts of panel p+1 in flight during the GEMM of panel
p): each span is bracketed on its own, on the host clock or by a pair of
CUDA events on the stream its work goes to, so spans may overlap and the
phases may add up to more than the wall time.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Sequence
from contextlib import contextmanager

import numpy as np
from mpi4py import MPI

__all__ = ["PhaseTimer", "SpanTimer", "reduce_phases", "write_trace"]


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
        start_ms = 0.0
        for (phase, ev, _, label), (_, nxt, _, _) in zip(pend[:-1], pend[1:], strict=True):
            dt = _between(self.cupy, ev, nxt)
            if phase is not None:
                self.totals[phase] += dt
                if self.trace:
                    self.events.append((phase, t0_host + start_ms / 1e3, dt, label))
            start_ms += dt * 1e3
        # The last mark starts the next interval: keep it, recycle the others.
        self._pool.extend(ev for _, ev, _, _ in pend[:-1])
        self._pending = [pend[-1]]


def _between(cupy, start, end) -> float:
    """Seconds from CUDA event ``start`` to ``end`` (both recorded and complete)."""
    return cupy.cuda.get_elapsed_time(start, end) / 1e3


class SpanTimer:
    """Seconds per phase on this rank, from spans that may overlap.

    Not collective. Host spans (:meth:`host`: MPI calls, GEMMs on the
    host) read ``time.perf_counter`` around the block. Device spans
    (:meth:`device`) record a CUDA event before and after the work on the
    stream it goes to, and are read once in :meth:`collect`: timing adds
    no synchronization inside the schedule, so it measures the overlapped
    run itself.

    Parameters
    ----------
    phases : sequence of str
        The phase names, e.g. ``("gemm", "d2h", "h2d", "mpi")``.
    cupy : module, optional
        CuPy (or its stand-in) when work runs on a GPU; ``None``: every span
        is a host span.
    on : bool
        ``False`` makes every call a no-op (nothing is recorded).

    Attributes
    ----------
    started : float
        ``time.perf_counter()`` when the timer was made.
    """

    def __init__(self, phases: Sequence[str], cupy=None, on: bool = True):
        self.phases, self.cupy, self.on = tuple(phases), cupy, on
        self.seconds = dict.fromkeys(self.phases, 0.0)
        self._events: list[tuple[str, object, object]] = []
        self.started = time.perf_counter()

    @contextmanager
    def host(self, phase: str):
        """Add the block's host-clock seconds to ``phase`` (a context manager).

        Parameters
        ----------
        phase : str
            One of :attr:`phases`.
        """
        if not self.on:
            yield
            return
        t = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] += time.perf_counter() - t

    @contextmanager
    def device(self, phase: str, stream):
        """Add the device seconds of the work the block queues on ``stream`` to ``phase`` (a context manager).

        A host span when the timer has no ``cupy`` (``stream`` is then ignored).

        Parameters
        ----------
        phase : str
            One of :attr:`phases`.
        stream : cupy.cuda.Stream or None
            The stream the block's work goes to; CUDA events are recorded on it before and after.
        """
        if not self.on or self.cupy is None:
            with self.host(phase):
                yield
            return
        start, end = self.cupy.cuda.Event(), self.cupy.cuda.Event()
        start.record(stream)
        try:
            yield
        finally:
            end.record(stream)
            self._events.append((phase, start, end))

    def collect(self) -> dict:
        """The seconds per phase (waits for the device's spans to end).

        Returns
        -------
        dict of str to float
            Every phase of :attr:`phases`, 0.0 where nothing ran.
        """
        if self.on and self.cupy is not None:
            self.cupy.cuda.get_current_stream().synchronize()
            for phase, start, end in self._events:
                start.synchronize()
                end.synchronize()
                self.seconds[phase] += _between(self.cupy, start, end)
            self._events.clear()
        return dict(self.seconds)


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
    from ._outputs import mark_text
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
        with atomic_path(path) as tmp, open(tmp, "w") as f:  # the writer's mark first: the output policy's
            json.dump({"otherData": {"writer": mark_text()}, "traceEvents": out, "displayTimeUnit": "ms"}, f)

    on_root(write, comm=comm, root=root, catch=WRITE_ERRORS,
            error=lambda e: OSError(f"--trace {path}: cannot write ({one_line(e)})"))
