"""Trainer throughput at 1 and 2 ranks on Fashion-MNIST, measured in one run.

    python benchmarks/train.py [--epochs 5] [--ranks 1,2] [--data FILE]

Every run: hidden 256,256, global batch 256, one BLAS thread per rank
(OMP_NUM_THREADS=1). Throughput is the median over epochs 2.. of samples per
second (epoch 1 pays for first touches). Scaling efficiency is the P-rank
figure divided by P times the 1-rank figure.

Because small GEMMs do not scale like large ones on two shared cores, the
script also times the same local steps WITHOUT any communication at each P
(``--compute-only`` mode, launched by the script itself): efficiency read
against that compute-only scaling tells what communication costs.

Also reported: training time (s, epochs summed, evaluation excluded) until
the test accuracy first reached 85%, from the run at the largest P.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def mpiexec() -> str:
    return os.environ.get("HPCGPU_MPIEXEC") or shutil.which("mpiexec", path=os.path.dirname(sys.executable)) \
        or "mpiexec"


def env1() -> dict:
    e = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    e["PYTHONPATH"] = ROOT + os.pathsep + e.get("PYTHONPATH", "")
    return e


def ensure_data(path: str | None) -> str:
    if path:
        return path
    path = os.path.join(ROOT, "results", "data", "fashion-mnist.h5")
    if not os.path.exists(path):
        subprocess.run([sys.executable, "-m", "hpcgpu.datasets", "fashion-mnist", "--out", path], check=True,
                       env=env1())
    return path


def train_run(P: int, data: str, epochs: int, out: str) -> dict:
    cmd = [mpiexec(), "-n", str(P), sys.executable, "-m", "hpcgpu.train", "--data", data, "--out", out,
           "--hidden", "256,256", "--batch-size", "256", "--epochs", str(epochs), "--lr", "0.1",
           "--device", "cpu", "--progress", "none"]
    subprocess.run(cmd, check=True, env=env1(), timeout=3600)
    with h5py.File(out) as f:
        return {k: f["metrics"][k][()].tolist() for k in f["metrics"]}


def compute_only(steps: int) -> None:
    """Under mpiexec: time local steps of B/P samples with no communication at all."""
    from mpi4py import MPI

    from hpcgpu import init
    from hpcgpu._partition import block_range
    from hpcgpu.train import MLP, SGD

    rt = init("cpu")
    lo, hi = block_range(256, rt.size, rt.rank)
    rng = np.random.default_rng(rt.rank)
    X = rng.random((hi - lo, 784), dtype=np.float32)
    y = rng.integers(0, 10, hi - lo)
    m = MLP([784, 256, 256, 10], seed=0)
    opt = SGD(m.params, 0.9, 1e-4)
    for _ in range(20):  # warm-up
        m.loss_and_grad(X, y)
    rt.comm.Barrier()
    t0 = MPI.Wtime()
    for _ in range(steps):
        m.loss_and_grad(X, y)
        opt.step(m.param_grad, 0.01, scale=1 / 256)
    dt = rt.comm.allreduce(MPI.Wtime() - t0, op=MPI.MAX)
    if rt.rank == 0:
        print(json.dumps({"samples_per_second": steps * 256 / dt}))


def compute_run(P: int, steps: int) -> float:
    cmd = [mpiexec(), "-n", str(P), sys.executable, os.path.abspath(__file__), "--compute-only", str(steps)]
    p = subprocess.run(cmd, check=True, env=env1(), capture_output=True, text=True, timeout=600)
    return json.loads(p.stdout.strip().splitlines()[-1])["samples_per_second"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", help="Fashion-MNIST HDF5 (written from Debian's IDX files when omitted)")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--ranks", default="1,2")
    ap.add_argument("--compute-steps", type=int, default=300)
    ap.add_argument("--json", default=os.path.join(ROOT, "results", "bench-train.json"))
    ap.add_argument("--compute-only", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.compute_only:
        compute_only(a.compute_only)
        return 0
    data = ensure_data(a.data)
    ranks = [int(p) for p in a.ranks.split(",")]
    res = {}
    with tempfile.TemporaryDirectory() as tmp:
        for P in ranks:
            m = train_run(P, data, a.epochs, os.path.join(tmp, f"p{P}.h5"))
            sps = float(np.median(m["samples_per_second"][1:] or m["samples_per_second"]))
            acc = np.asarray(m["test_accuracy"])
            secs = np.cumsum(m["seconds"])
            hit = np.flatnonzero(acc >= 0.85)
            res[P] = {
                "samples_per_second": sps,
                "compute_only_samples_per_second": compute_run(P, a.compute_steps),
                "final_test_accuracy": float(acc[-1]),
                "seconds_to_85pct": float(secs[hit[0]]) if hit.size else None,
                "epochs_to_85pct": int(hit[0]) + 1 if hit.size else None,
            }
    base, base_c = res[ranks[0]]["samples_per_second"], res[ranks[0]]["compute_only_samples_per_second"]
    print(f"{'P':>2} {'samples/s':>10} {'efficiency':>10} {'compute-only/s':>14} {'compute eff.':>12} "
          f"{'acc':>6} {'s to 85%':>8}")
    for P in ranks:
        r = res[P]
        r["efficiency"] = r["samples_per_second"] / (P / ranks[0] * base)
        r["compute_only_efficiency"] = r["compute_only_samples_per_second"] / (P / ranks[0] * base_c)
        r["efficiency_vs_compute_only"] = r["samples_per_second"] / r["compute_only_samples_per_second"]
        t85 = "-" if r["seconds_to_85pct"] is None else f"{r['seconds_to_85pct']:.1f}"
        print(f"{P:>2} {r['samples_per_second']:>10.0f} {r['efficiency']:>10.3f} "
              f"{r['compute_only_samples_per_second']:>14.0f} {r['compute_only_efficiency']:>12.3f} "
              f"{r['final_test_accuracy']:>6.3f} {t85:>8}")
    os.makedirs(os.path.dirname(a.json), exist_ok=True)
    with open(a.json, "w") as f:
        json.dump({"data": data, "epochs": a.epochs, "results": res}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
