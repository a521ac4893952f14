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

import contextlib
import dataclasses
import functools
import hashlib
import numbers
import os
import sys
import time

__all__ = ["AgreedError", "agreed", "agree", "agree_call", "agree_inputs", "plain_type", "abort"]


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
    _, first = _fold(comm, error)
    if first is not None:
        _raise_first([comm.bcast(_refusal(error), root=first)], error)


def _fold(comm, error: BaseException | None, digest: int = 0) -> tuple[bool, int | None]:
    """Whether the ranks' ``digest`` differ, and the lowest rank with an ``error`` (None when none has). Collective.

    One ``Allreduce`` (``MPI_MAX``) of three int64 in place, where a pickled ``allgather`` of the same took twice
    the time: 0.43 ms a call against 0.8-1.0 ms at 4 ranks on this project's 2-core machine (MPICH).
    """
    import numpy as np
    from mpi4py import MPI

    size = comm.Get_size()
    buf = np.array([digest, -digest, -(size if error is None else comm.Get_rank())], np.int64)
    comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.MAX)
    first = -int(buf[2])
    return int(buf[0]) != -int(buf[1]), (first if first < size else None)


def _digest(form) -> int:
    """A normalized form's (:func:`_normal`) digest: BLAKE2b of its text, 7 bytes as a non-negative int64."""
    return int.from_bytes(hashlib.blake2b(_flat(form).encode(), digest_size=7).digest(), "big")


def _refusal(error: BaseException | None):
    """What a rank tells the others of its error: (its plain type, its message), or None."""
    return None if error is None else (plain_type(error), str(error))


def _raise_first(refusals, error: BaseException | None) -> None:
    """Raise the first of the ranks' refusals (:func:`_refusal`), agreed; return when there is none."""
    for found in refusals:
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


_watch = None
"""``hpcgpu.watchdog.watch`` once that module is loaded (it sets this): the agreement of arguments waits under
the stall watchdog, which lives in a layer above this one."""

_PLAIN = (bool, int, float, str, bytes)
_LONG = 16  # a list or tuple longer than this is normalized by its length, first item and a digest of all items


def _normal(value, depth: int = 0):
    """``value`` in a form that is the same on two ranks exactly when their arguments are: str leaves, dicts, lists.

    Floats by ``repr`` (round-trip exact), ints, strings, bools and None by ``repr``; containers item by item
    (dicts and sets sorted; a list or tuple of more than ``_LONG`` items by its length, first item and a digest
    of every item's form); arrays (anything with a ``shape``) by type, shape and dtype, never by contents;
    functions and classes by their qualified names; a ``functools.partial`` by its function, arguments and
    keywords; a NumPy ``Generator`` by its bit generator's state; hpcgpu's own objects (a ``DistMatrix``, an
    array with a grid), then other objects that are no array, by their ``describe()`` hook, a dataclass field by
    field, a ``__repr__`` of their own, their attributes (``__dict__``), or their type's name (never an
    address). Nesting deeper than 6 levels is named by type.
    """
    if type(value) in _PLAIN or value is None:  # the common case first: an argument of a built-in type
        return repr(value)
    if isinstance(value, numbers.Integral):  # NumPy's integers too
        return repr(int(value))
    if isinstance(value, numbers.Real):  # NumPy's floats too
        return repr(float(value))
    if depth > 6:
        return type(value).__name__
    if isinstance(value, (dict, set, frozenset, list, tuple)):
        return _normal_container(value, depth)
    return _normal_object(value, depth)


def _normal_container(value, depth: int):
    """:func:`_normal` of a dict, set, list or tuple."""
    if isinstance(value, dict):
        return {f"[{_flat(_normal(k, depth + 1))}]" if not isinstance(k, str) else k: _normal(v, depth + 1)
                for k, v in sorted(value.items(), key=lambda kv: repr(kv[0]))}
    kind = type(value).__name__
    if isinstance(value, (set, frozenset)):  # iteration order follows each process's hash seed: sorted
        return [kind, *sorted((_normal(v, depth + 1) for v in value), key=_flat)]
    if len(value) > _LONG:  # one line in a message, every item in the digest
        digest = hashlib.blake2b(digest_size=8)
        for v in value:
            digest.update(_flat(_normal(v, depth + 1)).encode() + b"\0")
        return f"{kind} of {len(value)}, first {_flat(_normal(value[0], depth + 1))}, digest {digest.hexdigest()}"
    return [kind, *(_normal(v, depth + 1) for v in value)]


def _normal_object(value, depth: int):
    """:func:`_normal` of anything but a number, a string or a container."""
    if isinstance(value, functools.partial):
        return ["partial", _normal(value.func, depth + 1), _normal(value.args, depth + 1),
                _normal(value.keywords, depth + 1)]
    state = getattr(getattr(value, "bit_generator", None), "state", None)  # a NumPy Generator
    if isinstance(state, dict):
        return {"class": type(value).__name__, "state": _normal(state, depth + 1)}
    describe = getattr(value, "describe", None) if type(value).__module__.startswith("hpcgpu.") else None
    if callable(describe):  # hpcgpu's own arrays (a DistMatrix: its grid too, not only its shape)
        return _normal(describe(), depth + 1)
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if isinstance(shape, tuple):  # an array of any kind (NumPy, CuPy, h5py, torch; a table): never its contents
        if shape == () and dtype is not None and hasattr(value, "item"):  # a NumPy scalar (a bool_): its value
            return _normal(value.item(), depth + 1)
        dims = tuple(int(d) if isinstance(d, numbers.Integral) else d for d in shape)
        return f"{type(value).__name__} of shape {dims}" + (f" and dtype {dtype}" if dtype is not None else "")
    if isinstance(value, type) or callable(value) and hasattr(value, "__qualname__"):  # a class, a function
        return f"{getattr(value, '__module__', '?')}.{value.__qualname__}"
    describe = getattr(value, "describe", None)
    if callable(describe):
        return _normal(describe(), depth + 1)
    name = f"{type(value).__module__}.{type(value).__qualname__}"
    if dataclasses.is_dataclass(value):  # its fields' forms: a NumPy float and a float alike
        return {"class": name, **{f.name: _normal(getattr(value, f.name, None), depth + 1)
                                  for f in dataclasses.fields(value)}}
    if type(value).__repr__ is not object.__repr__:
        text = repr(value)
        if " at 0x" not in text:  # an address differs on every rank
            return text
    attrs = getattr(value, "__dict__", None)
    if isinstance(attrs, dict):
        return {"class": name, **_normal(attrs, depth + 1)}
    return name


def _flat(form) -> str:
    """A normalized form (:func:`_normal`) as one line of text: a message's words and the digest's bytes."""
    if isinstance(form, str):
        return form
    if isinstance(form, dict):
        return "{" + ", ".join(f"{k}: {_flat(v)}" for k, v in form.items()) + "}"
    kind, items = form[0], [_flat(v) for v in form[1:]]
    return ("(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")") if kind == "tuple" else \
        "[" + ", ".join(items) + "]"


def _ranks(ranks: list) -> str:
    """``[0, 1, 2, 5]`` as ``"ranks 0-2, 5"``; one rank as ``"rank 3"``."""
    runs, start = [], ranks[0]
    for a, b in zip(ranks, [*ranks[1:], None], strict=True):
        if b != a + 1:
            runs.append(f"{start}" if a == start else f"{start}-{a}")
            start = b
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(runs)


def _difference(forms: list) -> tuple[str, str]:
    """The first argument whose forms differ over the ranks (descending into dicts), and its value on each rank."""
    name, values = "", forms
    while all(isinstance(v, dict) for v in values) and len({tuple(v) for v in values}) == 1:
        key = next(k for k in values[0] if len({_flat(v[k]) for v in values}) > 1)
        name, values = (f"{name}.{key}" if name else key), [v[key] for v in values]
    if not name and all(isinstance(v, dict) for v in values):  # the arguments given differ: name the first
        keys = [k for v in values for k in v]
        key = next(k for k in dict.fromkeys(keys) if len({_flat(v.get(k, "(not given)")) for v in values}) > 1)
        name, values = key, [v.get(key, "(not given)") for v in values]
    groups: dict[str, list] = {}
    for r, v in enumerate(values):
        groups.setdefault(_flat(v), []).append(r)
    parts = [f"{text} on {_ranks(rs)}" for text, rs in sorted(groups.items(), key=lambda kv: kv[1][0])]
    return name, ", ".join(parts)


def agree_inputs(where: str, args, *, comm=None, error: BaseException | None = None) -> None:
    """Make every rank raise the same error when the ranks' arguments differ, or when any rank refused its own.

    Collective: all ranks of ``comm`` must call it, at the entry of a collective function and before any
    other communication, each with the arguments it was given. The input-side twin of :func:`agree`. Each
    rank normalizes ``args`` (floats by ``repr``, which is exact; ints, strings, bools, None; tuples, lists
    and dicts element by element, dicts sorted; arrays by type, shape and dtype, not contents; other objects
    by a ``describe()`` method, a ``__repr__`` of their own, or their type's name), hashes the result
    (BLAKE2b, 7 bytes) and one ``Allreduce`` of three integers (the digest, its negation, the lowest refusing
    rank) decides. Only when the digests differ does an ``allgather`` of the normalized values run, on every
    rank, to name the difference; only when a rank refused does a ``bcast`` of its refusal. It costs one small
    collective per call and the normalization (measured on 2 loaded cores: 26 microseconds for a matrix's
    arguments, 97 for a Trainer's config). At one rank it does nothing.

    Parameters
    ----------
    where : str
        The entry point, as messages name it (``"Trainer"``, ``"fit"``, ``"matmul"``).
    args : Mapping[str, object]
        The arguments that must be the same on every rank, by the names the caller knows them by.
        Anything legitimately per-rank (a sharded data set's rows) is left out by the caller.
    comm : mpi4py.MPI.Intracomm, keyword-only
        The ranks that agree (the runtime's private communicator by default).
    error : BaseException or None, keyword-only
        This rank's own refusal of its arguments (a bad value, a bad type), found before any communication.

    Raises
    ------
    ValueError
        The arguments differ: on every rank, an :class:`AgreedError` naming the first differing argument and
        its value on each set of ranks (``"Trainer: lr differs across ranks: 0.1 on ranks 0-1, 0.5 on rank
        2"``; a nested one by its path, ``optimizer.lr``). A difference wins over a rank's own refusal: a
        rank that refused a value the others did not was given another value.
    Exception
        Otherwise, the lowest refusing rank's ``error`` on every rank, as :func:`agree` raises it.

    Examples
    --------
    >>> agree_inputs("matmul", {"transa": transa, "alpha": alpha}, comm=comm)  # doctest: +SKIP
    """
    if comm is None:
        from . import _context

        comm = _context.comm()
    if comm.Get_size() == 1:  # nothing to differ from: no normalizing, no collective
        _raise_first([_refusal(error)], error)
        return
    form = _normal(dict(args))
    with _watch(f"{where}'s agreement of its arguments") if _watch else contextlib.nullcontext():
        differ, first = _fold(comm, error, _digest(form))
        if differ:
            forms = comm.allgather(form)
        elif first is not None:
            refusal = comm.bcast(_refusal(error), root=first)
    if differ:
        name, values = _difference(forms)
        raise agreed(ValueError(f"{where}: {name} differs across ranks: {values}"))
    if first is not None:
        _raise_first([refusal], error)


def write_line(line: str, stream=None) -> None:
    """``line`` and its newline on ``stream`` (default ``sys.stderr``) in one write, flushed. Not collective.

    What several ranks' output may meet: ``print`` writes its text and its newline in two calls when Python runs
    unbuffered (``PYTHONUNBUFFERED=1``, as many job scripts set), and another rank's output forwarded by the
    launcher can land between them, running two lines together.
    """
    stream = sys.stderr if stream is None else stream
    stream.write(line if line.endswith("\n") else line + "\n")
    stream.flush()


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
    MPICH's ``MPI_Abort`` returns once the launcher has the request, and a
    loaded launcher ends the ranks a while later: the rank then ends at once
    (``os._exit``), so that nothing of the program runs on after an abort.
    """
    from mpi4py import MPI  # here, not at import: hpcgpu binds the GPU before MPI_Init

    write_line(message)
    if MPI.COMM_WORLD.Get_size() > 1:
        time.sleep(0.5)
        MPI.COMM_WORLD.Abort(code)
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        os._exit(code)
    sys.exit(code)
