"""Stop signals that come while one of hpcgpu's programs is still starting.

``python -m hpcgpu.train`` (and ``python -m hpcgpu.tasks``, ``python -m
hpcgpu matmul``) spends its first second or so importing (MPI_Init among it)
before ``hpcgpu._stop.StopRequest`` installs its handlers; a SIGTERM,
SIGUSR1 or SIGINT then (a preemption, Slurm's warning signal to a job that
just started, a Ctrl-C) would end the process with no word or a traceback,
and a job script waiting for exit 3 would not requeue. So the first thing
``import hpcgpu`` does, in those programs only, is to record those signals;
the stop request takes the record over, and the run stops at its first safe
point, with its checkpoint and the usual line. A library import changes no
signal handler.
"""

from __future__ import annotations

import os
import signal
import sys

__all__ = ["catch", "received", "received_all", "release"]

SIGNALS = ("SIGTERM", "SIGUSR1", "SIGINT")
PROGRAMS = ("hpcgpu", "hpcgpu.train", "hpcgpu.tasks")
_received: list[str] = []
_installed: dict = {}


def _is_program() -> bool:
    """Whether this process is one of hpcgpu's command lines (``python -m hpcgpu[.train|.tasks]``, ``hpcgpu-train``)."""
    argv = getattr(sys, "orig_argv", None) or []
    if any(a == "-m" and b in PROGRAMS for a, b in zip(argv, argv[1:], strict=False)):
        return True
    return bool(argv) and any(os.path.basename(a) == "hpcgpu-train" for a in argv[1:3])


def _record(signum, frame) -> None:
    name = signal.Signals(signum).name
    if name == "SIGINT" and name in _received:  # Ctrl-C twice while starting: end now, as the stop policy does
        os._exit(130)
    if name not in _received:
        _received.append(name)


def catch() -> None:
    """In hpcgpu's command lines only: record SIGTERM, SIGUSR1 and SIGINT instead of dying (main thread only)."""
    import threading

    if not _is_program() or threading.current_thread() is not threading.main_thread():
        return
    for name in SIGNALS:
        sig = getattr(signal, name)
        if signal.getsignal(sig) in (signal.SIG_DFL, signal.default_int_handler):
            _installed[name] = signal.signal(sig, _record)


def received() -> str | None:
    """The first stop signal recorded before the stop request took over (``"SIGTERM"``), or None."""
    return _received[0] if _received else None


def received_all() -> tuple:
    """Every stop signal recorded before the stop request took over, in order of arrival."""
    return tuple(_received)


def release() -> None:
    """Put the default actions back, and deliver a recorded signal now (a program that does not stop cleanly)."""
    for name, old in _installed.items():
        signal.signal(getattr(signal, name), old)
    _installed.clear()
    if _received:
        signal.raise_signal(getattr(signal, _received[0]))
