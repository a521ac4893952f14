"""Tasks in a supervised process of their own: a task that ends its process fails alone.

A task function may end the process it runs in: ``os._exit``, a Fortran
``STOP`` or a C ``exit()`` inside a wrapped library, a segmentation fault,
the kernel's out-of-memory killer. In the rank's own process that ends the
rank, and with it the sweep (at one rank, with exit status 0 and no results
file). So each working rank runs its tasks in one child process of its own,
started once and again only after one dies, and waits for each answer on a
pipe: a child that dies is a failed task whose cause names the exit status or
the signal, and the rank goes on with a fresh child.

The child is a new interpreter (``subprocess`` with ``sys.executable``), not
a fork: forking a process that has initialized MPI (and CUDA) is unsafe under
most MPI libraries and impossible for CUDA, and ``multiprocessing``'s spawn
would run the user's ``__main__`` script again in the child. It never
initializes MPI (``mpi4py.rc.initialize = False``, and the launcher's
variables ``PMI_*``, ``PMIX_*``, ``OMPI_*``, ``HYDRA_*``, ``I_MPI_*``, ``PRTE_*``,
``MPI_LOCALRANKID``... are removed from its environment), so it works under
every launcher (``mpiexec`` of each MPI, ``srun``). It sees the rank's GPU
alone (``CUDA_VISIBLE_DEVICES``), and ``hpcgpu.get_runtime()`` (and
``hpcgpu.init()``) inside it give a one-rank runtime without a communicator
whose ``xp`` is the rank's (CuPy on the rank's GPU, or NumPy). It ignores
SIGINT, SIGTERM, SIGUSR1 and SIGHUP, which are the rank's to act on (a stop
between two tasks), and dies with its rank (``PR_SET_PDEATHSIG``).

The function reaches the child by reference (pickle, after the child has
the rank's ``sys.path`` and has loaded the function's module from its file
if it was loaded so, as ``python -m hpcgpu.tasks sims.py:run`` does).
Lambdas, nested functions and functions of the ``__main__`` script cannot
be named so: they run in the rank's process (see :func:`choose`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pickle
import signal
import socket
import subprocess
import sys
import time
from multiprocessing.connection import Connection

from ._store import Record

__all__ = ["ProcessRunner", "InProcessRunner", "choose", "isolation", "not_isolatable", "child_environment",
           "death_cause"]

_SCRUB_PREFIXES = ("PMI_", "PMIX_", "OMPI_", "HYDRA_", "I_MPI_", "PRTE_", "MV2_COMM_WORLD_", "PALS_", "MPIEXEC_")
_SCRUB_NAMES = ("PMI_FD", "PMI_PORT", "PMI_ID", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "PMIX_RANK")
_HINTS = {signal.SIGKILL: "out of memory?", signal.SIGSEGV: "a segmentation fault in native code",
          signal.SIGBUS: "a bus error in native code", signal.SIGABRT: "abort() in native code",
          signal.SIGFPE: "a floating-point trap in native code", signal.SIGILL: "an illegal instruction"}
_START_SECONDS = 300.0  # a child that is not ready by then (imports hanging on a shared file system) is a failure


def death_cause(returncode: int) -> str:
    """The one-line cause of a task whose process ended: its exit status or the signal that killed it.

    Not collective.

    Parameters
    ----------
    returncode : int
        ``subprocess.Popen.returncode``: the exit status, or minus the signal number.

    Returns
    -------
    str
        ``"the task's process exited with status 0 (os._exit or a C exit() in the task)"``, or
        ``"the task's process was killed by signal 9 (SIGKILL: out of memory?)"``.
    """
    if returncode >= 0:
        return f"the task's process exited with status {returncode} (os._exit or a C exit() in the task)"
    num = -returncode
    try:
        name = signal.Signals(num).name
    except ValueError:
        name = f"signal {num}"
    hint = _HINTS.get(num)
    return f"the task's process was killed by signal {num} ({name}{': ' + hint if hint else ''})"


def child_environment(device_id: int | None, env: dict | None = None) -> dict:
    """The environment of a task process: the rank's, without the launcher's variables, on the rank's GPU.

    Not collective.

    Parameters
    ----------
    device_id : int or None
        The rank's CUDA device (an ordinal among the devices it sees), or ``None`` on the CPU.
    env : dict, optional
        The rank's environment (``os.environ`` by default).

    Returns
    -------
    dict
        ``CUDA_VISIBLE_DEVICES`` names the rank's device alone (the entry of the rank's own
        ``CUDA_VISIBLE_DEVICES`` where it has one, so UUIDs and MIG instances carry over);
        ``HPCGPU_DEVICE=cpu`` on the CPU, so that importing hpcgpu touches no GPU.
    """
    env = dict(os.environ if env is None else env)
    for k in list(env):
        if k.startswith(_SCRUB_PREFIXES) or k in _SCRUB_NAMES:
            del env[k]
    if device_id is None:
        env["HPCGPU_DEVICE"] = "cpu"
    else:
        seen = [v.strip() for v in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
        env["CUDA_VISIBLE_DEVICES"] = seen[device_id] if device_id < len(seen) else str(device_id)
    return env


def _reference(fn) -> tuple[bytes, tuple[str, str] | None] | str:
    """How a fresh interpreter finds ``fn``: its pickle and its module's (name, file); else why it cannot."""
    module = getattr(fn, "__module__", None)
    if module in (None, "__main__", "__mp_main__"):
        return f"{getattr(fn, '__qualname__', fn)!r} is defined in the main script"
    try:
        payload = pickle.dumps(fn, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as e:  # noqa: BLE001 - a lambda, a nested function, a callable holding a lock...
        return f"it cannot be pickled by reference ({type(e).__name__})"
    if b"__main__" in payload:
        return "it refers to the main script"
    mod = sys.modules.get(module)
    path = getattr(mod, "__file__", None)
    return payload, ((module, os.path.abspath(path)) if path else None)


def not_isolatable(fn) -> str | None:
    """Why a task process cannot load ``fn`` (a lambda, a nested function, the main script's), or ``None``.

    Not collective.

    Parameters
    ----------
    fn : callable

    Returns
    -------
    str or None
    """
    ref = _reference(fn)
    return ref if isinstance(ref, str) else None


def isolation(fn, isolate) -> str:
    """Where ``fn``'s tasks run, in words for the file's ``isolation`` attribute.

    Not collective.

    Parameters
    ----------
    fn : callable
    isolate : bool or "auto"
        As for :func:`hpcgpu.tasks.map`.

    Returns
    -------
    str
        ``"process"`` (a child process per working rank), or ``"none (why)"``.
    """
    if isolate is False:
        return "none (isolate=False)"
    why = not_isolatable(fn)
    return "process" if why is None else f"none ({why})"


def choose(fn, isolate, rank: int, timeout: float | None, runtime=None):
    """The runner of a working rank: tasks in a child process where ``fn`` can be named to one.

    Not collective.

    Parameters
    ----------
    fn : callable
        The task function.
    isolate : bool or "auto"
        ``False``: in this process; ``True`` or ``"auto"``: in a child
        process where ``fn`` can be named to one (:func:`not_isolatable`;
        the caller refuses ``True`` otherwise), this process otherwise.
    rank : int
        This rank, recorded with each task.
    timeout : float or None
        Seconds a task may run.
    runtime : hpcgpu.Runtime, optional
        The rank's runtime: the child uses its device.

    Returns
    -------
    ProcessRunner or InProcessRunner
    """
    if isolate is False:
        return InProcessRunner(fn, rank, timeout)
    ref = _reference(fn)
    if isinstance(ref, str):  # isolate=True was refused before (hpcgpu.tasks._check_args)
        return InProcessRunner(fn, rank, timeout, why=ref)
    gpu = runtime is not None and runtime.device == "gpu"
    return ProcessRunner(ref, rank, timeout, device_id=runtime.device_id if gpu else None,
                         reason=runtime.device_reason if gpu else "")


class InProcessRunner:
    """Tasks in the rank's own process (``isolate=False``, or a function no child can load).

    Parameters
    ----------
    fn : callable
        The task function.
    rank : int
        This rank.
    timeout : float or None
        Seconds a task may run (SIGALRM: main thread only).
    why : str, optional
        Why not in a child process (for the file's ``isolation`` attribute).
    """

    def __init__(self, fn, rank: int, timeout: float | None, why: str = "isolate=False"):
        from ._farm import _Alarm

        self.fn, self.rank = fn, rank
        self.alarm = _Alarm(timeout)
        self.usable = self.alarm.usable
        self.isolation = f"none ({why})"

    def run(self, task: int, attempt: int, kwargs: dict) -> Record:
        """One attempt at one task; an exception or the time limit is a failed record."""
        from ._farm import run_task

        return run_task(self.fn, task, attempt, kwargs, self.rank, self.alarm)

    def wait_ready(self) -> None:
        """Nothing to wait for: the function is here."""

    def close(self) -> None:
        """Put SIGALRM back."""
        self.alarm.close()


class ProcessRunner:
    """Tasks in a child process, restarted after it dies; a death is a failed record naming its cause.

    Parameters
    ----------
    ref : tuple
        The function's pickle and its module's (name, file), from :func:`_reference`.
    rank : int
        This rank.
    timeout : float or None
        Seconds a task may run: :class:`~hpcgpu.tasks.TaskTimeout` is
        raised in it (SIGALRM in the child), and a child still running
        ``min(max(2, timeout), 60)`` seconds later is killed.
    device_id : int or None
        The rank's GPU, which the child alone sees.
    reason : str
        Why the rank has that device (its runtime's ``device_reason``).
    """

    usable = True
    isolation = "process"

    def __init__(self, ref, rank: int, timeout: float | None, device_id: int | None = None, reason: str = ""):
        self.payload, self.module = ref
        self.rank, self.timeout, self.device_id, self.reason = rank, timeout, device_id, reason
        self.grace = min(max(2.0, timeout), 60.0) if timeout else 0.0
        self.proc: subprocess.Popen | None = None
        self.conn: Connection | None = None
        self.ready: str | None = None  # "" once the child said it is ready; else why it is not
        self.outputs: list = []  # the child's capture files of a task's stdout and stderr, open here, unlinked
        self.task: int | None = None  # the task the child runs
        self.starts = 0
        self.start()

    def start(self) -> None:
        """Start a child (it loads the function while the rank goes on)."""
        to_child, from_parent = os.pipe()
        to_parent, from_child = os.pipe()
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        code = (f"import sys; sys.path.insert(0, {root!r}); import mpi4py; mpi4py.rc.initialize = False; "
                "mpi4py.rc.finalize = False; from hpcgpu.tasks._isolate import _child; "
                f"_child({to_child}, {from_child}, {os.getpid()})")
        try:
            self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL,
                                         pass_fds=(to_child, from_child), env=child_environment(self.device_id))
        finally:
            os.close(to_child)
            os.close(from_child)
        self.conn = _Pipe(to_parent, from_parent)
        self.ready = None
        self.starts += 1
        init = {"path": list(sys.path), "payload": self.payload, "module": self.module, "rank": self.rank,
                "timeout": self.timeout, "gpu": self.device_id is not None, "reason": self.reason}
        try:
            self.conn.send(init)
        except OSError:
            pass  # it died at once: the first task finds out why

    def _wait(self, deadline: float | None):
        """The child's next message; ``("died", cause)`` or ``("late", None)`` when none came."""
        while True:
            step = 0.5 if deadline is None else max(0.0, min(0.5, deadline - time.monotonic()))
            try:
                if self.conn.poll(step):
                    return self.conn.recv()
            except (EOFError, OSError):
                pass
            else:
                if self.proc.poll() is None:
                    if deadline is not None and time.monotonic() >= deadline:
                        return "late", None
                    continue
                if self.conn.poll(0):  # it answered, then ended (an atexit os._exit?)
                    try:
                        return self.conn.recv()
                    except (EOFError, OSError):
                        pass
            return "died", death_cause(self._reap())

    def _reap(self) -> int:
        """Kill the child if it runs, collect its exit status, forget it (the next task starts another).

        What the task it ran had printed is written out, prefixed with its id, as the child would have
        done at the task's end: the lines before a crash are the ones most wanted.
        """
        proc, self.proc = self.proc, None
        if proc.poll() is None:
            proc.kill()
        rc = proc.wait()
        self.conn.close()
        self.conn = None
        self._salvage()
        return rc

    def _salvage(self) -> None:
        """The dead child's capture files: their lines to this rank's stdout and stderr, then the files removed."""
        from ._farm import _emit, _prefixed

        outputs, self.outputs = self.outputs, []
        for fd, stream, f in zip((1, 2), (sys.stdout, sys.stderr), outputs, strict=False):
            try:
                with f:
                    f.seek(0)
                    data = f.read()
            except OSError:
                continue
            if data and self.task is not None:
                _emit(stream, fd, _prefixed(data, self.task))

    def wait_ready(self) -> None:
        """Start a child if none runs, and wait until it has loaded the function (or failed to)."""
        if self.ready:
            return
        if self.proc is None:
            self.start()
        if self.ready is None:
            msg = self._wait(time.monotonic() + _START_SECONDS)
            if msg[0] == "late":
                self._reap()
                msg = ("broken", f"the task process did not start in {_START_SECONDS:g} s")
            if msg[0] == "died":
                msg = ("broken", f"{msg[1]} while loading the task function")
            self.ready = msg[1] if msg[0] == "broken" else ""
            if msg[0] == "ready":
                self.outputs = _open_unlinked(msg[1] or [])

    def run(self, task: int, attempt: int, kwargs: dict) -> Record:
        """One attempt at one task in the child; its death or a hang past the grace is a failed record."""
        if self.ready:  # its function cannot be loaded: every task says why, no child is started again
            return Record(task, False, attempt, 0.0, self.rank, error=self.ready)
        self.wait_ready()
        if self.ready:
            return Record(task, False, attempt, 0.0, self.rank, error=self.ready)
        t0 = time.perf_counter()
        self.task = task
        try:
            self.conn.send((task, attempt, kwargs))
        except OSError:
            pass  # it died between two tasks: _wait says how
        deadline = time.monotonic() + self.timeout + self.grace if self.timeout else None
        msg = self._wait(deadline)
        if isinstance(msg, Record):
            return msg
        seconds = time.perf_counter() - t0
        if msg[0] == "late":
            self._reap()
            error = (f"TaskTimeout: timed out after {self.timeout:g} s, still running {self.grace:g} s later "
                     "(a native call that ignores signals?): its process was killed")
        else:
            error = msg[1]
        return Record(task, False, attempt, seconds, self.rank, error=error)

    def close(self) -> None:
        """Tell the child to end and wait for it (a few seconds, then kill it)."""
        if self.proc is None:
            return
        try:
            self.conn.send(None)
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.conn.close()
        self.proc = self.conn = None
        for f in self.outputs:  # the child wrote its last task's lines itself
            f.close()
        self.outputs = []


def _open_unlinked(paths: list) -> list:
    """The task process's capture files, opened here and removed at once.

    Nothing is left behind, even when the rank is killed, and the rank still reads what the process
    wrote until it closes them.
    """
    files = []
    for path in paths:
        with contextlib.suppress(OSError):
            files.append(open(path, "rb"))  # noqa: SIM115 - held open until the child's end
        with contextlib.suppress(OSError):
            os.unlink(path)
    return files


class _Pipe:
    """Two one-way pipes as one connection: ``send`` on one, ``recv``/``poll`` on the other."""

    def __init__(self, read_fd: int, write_fd: int):
        self._r = Connection(read_fd, writable=False)
        self._w = Connection(write_fd, readable=False)
        self.recv, self.poll, self.send = self._r.recv, self._r.poll, self._w.send

    def close(self) -> None:
        self._r.close()
        self._w.close()


# ---- the child ----------------------------------------------------------------------------------

def _child(read_fd: int, write_fd: int, parent: int) -> None:
    """The task process: load the function, then run tasks until told to stop or the pipe closes."""
    _die_with(parent)
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGHUP):
        signal.signal(s, _ignore)  # a handler, not SIG_IGN: programs the task starts get the default back
    conn = _Pipe(read_fd, write_fd)
    try:
        init = conn.recv()
    except (EOFError, OSError):
        return
    from ._farm import _CAPTURE, _Alarm, _one_line, run_task

    rank = init["rank"]
    try:
        sys.path[:] = init["path"]
        _one_rank_runtime(init["gpu"], init["reason"])
        fn = _load(init["payload"], init["module"])
        alarm = _Alarm(init["timeout"])
    except BaseException as e:  # noqa: BLE001 - the rank records it for every task of this process
        conn.send(("broken", f"the task process could not load the function: {_one_line(e)}"))
        return
    conn.send(("ready", _CAPTURE.named()))  # the rank reads these files if this process dies in a task
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:  # the sweep is over: no interpreter teardown to wait for (50 ms with NumPy and MPI loaded)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
        task, attempt, kwargs = msg
        try:
            rec = run_task(fn, task, attempt, kwargs, rank, alarm)
        except MemoryError as e:
            rec = Record(task, False, attempt, 0.0, rank, error=_one_line(e) or "MemoryError")
        try:
            conn.send(rec)
        except (EOFError, BrokenPipeError):
            return
        except Exception as e:  # noqa: BLE001 - pickling the result failed: nothing was written
            conn.send(Record(task, False, attempt, rec.seconds, rank,
                             error=f"its result cannot be sent to the rank ({_one_line(e)})"))


def _ignore(signum, frame) -> None:
    """The rank acts on stop signals; its task process carries on with the task."""


def _die_with(parent: int) -> None:
    """Linux: SIGKILL this process when the rank that started it ends (a second Ctrl-C, MPI_Abort, a kill)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: a child whose rank died ends at its next read of the pipe
    if os.getppid() != parent:
        os._exit(1)


def _load(payload: bytes, module: tuple[str, str] | None):
    """The function from its pickle; its module first loaded from its file when the name alone cannot find it."""
    import importlib
    import importlib.util

    if module is not None:
        name, path = module
        try:
            mod = importlib.import_module(name)
            found = os.path.abspath(getattr(mod, "__file__", "") or "")
        except ImportError:
            found = None
        if found != path and os.path.isfile(path):
            spec = importlib.util.spec_from_file_location(name, path)
            mod = importlib.util.module_from_spec(spec)
            sys.modules[name] = mod
            spec.loader.exec_module(mod)
    return pickle.loads(payload)


def _one_rank_runtime(gpu: bool, reason: str) -> None:
    """``hpcgpu.get_runtime()`` and ``hpcgpu.init()`` in a task process: one rank, no MPI, the rank's device."""
    import numpy
    from mpi4py import MPI

    from .. import runtime

    xp = numpy
    if gpu:
        from .. import _device

        xp = _device.bind(0)  # the rank's GPU, the only one CUDA_VISIBLE_DEVICES shows
    rt = runtime.Runtime(comm=MPI.COMM_NULL, rank=0, size=1, local_rank=0, local_size=1,
                         host=socket.gethostname(), device="gpu" if gpu else "cpu", device_id=0 if gpu else None,
                         xp=xp, cuda_aware=False, cuda_aware_reason="a task process: no MPI", mpi_library="",
                         device_reason=f"the rank's ({reason})" if gpu else "the rank's",
                         binding=f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')}" if gpu else "",
                         _owns_comm=False)
    runtime._RUNTIME = runtime._PINNED = rt  # init() gives it, whatever it is asked: tasks do not communicate
