"""The task farm's entry point, :func:`map` (documented in :mod:`hpcgpu.tasks`)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

from .._version import __version__
from ..comm import default_comm
from ..errors import agree, agree_inputs
from ..errors import agreed
from .._outputs import Input, Output, claim, release
from ..io import WRITE_ERRORS, one_line, shared_dir_error
from ._farm import (Options, Outcome, TaskInfo, TaskTimeout, _Keeper, agreed_outcome, balance, current_task,
                    earlier_work, manage, resume_from, work, work_alone)
from ._isolate import choose, isolation
from ._params import Params, read_params
from ._store import DONE, FAILED, PENDING, Ledger

# ``map`` is public (hpcgpu.tasks.map) but not in __all__: ``from hpcgpu.tasks import *`` must not shadow the builtin.
__all__ = ["SweepResult", "Params", "read_params", "TaskTimeout", "TaskInfo", "current_task",
           "PENDING", "DONE", "FAILED"]

PROGRESS = ("auto", "bar", "lines", "none")


@dataclass
class SweepResult:
    """The outcome of a sweep; the same summary on every rank, the tables on rank 0.

    Attributes
    ----------
    tasks, done, failed, pending : int
        Task counts (``pending``: not run, after a stop).
    makespan : float
        Seconds from the first task handed out to the last worker stopping.
    workers : int
        Ranks that ran tasks (``P - 1``, or 1 on one rank).
    balance : float
        Seconds spent in tasks over ``workers * makespan`` (1.0: no worker waited).
    stopped : str or None
        Why the sweep stopped early (``"SIGTERM"``, ``"stop file PATH"``), else ``None``.
    out : str or None
        The HDF5 file written.
    results : dict of str to numpy.ndarray or None
        Rank 0: each result over all tasks (task id first; NaN or 0 where not done); a result whose shape
        varies, an object array of each task's array (``None`` where not done). Others: ``None``.
    status : numpy.ndarray or None
        Rank 0: int8 per task, :data:`PENDING`, :data:`DONE` or :data:`FAILED`.
    error : list of str or None
        Rank 0: the one-line error of each failed task (``""`` otherwise).
    seconds : numpy.ndarray or None
        Rank 0: wall-clock seconds of each task's last attempt (NaN: not run).
    """

    tasks: int
    done: int
    failed: int
    pending: int
    makespan: float
    workers: int
    balance: float
    stopped: str | None = None
    out: str | None = None
    results: dict | None = None
    status: np.ndarray | None = None
    error: list | None = None
    seconds: np.ndarray | None = None

    def summary(self) -> str:
        """The one line a run ends with: counts, makespan, workers, balance, the file.

        Returns
        -------
        str
        """
        line = (f"{self.tasks} tasks: {self.done} done, {self.failed} failed, {self.pending} pending; "
                f"makespan {self.makespan:.2f} s on {self.workers} worker{'s' * (self.workers != 1)}, "
                f"balance {self.balance:.2f}")
        if self.stopped:
            line += f"; stopped ({self.stopped})"
        return line + (f"; wrote {self.out}" if self.out else "")


def map(fn, params, out: str | os.PathLike | None = None, *, resume: bool = False, retry_failed: bool = False,
        retries: int = 0, timeout: float | None = None, flush_seconds: float = 2.0, progress: str = "none",
        stop_file: str | None = None, comm: MPI.Intracomm | None = None, name: str | None = None,
        isolate: bool | str = "auto", overwrite: bool = False) -> SweepResult:
    """Call ``fn(**row)`` for every row of ``params`` over the ranks; gather the results in one file.

    Collective: every rank of ``comm`` calls it with the same arguments
    (``fn`` itself is not sent anywhere: each rank calls its own, as SPMD
    code does). Rank 0 hands out tasks in chunks that shrink as the work runs
    out (guided self-scheduling) and records the results; the other ranks run
    them. On one rank, the tasks run there in order.

    Parameters
    ----------
    fn : callable
        Takes the parameter columns as keyword arguments; returns a dict of
        numbers, booleans, strings or fixed-shape numeric arrays (CuPy
        arrays are copied to the host). The first result fixes the names
        and dtypes; a result whose shape varies from task to task is stored
        ragged (``/results/NAME`` each task's values flattened,
        ``/shapes/NAME`` each task's shape; in ``results`` an object array
        of each task's array). An exception fails that task only (a
        ``KeyboardInterrupt`` the task raises too), and so does ending the
        process (see ``isolate``). What a task prints goes to the rank's
        stdout and stderr when it ends, each line prefixed ``[task ID]``.
    params : str, os.PathLike, Params, mapping or sequence of dicts
        The task table, read by rank 0; see :func:`read_params`.
    out : str or os.PathLike, optional
        The HDF5 file (written by rank 0, atomically) and beside it
        ``OUT.journal`` while the sweep runs. Without it nothing is
        written and ``resume`` is not possible.
    resume : bool, keyword-only
        Keep the done and the failed tasks of an earlier run of the same
        sweep (same function name and parameter table) from ``out`` and its
        journal; run the tasks not yet run. The failed ones stay failed
        (with their errors) unless ``retry_failed``: a task that crashes
        its process does not crash every resume. Without an earlier file,
        start afresh.
    retry_failed : bool, keyword-only
        With ``resume``: run the earlier run's failed tasks again too.
    retries : int, keyword-only
        Further attempts at a task that raised or timed out before it is
        recorded as failed (on whichever worker asks next).
    timeout : float, keyword-only, optional
        Seconds an attempt may run; then :class:`TaskTimeout` is raised in
        it (SIGALRM in the task's process) and the rank goes on with its
        next task. A native call that never returns cannot be stopped so:
        a task still running ``min(max(2, timeout), 60)`` seconds past its
        limit has its process killed and is recorded as failed. A task run
        in the rank's own process (``isolate``) cannot be killed: then a
        watchdog thread aborts the job, naming it (the finished tasks stay
        in the file and journal for ``resume``), and the limit needs the
        main thread.
    flush_seconds : float, keyword-only
        The journal is forced to disk at least this often (seconds): what a
        killed job can lose. The HDF5 file is rewritten every
        ``10 * flush_seconds`` at most, and less often when writing it is
        slow (at most 5% of the time).
    progress : {"auto", "bar", "lines", "none"}, keyword-only
        Rank 0's progress display: a tqdm bar (``auto``: on a terminal), a
        line every 30 s, or nothing.
    stop_file : str, keyword-only, optional
        When this file appears, stop handing out tasks, let the running
        ones finish, write the file and return with ``stopped`` set. The
        same for SIGINT, SIGTERM and SIGUSR1 to any rank while the sweep
        runs (the stop policy's handlers are installed for its duration,
        in the main thread); a program run by :func:`hpcgpu.run_guarded`
        whose sweep stopped then exits 3. ``resume=True`` goes on.
    comm : mpi4py.MPI.Intracomm, keyword-only, optional
        The runtime's communicator by default (duplicated for the farm).
    name : str, keyword-only, optional
        The function's name in the file and in resume checks; by default
        ``fn``'s module and qualified name.
    isolate : {"auto", True, False}, keyword-only
        Where the tasks run. ``True``: each working rank runs them in a
        child process of its own, started once (and again after one dies),
        which sees the rank's GPU alone and never joins MPI (inside it
        ``hpcgpu.get_runtime()`` is a one-rank runtime with the rank's
        ``xp`` and no communicator); a task that ends that process
        (``os._exit``, a C ``exit()``, a signal, an out-of-memory kill) is
        a failed task whose error names the exit status or signal, and
        the rank goes on. ``fn`` reaches the child by reference, so it must
        be defined at the top level of a module (a file loaded as
        ``sims.py:run`` will do). ``False``: in the rank's own process (a
        task that ends it ends the job). ``"auto"``: ``True`` where ``fn``
        can be named to a child, ``False`` for lambdas, nested functions and
        functions of the ``__main__`` script. The file's ``isolation``
        attribute says which.
    overwrite : bool, keyword-only
        Replace an ``out`` (or its journal) that hpcgpu did not write;
        refused otherwise, before any task runs (the output policy), as
        is an ``out`` that is the parameter table or ``fn``'s source file.
        Also start afresh over an ``out`` (or journal) that holds an
        earlier run's finished tasks: without ``resume`` or ``overwrite``
        such an ``out`` is refused, nothing touched.

    Returns
    -------
    SweepResult
        Counts and timings on every rank; the tables on rank 0.

    Raises
    ------
    ValueError
        Bad arguments or parameter table, an earlier file of another sweep
        with ``resume``, or results that change names or dtypes from task
        to task, or from the results a resume kept (the sweep stops; the
        journal keeps what was done; the output is not written);
        ``isolate=True`` for a function no child process can load; a
        ``stop_file`` that is ``params`` or ``out``. Agreed: every rank
        raises it.
    FileExistsError
        ``out`` (or its journal) holds an earlier run's finished tasks and
        neither ``resume`` nor ``overwrite`` was given (agreed, before any
        task runs, nothing touched).
    FileNotFoundError
        ``params`` names no file (agreed).
    PermissionError, IsADirectoryError
        ``out`` cannot be written (agreed, before any task runs).

    Notes
    -----
    Chunks: a worker asking gets ``ceil(R / 2W)`` of the ``R`` tasks not
    handed out (Polychronopoulos and Kuck, "Guided self-scheduling", IEEE
    Trans. Computers 36(12), 1987; halved as in Hummel, Schonberg and
    Flynn, "Factoring", CACM 35(8), 1992). A worker sends its records at
    the end of a chunk and every ``flush_seconds / 2`` within one.

    Examples
    --------
    >>> def fit(a, b):                                   # doctest: +SKIP
    ...     return {"x": a * b}
    >>> r = hpcgpu.tasks.map(fit, {"a": [1, 2], "b": [3, 4]}, out="fits.h5")  # doctest: +SKIP
    >>> r.summary()                                      # doctest: +SKIP
    '2 tasks: 2 done, 0 failed, 0 pending; makespan 0.01 s on 1 worker, balance 0.98; wrote fits.h5'
    """
    from .._stop import StopRequest, agree_stop_file, note_stopped

    on = default_comm() if comm is None else comm
    agree_inputs("map", dict(fn=fn, params=params, out=out, resume=resume, retry_failed=retry_failed, retries=retries,
                             timeout=timeout, flush_seconds=flush_seconds, progress=progress, stop_file=stop_file,
                             name=name, isolate=isolate, overwrite=overwrite), comm=on)
    if stop_file is not None:
        files = {"params": params if isinstance(params, (str, os.PathLike)) else None, "out": out,
                 "journal": f"{os.fspath(out)}.journal" if out is not None else None}
        agree_stop_file(stop_file, files, on, "hpcgpu.tasks", "stop_file")
    # The stop policy for the whole sweep: a stop signal to any rank (or the stop file) stops it after the running
    # tasks, the results written, as the command line does.
    stop = StopRequest(stop_file, check_file=on.rank == 0, prog="hpcgpu.tasks").install()
    try:
        r = run_sweep(fn, params, out, resume=resume, retry_failed=retry_failed, retries=retries, timeout=timeout,
                      flush_seconds=flush_seconds, progress=progress, stop=stop, comm=comm, name=name,
                      isolate=isolate, overwrite=overwrite)
    finally:
        stop.uninstall()
    # hpcgpu.run_guarded ends a program whose sweep stopped (and was not finished by a later one) with exit 3.
    note_stopped(("hpcgpu.tasks.map", os.path.abspath(os.fspath(out)) if out is not None else None), r.stopped)
    return r


def run_sweep(fn, params, out=None, *, resume=False, retry_failed=False, retries=0, timeout=None, flush_seconds=2.0,
              progress="none", stop=None, comm=None, name=None, isolate="auto", what="params",
              overwrite=False) -> SweepResult:
    """:func:`map` for callers that bring their own stop request (the command line, tests).

    Collective, as :func:`map`, whose parameters it shares but ``stop_file``.

    Parameters
    ----------
    fn, params, out, resume, retry_failed, retries, timeout, flush_seconds, progress, comm, name, isolate, overwrite
        As for :func:`map`.
    stop : object, keyword-only, optional
        Anything with a ``requested()`` method and a ``reason`` attribute
        (``hpcgpu._stop.StopRequest``), asked on rank 0 between
        messages and on the workers between tasks.
    what : str, keyword-only
        How messages name the parameter table (``--params`` on the command line).

    Returns
    -------
    SweepResult

    Raises
    ------
    ValueError, FileNotFoundError, PermissionError, IsADirectoryError
        As for :func:`map`.
    """
    from ..runtime import current_runtime

    base = default_comm() if comm is None else comm
    out = os.fspath(out) if out is not None else None
    name = name or f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', repr(fn))}"
    _check_args(fn, retries, timeout, flush_seconds, progress, resume, out, retry_failed, isolate)
    how, err = isolation(fn, isolate), None  # the same on every rank: fn is
    runner = None
    if base.size == 1 or base.rank != 0:  # a working rank: its task process starts loading now
        runner = choose(fn, isolate, base.rank, timeout, current_runtime())
        if not runner.usable:
            err = ValueError("timeout: needs the main thread (SIGALRM)")  # only a task run in the rank's process
    try:
        agree(err, comm=base)
        if out is not None:  # the output policy, before any task: the results, the journal
            claim(_outputs(out, what), _inputs(fn, params, what), comm=base, overwrite=overwrite, prog="hpcgpu.tasks")
        opts = Options(out=out, resume=resume, retries=retries, timeout=timeout, flush_seconds=flush_seconds,
                       progress=progress, stop=stop, what=what, retry_failed=retry_failed, isolation=how,
                       overwrite=overwrite)
        comm = base.Dup()  # the farm's messages never match the caller's
        try:
            return _sweep(comm, fn, params, name, opts, runner)
        finally:
            comm.Free()
    finally:
        if runner is not None:
            runner.close()
        if out is not None:  # written, stopped or refused: another job may write them now
            release(o.path for o in _outputs(out, what))


def _outputs(out: str, what: str) -> list:
    """The files a sweep writes: the results and, while it runs, the journal beside them."""
    label = "-o" if what == "--params" else "out"
    return [Output(out, label), Output(out + ".journal", label, kind="journal")]


def _inputs(fn, params, what: str) -> list:
    """The files a sweep reads: the parameter table (when a path) and the task function's source file."""
    import inspect

    found = [Input(os.fspath(params), what)] if isinstance(params, (str, os.PathLike)) else []
    try:
        source = inspect.getsourcefile(fn)
    except TypeError:  # a builtin or a callable object without a source
        source = None
    if source:
        found.append(Input(source, "MODULE" if what == "--params" else "fn's module"))
    return found


def _check_args(fn, retries, timeout, flush_seconds, progress, resume, out, retry_failed, isolate) -> None:
    """The arguments, checked alike on every rank before any communication."""
    from ._isolate import not_isolatable

    err = None
    if not callable(fn):
        err = ValueError(f"fn: expected a callable, got {type(fn).__name__}")
    elif isinstance(retries, bool) or not isinstance(retries, (int, np.integer)) or retries < 0:
        err = ValueError(f"--retries must be an integer >= 0, got {retries!r}")
    elif timeout is not None and not (isinstance(timeout, (int, float)) and np.isfinite(timeout) and timeout > 0):
        err = ValueError(f"--timeout must be a number of seconds > 0, got {timeout!r}")
    elif not (isinstance(flush_seconds, (int, float)) and np.isfinite(flush_seconds) and flush_seconds > 0):
        err = ValueError(f"--flush-seconds must be a number of seconds > 0, got {flush_seconds!r}")
    elif progress not in PROGRESS:
        err = ValueError(f"--progress must be one of {', '.join(PROGRESS)}, got {progress!r}")
    elif resume and out is None:
        err = ValueError("resume needs out: the file of the earlier run")
    elif not isinstance(retry_failed, (bool, np.bool_)):
        err = ValueError(f"--retry-failed must be True or False, got {retry_failed!r}")
    elif not (isolate is True or isolate is False or (isinstance(isolate, str) and isolate == "auto")):
        err = ValueError(f"isolate must be True, False or 'auto', got {isolate!r}")
    elif isolate is True and not_isolatable(fn):
        err = ValueError(f"isolate: {getattr(fn, '__qualname__', fn)!r} cannot run in a task process: "
                         f"{not_isolatable(fn)} (define it at the top level of a module, or pass isolate=False)")
    if err is not None:
        raise agreed(err)


def _prepare(fn, params, name: str, opts: Options, what: str) -> tuple[Ledger, list[int], list]:
    """Rank 0: the table, the output's checks, an earlier run's results. Raises what the user must fix.

    Nothing is written here: an earlier run's finished work in ``out`` (or its journal) without
    ``resume`` or ``overwrite`` is refused, not started afresh.
    """
    table = read_params(params, what)
    _check_signature(fn, table, name)
    cli = what == "--params"
    label = f"-o {opts.out}" if cli else f"out {opts.out}"
    ledger = Ledger(table, name)
    ledger.afresh = "--overwrite" if cli else "overwrite=True"
    carry: list = []
    if opts.resume:
        carry = resume_from(ledger, opts.out, label)
    elif opts.out is not None and not opts.overwrite:
        _refuse_earlier_work(ledger, opts.out, cli)
    return ledger, ledger.todo(opts.retry_failed), carry


def _refuse_earlier_work(ledger: Ledger, out: str, cli: bool) -> None:
    """A FileExistsError when ``out`` or its journal holds finished tasks: a fresh start would discard them."""
    count, whose = earlier_work(ledger, out)
    if not count:
        return
    resume, overwrite = ("--resume", "--overwrite") if cli else ("resume=True", "overwrite=True")
    if whose is None:
        raise FileExistsError(f"{out} holds {count} finished task{'s' * (count != 1)} of this sweep: {resume} "
                              f"continues them, {overwrite} starts afresh")
    raise FileExistsError(f"{out} holds {count} finished task{'s' * (count != 1)} of {whose}: {overwrite} "
                          f"replaces them (or write to another {'-o' if cli else 'out'})")


def _check_signature(fn, table: Params, name: str) -> None:
    """Every column must be a parameter of ``fn``, and every parameter without a default a column."""
    import inspect

    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin or an extension: nothing to check
        return
    try:
        sig.bind(**dict.fromkeys(table.names))
    except TypeError as e:
        takes = ", ".join(sig.parameters) or "nothing"
        raise ValueError(f"{table.source}: columns {', '.join(table.names)} do not fit {name}({takes}): {e}") \
            from None


def _sweep(comm, fn, params, name, opts, runner) -> SweepResult:
    from ..runtime import _library_version, current_runtime

    what = opts.what
    rank, size = comm.rank, comm.size
    keeper = ledger = None
    err = None
    if rank == 0:
        try:
            ledger, todo, carry = _prepare(fn, params, name, opts, what)
            rt = current_runtime()
            attrs = {"world_size": size, "workers": max(1, size - 1), "hpcgpu_version": __version__,
                     "mpi_library": rt.mpi_library if rt is not None else _library_version(),
                     "device": rt.device if rt is not None else "", "retries": opts.retries,
                     "timeout_seconds": opts.timeout if opts.timeout else 0.0, "isolation": opts.isolation,
                     "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
            keeper = _Keeper(ledger, opts, attrs)
            keeper.todo = len(todo)
        except (OSError, ValueError) as e:
            err = e
        if err is None:
            try:
                keeper.start(carry)  # the old journal's records go on in the new one: no file written yet
            except WRITE_ERRORS as e:  # the journal (a full disk, a quota): one line naming it
                err = OSError(f"{'-o' if what == '--params' else 'out'} {opts.out}: cannot write its journal "
                              f"{opts.out}.journal ({one_line(e)})")
    agree(err, comm=comm)
    if opts.out is not None:  # a requeued job's rank 0 may land on another node: it must find the journal
        agree(shared_dir_error(opts.out, comm, "-o" if what == "--params" else "out"), comm=comm)
    if rank == 0 and opts.resume and (what == "--params" or opts.progress != "none"):
        n = ledger.params.n
        print(f"hpcgpu.tasks: resumed: {n - len(todo)} of {n} tasks kept from {opts.out}", flush=True)
    outcome = None
    try:
        if size == 1:
            outcome = work_alone(keeper, runner, todo, ledger.params)
        elif rank == 0:
            outcome = manage(comm, keeper, todo, ledger.params)
        else:
            work(comm, runner, opts.stop, opts.flush_seconds)
        if rank == 0:
            outcome = _finish(keeper, outcome)
    finally:
        if keeper is not None:
            keeper.close()
    outcome = agreed_outcome(comm, outcome) if size > 1 else _raise_fatal(outcome)
    return _result(outcome, ledger, opts.out if outcome.wrote else None)


def _finish(keeper: _Keeper, outcome: Outcome) -> Outcome:
    """Rank 0 after the last task: the final file (not after a schema error: the journal keeps the work)."""
    outcome.fatal = keeper.fatal
    if keeper.journal is None:
        return outcome
    if keeper.fatal:
        keeper.journal.flush()
        return outcome
    final = {"makespan_seconds": outcome.makespan, "busy_seconds": outcome.busy, "balance": balance(outcome),
             "stopped": outcome.stopped or ""}
    try:
        keeper.write(final)
        outcome.wrote = keeper.opts.out
    except WRITE_ERRORS as e:
        keeper.journal.flush()
        outcome.fatal = f"{keeper.opts.out}: cannot write the results ({one_line(e)}); the journal keeps them: --resume"
    return outcome


def _raise_fatal(outcome: Outcome) -> Outcome:
    if outcome.fatal:
        raise agreed(ValueError(outcome.fatal))
    return outcome


def _result(outcome: Outcome, ledger: Ledger | None, out) -> SweepResult:
    c = outcome.counts
    r = SweepResult(tasks=sum(c.values()), done=c["done"], failed=c["failed"], pending=c["pending"],
                    makespan=outcome.makespan, workers=outcome.workers, balance=balance(outcome),
                    stopped=outcome.stopped, out=out)
    if ledger is not None:
        r.results, r.status, r.error, r.seconds = ledger.results, ledger.status, ledger.error, ledger.seconds
    return r


for _public in (map, run_sweep, SweepResult):  # documented, pickled and shown as hpcgpu.tasks's own
    _public.__module__ = "hpcgpu.tasks"
