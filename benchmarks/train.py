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

``--sweep`` instead runs ranks x threads splits, in one run, for each model
of ``--models`` (hidden widths @ global batch), on the first ``--samples``
training samples, and prints samples/s per split with its ratio to 1 x 1:

    python benchmarks/train.py --sweep [--splits 1x1,1x2,2x1,d1,d2] [--models "256,256@256;1024,1024@1024"]
                               [--peer benchmarks/peers/numpy_sgd.py] [--baseline DIR]

``--tensor-parallel`` runs data x tensor grids (``--grids 2x1,1x2,4x1,2x2,1x4``)
for each model of ``--models`` and prints samples/s with the ratio to the
data-parallel run at the same number of ranks:

    python benchmarks/train.py --tensor-parallel --models "256,256@256;2048,2048@256" --epochs 3

``RxT`` is R ranks with OMP_NUM_THREADS=T; ``dR`` is R ranks with no thread
variable at all, what a user gets by default (hpcgpu's split of the cores).
A split ending in ``all`` (``1x2all``) runs with ``--gemm-threads all``: every
GEMM on the rank's threads instead of the timed choice per GEMM.
The default splits are every R x T with R * T = the cores here, 1 x 1, and
dR for R = 1 and R = cores. ``--peer`` (default ``benchmarks/peers/numpy_sgd.py``,
``none`` for none) also runs the plain NumPy + mpi4py loop at every RxT split of
the model it has (784-256-256-10, its batch). ``--baseline DIR`` runs every
split of hpcgpu in another tree too (a git worktree of an earlier commit), in
the same rounds, and prints its samples/s, its ratio to the peer and ours over
it: a change's effect on speed, measured in one run.
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


def env1(root: str = ROOT) -> dict:
    e = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    e["PYTHONPATH"] = root + os.pathsep + e.get("PYTHONPATH", "")
    return e


def ensure_data(path: str | None) -> str:
    if path:
        return path
    path = os.path.join(ROOT, "results", "data", "fashion-mnist.h5")
    if not os.path.exists(path):
        p = subprocess.run([sys.executable, "-m", "hpcgpu.datasets", "fashion-mnist", "--out", path], env=env1())
        if p.returncode:  # hpcgpu.datasets has said why in one line (Debian's IDX files missing, most often)
            sys.exit("benchmarks/train.py: no Fashion-MNIST here: pass --data FILE.h5 (the bundled digits: "
                     "python -m hpcgpu.datasets digits --out FILE.h5)")
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
    opt = SGD(0.01, momentum=0.9, weight_decay=1e-4)
    state = opt.init(m.params)
    for _ in range(20):  # warm-up
        m.loss_and_grad(X, y)
    rt.comm.Barrier()
    t0 = MPI.Wtime()
    for _ in range(steps):
        m.loss_and_grad(X, y)
        opt.update(m.grad, state, m.params, lr=0.01, scale=1 / 256)
    dt = rt.comm.allreduce(MPI.Wtime() - t0, op=MPI.MAX)
    if rt.rank == 0:
        print(json.dumps({"samples_per_second": steps * 256 / dt}))


def compute_run(P: int, steps: int) -> float:
    cmd = [mpiexec(), "-n", str(P), sys.executable, os.path.abspath(__file__), "--compute-only", str(steps)]
    p = subprocess.run(cmd, check=True, env=env1(), capture_output=True, text=True, timeout=600)
    return json.loads(p.stdout.strip().splitlines()[-1])["samples_per_second"]


_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")


def split_env(threads: int | None, root: str = ROOT) -> dict:
    """The environment of a sweep run: T threads per rank, or (None) no thread variable at all."""
    e = {k: v for k, v in env1(root).items() if k not in _THREAD_VARS}
    if threads is not None:
        e["OMP_NUM_THREADS"] = str(threads)
    return e


def default_splits() -> list[str]:
    cores = len(os.sched_getaffinity(0))
    splits = ["1x1"] + [f"{r}x{cores // r}" for r in range(1, cores + 1) if cores % r == 0]
    return list(dict.fromkeys(splits + ["d1", f"d{cores}"]))


def subset(data: str, n: int, out: str) -> str:
    with h5py.File(data) as f, h5py.File(out, "w") as g:
        g["train/X"], g["train/y"] = f["train/X"][:n], f["train/y"][:n]
        g["test/X"], g["test/y"] = f["test/X"][:2000], f["test/y"][:2000]
    return out


def sweep_run(split: str, hidden: str, batch: int, data: str, epochs: int, out: str, root: str = ROOT) -> float:
    extra = ["--gemm-threads", "all"] if split.endswith("all") else []
    split = split.removesuffix("all")
    ranks, threads = (int(split[1:]), None) if split.startswith("d") else map(int, split.split("x"))
    cmd = [mpiexec(), "-n", str(ranks), sys.executable, "-m", "hpcgpu.train", "--data", data, "--out", out,
           "--hidden", hidden, "--batch-size", str(batch), "--epochs", str(epochs), "--lr", "0.05",
           "--weight-decay", "0", "--device", "cpu", "--progress", "none", *extra]  # the peer's update: no decay
    subprocess.run(cmd, check=True, env=split_env(threads, root), timeout=3600, cwd=root)
    with h5py.File(out) as f:
        return float(np.median(f["metrics/samples_per_second"][1:]))


def peer_run(peer: str, split: str, data: str, epochs: int) -> float | None:
    if split.startswith("d") or split.endswith("all"):
        return None
    ranks, threads = map(int, split.split("x"))
    cmd = [mpiexec(), "-n", str(ranks), sys.executable, peer, "--data", data, "--threads", str(threads),
           "--epochs", str(epochs)]
    p = subprocess.run(cmd, check=True, env=split_env(threads), timeout=3600, capture_output=True, text=True)
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT")][-1]
    return float(line.split("samples_per_s=")[1].split()[0])


def sweep(a, data: str) -> int:
    splits = a.splits.split(",") if a.splits else default_splits()
    models = [(m.split("@")[0], int(m.split("@")[1])) for m in a.models.split(";")]
    runs: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        small = subset(data, a.samples, os.path.join(tmp, "subset.h5"))
        for rnd in range(a.repeat):  # rounds over every split, so drift falls on all of them alike
            for hidden, batch in models:
                for split in splits:
                    r = runs.setdefault((hidden, batch, split), {"ours": [], "peer": [], "base": []})
                    trees = [("ours", ROOT)] + ([("base", os.path.abspath(a.baseline))] if a.baseline else [])
                    for key, root in trees[:: 1 if rnd % 2 == 0 else -1]:  # each goes first in every other round
                        r[key].append(sweep_run(split, hidden, batch, small, a.epochs, os.path.join(tmp, "o.h5"),
                                                root=root))
                    if a.peer and hidden == "256,256" and batch == 256 and not split.startswith("d") \
                            and not split.endswith("all"):
                        r["peer"].append(peer_run(a.peer, split, small, a.epochs))
                    print(f"round {rnd + 1}: {hidden}@{batch} {split}: {r}", file=sys.stderr, flush=True)
    res = [{"hidden": h, "batch": b, "split": sp, "samples_per_second": float(np.median(r["ours"])),
            "best_samples_per_second": float(max(r["ours"])),
            "peer_samples_per_second": float(np.median(r["peer"])) if r["peer"] else None,
            "peer_best_samples_per_second": float(max(r["peer"])) if r["peer"] else None,
            "baseline_samples_per_second": float(np.median(r["base"])) if r["base"] else None,
            "baseline_best_samples_per_second": float(max(r["base"])) if r["base"] else None, "runs": r}
           for (h, b, sp), r in runs.items()]
    print(f"cores here: {len(os.sched_getaffinity(0))}; {a.samples} samples; samples/s: median over {a.repeat} "
          f"rounds of the median of epochs 2..{a.epochs}; RxT: R ranks x T threads (OMP_NUM_THREADS=T), "
          "dR: R ranks, no thread variable (the default)")
    print("median and best of the rounds (a shared machine loses CPU time in bursts: compare best with best)")
    print(f"{'model':>18} {'batch':>5} {'split':>6} {'median/s':>9} {'best/s':>8} {'vs 1x1':>13} "
          f"{'peer med/best':>15} {'vs peer':>11}")
    for r in res:
        base = next((q for q in res if q["hidden"] == r["hidden"] and q["batch"] == r["batch"]
                     and q["split"] == "1x1"), None)
        r["ratio_to_1x1"] = r["samples_per_second"] / base["samples_per_second"] if base else None
        r["best_ratio_to_1x1"] = r["best_samples_per_second"] / base["best_samples_per_second"] if base else None
        peer, peer_best = r["peer_samples_per_second"], r["peer_best_samples_per_second"]
        r["ratio_to_peer"] = r["samples_per_second"] / peer if peer else None
        r["best_ratio_to_peer"] = r["best_samples_per_second"] / peer_best if peer_best else None

        def pair(x, y, f=".2f"):
            return "-" if x is None else f"{x:{f}}/{y:{f}}"

        print(f"{'784-' + r['hidden'].replace(',', '-') + '-10':>18} {r['batch']:>5} {r['split']:>6} "
              f"{r['samples_per_second']:>9.0f} {r['best_samples_per_second']:>8.0f} "
              f"{pair(r['ratio_to_1x1'], r['best_ratio_to_1x1']):>13} {pair(peer, peer_best, '.0f'):>15} "
              f"{pair(r['ratio_to_peer'], r['best_ratio_to_peer']):>11}")
        base = r["baseline_samples_per_second"]
        if base:
            r["baseline_ratio_to_peer"] = base / peer if peer else None
            r["ratio_to_baseline"] = r["samples_per_second"] / base
            vs = f", baseline vs peer {r['baseline_ratio_to_peer']:.3f}" if peer else ""
            lo, hi = min(r["runs"]["base"]), r["baseline_best_samples_per_second"]
            print(f"{'':>18} {'':>5} {'':>6} baseline {a.baseline}: {base:.0f}/s (rounds {lo:.0f}-{hi:.0f}, ours "
                  f"{min(r['runs']['ours']):.0f}-{r['best_samples_per_second']:.0f}); ours / baseline "
                  f"{r['ratio_to_baseline']:.3f}{vs}")
    os.makedirs(os.path.dirname(a.json), exist_ok=True)
    with open(a.json, "w") as f:
        json.dump({"data": data, "samples": a.samples, "epochs": a.epochs, "sweep": res}, f, indent=1)
    return 0


def tensor_run(P: int, T: int, hidden: str, batch: int, data: str, epochs: int, out: str) -> float:
    cmd = [mpiexec(), "-n", str(P), sys.executable, "-m", "hpcgpu.train", "--data", data, "--out", out,
           "--hidden", hidden, "--batch-size", str(batch), "--epochs", str(epochs), "--tensor-parallel", str(T),
           "--device", "cpu", "--progress", "none"]
    subprocess.run(cmd, check=True, env=env1(), timeout=3600)
    with h5py.File(out) as f:
        return float(np.median(f["metrics/samples_per_second"][1:]))


def tensor(a, data: str) -> int:
    """(D, T) grids in one run, each model's samples/s and the ratio to its data-parallel run at the same P."""
    grids = [tuple(int(x) for x in g.split("x")) for g in a.grids.split(",")]
    models = [(m.split("@")[0], int(m.split("@")[1])) for m in a.models.split(";")]
    res: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        small = subset(data, a.samples, os.path.join(tmp, "subset.h5"))
        for r in range(a.repeat):
            for hidden, batch in models:
                for D, T in grids:
                    sps = tensor_run(D * T, T, hidden, batch, small, a.epochs, os.path.join(tmp, "o.h5"))
                    res.setdefault((hidden, batch, D, T), []).append(sps)
                    print(f"round {r + 1}: {hidden}@{batch} {D}x{T}: {sps:.0f}/s", flush=True)
    print(f"one BLAS thread a rank, {a.samples} samples, median of {a.repeat} rounds of the median of epochs 2..; "
          "ratio: against D x 1 at the same number of ranks (oversubscribed beyond the cores here)")
    print(f"{'model':>20} {'batch':>5} {'D x T':>6} {'samples/s':>10} {'vs data-parallel':>16}")
    for hidden, batch in models:
        for D, T in grids:
            med = float(np.median(res[(hidden, batch, D, T)]))
            dp = res.get((hidden, batch, D * T, 1))
            ratio = f"{med / float(np.median(dp)):.2f}" if dp else "-"
            print(f"{'784-' + hidden.replace(',', '-') + '-10':>20} {batch:>5} {f'{D}x{T}':>6} {med:>10.0f} "
                  f"{ratio:>16}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", help="Fashion-MNIST HDF5 (written from Debian's IDX files when omitted)")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--ranks", default="1,2")
    ap.add_argument("--compute-steps", type=int, default=300)
    ap.add_argument("--json", default=os.path.join(ROOT, "results", "bench-train.json"))
    ap.add_argument("--compute-only", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--sweep", action="store_true", help="ranks x threads splits instead (see above)")
    ap.add_argument("--splits", help="--sweep: RxT and dR items, comma-separated (default: from the cores here)")
    ap.add_argument("--models", default="256,256@256;1024,1024@1024",
                    help="--sweep: hidden widths @ global batch, ';'-separated")
    ap.add_argument("--samples", type=int, default=16384, help="--sweep: training samples used")
    ap.add_argument("--repeat", type=int, default=3, help="--sweep: rounds over the splits; medians are kept")
    ap.add_argument("--peer", default=os.path.join(HERE, "peers", "numpy_sgd.py"),
                    help="--sweep: the plain NumPy + mpi4py loop to run beside ('none': none)")
    ap.add_argument("--baseline", help="--sweep: another hpcgpu tree (a worktree of an earlier commit) run beside")
    ap.add_argument("--tensor-parallel", action="store_true",
                    help="data x tensor grids instead: --grids of DxT, each model of --models")
    ap.add_argument("--grids", default="2x1,1x2,4x1,2x2,1x4", help="--tensor-parallel: DxT items")
    a = ap.parse_args()
    if a.compute_only:
        compute_only(a.compute_only)
        return 0
    data = ensure_data(a.data)
    if a.tensor_parallel:
        return tensor(a, data)
    if a.peer == "none":
        a.peer = None
    if a.sweep:
        if a.json.endswith("bench-train.json"):
            a.json = a.json.replace("bench-train.json", "bench-train-sweep.json")
        return sweep(a, data)
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
