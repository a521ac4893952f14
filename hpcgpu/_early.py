"""Stop signals that come while the trainer's command line is still starting.

``python -m hpcgpu.train`` spends its first second or so importing (MPI_Init
among it) and reading its data before :class:`hpcgpu.train.stop.StopRequest`
installs its handlers; a SIGTERM or SIGUSR1 then (a preemption, Slurm's
warning signal to a job that just started) would end the process with no
word and exit 15, and a job script waiting for exit 3 would not requeue. So
the first thing ``import hpcgpu`` does, in that program only, is to record
those signals; the stop request takes the record over, and the run stops
after its first step, with its checkpoint and the usual line. A library
import changes no signal handler.
"""

from __future__ import annotations

import os
import signal
import sys

__all__ = ["catch", "received", "release"]

SIGNALS = ("SIGTERM", "SIGUSR1")
_received: list[str] = []
_installed: dict = {}


def _is_trainer() -> bool:
    """Whether this process is the trainer's command line (``python -m hpcgpu.train``, ``hpcgpu-train``)."""
    argv = getattr(sys, "orig_argv", None) or []
    if any(a == "-m" and b == "hpcgpu.train" for a, b in zip(argv, argv[1:], strict=False)):
        return True
    return bool(argv) and any(os.path.basename(a) == "hpcgpu-train" for a in argv[1:3])


def _record(signum, frame) -> None:
    name = signal.Signals(signum).name
    if name not in _received:
        _received.append(name)


def catch() -> None:
    """In the trainer's command line only: record SIGTERM and SIGUSR1 instead of dying (main thread only)."""
    import threading

    if not _is_trainer() or threading.current_thread() is not threading.main_thread():
        return
    for name in SIGNALS:
        sig = getattr(signal, name)
        if signal.getsignal(sig) is signal.SIG_DFL:
            _installed[name] = signal.signal(sig, _record)


def received() -> str | None:
    """The first stop signal recorded before the stop request took over (``"SIGTERM"``), or None."""
    return _received[0] if _received else None


def release() -> None:
    """Put the default actions back, and deliver a recorded signal now (a program that does not stop cleanly)."""
    for name, old in _installed.items():
        signal.signal(getattr(signal, name), old)
    _installed.clear()
    if _received:
        signal.raise_signal(getattr(signal, _received[0]))
