"""The task farm: a manager rank hands out chunks of tasks, the workers run them and report back.

Scheduling is guided self-scheduling (Polychronopoulos and Kuck 1987) with
the chunk halved as in factoring (Hummel, Schonberg and Flynn 1992): a
worker that asks gets ``ceil(R / (2 W))`` of the ``R`` tasks not yet handed
out, ``W`` the number of workers. Early chunks are large (few messages),
late ones single tasks (the last tasks balance), so uneven task times even
out without a message per task. Rank 0 is the manager and the one writer;
ranks 1 .. P-1 work. One rank works alone. No process is spawned, so it runs
under any launcher (``srun`` included).

Messages (pickled, on the farm's own duplicate of the communicator):
worker -> manager ``(records, kind, why)``, ``kind`` one of ``"more"`` (send
me work), ``"progress"`` (results of a long chunk, no reply wanted) and
``"stopping"`` (I stop: the unstarted tasks are returned; ``why`` names the
stop signal this worker received, and the manager then stops every worker,
as for a signal of its own; else ``None``); manager -> worker
a chunk ``[(task, attempt, kwargs), ...]`` or ``None`` (stop). Each worker
receives exactly one ``None``, so no message is left unmatched: a stop sent
while a worker runs a chunk is seen between two tasks (``iprobe``), and a
request that crosses it is answered by it.
"""

from __future__ import annotations

import collections
import contextlib
import math
import os
import pickle
import signal
import sys
import threading
import time
from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

from ..errors import agreed
from ._params import Params
from ._store import PENDING, Journal, Ledger, Record, SchemaError

__all__ = ["TaskTimeout", "TaskInfo", "current_task", "chunk_size"]

TAG_REPORT, TAG_WORK = 71, 72


class TaskTimeout(TimeoutError):
    """Raised inside a task that ran past its time limit (``--timeout``).

    The task is recorded as failed with the message ``timed out after S s``
    (after its retries); the rank carries on with its next task.
    """


@dataclass(frozen=True)
class TaskInfo:
    """The task a rank is running, for the task function to ask (:func:`current_task`).

    Attributes
    ----------
    id : int
        The task's row in the parameter table (0-based).
    attempt : int
        0 for the first attempt, 1 for the first retry, ...
    """

    id: int
    attempt: int


_CURRENT: TaskInfo | None = None


def current_task() -> TaskInfo | None:
    """The task this rank is running, or ``None`` outside a task.

    Not collective. A task function can take its id for a seed or a file
    name without a column for it.

    Returns
    -------
    TaskInfo or None
    """
    return _CURRENT


@dataclass
class Options:
    """How a sweep runs; see :func:`hpcgpu.tasks.map`."""

    out: str | None = None
    resume: bool = False
    retries: int = 0
    timeout: float | None = None
    flush_seconds: float = 2.0
    progress: str = "none"
    stop: object = None  # a hpcgpu._stop.StopRequest, or None
    what: str = "params"  # how messages name the parameter table (--params on the command line)
    retry_failed: bool = False  # resume: run the failed tasks again too
    isolation: str = "process"  # where tasks run, for the file's attribute
    overwrite: bool = False  # start afresh over an earlier run's finished tasks in out


def chunk_size(remaining: int, workers: int) -> int:
    """Guided self-scheduling with factoring's halving: ``ceil(remaining / (2 workers))``, at least 1.

    Parameters
    ----------
    remaining : int
        Tasks not yet handed out.
    workers : int
        Number of worker ranks.

    Returns
    -------
    int
    """
    return max(1, math.ceil(remaining / (2 * max(1, workers))))


# ---- running one task ---------------------------------------------------------------------------

class _Alarm:
    """A per-task time limit: SIGALRM raises :class:`TaskTimeout` in the task; a watchdog ends a stuck one.

    The exception is raised at the task's next Python bytecode, so Python
    loops, ``time.sleep`` and a sequence of NumPy or CuPy calls stop at once
    and the rank goes on with its next task. A native call that never
    returns (a hung kernel wait, a library that blocks signals) cannot be
    stopped inside the process: when a task is still running ``grace``
    seconds after its limit, a watchdog thread says which task on which
    rank and aborts the job (``MPI_Abort``), rather than leave everyone
    waiting; the journal keeps every finished task for ``--resume``. Main
    thread only (signals).
    """

    def __init__(self, seconds: float | None, grace: float | None = None):
        self.seconds = seconds if seconds and seconds > 0 else None
        self.grace = grace if grace is not None else (min(max(2.0, self.seconds), 60.0) if self.seconds else 0.0)
        self.armed = False
        self._old = None
        self._deadline: tuple[float, str] | None = None  # (monotonic deadline, what) of the running task
        self._stop = threading.Event()
        if self.seconds and threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGALRM, self._fire)
            self.usable = True
            threading.Thread(target=self._watch, name="hpcgpu-task-watchdog", daemon=True).start()
        else:
            self.usable = self.seconds is None

    def _fire(self, signum, frame):
        if self.armed:
            self.armed = False
            raise TaskTimeout(f"timed out after {self.seconds:g} s")

    def _watch(self) -> None:
        while not self._stop.wait(min(0.5, self.grace / 4)):
            d = self._deadline
            if d is not None and time.monotonic() > d[0]:
                from mpi4py import MPI

                _CAPTURE.release()  # the rank's own stderr for the line, and the stuck task's lines before it
                sys.stderr.write(f"[rank {MPI.COMM_WORLD.Get_rank()}] error: {d[1]} is still running "
                                 f"{self.grace:g} s after its --timeout of {self.seconds:g} s (stuck in a native "
                                 "call that ignores signals?): aborting the job; the finished tasks are in the "
                                 "journal, rerun with --resume\n")
                sys.stderr.flush()
                time.sleep(0.5)  # let the launcher forward the line
                MPI.COMM_WORLD.Abort(1)
                # MPICH's MPI_Abort returns once the launcher has the request, and the launcher ends the ranks
                # when it gets to it: this rank ends now, so the line is said once and no task runs on.
                os._exit(1)

    @contextlib.contextmanager
    def __call__(self, what: str = "a task"):
        if not self.seconds:
            yield
            return
        self.armed = True
        self._deadline = (time.monotonic() + self.seconds + self.grace, what)
        signal.setitimer(signal.ITIMER_REAL, self.seconds)
        try:
            yield
        finally:
            self.armed = False
            signal.setitimer(signal.ITIMER_REAL, 0)
            self._deadline = None

    def close(self):
        self._stop.set()
        if self._old is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._old)
            self._old = None


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text and text[0] else type(exc).__name__


def _to_host(values):
    """Results on the host: CuPy arrays are copied (after their stream finishes), NumPy ones kept."""
    if not isinstance(values, dict):
        return values
    out = {}
    for k, v in values.items():
        if type(v).__module__.split(".")[0] == "cupy":
            v = v.get()
        out[k] = v
    return out


_LIBC: list = []  # C's stdio, loaded on the first capture: [fflush] or [None] where there is none


def _flush_streams() -> None:
    """Python's and C's buffered output to the file descriptors (a task's prints in the files of its capture)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    if not _LIBC:
        try:
            import ctypes

            _LIBC.append(ctypes.CDLL(None).fflush)
        except (OSError, AttributeError):
            _LIBC.append(None)
    if _LIBC[0] is not None:
        _LIBC[0](None)


def _prefixed(data: bytes, task: int) -> bytes:
    """Each line of ``data`` prefixed ``[task ID] `` (a last line without its newline gets one)."""
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    prefix = b"[task %d] " % task
    return b"".join(prefix + line + b"\n" for line in lines)


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data):]


class _Capture:
    """A task's stdout and stderr while it runs, then to this process's own, each line prefixed ``[task ID] ``.

    File descriptors 1 and 2, and ``sys.stdout`` and ``sys.stderr`` (which
    may write elsewhere: a notebook, a test's capture), go to two temporary
    files during the task, so what a C or Fortran library prints is captured
    too; when the task ends its lines are written in one piece, so a sweep's
    log says which task printed what and a task's lines stay together. The
    files are made once a process and emptied before each task.
    """

    def __init__(self):
        self.files: list | None = None
        self.active: tuple | None = None  # (task, saved fds, streams, wrappers) while a task runs
        self.lock = threading.Lock()

    def named(self) -> list[str]:
        """Capture into two named files (a task process's: its rank reads them if the process dies in a task).

        Returns
        -------
        list of str
            The stdout file and the stderr file; the caller removes them.
        """
        import tempfile

        paths = []
        self.files = []
        for what in ("stdout", "stderr"):
            fd, path = tempfile.mkstemp(prefix=f"hpcgpu-task-{what}-")
            self.files.append(os.fdopen(fd, "w+b"))
            paths.append(path)
        return paths

    @contextlib.contextmanager
    def __call__(self, task: int):
        import io
        import tempfile

        if self.files is None:
            self.files = [tempfile.TemporaryFile(prefix="hpcgpu-task-") for _ in range(2)]
        _flush_streams()
        streams = [sys.stdout, sys.stderr]
        saved = {fd: os.dup(fd) for fd in (1, 2)}
        wrappers = []
        for fd, f in zip((1, 2), self.files, strict=True):
            f.seek(0)
            f.truncate()
            os.dup2(f.fileno(), fd)
            wrappers.append(io.TextIOWrapper(io.FileIO(os.dup(f.fileno()), "w"), encoding="utf-8",
                                             errors="backslashreplace", write_through=True))
        sys.stdout, sys.stderr = wrappers
        self.active = (task, saved, streams, wrappers)
        try:
            yield
        finally:
            self.release()

    def release(self) -> None:
        """Put stdout and stderr back and write the task's lines, prefixed; nothing when no task is captured.

        Also called by the time limit's watchdog before it aborts the job, so that its line and what the
        stuck task printed reach the log.
        """
        with self.lock:
            if self.active is None:
                return
            (task, saved, streams, wrappers), self.active = self.active, None
            _flush_streams()
            sys.stdout, sys.stderr = streams
            for fd, f, stream, wrapper in zip((1, 2), self.files, streams, wrappers, strict=True):
                with contextlib.suppress(Exception):
                    wrapper.close()
                os.dup2(saved[fd], fd)
                os.close(saved[fd])
                f.seek(0)
                data = f.read()
                f.seek(0)
                f.truncate()  # written out: not again by a rank that finds this process dead later
                if data:
                    _emit(stream, fd, _prefixed(data, task))


def _emit(stream, fd: int, data: bytes) -> None:
    """``data`` to ``stream`` (its bytes buffer, or as text: a notebook's), else to file descriptor ``fd``."""
    try:
        stream.flush()
        if hasattr(stream, "buffer"):
            stream.buffer.write(data)
            stream.buffer.flush()
        else:
            stream.write(data.decode("utf-8", "backslashreplace"))
            stream.flush()
    except Exception:  # noqa: BLE001 - no stream (None) or a closed one: the file descriptor
        _write_all(fd, data)


_CAPTURE = _Capture()


def run_task(fn, task: int, attempt: int, kwargs: dict, rank: int, alarm: _Alarm) -> Record:
    """One attempt at one task, its output captured; an exception (or the time limit) becomes a failed record."""
    global _CURRENT
    _CURRENT = TaskInfo(task, attempt)
    t0 = time.perf_counter()
    try:
        with _CAPTURE(task), alarm(f"task {task} (attempt {attempt + 1})"):
            values = _to_host(fn(**kwargs))
        return Record(task, True, attempt, time.perf_counter() - t0, rank, values=values)
    except MemoryError:
        raise
    except BaseException as exc:  # noqa: BLE001 - a task's failure is data; SystemExit and KeyboardInterrupt included
        # A stop signal never raises KeyboardInterrupt in a task (the stop policy's handler or the task process's
        # records it), so one here is the task's own raise: a failed task, named as what it is.
        return Record(task, False, attempt, time.perf_counter() - t0, rank, error=_one_line(exc))
    finally:
        _CURRENT = None


# ---- rank 0: the ledger, its files and the summary ------------------------------------------------

@dataclass
class Outcome:
    """What rank 0 tells every rank at the end."""

    counts: dict
    makespan: float
    workers: int
    busy: float
    stopped: str | None = None
    fatal: str | None = None
    wrote: str | None = None


class _Keeper:
    """Rank 0's bookkeeping: the ledger, retries, the journal, the periodic HDF5 writes, progress."""

    def __init__(self, ledger: Ledger, opts: Options, attrs: dict):
        self.ledger, self.opts, self.attrs = ledger, opts, attrs
        self.journal = (Journal(opts.out + ".journal",
                                {"function": ledger.function, "params_digest": ledger.params.digest(),
                                 "tasks": ledger.params.n}) if opts.out else None)
        self.last_flush = self.last_write = time.monotonic()
        self.write_cost = 0.0
        self.busy = 0.0
        self.fatal: str | None = None
        self.bar = None
        self.total = ledger.params.n
        self.last_line = time.monotonic()
        self.todo = ledger.params.n

    def start(self, carry: list | None = None) -> None:
        """Start the journal (keeping ``carry``, the records a resume read from the old one) and the bar."""
        if self.journal is not None:
            self.journal.restart(carry)
        if self.opts.progress in ("bar", "auto") and (self.opts.progress == "bar" or sys.stderr.isatty()):
            from tqdm import tqdm

            self.bar = tqdm(total=self.total, initial=self.total - self.todo, unit="task",
                            dynamic_ncols=True)

    def record(self, rec: Record, requeue) -> None:
        """Apply one attempt: done, failed after its retries, or put back for a retry."""
        self.busy += rec.seconds
        if not rec.ok and rec.attempt < self.opts.retries:
            requeue(rec.task, rec.attempt + 1)
            return
        try:
            self.ledger.apply(rec)
        except SchemaError as e:
            self.fatal = self.fatal or str(e)
            return
        if self.journal is not None:
            self.journal.buffer.append(rec)
        if self.bar is not None:
            self.bar.update(1)

    def tick(self, now: float) -> None:
        """The periodic duties: journal every ``flush_seconds``, the HDF5 file when it is cheap enough."""
        if self.opts.progress == "lines" and now - self.last_line >= 30:
            self.last_line = now
            c = self.ledger.counts()
            print(f"hpcgpu.tasks: {c['done']}/{self.total} done, {c['failed']} failed", flush=True)
        if self.journal is None or self.fatal:
            return
        if now - self.last_write >= max(10 * self.opts.flush_seconds, 20 * self.write_cost):
            self.write()
        elif self.journal.buffer and now - self.last_flush >= self.opts.flush_seconds:
            self.journal.flush()
            self.last_flush = now

    def write(self, final: dict | None = None) -> None:
        """The whole HDF5 file, atomically; then the journal starts afresh (or goes, at the end)."""
        t0 = time.monotonic()
        self.ledger.write(self.opts.out, {**self.attrs, **(final or {})})
        if final is not None and not self.ledger.counts()["pending"]:
            self.journal.remove()
        else:
            self.journal.restart()
        self.last_write = self.last_flush = time.monotonic()
        self.write_cost = self.last_write - t0

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class _Manager:
    """Rank 0 of a farm of ``comm.size - 1`` workers: hand out chunks, apply reports, stop everyone."""

    def __init__(self, comm: MPI.Intracomm, keeper: _Keeper, todo: list[int], params: Params):
        self.comm, self.keeper, self.params = comm, keeper, params
        self.W = comm.size - 1
        self.pending = collections.deque((t, 0) for t in todo)
        self.holding = dict.fromkeys(range(1, comm.size), 0)  # tasks handed to each worker, not yet reported
        self.parked: list[int] = []  # asked while nothing was pending but tasks were still out
        self.stop_sent: set[int] = set()
        self.finished: set[int] = set()
        self.stopping: str | None = None

    def requeue(self, task: int, attempt: int) -> None:
        self.pending.appendleft((task, attempt))

    def serve(self, w: int) -> None:
        """Answer worker ``w``'s request for work: a chunk, a wait (parked), or the stop."""
        if self.stopping is None and self.pending:
            n = min(chunk_size(len(self.pending), self.W), len(self.pending))
            chunk = [self.pending.popleft() for _ in range(n)]
            self.holding[w] = n
            self.comm.send([(t, a, self.params.row(t)) for t, a in chunk], dest=w, tag=TAG_WORK)
        elif self.stopping is None and any(self.holding.values()):
            self.parked.append(w)  # a retry or a returned task may still come
        else:
            self.stop(w)
            self.finished.add(w)

    def stop(self, w: int) -> None:
        if w not in self.stop_sent:
            self.stop_sent.add(w)
            self.comm.send(None, dest=w, tag=TAG_WORK)

    def begin_stop(self, why: str) -> None:
        self.stopping = why
        for w in range(1, self.comm.size):  # a busy worker sees its None between two tasks
            self.stop(w)
        self.finished.update(self.parked)  # they were waiting for an answer: the None is it
        self.parked.clear()

    def on_report(self, w: int, records: list, kind: str, why: str | None = None) -> None:
        for rec in records:
            if isinstance(rec, Record):
                self.holding[w] -= 1
                self.keeper.record(rec, self.requeue)
            else:  # ("returned", [(task, attempt), ...]) from a stopping worker
                self.holding[w] -= len(rec[1])
                self.pending.extendleft(reversed(rec[1]))
        if self.keeper.fatal and self.stopping is None:
            self.begin_stop(self.keeper.fatal)
        if kind == "stopping" and why and self.stopping is None:  # a stop signal to this worker stops the farm
            self.begin_stop(f"{why} on rank {w}")
        if kind == "stopping":
            self.stop(w)  # its None may be on the way already; if not, this is it
            self.finished.add(w)
        elif kind == "more":
            if w in self.stop_sent:
                self.finished.add(w)  # it reads the None we sent
            else:
                self.serve(w)
        while self.parked and (self.pending or not any(self.holding.values())):
            self.serve(self.parked.pop(0))

    def run(self) -> Outcome:
        stop, status, nap = self.keeper.opts.stop, MPI.Status(), 0.0
        t_start = time.monotonic()
        while len(self.finished) < self.W:
            self.keeper.tick(time.monotonic())
            if self.stopping is None and stop is not None and stop.requested():
                self.begin_stop(stop.reason)
            msg = self.comm.improbe(MPI.ANY_SOURCE, TAG_REPORT, status)
            if msg is None:
                # Back off from 0 to 2 ms while nothing comes: a reply within microseconds when
                # busy, and no core burnt by the manager of an oversubscribed node when not.
                nap = min(2e-3, nap * 2 or 2e-5)
                time.sleep(nap)
                continue
            nap = 0.0
            self.on_report(status.Get_source(), *msg.recv())
        self.keeper.tick(time.monotonic())
        stopped = None if self.keeper.fatal else self.stopping
        return Outcome(self.keeper.ledger.counts(), time.monotonic() - t_start, self.W, self.keeper.busy,
                       stopped=stopped)


def manage(comm: MPI.Intracomm, keeper: _Keeper, todo: list[int], params: Params) -> Outcome:
    """Rank 0 of a farm: run the :class:`_Manager` until every worker has stopped."""
    return _Manager(comm, keeper, todo, params).run()


def work(comm: MPI.Intracomm, runner, stop_request, flush_seconds: float) -> None:
    """A worker rank: ask for work, run it (``runner.run``), report, until the manager says stop."""
    runner.wait_ready()  # its task process started with the sweep: the makespan starts with work
    _send(comm, [], "more")
    while True:
        chunk = comm.recv(source=0, tag=TAG_WORK)
        if chunk is None:
            return
        records: list = []
        last_send = time.monotonic()
        told_to_stop, why = False, None
        for i, (task, attempt, kwargs) in enumerate(chunk):
            if stop_request is not None and stop_request.requested():
                told_to_stop, why = True, stop_request.reason  # the manager stops every worker for it
            elif comm.iprobe(source=0, tag=TAG_WORK):  # only ever a None while a chunk runs
                told_to_stop = True
            if told_to_stop:
                records.append(("returned", [(t, a) for t, a, _ in chunk[i:]]))
                break
            records.append(runner.run(task, attempt, kwargs))
            now = time.monotonic()
            if i + 1 < len(chunk) and now - last_send >= flush_seconds / 2:
                _send(comm, records, "progress")
                records, last_send = [], now
        _send(comm, records, "stopping" if told_to_stop else "more", why)


def _send(comm: MPI.Intracomm, records: list, kind: str, why: str | None = None) -> None:
    """Report to the manager; a result that cannot be pickled (a task run in this process) fails its task."""
    try:
        comm.send((records, kind, why), dest=0, tag=TAG_REPORT)
        return
    except Exception:  # noqa: BLE001 - PicklingError, TypeError, AttributeError...: pickling comes before sending
        pass
    for k, rec in enumerate(records):
        if isinstance(rec, Record) and rec.ok:
            try:
                pickle.dumps(rec, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception as e:  # noqa: BLE001
                records[k] = Record(rec.task, False, rec.attempt, rec.seconds, rec.rank,
                                    error=f"its result cannot be sent to the manager ({_one_line(e)})")
    comm.send((records, kind, why), dest=0, tag=TAG_REPORT)


def work_alone(keeper: _Keeper, runner, todo: list[int], params: Params) -> Outcome:
    """One rank: run the tasks in order (``runner.run``), with the same records, retries and files."""
    pending = collections.deque((t, 0) for t in todo)
    if todo:
        runner.wait_ready()
    t_start = time.monotonic()
    stopping = None

    def requeue(task, attempt):
        pending.appendleft((task, attempt))

    while pending and not keeper.fatal:
        if keeper.opts.stop is not None and keeper.opts.stop.requested():
            stopping = keeper.opts.stop.reason
            break
        task, attempt = pending.popleft()
        keeper.record(runner.run(task, attempt, params.row(task)), requeue)
        keeper.tick(time.monotonic())
    return Outcome(keeper.ledger.counts(), time.monotonic() - t_start, 1, keeper.busy, stopped=stopping)


def resume_from(ledger: Ledger, out: str, label: str) -> list:
    """Load an earlier run's file and journal into ``ledger``; the journal's records applied.

    Raises
    ------
    ValueError
        The file or the journal belongs to another sweep, or a journal record does not fit the schema.
    """
    if os.path.exists(out):
        ledger.load(out, label)
    header, records = Journal.read(out + ".journal")
    if header is not None:
        ledger._check_same_sweep(header, f"{label}.journal")
        for rec in records:
            try:
                ledger.apply(rec)
            except SchemaError as e:
                raise ValueError(f"{label}.journal: {e}") from None
    if ledger.schema is not None:  # a result of another kind from now on is the function's change, said so
        ledger.schema_from = label
    return records if header is not None else []


def earlier_work(ledger: Ledger, out: str) -> tuple[int, str | None]:
    """The tasks an earlier run finished (done or failed) in ``out`` and its journal, and whose they are.

    Not collective (rank 0). Reads the file's task status and the journal; a file that is not a
    results file counts no task (the output policy judged it already).

    Returns
    -------
    (int, str or None)
        The number of finished tasks, and ``None`` when they are this sweep's (same function and
        parameter table as ``ledger``), else ``"a sweep of FN"`` naming the other one.
    """
    import h5py

    finished: set = set()
    whose = None
    if os.path.isfile(out):
        try:
            with h5py.File(out, "r") as f:
                status = f.get("tasks/status")
                if isinstance(status, h5py.Dataset):
                    finished.update(np.flatnonzero(status[()] != PENDING).tolist())
                    whose = _whose(ledger, dict(f.attrs))
        except OSError:
            pass
    header, records = Journal.read(out + ".journal")
    if header is not None and records:
        finished.update(r.task for r in records)
        whose = whose or _whose(ledger, header)
    return len(finished), whose


def _whose(ledger: Ledger, attrs: dict) -> str | None:
    """None when ``attrs`` (a results file's or a journal's header) are ``ledger``'s sweep, else whose they are."""
    fn = str(attrs.get("function", ""))
    if fn != ledger.function:
        return f"a sweep of {fn}"
    if str(attrs.get("params_digest", "")) != ledger.params.digest() or attrs.get("tasks") != ledger.params.n:
        return f"a sweep of {fn} over other parameters"
    return None


def balance(outcome: Outcome) -> float:
    """Busy seconds over the workers' available seconds (1.0: no worker ever waited)."""
    avail = outcome.workers * outcome.makespan
    return outcome.busy / avail if avail > 0 else float("nan")


def agreed_outcome(comm: MPI.Intracomm, outcome: Outcome | None) -> Outcome:
    """Rank 0's outcome on every rank; a fatal one raised everywhere as the same ``ValueError``."""
    outcome = comm.bcast(outcome, root=0)
    if outcome.fatal:
        raise agreed(ValueError(outcome.fatal))
    return outcome

