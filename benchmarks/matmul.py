"""SUMMA against the local GEMM, N x N float64, over ranks x threads splits, in one run.

    python benchmarks/matmul.py [--n 4096] [--splits 1x1,1x2,2x1,d1,d2] [--dtype float64]
    python benchmarks/matmul.py --traffic [--ranks 8 --replication 2 --n 4096]

A split ``RxT`` is R ranks with OMP_NUM_THREADS=T; ``dR`` is R ranks with no
thread variable at all, what a user gets by default (hpcgpu gives each rank
its share of the cores). The default splits: 1 x 1, every R x T with R * T =
the cores here, and dR for R = 1 and R = cores. Two ratios are reported, both
"reference time / SUMMA time" (higher is better, 1.0 = as fast as the
reference):

- ratio_in_run: against one process doing the same GEMM with all the ranks'
  threads together (capped at the cores), measured inside the same mpiexec
  run (``python -m hpcgpu matmul --bench``);
- ratio_numpy_all: against single-process NumPy with a thread per core,
  measured by this script in the same invocation.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def mpiexec():
    return os.environ.get("HPCGPU_MPIEXEC") or shutil.which("mpiexec", path=os.path.dirname(sys.executable)) \
        or "mpiexec"


def numpy_gemm(n, dtype, threads, repeat):
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(0)
    a, b = rng.random((n, n)).astype(dtype), rng.random((n, n)).astype(dtype)
    c = np.empty_like(a)
    with threadpool_limits(limits=threads, user_api="blas"):
        np.matmul(a, b, out=c)
        best = min(_timed(lambda: np.matmul(a, b, out=c)) for _ in range(repeat))
    return best


def _timed(f):
    t0 = time.perf_counter()
    f()
    return time.perf_counter() - t0


def traffic(a) -> int:
    """SUMMA's and 2.5-D's measured bytes a rank at --ranks (oversubscribed), against 2.5-D's lower bound."""
    P, n, item = a.ranks, a.n, np.dtype(a.dtype).itemsize
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    print(f"N={n} {a.dtype}, {P} ranks (one BLAS thread each): bytes a rank moved (sent + received, the largest "
          f"over ranks), and 2.5-D's bound 2 n^2 / sqrt(c P) words")
    print(f"{'algorithm':>14} {'c':>3} {'bytes/rank':>14} {'bound':>14} {'ratio':>6} {'seconds':>8}")
    for algo, c in (("summa", 1), ("2.5d", a.replication)):
        cmd = [mpiexec(), "-n", str(P), sys.executable, "-m", "hpcgpu", "matmul", "--bench", str(n), "--repeat", "1",
               "--json", "--dtype", a.dtype, "--algorithm", algo, "--device", "cpu"]
        if algo == "2.5d":
            cmd += ["--replication", str(c)]
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600, check=True)
        res = json.loads(r.stdout.strip().splitlines()[-1])
        bound = 2 * n * n / (c * P) ** 0.5 * item
        print(f"{algo:>14} {c:>3} {res['comm_bytes_per_rank_max']:>14} {bound:>14.0f} "
              f"{res['comm_bytes_per_rank_max'] / bound:>6.2f} {res['seconds']:>8.2f}", flush=True)
        parts = {k: v for k, v in res["comm_bytes_rank0"].items() if k not in ("sent", "received")}
        if len(parts) > 1:
            print(f"{'':>14} rank 0's parts: " + ", ".join(f"{k} {v}" for k, v in parts.items()), flush=True)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traffic", action="store_true",
                    help="SUMMA's and 2.5-D's bytes a rank at --ranks against the lower bound, instead")
    ap.add_argument("--ranks", type=int, default=8, help="--traffic: ranks")
    ap.add_argument("--replication", type=int, default=2, help="--traffic: 2.5-D's c")
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--splits", help="RxT and dR items, comma-separated (default: from the cores here)")
    ap.add_argument("--dtype", default="float64")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", default=os.path.join(ROOT, "results", "bench-matmul.json"))
    a = ap.parse_args()
    if a.traffic:
        return traffic(a)
    cores = len(os.sched_getaffinity(0))
    splits = a.splits.split(",") if a.splits else list(dict.fromkeys(
        ["1x1"] + [f"{r}x{cores // r}" for r in range(1, cores + 1) if cores % r == 0] + ["d1", f"d{cores}"]))
    flops = (8 if "complex" in a.dtype else 2) * a.n**3
    ref = numpy_gemm(a.n, a.dtype, cores, a.repeat)
    rows = []
    for split in splits:
        P, T = (int(split[1:]), None) if split.startswith("d") else map(int, split.split("x"))
        env = {k: v for k, v in os.environ.items()
               if k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")}
        env["PYTHONPATH"] = ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")
        if T is not None:
            env["OMP_NUM_THREADS"] = str(T)
        cmd = [mpiexec(), "-n", str(P), sys.executable, "-m", "hpcgpu", "matmul", "--bench", str(a.n), "--dtype",
               a.dtype, "--repeat", str(a.repeat), "--json", "--device", "cpu"]
        out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True, timeout=1800).stdout
        r = json.loads(out.strip().splitlines()[-1])
        r["split"] = split
        r["ratio_numpy_all"] = ref / r["seconds"]
        rows.append(r)
    print(f"N={a.n} {a.dtype}; NumPy, 1 process, {cores} threads: {ref:.3f} s, {flops / ref / 1e9:.1f} GFLOP/s")
    print(f"{'split':>5} {'grid':>5} {'panel':>6} {'seconds':>8} {'GFLOP/s':>8} {'ref thr':>7} {'ratio_in_run':>12} "
          f"{'ratio_numpy_all':>15}")
    for r in rows:
        print(f"{r['split']:>5} {'x'.join(map(str, r['grid'])):>5} {r['panel']:>6} {r['seconds']:>8.3f} "
              f"{r['gflops']:>8.1f} {r['local_gemm_threads']:>7} {r['ratio']:>12.3f} {r['ratio_numpy_all']:>15.3f}")
    os.makedirs(os.path.dirname(a.json), exist_ok=True)
    with open(a.json, "w") as f:
        json.dump({"numpy_all_threads_seconds": ref, "cores": cores, "runs": rows}, f, indent=1)


if __name__ == "__main__":
    main()
