"""SUMMA against the local GEMM, N x N float64, at 1, 2 and 4 ranks, in one run.

    python benchmarks/matmul.py [--n 4096] [--ranks 1,2,4] [--dtype float64]

Each SUMMA run uses one BLAS thread per rank (OMP_NUM_THREADS=1). Two ratios
are reported, both "reference time / SUMMA time" (higher is better, 1.0 =
as fast as the reference):

- ratio_in_run: against one process doing the same GEMM with all the ranks'
  threads together (capped at the cores), measured inside the same mpiexec
  run (``python -m hpcgpu matmul --bench``);
- ratio_numpy_2t: against single-process NumPy with 2 BLAS threads,
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--ranks", default="1,2,4")
    ap.add_argument("--dtype", default="float64")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", default=os.path.join(ROOT, "results", "bench-matmul.json"))
    a = ap.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    flops = (8 if "complex" in a.dtype else 2) * a.n**3
    ref2 = numpy_gemm(a.n, a.dtype, 2, a.repeat)
    rows = []
    for P in (int(p) for p in a.ranks.split(",")):
        cmd = [mpiexec(), "-n", str(P), sys.executable, "-m", "hpcgpu", "matmul", "--bench", str(a.n), "--dtype",
               a.dtype, "--repeat", str(a.repeat), "--json", "--device", "cpu"]
        out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True, timeout=1800).stdout
        r = json.loads(out.strip().splitlines()[-1])
        r["ratio_numpy_2t"] = ref2 / r["seconds"]
        rows.append(r)
    print(f"N={a.n} {a.dtype}; NumPy 1 process 2 threads: {ref2:.3f} s, {flops / ref2 / 1e9:.1f} GFLOP/s")
    print(f"{'P':>2} {'grid':>5} {'panel':>6} {'seconds':>8} {'GFLOP/s':>8} {'ref thr':>7} {'ratio_in_run':>12} "
          f"{'ratio_numpy_2t':>14}")
    for r in rows:
        print(f"{r['ranks']:>2} {'x'.join(map(str, r['grid'])):>5} {r['panel']:>6} {r['seconds']:>8.3f} "
              f"{r['gflops']:>8.1f} {r['local_gemm_threads']:>7} {r['ratio']:>12.3f} {r['ratio_numpy_2t']:>14.3f}")
    os.makedirs(os.path.dirname(a.json), exist_ok=True)
    with open(a.json, "w") as f:
        json.dump({"numpy_2_threads_seconds": ref2, "runs": rows}, f, indent=1)


if __name__ == "__main__":
    main()
