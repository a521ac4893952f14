"""The error contract of hpcgpu, as a type.

An MPI program has two kinds of error. An error that every rank found (bad
input, checked before any communication, or agreed on with
:func:`hpcgpu.errors.agree`) is safe to raise: nobody is left waiting in a
collective. It is an :class:`AgreedError`, and the command-line guard turns
it into one line on stderr and exit status 2. Any other exception was raised
by some ranks while others may wait in a collective: the guard aborts the
whole job (:func:`abort`).

An agreed error keeps its ordinary type as well, so ``except ValueError``
still catches a bad argument: ``agreed(ValueError("--lr must be ..."))`` is
an instance of both ``ValueError`` and :class:`AgreedError`.
"""

from __future__ import annotations

import sys
import time

__all__ = ["AgreedError", "agreed", "agree", "agree_call", "plain_type", "abort"]


class AgreedError(Exception):
    """Base of every error that all ranks of a communicator raise together.

    Never raised on its own: :func:`agreed` makes an error of a subclass of
    both the original type (``ValueError``, ``FileNotFoundError``, ...) and
    this one.

    Attributes
    ----------
    silent : bool
        When true, the command-line guard prints nothing on this rank (every
        rank of a job raised it, and one of them speaks).
    """

    silent: bool = False


_CLASSES: dict[type, type] = {}


def _agreed_class(cls: type) -> type:
    """``cls`` made a subclass of :class:`AgreedError` too (one class per ``cls``, cached)."""
    if issubclass(cls, AgreedError):
        return cls
    sub = _CLASSES.get(cls)
    if sub is None:
        sub = type(cls.__name__, (cls, AgreedError), {"__module__": cls.__module__, "__qualname__": cls.__qualname__})
        _CLASSES[cls] = sub
    return sub


def plain_type(error: BaseException) -> type:
    """The ordinary type of ``error``: ``ValueError`` for ``agreed(ValueError(...))``.

    Not collective. The class :func:`agreed` makes exists only in this
    process; this one can be pickled to other ranks.

    Parameters
    ----------
    error : BaseException
        Any exception, agreed or not.

    Returns
    -------
    type
        The original type when ``type(error)`` is a class that :func:`agreed`
        made; ``type(error)`` otherwise.
    """
    cls = type(error)
    for base, sub in _CLASSES.items():
        if sub is cls:
            return base
    return cls


def agreed(error: BaseException, *, silent: bool = False) -> BaseException:
    """The same error, marked as known to every rank.

    Not collective. Call it only where every rank raises the same error at
    the same point: a check of values that are the same everywhere (the
    arguments, the environment, a reduced loss), or the outcome of
    :func:`hpcgpu.errors.agree`.

    Parameters
    ----------
    error : BaseException
        The error, with a one-line message naming the file, dataset or
        argument.
    silent : bool, keyword-only
        Let the command-line guard print nothing on this rank.

    Returns
    -------
    BaseException
        An instance of ``type(error)`` and of :class:`AgreedError`, with
        ``error``'s arguments and cause; ``error`` itself when it already is
        one (then only ``silent`` is updated). A type whose constructor does
        not take ``error.args`` becomes a ``RuntimeError`` with its message.

    Examples
    --------
    >>> raise agreed(ValueError("--epochs must be >= 1, got 0"))  # doctest: +SKIP
    """
    if isinstance(error, AgreedError):
        out = error
    else:
        try:
            out = _agreed_class(type(error))(*error.args)
        except Exception:  # a constructor with other arguments
            out = _agreed_class(RuntimeError)(str(error))
        out.__cause__, out.__traceback__ = error.__cause__, error.__traceback__
    out.silent = silent
    return out


def agree(error: BaseException | None, *, comm=None) -> None:
    """Make every rank raise the same error when any rank has one.

    Collective: all ranks of ``comm`` must call it, each with the error it
    found in its own checks (or ``None``). When no rank has an error, all
    return. Otherwise every rank raises an exception of the type of the
    lowest failing rank's error, with that rank's message, made an
    :class:`~hpcgpu.errors.AgreedError` by :func:`~hpcgpu.errors.agreed`:
    the command-line guard then knows that all ranks know, and a clean exit
    (status 2) is safe.

    Parameters
    ----------
    error : BaseException or None
    comm : mpi4py.MPI.Intracomm, keyword-only
        The ranks that agree (the runtime's private communicator by default:
        :func:`hpcgpu.comm.default_comm`).

    Raises
    ------
    Exception
        As described above.
    """
    if comm is None:
        from . import _context

        comm = _context.comm()
    mine = None if error is None else (plain_type(error), str(error))
    for found in comm.allgather(mine):
        if found is None:
            continue
        cls, msg = found
        try:
            exc = agreed(cls(msg))
        except Exception:  # a type whose constructor wants other arguments
            exc = agreed(RuntimeError(msg))
        if error is not None and plain_type(error) is cls and str(error) == msg:
            raise exc from error
        raise exc


def agree_call(fn, *, catch: tuple, comm=None):
    """``fn()`` on every rank, with any error of the types ``catch`` agreed (:func:`agree`); its result.

    Collective, as :func:`agree`: the one form of "try this rank's part, then agree before any rank goes on"
    (``err = None; try: ...; except ...: err = e; agree(err)``).

    Parameters
    ----------
    fn : callable
        Called with no argument on every rank of ``comm``.
    catch : tuple of type, keyword-only
        The exception types that are an answer to agree on; any other propagates at once (a bug, for the
        program's guard to abort the job on).
    comm : mpi4py.MPI.Intracomm, optional, keyword-only
        As for :func:`agree`.

    Returns
    -------
    object
        What ``fn`` returned on this rank.

    Raises
    ------
    Exception
        The lowest failing rank's error, on every rank (:func:`agree`).
    """
    result, err = None, None
    try:
        result = fn()
    except catch as e:
        err = e
    agree(err, comm=comm)
    return result


def abort(message: str, code: int = 1) -> None:
    """Print ``message`` on stderr, give the launcher a moment to pass it on, abort the job.

    Not collective: one rank ends every rank of ``MPI.COMM_WORLD``
    (``MPI_Abort``); with one rank it simply exits. Used for anything
    unexpected, where other ranks may be waiting in a collective.

    Parameters
    ----------
    message : str
        What went wrong (a newline is added when missing).
    code : int
        The exit status asked of the launcher.

    Notes
    -----
    Without the half-second pause, mpiexec sometimes killed the job before
    it had forwarded the aborting rank's last lines: the user saw no reason.
    """
    from mpi4py import MPI  # here, not at import: hpcgpu binds the GPU before MPI_Init

    sys.stderr.write(message if message.endswith("\n") else message + "\n")
    sys.stderr.flush()
    if MPI.COMM_WORLD.Get_size() > 1:
        time.sleep(0.5)
        MPI.COMM_WORLD.Abort(code)
    sys.exit(code)
