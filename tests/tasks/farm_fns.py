"""Task functions of the farm's tests, loaded as ``tests/tasks/farm_fns.py:NAME``.

Each call appends its task id to ``$FARM_LOG/<pid>``, so a test can count how
often every task ran and on which process.
"""

import os
import time

import numpy as np

import hpcgpu
from hpcgpu.tasks import current_task


def _log(i):
    d = os.environ.get("FARM_LOG")
    if d:
        with open(os.path.join(d, str(os.getpid())), "a") as f:
            f.write(f"{i}\n")


def uneven(i, seconds, fail=0):
    """Sleeps ``seconds``; fail=1 always raises, 2 raises on the first attempt, 3 hangs (past any timeout)."""
    _log(i)
    time.sleep(seconds)
    if fail == 1:
        raise RuntimeError(f"task {i} fails\nsecond line of the message")
    if fail == 2 and current_task().attempt == 0:
        raise OSError(f"task {i}: transient")
    if fail == 3:
        time.sleep(120)
    xp = hpcgpu.get_runtime().xp  # on the device path, a device array copied back by the farm
    return {"square": i * i, "vec": xp.full(3, float(i)), "tag": f"t{i}", "root": np.sqrt(float(i))}


def changes_shape(i, seconds=0):
    _log(i)
    return {"x": np.zeros(2 if i < 3 else 3)}


def slow(i, seconds=0.02):
    _log(i)
    time.sleep(seconds)
    return {"twice": 2 * i}


def gated(i, seconds=0.1):
    """``slow``, but task 8 and later first wait for the file ``$FARM_GATE``, which the test makes once the job's
    warning has been seen: a warning after 8 tasks always finds the sweep unfinished, however slow the machine."""
    _log(i)
    gate = os.environ.get("FARM_GATE")
    while gate and i >= 8 and not os.path.exists(gate):
        time.sleep(0.05)
    time.sleep(seconds)
    return {"twice": 2 * i}


def stuck(i, seconds=0.0):
    """Task 2 blocks SIGALRM and sleeps: a native call that no signal interrupts, as far as the farm can tell."""
    import signal

    _log(i)
    if i == 2:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        time.sleep(60)
    return {"i": i}


def crashy(i, how="ok"):
    """With ``FARM_CRASH=1``: ``exit`` ends the process with status 0 (a Fortran STOP), ``kill`` SIGKILLs it (the
    out-of-memory killer), ``unpicklable`` returns a lambda, ``stuck`` blocks SIGALRM and sleeps (a native call)."""
    import signal

    _log(i)
    if os.environ.get("FARM_CRASH") == "1":
        if how == "exit":
            os._exit(0)
        if how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if how == "unpicklable":
            return {"y": lambda: i}
        if how == "stuck":
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
            time.sleep(60)
    xp = hpcgpu.get_runtime().xp  # the task process's one-rank runtime: the rank's xp
    return {"y": float(xp.sqrt(xp.asarray(float(i))))}


def changes_kind(i, seconds=0):
    """Numbers for tasks 0-2, a string from task 3 on: a result of another dtype."""
    _log(i)
    return {"x": np.zeros(2) if i < 3 else "three"}


def ragged(i, seconds=0):
    """A vector of i % 3 + 1 values and a matrix of (i % 2 + 1, 2) values: shapes that vary from task to task."""
    _log(i)
    return {"v": np.arange(i % 3 + 1, dtype=float), "m": np.full((i % 2 + 1, 2), i), "s": i}


def chatty(i, seconds=0):
    """Prints two lines to stdout, one to stderr, and writes a line on file descriptor 1 as C code would."""
    import sys

    _log(i)
    print(f"out {i} a")
    print(f"err {i}", file=sys.stderr)
    os.write(1, f"raw {i}\n".encode())
    print(f"out {i} b", end="")  # a last line without its newline
    return {"i": i}


def interrupted(i, seconds=0):
    """Task 2 raises KeyboardInterrupt itself."""
    _log(i)
    if i == 2:
        raise KeyboardInterrupt("the task's own")
    return {"i": i}


def crashes_after_printing(i, seconds=0):
    """Task 1 prints a line, then ends its process with SIGSEGV's default action (a crash in native code)."""
    import signal

    _log(i)
    print(f"step {i} before the crash", flush=True)
    if i == 1:
        os.kill(os.getpid(), signal.SIGSEGV)
        time.sleep(10)
    return {"i": i}
