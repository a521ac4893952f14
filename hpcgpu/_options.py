"""Every ``HPCGPU_*`` environment variable, read in one place.

An option is its argument, else its variable, else its default.

=============================  ==========================================================================
variable                       what it sets
=============================  ==========================================================================
``HPCGPU_STALL_TIMEOUT``       seconds a collective may wait before the job is aborted (0: off)
``HPCGPU_CUDA_AWARE_MPI``      0/1: whether device buffers go straight to MPI (against the MPI's answer)
``HPCGPU_NONBLOCKING_DEVICE``  0/1: whether they go to its non-blocking collectives too
``HPCGPU_DEVICE``              ``cpu``: ``import hpcgpu`` binds no GPU before ``MPI_Init`` (``auto``, ``gpu``: it may)
``HPCGPU_IGNORE_SLURM_NTASKS`` 1: do not refuse N one-rank worlds under ``srun --mpi=none``
``HPCGPU_BLAS_OVERSUBSCRIBE``  1: keep a thread variable's count above a bound rank's CPU set
``HPCGPU_KEEP_HOST_MEMORY``    0: leave glibc's ``malloc`` as it is (1, the default: freed memory stays in the rank)
``HPCGPU_DATA_DIR``            where the bundled data sets are cached (``~/.cache/hpcgpu``)
``HPCGPU_POWERCAP_ROOT``       where RAPL's counters are read (``/sys/class/powercap``)
``HPCGPU_MPIEXEC``             the launcher ``python -m hpcgpu.scaling`` starts its runs with
``HPCGPU_JOB_STOP_FILE``       a job script's own stop file: there at the start, it is a stop, not a stale file
=============================  ==========================================================================

Switches take 0/1, no/yes, false/true or off/on. Not collective: a variable
is the same on every rank of a job, so every rank reads the same value (and
raises the same error). :func:`error` reads every variable through its reader
at once: :func:`hpcgpu.init` refuses a bad value there, in one line naming the
variable, whether or not the run would have read it.
"""

from __future__ import annotations

import math
import os

__all__ = ["VARIABLES", "text", "switch", "seconds", "choice", "error", "stall_timeout", "DEFAULT_STALL_TIMEOUT"]

VARIABLES = ("HPCGPU_STALL_TIMEOUT", "HPCGPU_CUDA_AWARE_MPI", "HPCGPU_NONBLOCKING_DEVICE", "HPCGPU_DEVICE",
             "HPCGPU_IGNORE_SLURM_NTASKS", "HPCGPU_BLAS_OVERSUBSCRIBE", "HPCGPU_KEEP_HOST_MEMORY", "HPCGPU_DATA_DIR",
             "HPCGPU_POWERCAP_ROOT", "HPCGPU_MPIEXEC", "HPCGPU_JOB_STOP_FILE")

TRUE = frozenset({"1", "yes", "true", "on"})
FALSE = frozenset({"0", "no", "false", "off"})


def _known(name: str) -> str:
    assert name in VARIABLES, name  # a new variable goes in the table first
    return name


def text(name: str, value: str | None = None, default: str | None = None) -> str | None:
    """``value`` when given, else the variable's text (stripped) when set and not empty, else ``default``.

    Parameters
    ----------
    name : str
        One of :data:`VARIABLES`.
    value : str, optional
        The argument, which wins.
    default : str, optional

    Returns
    -------
    str or None
    """
    if value is not None:
        return value
    raw = os.environ.get(_known(name), "").strip()
    return raw or default


def switch(name: str, value: bool | None = None) -> bool | None:
    """An on/off option: ``value`` when given, else the variable, else None.

    Parameters
    ----------
    name : str
        One of :data:`VARIABLES`.
    value : bool, optional

    Returns
    -------
    bool or None
        None when neither says.

    Raises
    ------
    ValueError
        The variable is set to another word than 0/1, no/yes, false/true, off/on.
    """
    if value is not None:
        return bool(value)
    raw = os.environ.get(_known(name), "")
    v = raw.strip().lower()
    if not v:
        return None
    if v not in TRUE | FALSE:
        raise ValueError(f"{name} must be 0 or 1 (or no/yes, false/true, off/on), got {raw!r}")
    return v in TRUE


def seconds(name: str, value: float | None, default: float, what: str) -> float:
    """A duration in seconds: ``value`` (the option ``what``) when given, else the variable, else ``default``.

    Parameters
    ----------
    name : str
        One of :data:`VARIABLES`.
    value : float, optional
    default : float
    what : str
        How the message names the option (``--stall-timeout``).

    Returns
    -------
    float
        Seconds, >= 0 and finite.

    Raises
    ------
    ValueError
        The option or the variable is not a number >= 0 and finite; the message names which.
    """
    if value is not None:
        if not value >= 0 or not math.isfinite(value):
            raise ValueError(f"{what} must be >= 0 seconds, got {value}")
        return float(value)
    raw = os.environ.get(_known(name), "").strip()
    if not raw:
        return default
    try:
        t = float(raw)
    except ValueError:
        raise ValueError(f"{name} must be seconds, got {raw!r}") from None
    if not t >= 0 or not math.isfinite(t):
        raise ValueError(f"{name} must be >= 0 seconds, got {raw!r}")
    return t


DEVICES = ("auto", "cpu", "gpu")
"""The words ``HPCGPU_DEVICE`` takes (``cpu`` is the one that changes what ``import hpcgpu`` does)."""


def choice(name: str, words: tuple, default: str | None = None) -> str | None:
    """A variable that is one of ``words`` (case aside): the word, else ``default`` when unset or empty.

    Parameters
    ----------
    name : str
        One of :data:`VARIABLES`.
    words : tuple of str
        The lower-case words it takes.
    default : str, optional

    Returns
    -------
    str or None
        The word, lower-cased.

    Raises
    ------
    ValueError
        Another word; the message names the variable and the words.
    """
    raw = os.environ.get(_known(name), "")
    v = raw.strip().lower()
    if not v:
        return default
    if v not in words:
        raise ValueError(f"{name} must be {', '.join(words[:-1])} or {words[-1]}, got {raw!r}")
    return v


_READERS = {
    "HPCGPU_STALL_TIMEOUT": lambda n: seconds(n, None, 0.0, n),
    "HPCGPU_CUDA_AWARE_MPI": switch,
    "HPCGPU_NONBLOCKING_DEVICE": switch,
    "HPCGPU_DEVICE": lambda n: choice(n, DEVICES),
    "HPCGPU_IGNORE_SLURM_NTASKS": switch,
    "HPCGPU_BLAS_OVERSUBSCRIBE": switch,
    "HPCGPU_KEEP_HOST_MEMORY": switch,
    "HPCGPU_DATA_DIR": text,
    "HPCGPU_POWERCAP_ROOT": text,
    "HPCGPU_MPIEXEC": text,
    "HPCGPU_JOB_STOP_FILE": text,
}
"""How each variable is read: its value's rules live in its reader, and :func:`error` runs them all."""


def error() -> ValueError | None:
    """The first variable set to a value its reader refuses, as a one-line error naming it; None when all are good.

    Not collective (the environment is the same on every rank). Each variable of :data:`VARIABLES` is read
    through its reader (:func:`switch`, :func:`seconds`, :func:`choice`, :func:`text`), so a value that a run
    reads late, or only on some machines (``HPCGPU_IGNORE_SLURM_NTASKS`` under Slurm alone), is refused at the
    start all the same.

    Returns
    -------
    ValueError or None
    """
    for name in VARIABLES:
        try:
            _READERS[name](name)
        except ValueError as e:
            return e
    return None


DEFAULT_STALL_TIMEOUT = 600.0
"""Seconds a collective may wait when neither an option nor ``HPCGPU_STALL_TIMEOUT`` says: far above any
legitimate wait of hpcgpu's own (a checkpoint of a large model on a slow file system, a data set's first read,
a rank's first CUDA or NCCL start: tens of seconds), and short against an allocation's hours that a hang burns."""


def stall_timeout(value: float | None = None) -> float:
    """The stall timeout in seconds: ``value``, else ``$HPCGPU_STALL_TIMEOUT``, else :data:`DEFAULT_STALL_TIMEOUT`.

    Not collective. The one reader of ``HPCGPU_STALL_TIMEOUT`` (:func:`hpcgpu.watchdog.stall_timeout` makes its
    error an agreed one; ``hpcgpu._stop.finish``, a layer below the watchdog, bounds the end's meeting with it).

    Raises
    ------
    ValueError
        ``value`` or the variable is not a number >= 0 and finite.
    """
    return seconds("HPCGPU_STALL_TIMEOUT", value, DEFAULT_STALL_TIMEOUT, "--stall-timeout")
