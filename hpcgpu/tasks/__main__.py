"""``mpiexec -n P python -m hpcgpu.tasks MODULE:FUNCTION --params PARAMS -o RESULTS.h5``: a sweep of independent tasks.

Exit status: 0 every task done, 4 the sweep finished with failed tasks,
3 stopped by SIGINT (Ctrl-C), SIGUSR1, SIGTERM or --stop-file with the results
so far written (rerun with --resume; a second Ctrl-C ends the job at once,
130), 2 bad input (one line on stderr, no file touched),
1 anything else (the job is aborted).

Each row of PARAMS (CSV with a header, JSON lines, or HDF5 with one dataset
per parameter) is one call FUNCTION(**row), on a worker rank bound to its GPU
(``hpcgpu.get_runtime().xp`` inside it). Rank 0 hands out the tasks and writes
RESULTS.h5; with one rank, that rank runs them.
"""

from __future__ import annotations

if __name__ == "__main__":  # the program: stop signals are recorded from here on, before MPI_Init (hpcgpu._early)
    from .. import _early

    _early.catch("hpcgpu.tasks")

import importlib
import importlib.util
import os
import sys

from .._cli import ArgumentParser, run

EXIT_STOPPED, EXIT_FAILED_TASKS = 3, 4


def parser() -> ArgumentParser:
    """The parser of ``python -m hpcgpu.tasks``."""
    p = ArgumentParser(prog="python -m hpcgpu.tasks", description=__doc__.split("\n\n")[0])
    p.add_argument("function", metavar="MODULE:FUNCTION",
                   help="the task function: a module on the path (mypkg.sims:run) or a file (sims.py:run)")
    p.add_argument("--params", required=True,
                   help="the tasks, one a row: .csv (header row), .jsonl (one object a line) or .h5 "
                        "(one dataset per parameter, in /params or at the root)")
    p.add_argument("-o", "--out", default="results/tasks.h5",
                   help="HDF5 output (/params, /results, /tasks); OUT.journal beside it while the sweep runs")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an OUT (or OUT.journal) that hpcgpu did not write, or start afresh over the finished "
                        "tasks an earlier run left in OUT; without it (or --resume) such a file is refused before any "
                        "task runs")
    p.add_argument("--resume", action="store_true",
                   help="keep the done and failed tasks of the earlier run in OUT (and its journal), run the tasks "
                        "not yet run")
    p.add_argument("--retry-failed", action="store_true",
                   help="with --resume: run the earlier run's failed tasks again too (by default they stay failed, "
                        "so a task that crashes its process does not crash every resume)")
    p.add_argument("--retries", type=int, default=0, help="further attempts at a task that raised or timed out")
    p.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                   help="a task running longer is stopped (TaskTimeout raised in it) and recorded as failed; "
                        "its rank carries on")
    p.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto",
                   help="gpu: each rank bound to a GPU (CuPy as xp); cpu: NumPy; auto: gpu when every rank has one")
    p.add_argument("--flush-seconds", type=float, default=2.0, metavar="SECONDS",
                   help="finished tasks are on disk within this time (what a killed job can lose)")
    p.add_argument("--progress", choices=("auto", "bar", "lines", "none"), default="auto",
                   help="rank 0's display: a bar on a terminal, a line every 30 s, or nothing")
    p.add_argument("--stop-file", default=None, metavar="PATH",
                   help="when PATH appears, let the running tasks finish, write OUT and exit 3 "
                        "(job scripts touch it on Slurm's warning signal)")
    return p


def load_function(spec: str):
    """``MODULE:FUNCTION`` -> the function; a ``ValueError`` or ``FileNotFoundError`` naming ``spec`` otherwise.

    MODULE is a dotted module name on ``sys.path`` (the current directory
    included) or the path of a ``.py`` file.
    """
    module, sep, name = spec.rpartition(":")
    if not sep or not module or not name:
        raise ValueError(f"{spec!r}: expected MODULE:FUNCTION (e.g. mypkg.sims:run or sims.py:run)")
    try:
        if module.endswith(".py"):
            if not os.path.isfile(module):
                raise FileNotFoundError(f"{spec}: no such file {module}")
            mod_name = os.path.splitext(os.path.basename(module))[0]
            spec_ = importlib.util.spec_from_file_location(mod_name, module)
            mod = importlib.util.module_from_spec(spec_)
            sys.modules.setdefault(mod_name, mod)
            spec_.loader.exec_module(mod)
        else:
            if "" not in sys.path and os.getcwd() not in sys.path:
                sys.path.insert(0, os.getcwd())
            mod = importlib.import_module(module)
    except FileNotFoundError:
        raise
    except ModuleNotFoundError as e:
        raise ValueError(f"{spec}: no module named {e.name!r}") from None
    except Exception as e:  # noqa: BLE001 - the user's module failed to import: say how, in one line
        first = (str(e).strip().splitlines() or [""])[0]
        raise ValueError(f"{spec}: importing {module} failed: {type(e).__name__}: {first}") from None
    fn = getattr(mod, name, None)
    if fn is None:
        raise ValueError(f"{spec}: module {module} has no attribute {name!r}")
    if not callable(fn):
        raise ValueError(f"{spec}: {name} is a {type(fn).__name__}, not a function")
    return fn


def main(argv=None) -> int:
    """Run the sweep in ``argv``. Collective over ``MPI.COMM_WORLD``.

    Returns
    -------
    int
        0, :data:`EXIT_FAILED_TASKS` (4) or :data:`EXIT_STOPPED` (3).
    """
    from .._stop import StopRequest

    stop = StopRequest(prog="hpcgpu.tasks").install()  # first: a stop signal during the imports must not kill the job
    try:
        return _main(argv, stop)
    finally:
        stop.uninstall()


def _main(argv, stop) -> int:
    """:func:`main` under its stop request."""
    args = parser().parse_args(argv)
    import hpcgpu
    from hpcgpu._stop import agree_stop_file, remove_first
    from hpcgpu.errors import agree_call, write_line

    from . import run_sweep

    rt = hpcgpu.init(device=args.device)
    fn = agree_call(lambda: load_function(args.function), catch=(ValueError, FileNotFoundError), comm=rt.comm)
    files = {"--params": args.params, "--out": args.out, "journal": f"{args.out}.journal" if args.out else None}
    agree_stop_file(args.stop_file, files, rt.comm, "hpcgpu.tasks")
    stop.stop_file, stop.check_file = args.stop_file, rt.rank == 0
    talk = rt.rank == 0 and args.progress != "none"
    if talk:
        write_line(f"hpcgpu.tasks: {args.function} over {args.params} on {rt.size} rank{'s' * (rt.size != 1)} "
                   f"({max(1, rt.size - 1)} worker{'s' * (rt.size > 2)}; {rt.summary()})", sys.stdout)
    r = run_sweep(fn, args.params, args.out, resume=args.resume, retry_failed=args.retry_failed,
                  overwrite=args.overwrite, retries=args.retries, timeout=args.timeout,
                  flush_seconds=args.flush_seconds, progress=args.progress, name=args.function, comm=rt.comm,
                  stop=stop, what="--params")
    if rt.rank == 0:
        write_line(f"hpcgpu.tasks: {r.summary()}", sys.stdout)
        if r.stopped:
            write_line(f"hpcgpu.tasks: {remove_first(stop)}rerun with --resume to run the {r.pending} pending tasks",
                       sys.stdout)
    if r.stopped:
        return EXIT_STOPPED
    return EXIT_FAILED_TASKS if r.failed else 0


if __name__ == "__main__":
    run(main, prog="hpcgpu.tasks")
