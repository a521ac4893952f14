"""Exposed gradient communication per step, with and without overlap, measured in one run.

    python benchmarks/overlap.py [--ranks 2,4] [--hidden 1024,1024] [--batch-size 256] [--steps 60]
                                 [--buckets 25,1] [--data FILE]

For each number of ranks, each ``--bucket-mb`` of ``--buckets`` and each
MPICH progress setting (none; ``MPIR_CVAR_ASYNC_PROGRESS=1``, a progress
thread per rank: MPICH only), the trainer runs ``--steps`` steps (after 10
warm-up steps) on Fashion-MNIST, one BLAS thread per rank, and reports the
median over ranks of: the time the host waited for the gradient reduction
after the backward pass ended (``exposed``, ms per step: all of it with one
bucket, the part not hidden by the backward pass with several) and the step
time (ms). 25 MB is one bucket for these models (PyTorch DDP's default); 1 MB
cuts 784-1024-1024-10's 7.5 MB gradient into two buckets.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from train import ensure_data, env1, mpiexec  # noqa: E402


def child(args) -> None:
    import statistics

    from mpi4py import MPI

    import hpcgpu
    from hpcgpu.train import TrainConfig, Trainer

    rt = hpcgpu.init("cpu")
    hidden = tuple(int(h) for h in args.hidden.split(","))
    tr = Trainer(TrainConfig(data=args.data, out=None, hidden=hidden, batch_size=args.batch_size,
                             epochs=1, bucket_mb=args.bucket_mb, progress="none", gemm_threads="all"), rt)
    tr.fit()  # bound to its data (the MLP is sized by it), and warm
    tr.sampler.start_epoch(0)
    red, model, sampler = tr.reducer, tr.model, tr.sampler
    overlap = len(red.buckets) > 1 and rt.size > 1

    def step(s):
        X, y = sampler.batch(s)
        model.loss_and_grad(X, y, on_layer=red.ready if overlap else None)
        red.finish()
        tr.optimizer.update(red.grad, tr.opt_state, model.params, lr=0.01, scale=1.0 / sampler.global_batch)

    for s in range(10):
        step(s)
    rt.comm.Barrier()
    red.exposed_seconds = 0.0
    t0 = MPI.Wtime()
    n = min(args.steps, sampler.steps - 10)
    for s in range(10, 10 + n):
        step(s)
    dt = MPI.Wtime() - t0
    exposed = rt.comm.gather(red.exposed_seconds / n, root=0)
    steps = rt.comm.gather(dt / n, root=0)
    if rt.rank == 0:
        print(json.dumps({"exposed_ms": 1e3 * statistics.median(exposed), "step_ms": 1e3 * statistics.median(steps),
                          "buckets": len(red.buckets)}))
    tr.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--hidden", default="1024,1024")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--buckets", default="25,1")
    ap.add_argument("--data", default=None)
    ap.add_argument("--bucket-mb", type=float, default=25.0, help=argparse.SUPPRESS)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.data = ensure_data(args.data)
    if args.child:
        child(args)
        return
    from mpi4py import MPI

    mpich = "MPICH" in MPI.Get_library_version() and "Intel" not in MPI.Get_library_version()
    print(f"model 784-{args.hidden.replace(',', '-')}-10, global batch {args.batch_size}, {args.steps} steps, "
          f"one BLAS thread per rank; exposed = waiting for the reduction after backward (ms/step)")
    print(f"{'ranks':>5} {'bucket MB':>9} {'buckets':>7} {'progress':>14} {'exposed ms':>10} {'step ms':>8}")
    for p in (int(r) for r in args.ranks.split(",")):
        for mb in args.buckets.split(","):
            for progress in (["none", "async thread"] if mpich else ["none"]):
                env = env1()
                if progress != "none":
                    env["MPIR_CVAR_ASYNC_PROGRESS"] = "1"
                cmd = [mpiexec(), "-n", str(p), sys.executable, os.path.abspath(__file__), "--child", "--data",
                       args.data, "--hidden", args.hidden, "--batch-size", str(args.batch_size), "--steps",
                       str(args.steps), "--bucket-mb", mb]
                r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, check=True)
                d = json.loads(r.stdout.strip().splitlines()[-1])
                print(f"{p:>5} {mb:>9} {d['buckets']:>7} {progress:>14} {d['exposed_ms']:>10.2f} "
                      f"{d['step_ms']:>8.2f}", flush=True)


if __name__ == "__main__":
    main()
