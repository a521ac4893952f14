"""Stopping a run cleanly: a signal or a stop file asks, the trainer agrees on it in a step's reduction."""

from __future__ import annotations

import os
import time

__all__ = ["StopRequest"]


class StopRequest:
    """A request to stop at the next step: SIGUSR1, SIGTERM, or a stop file.

    Not collective: each rank records its own requests; the trainer agrees
    on them in the step's Allreduce, so all ranks stop after the same step.
    A second signal of the same kind takes its default action (the process
    ends), for a user who really means it.

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

    Attributes
    ----------
    reason : str or None
        ``"SIGUSR1"``, ``"SIGTERM"`` or ``"stop file PATH"`` once requested.
    """

    SIGNALS = ("SIGUSR1", "SIGTERM")

    def __init__(self, stop_file: str | None = None, check_file: bool = True, interval: float = 1.0):
        self.reason: str | None = None
        self.stop_file, self.check_file, self.interval = stop_file, check_file, interval
        self._next_look = 0.0
        self._old: dict = {}

    def _handler(self, signum, frame):
        import signal

        name = signal.Signals(signum).name
        if self.reason == name:
            signal.signal(signum, self._old.get(name, signal.SIG_DFL))
            signal.raise_signal(signum)
            return
        self.reason = self.reason or name

    def requested(self) -> bool:
        """Whether a stop was asked for on this rank (looks at the file now and then)."""
        if self.reason is None and self.stop_file and self.check_file:
            now = time.monotonic()
            if now >= self._next_look:
                self._next_look = now + self.interval
                if os.path.exists(self.stop_file):
                    self.reason = f"stop file {self.stop_file}"
        return self.reason is not None

    def install(self) -> "StopRequest":
        """Install the signal handlers (main thread only; elsewhere a no-op).

        A stop signal the command line recorded while it was starting
        (:mod:`hpcgpu._early`) becomes this request's reason.
        """
        import signal
        import threading

        from .. import _early

        if threading.current_thread() is threading.main_thread():
            for name in self.SIGNALS:
                self._old[name] = signal.signal(getattr(signal, name), self._handler)
                if self._old[name] is _early._record:  # the default action is what a second signal gets
                    self._old[name] = signal.SIG_DFL
            self.reason = self.reason or _early.received()
        return self

    def uninstall(self) -> None:
        """Put the previous handlers back."""
        import signal

        for name, h in self._old.items():
            signal.signal(getattr(signal, name), h)
        self._old.clear()
