"""The task farm's balance and per-task overhead against mpi4py.futures.MPICommExecutor, in one run.

    python benchmarks/tasks.py [--ranks 2,4,8] [--tasks 400] [--median-ms 20] [--noop-tasks 4000]

For each number of ranks P (W = P - 1 workers for both farms: rank 0 manages
in each), two sweeps:

- **uneven**: ``--tasks`` tasks sleeping lognormal times (sigma 1, median
  ``--median-ms``, one fixed draw), so the node's cores are not what limits
  them. ``ratio`` is the makespan over the lower bound
  ``max(sum(t) / W, max(t))`` of the task times actually measured.
- **no-op**: ``--noop-tasks`` tasks that return at once. ``overhead_us`` is
  ``makespan * W / tasks``: the cost of handing out, running and recording one
  task, per worker.

hpcgpu.tasks runs without an output file (``out=None``) and with one
(``file``: the journal and the HDF5 file as a user gets them by default);
MPICommExecutor runs ``submit`` per task (its balance) and ``map`` with
``chunksize`` = tasks / (4 W) (its best static chunks). One JSON line per
(P, farm, sweep).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from train import env1  # noqa: E402


def sleep_task(seconds):
    """The uneven sweep's task: sleep, return the time slept (seconds)."""
    t0 = time.perf_counter()
    time.sleep(seconds)
    return {"t": time.perf_counter() - t0}


def noop_task(seconds):
    """The overhead sweep's task: nothing."""
    return {"t": 0.0}


def _draw(n, median_ms, seed=0):
    import numpy as np

    return (median_ms / 1e3 * np.random.default_rng(seed).lognormal(0.0, 1.0, n)).tolist()


def child(args) -> None:
    from mpi4py import MPI
    from mpi4py.futures import MPICommExecutor

    import hpcgpu
    from hpcgpu import tasks

    rt = hpcgpu.init("cpu")
    comm = rt.comm
    W = max(1, comm.size - 1)
    sweeps = {"uneven": (sleep_task, _draw(args.tasks, args.median_ms)),
              "no-op": (noop_task, [0.0] * args.noop_tasks)}

    def emit(farm, sweep, makespan, times):
        if comm.rank != 0:
            return
        n = len(times)
        bound = max(sum(times) / W, max(times))
        line = {"ranks": comm.size, "workers": W, "farm": farm, "sweep": sweep, "tasks": n,
                "makespan_s": round(makespan, 4)}
        if sweep == "uneven":
            line.update(bound_s=round(bound, 4), ratio=round(makespan / bound, 3))
        else:
            line.update(overhead_us=round(makespan * W / n * 1e6, 1))
        print(json.dumps(line), flush=True)

    with tempfile.TemporaryDirectory() as d:
        for sweep, (fn, seconds) in sweeps.items():
            for farm, out in (("hpcgpu.tasks", None), ("hpcgpu.tasks file", os.path.join(d, f"{sweep}.h5"))):
                comm.Barrier()
                t0 = MPI.Wtime()
                r = tasks.map(fn, {"seconds": seconds}, out, comm=comm)
                makespan = MPI.Wtime() - t0
                times = list(r.results["t"]) if sweep == "uneven" and comm.rank == 0 else seconds
                emit(farm, sweep, makespan, times)
            for farm in ("MPICommExecutor submit", "MPICommExecutor map"):
                comm.Barrier()
                t0 = MPI.Wtime()
                times = seconds
                with MPICommExecutor(comm, root=0) as ex:
                    if ex is not None:
                        if farm.endswith("submit"):
                            futures = [ex.submit(fn, s) for s in seconds]
                            res = [f.result() for f in futures]
                        else:
                            res = list(ex.map(fn, seconds, chunksize=max(1, len(seconds) // (4 * W))))
                        if sweep == "uneven":
                            times = [r["t"] for r in res]
                makespan = MPI.Wtime() - t0
                emit(farm, sweep, makespan, times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", default="2,4,8")
    p.add_argument("--tasks", type=int, default=400)
    p.add_argument("--median-ms", type=float, default=20.0)
    p.add_argument("--noop-tasks", type=int, default=4000)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args)
        return
    from hpcgpu.scaling import _launcher  # the MPI's mpiexec, with Open MPI's oversubscribe (and root) settings

    for P in [int(r) for r in args.ranks.split(",")]:
        cmd, env = _launcher(P)
        env.update(env1())
        subprocess.run([*cmd, sys.executable, os.path.abspath(__file__), "--child",
                        "--tasks", str(args.tasks), "--median-ms", str(args.median_ms),
                        "--noop-tasks", str(args.noop_tasks)], check=True, env=env, cwd=HERE)


if __name__ == "__main__":
    main()
