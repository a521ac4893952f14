"""What the phase timers cost the trainer: steps with timing on against off, in one run.

    python benchmarks/observe.py [--ranks 1,2] [--models "256,256@64;1024,1024@256"] [--rounds 5] [--data FILE]

For each number of ranks and model, the trainer's epoch runs alternately with
``timing=True`` (the default: a mark at each phase boundary, 4 to 6 a step)
and ``timing=False``, ``--rounds`` times each, one BLAS thread a rank; the
median step times give ``overhead = on / off - 1``. Also the cost of one
mark on the host clock (ns) against the mean step, which bounds the overhead
from below without the noise. One JSON line per (ranks, model).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from train import env1, mpiexec  # noqa: E402


def child(args) -> None:
    import numpy as np
    from mpi4py import MPI

    import hpcgpu
    from hpcgpu.timing import PhaseTimer
    from hpcgpu.train import TrainConfig, Trainer

    rt = hpcgpu.init("cpu")
    hidden, batch = args.model.split("@")
    trainers = {}
    for on in (True, False):
        widths = tuple(int(h) for h in hidden.split(","))
        trainers[on] = Trainer(TrainConfig(data=args.data, out=None, hidden=widths, batch_size=int(batch),
                                           epochs=1000, progress="none", timing=on, gemm_threads="all",
                                           schedule="constant"), rt)
        trainers[on].fit(epochs=1)  # bound to its data (the MLP is sized by it), and warm
    times = {True: [], False: []}
    for _ in range(args.rounds):
        for on in (True, False):
            tr = trainers[on]
            rt.comm.Barrier()
            t0 = MPI.Wtime()
            tr.train_epoch()
            tr._finish_epoch(0.0)
            times[on].append((MPI.Wtime() - t0) / tr.sampler.steps)
    t = PhaseTimer(("a", "b"))
    n = 200_000
    t0 = time.perf_counter()
    for _ in range(n // 2):
        t.mark("a")
        t.mark("b")
    mark_ns = (time.perf_counter() - t0) / n * 1e9
    on, off = float(np.median(times[True])), float(np.median(times[False]))
    if rt.rank == 0:
        print(json.dumps({"ranks": rt.size, "model": args.model, "step_ms_on": round(on * 1e3, 4),
                          "step_ms_off": round(off * 1e3, 4), "overhead": round(on / off - 1, 4),
                          "mark_ns": round(mark_ns, 1), "marks_per_step": 5,
                          "mark_share": round(5 * mark_ns * 1e-9 / off, 6)}), flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", default="1,2")
    p.add_argument("--models", default="256,256@64;1024,1024@256")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--data", default=None)
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args)
        return
    for P in [int(r) for r in args.ranks.split(",")]:
        for model in args.models.split(";"):
            cmd = [mpiexec(), "-n", str(P), sys.executable, os.path.abspath(__file__), "--child", "--model", model,
                   "--rounds", str(args.rounds)] + (["--data", args.data] if args.data else [])
            subprocess.run(cmd, check=True, env=env1())


if __name__ == "__main__":
    main()
