"""Stop signals that come while one of hpcgpu's programs is still starting.

``python -m hpcgpu.train`` (and ``python -m hpcgpu.tasks``, ``python -m
hpcgpu matmul``) spends its first second or so importing (MPI_Init among it)
before ``hpcgpu._stop.StopRequest`` installs its handlers; a SIGTERM,
SIGUSR1 or SIGINT then (a preemption, Slurm's warning signal to a job that
just started, a Ctrl-C) would end the process with no word or a traceback,
and a job script waiting for exit 3 would not requeue. So the first thing
each program's ``__main__`` does, before any import that initializes MPI, is
:func:`catch`: it records those signals; the stop request takes the record
over, and the run stops at its first safe point, with its checkpoint and the
usual line. ``import hpcgpu`` itself changes no signal handler and reads no
command line (its packages load their names on first use, so nothing
initializes MPI before a program's ``__main__`` runs). Left open: the GPU's
binding at ``import hpcgpu`` (``hpcgpu._device.bind_early``, CuPy's start on a
GPU node, which can take seconds) comes before the program's ``catch``; a stop
signal in it has its default effect.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time

__all__ = ["catch", "count_sigint", "end_now", "name_program", "os_actions", "received", "received_all", "release",
           "sigints", "tell_launcher_finalized", "undo_mpi_init"]

EXIT_INTERRUPTED = 130
"""The exit status after a second SIGINT ended the job at once (128 + SIGINT, as a shell reports it)."""

SIGNALS = ("SIGTERM", "SIGUSR1", "SIGHUP", "SIGINT")
_received: list[str] = []
_sigints = [0]  # SIGINTs this process has taken so far, by any of hpcgpu's handlers: the second ends the job
_installed: dict = {}
_prog = "hpcgpu"
_ENDING = threading.Lock()


def _record(signum, frame) -> None:
    name = signal.Signals(signum).name
    if name == "SIGINT" and count_sigint():  # Ctrl-C twice (while starting, or after a stop): end now
        end_now(_prog)
    if name not in _received:
        _received.append(name)


def count_sigint() -> bool:
    """Count one SIGINT taken by a handler of hpcgpu's; whether it is the process's second (the job ends now).

    Not collective. The count is the process's, not a run's: a Ctrl-C that stopped a run, then another while
    the stopped run writes its checkpoint, returns, or finalizes MPI, is a second Ctrl-C.
    """
    _sigints[0] += 1
    return _sigints[0] > 1


def sigints() -> int:
    """The SIGINTs this process's hpcgpu handlers have taken so far. Not collective."""
    return _sigints[0]


def catch(prog: str) -> None:
    """Record SIGTERM, SIGUSR1, SIGHUP and SIGINT instead of dying (main thread only); a signal with a handler is left.

    Called by hpcgpu's programs first (their ``__main__``, and ``hpcgpu._scripts`` for the console script
    ``hpcgpu-train``), never by an import.

    Parameters
    ----------
    prog : str
        The program's name, as its lines begin (``"hpcgpu.train"``).
    """
    global _prog
    if threading.current_thread() is not threading.main_thread():
        return
    _prog = prog
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



def world_rank() -> int:
    """This process's rank in the job, without initializing MPI (a signal may come before MPI_Init)."""
    mpi = sys.modules.get("mpi4py.MPI")
    try:
        if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
            return mpi.COMM_WORLD.Get_rank()
    except Exception:  # noqa: BLE001 - a signal handler must not raise
        pass
    for var in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return 0


def name_program(prog: str) -> None:
    """Name the program in the line :func:`end_now` prints from a handler of this module (``"hpcgpu.train"``)."""
    global _prog
    _prog = prog


def end_now(prog: str) -> None:
    """A second SIGINT: one line from rank 0, then this process ends with :data:`EXIT_INTERRUPTED`.

    Every rank got the signal (the launcher forwards a Ctrl-C to all) and every rank ends at once, rank 0
    after writing its line. At once, because a rank that outlives another inside MPI (a collective's wait,
    a progress thread) may find the other gone, abort, and have the launcher kill the job with its banner
    (MPICH's Hydra did, even after MPI_Finalize, and for ranks that waited a few seconds to give rank 0 the
    first turn). Under a Hydra launcher (MPICH's, Intel MPI's) each rank first tells its proxy that it has
    finalized (:func:`tell_launcher_finalized`): Hydra kills every other rank with SIGKILL as soon as one exits
    without that, Intel MPI's whatever the status, MPICH's for any status but 0, and the job then ended with
    the launcher's banner and exit 255 or 9 whenever one rank left a millisecond before the others (about one
    run in eight under Intel MPI). A rank 0 that is not scheduled until after the others are gone can lose its
    line.

    Parameters
    ----------
    prog : str
        The program's name, which begins the line.
    """
    if not _ENDING.acquire(blocking=False):  # the watcher and the handler both saw it: one line
        while True:
            time.sleep(1)
    if world_rank() == 0:
        line = f"{prog}: second SIGINT: ending the job now, without saving (exit {EXIT_INTERRUPTED})\n"
        try:
            os.write(2, line.encode("utf-8", "replace"))
        except OSError:
            pass
    tell_launcher_finalized()
    os._exit(EXIT_INTERRUPTED)


HYDRA_PROXY = "hydra_pmi_proxy"
"""The process name of Hydra's per-node proxy, the parent of each rank that MPICH's or Intel MPI's ``mpiexec``
starts."""


def _under_hydra(levels: int = 4) -> bool:
    """Whether Hydra's proxy is this process's parent or an ancestor up to ``levels`` up (a wrapper script)."""
    pid = os.getppid()
    for _ in range(levels):
        if pid <= 1:
            return False
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
        name, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
        if name == HYDRA_PROXY:
            return True
        pid = int(rest[1])
    return False


def tell_launcher_finalized(timeout: float = 1.0) -> bool:
    """Tell a Hydra proxy that this rank has finalized, so that its exit does not end the other ranks.

    Not collective. Only where Hydra's proxy (:data:`HYDRA_PROXY`) is this process's parent (or an ancestor up
    to four levels: a wrapper script) and ``PMI_FD`` names the PMI socket the proxy gave it: PMI-1's
    ``cmd=finalize``, then the proxy's ``finalize_ack`` awaited for at most ``timeout`` seconds. Elsewhere it
    does nothing: Open MPI's ``prterun`` ends the other ranks with SIGTERM but reports the first rank's status
    (130, and its own message), Slurm's ``srun`` ends no task for another's exit (without
    ``--kill-on-bad-exit``). After it, a rank that outlives this one is not killed by the launcher: a rank
    that waits on this one inside MPI waits until hpcgpu's stall watchdog (``HPCGPU_STALL_TIMEOUT``) ends the
    job. So it is only for the end of a job that every rank is leaving: a second Ctrl-C, which the launcher
    forwards to every rank.

    Parameters
    ----------
    timeout : float
        Seconds to wait for the proxy's answer.

    Returns
    -------
    bool
        Whether the proxy answered.
    """
    fd = os.environ.get("PMI_FD", "")
    if not fd.isdigit() or not sys.platform.startswith("linux"):
        return False
    fd = int(fd)
    try:
        if not _under_hydra():
            return False
        import select

        os.write(fd, b"cmd=finalize\n")
        if not select.select([fd], [], [], timeout)[0]:
            return False
        return b"finalize_ack" in os.read(fd, 256)
    except (OSError, ValueError):
        return False


class _SigAction(ctypes.Structure):
    """glibc's ``struct sigaction`` (x86-64 and aarch64 alike): the handler, the mask, the flags, the restorer."""

    _fields_ = [("handler", ctypes.c_void_p), ("mask", ctypes.c_ulong * 16), ("flags", ctypes.c_int),
                ("restorer", ctypes.c_void_p)]


MPI_INIT_SIGNALS = ("SIGUSR1", "SIGHUP")
"""The stop signals whose action the MPI library changes behind Python's back: ``MPI_Init``'s SIGUSR1 handler
(MPICH, Intel MPI) and UCX's SIGHUP handler, installed when the library loads (MPICH's and Open MPI's wheels:
UCX's ``UCX_DEBUG_SIGNO``, which turns on debug logging). Open MPI's own handlers of SIGSEGV, SIGBUS, SIGFPE and
SIGABRT (its backtrace on a crash) are left."""


def os_actions() -> dict | None:
    """The operating system's action for each of :data:`MPI_INIT_SIGNALS`, as ``sigaction`` reports it. Not collective.

    What Python's ``signal.getsignal`` cannot see: a handler installed from C
    (MPICH's, ``faulthandler.register``'s). None off Linux or where libc's
    ``sigaction`` cannot be called.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        out = {}
        for name in MPI_INIT_SIGNALS:
            act = _SigAction()
            if libc.sigaction(int(getattr(signal, name)), None, ctypes.byref(act)) != 0:
                return None
            out[name] = act
        return out
    except (OSError, AttributeError):
        return None


def undo_mpi_init(before: dict | None) -> list:
    """Put back each stop signal's action the MPI library changed since ``before`` (:func:`os_actions`); those put back.

    Not collective. MPICH's ``MPI_Init`` (and Intel MPI's) installs a
    SIGUSR1 handler of its own where the process has none, unseen by Python:
    a SIGUSR1 (Slurm's ``--signal``) was then swallowed, and the program ran
    on as if never asked to stop. UCX (under MPICH's and Open MPI's wheels)
    installs a SIGHUP handler when the library loads, which switches its
    logging to debug: a SIGHUP (a closed terminal, a launcher's hang-up)
    then filled the log and the run went on. hpcgpu imports ``mpi4py.MPI`` (which runs
    ``MPI_Init``) between two looks at the actions (``hpcgpu._yield``), so
    between the runtime's start and a Trainer's (whose stop request takes
    over from its construction) a stop signal has the effect it had before:
    the default (the process ends) or a handler the program set, Python's or
    C's (``faulthandler.register``). A ``mpi4py.MPI`` imported before
    ``import hpcgpu`` is not watched (a stop request's handlers, Python's,
    replace the library's all the same).
    """
    after = os_actions()
    if before is None or after is None:
        return []
    libc, undone = ctypes.CDLL(None, use_errno=True), []
    for name, act in before.items():
        now = after[name]
        if (now.handler, now.flags) != (act.handler, act.flags) or bytes(now.mask) != bytes(act.mask):
            libc.sigaction(int(getattr(signal, name)), ctypes.byref(act), None)
            undone.append(name)
    return undone
