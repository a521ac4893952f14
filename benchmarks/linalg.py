"""hpcgpu.linalg's factorizations and solvers side by side with SciPy, dask and ScaLAPACK, in one run.

    mpiexec -n P python benchmarks/linalg.py [--n 4096] [--routines cholesky,lu,lstsq] [--lstsq 200000x200]
                                             [--nb 64,128] [--grid RxC] [--peers scipy,dask,scalapack]
                                             [--rounds 3] [--json OUT]

Routines (each on the same matrix for hpcgpu, SciPy and dask; ScaLAPACK's harness draws its own of the same
kind and size):

- ``cholesky``: ``hpcgpu.linalg.cholesky(A, lower=True)`` of an n x n symmetric positive definite matrix;
  SciPy ``cholesky``, dask ``da.linalg.cholesky``, ScaLAPACK PDPOTRF. ``hpcgpu.cyclic``: the same of A kept
  block-cyclic (``A.to_cyclic()``, untimed, as ScaLAPACK's harness keeps its matrix): no move in or out; its
  ratios are ``cyclic_vs_PEER``. ``--upper``: the upper factor (SciPy's and
  hpcgpu's default, ``lower=False``) for hpcgpu, SciPy and dask; ScaLAPACK's harness factors "L" either way.
- ``lu``: ``lu_factor`` then ``lu_solve`` of one right-hand side; SciPy the same, dask ``da.linalg.lu`` then two
  ``solve_triangular``, ScaLAPACK PDGETRF then PDGETRS. ``hpcgpu.cyclic``: A kept block-cyclic on the grid
  ``lu_factor`` picks (``A.to_cyclic(grid=A.grid.flat())``, untimed).
- ``lstsq``: least squares of a tall ``--lstsq`` matrix and one right-hand side, hpcgpu's ``lstsq`` (TSQR) on a
  P x 1 grid; SciPy ``qr(mode="economic")`` then ``solve_triangular`` (peer ``scipy``) and ``scipy.linalg.lstsq``
  (peer ``scipy.lstsq``), dask ``da.linalg.lstsq`` (TSQR), ScaLAPACK PDGELS on a P x 1 grid.

Every hpcgpu rank runs one BLAS thread (``--threads``); SciPy runs in rank 0 alone with as many threads as the
ranks use cores (``min(P x threads, cores)``) while the other ranks sleep; dask runs in rank 0 on its threaded
scheduler with that many workers, one BLAS thread each, and square chunks of about n / (2 workers) (TSQR: row
chunks of about m / (2 workers)), a few chunks a worker as dask's guide advises; ScaLAPACK runs from rank 0 as
its own job of P ranks under the system's Open MPI (``benchmarks/peers/scalapack_bench``, built by
``benchmarks/peers/build_scalapack.sh``), one BLAS thread a rank (OpenBLAS's serial build). hpcgpu runs at its
default block size (what a user gets) and at each ``--nb``; ScaLAPACK at each ``--nb``, its best kept.

Each round times every contender once, in an order shuffled anew each round (no contender always runs after the
same one), every rank idle for 0.3 s before each (``SETTLE``: the previous one's BLAS threads asleep), so drift
on a shared machine falls on all alike; the figures are the medians over ``--rounds`` (the best is printed
beside). One untimed call of each contender at a small size first loads its code, then one of hpcgpu's at the
full size, where every rank holds blocks and so loads its kernels (ScaLAPACK's job is new each round: its matrix
is written, so its pages are touched, before the timed call). A time is the slowest rank's,
from a barrier. Ratios are hpcgpu's speed over the peer's, peer seconds / hpcgpu seconds (> 1: hpcgpu faster),
both taken in this run, printed with both figures and the machine's load average. A peer that cannot run here (not
installed, not built) is printed and written as missing, with the reason.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import random
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

ROUTINES = ("cholesky", "lu", "lstsq")
PEERS = ("scipy", "dask", "scalapack")
HARNESS = os.path.join(HERE, "peers", "build", "scalapack_bench")
OPENBLAS_SERIAL = "/usr/lib/x86_64-linux-gnu/openblas-serial"


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=4096, help="order of the square matrices (cholesky, lu)")
    ap.add_argument("--lstsq", default="200000x200", help="MxN of lstsq's tall matrix")
    ap.add_argument("--routines", default=",".join(ROUTINES))
    ap.add_argument("--nb", default="128", help="block sizes measured beside hpcgpu's default, comma-separated")
    ap.add_argument("--grid", help="RxC grid of cholesky and lu (default: hpcgpu's default grid)")
    ap.add_argument("--peers", default=",".join(PEERS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="BLAS threads a rank")
    ap.add_argument("--dtype", default="float64")
    ap.add_argument("--mpirun", default=os.environ.get("SCALAPACK_MPIRUN", "/usr/bin/mpirun"),
                    help="the system Open MPI's mpirun, for the ScaLAPACK peer")
    ap.add_argument("--upper", action="store_true",
                    help="cholesky's upper factor (lower=False, the default a user gets) for hpcgpu, SciPy and dask")
    ap.add_argument("--profile", action="store_true",
                    help="after the rounds, one more call of each hpcgpu variant with its phases timed")
    ap.add_argument("--json", help="write the figures here (rank 0)")
    a = ap.parse_args(argv)
    a.routines = [r for r in a.routines.split(",") if r]
    a.peers = [p for p in a.peers.split(",") if p]
    a.nbs = [int(x) for x in a.nb.split(",") if x]
    a.lstsq_shape = tuple(int(x) for x in a.lstsq.lower().split("x"))
    bad = [r for r in a.routines if r not in ROUTINES] + [p for p in a.peers if p not in PEERS]
    if bad or not a.routines or a.rounds < 1 or a.n < 1 or min(a.nbs, default=1) < 1 or len(a.lstsq_shape) != 2:
        ap.error(f"--routines from {','.join(ROUTINES)}, --peers from {','.join(PEERS)}, --n, --nb, --rounds "
                 f">= 1, --lstsq MxN (got {' '.join(bad) or 'a bad number'})")
    return a


LOWER = True
"""Which Cholesky factor hpcgpu, SciPy and dask compute (``--upper``: False)."""


def flops(routine: str, shape, dtype) -> float:
    m, n = shape
    f = {"cholesky": n**3 / 3, "lu": 2 * n**3 / 3 + 2 * n**2, "lstsq": 2 * m * n**2 - 2 * n**3 / 3 + 4 * m * n}
    return f[routine] * (4 if np.dtype(dtype).kind == "c" else 1)


# ---- the matrices --------------------------------------------------------------------------------------------

def _hash01(i, j, salt: int):
    """Numbers in [0, 1) from global index pairs (splitmix64 of the pair), the same whatever the grid."""
    with np.errstate(over="ignore"):
        z = (i.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) ^ (j.astype(np.uint64) + np.uint64(salt)) \
            * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return ((z ^ (z >> np.uint64(31))) >> np.uint64(11)).astype(np.float64) / 2.0**53


def hermitian_block(rows: slice, cols: slice, n: int, dtype):
    """Rows x cols of an n x n Hermitian matrix with entries in [-0.5, 0.5) and n on the diagonal: diagonally
    dominant, so positive definite."""
    i, j = np.ogrid[rows, cols]
    lo, hi = np.minimum(i, j), np.maximum(i, j)
    block = _hash01(lo, hi, 1) - 0.5 + n * (i == j)
    if np.dtype(dtype).kind == "c":
        block = block + 1j * np.sign(j - i) * (_hash01(lo, hi, 2) - 0.5)
    return np.ascontiguousarray(block, dtype=dtype)


def inputs(routine, a, grids):
    """hpcgpu's DistMatrices (A, b) of the routine, and their global copies on rank 0 (None elsewhere).

    ``grids``: the square routines' grid and lstsq's P x 1 grid.
    """
    from hpcgpu.linalg import DistMatrix

    grid, tall = grids
    if routine == "lstsq":
        g = tall
        m, n = a.lstsq_shape
        A = DistMatrix.random((m, n), g, a.dtype, seed=1)
    else:
        g, m, n = grid, a.n, a.n
        A = DistMatrix.random((n, n), g, a.dtype, seed=1)
        if routine == "cholesky":
            rows, cols = g.block((n, n))
            A = DistMatrix(hermitian_block(rows, cols, n, a.dtype), (n, n), g)
    b = DistMatrix.random((m, 1), g, a.dtype, seed=2)
    return A, b, A.gather(), b.gather()


# ---- the contenders -----------------------------------------------------------------------------------------

def takes_nb(routine) -> bool:
    """Whether hpcgpu's routine has a block size to choose (TSQR's lstsq has none)."""
    import hpcgpu.linalg as hl

    f = {"cholesky": "cholesky", "lu": "lu_factor", "lstsq": "lstsq"}[routine]
    return "nb" in inspect.signature(getattr(hl, f)).parameters


def hpcgpu_call(routine, A, b, nb):
    """A function that runs hpcgpu's routine on (A, b) at block size nb (None: its default)."""
    import hpcgpu.linalg as hl

    kw = {} if nb is None else {"nb": nb}
    if routine == "cholesky":
        return lambda: hl.cholesky(A, lower=LOWER, **kw)
    if routine == "lu":
        return lambda: hl.lu_solve(hl.lu_factor(A, **kw), b)
    return lambda: hl.lstsq(A, b, **kw)


def scipy_call(routine, a, b, variant="scipy"):
    import scipy.linalg as sl

    if routine == "cholesky":
        return lambda: sl.cholesky(a, lower=LOWER)
    if routine == "lu":
        return lambda: sl.lu_solve(sl.lu_factor(a), b)
    if variant == "scipy.lstsq":
        return lambda: sl.lstsq(a, b)

    def qr_solve():
        q, r = sl.qr(a, mode="economic")
        return sl.solve_triangular(r, q.conj().T @ b)
    return qr_solve


def dask_chunks(routine, shape, workers):
    """Chunks a user would choose: about two a worker along the long side; square for the square routines."""
    m, n = shape
    if routine == "lstsq":
        return (-(-m // (2 * workers)), n)
    c = -(-n // (2 * workers))
    return (c, c)


def dask_call(routine, a, b, workers):
    import dask
    import dask.array as da

    chunks = dask_chunks(routine, a.shape, workers)

    def run(expr):
        with dask.config.set(scheduler="threads", num_workers=workers):
            return expr().compute()

    if routine == "cholesky":
        return lambda: run(lambda: da.linalg.cholesky(da.from_array(a, chunks=chunks), lower=LOWER))
    if routine == "lu":
        def lu():
            A = da.from_array(a, chunks=chunks)
            B = da.from_array(b, chunks=(chunks[0], 1))
            p, lo, up = da.linalg.lu(A)
            y = da.linalg.solve_triangular(lo, p.T @ B, lower=True)
            return da.linalg.solve_triangular(up, y, lower=False)
        return lambda: run(lu)
    return lambda: run(lambda: da.linalg.lstsq(da.from_array(a, chunks=chunks),
                                               da.from_array(b, chunks=(chunks[0], 1)))[0])


def scalapack_missing(a) -> str | None:
    if np.dtype(a.dtype) != np.float64:
        return f"the harness runs float64 only (PD*), not {a.dtype}"
    if not os.path.exists(HARNESS):
        return f"{os.path.relpath(HARNESS, ROOT)} not built: run sh benchmarks/peers/build_scalapack.sh"
    if not os.path.exists(a.mpirun):
        return f"no system mpirun at {a.mpirun} (Debian's openmpi-bin; --mpirun)"
    return None


def scalapack_run(a, routine, shape, nb, grid_shape, P) -> float:
    """Seconds of one ScaLAPACK call, its own job of P ranks (the matrix's pages are touched before the clock)."""
    name = {"cholesky": "potrf", "lu": "getrf", "lstsq": "gels"}[routine]
    # The job is started from inside an MPICH rank: none of this launcher's variables may reach Open MPI.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PMI_", "PMIX_", "MPIR_", "HYDRA_", "MPICH_", "OMPI_", "I_MPI_", "PRTE_"))}
    env.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    if os.path.isdir(OPENBLAS_SERIAL):
        env["LD_LIBRARY_PATH"] = OPENBLAS_SERIAL + os.pathsep + env.get("LD_LIBRARY_PATH", "")
    cmd = [a.mpirun, "--oversubscribe", "--allow-run-as-root", "--bind-to", "none", "-n", str(P), HARNESS, name,
           str(shape[0]), str(shape[1]), str(nb), str(grid_shape[0]), str(grid_shape[1]), "0"]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        raise RuntimeError(f"ScaLAPACK peer failed ({' '.join(cmd)}): exit {p.returncode}: {p.stderr[-2000:]}")
    return float(json.loads(lines[-1])["seconds"])


# ---- where hpcgpu's time goes ----------------------------------------------------------------------------------

_PHASE_NAMES = ("watch", "to_cyclic", "from_cyclic", "remap", "getrf", "potrf", "trsm", "gemm_update", "geqrf", "qr",
                "svd", "trsm_cyclic")
_ROUTINE_MODULES = ("lu", "chol", "tsqr", "triangular", "solvers", "_local")


class Phases:
    """Exclusive seconds per phase of one call: every ``watch`` section of the routines (named by what it waits
    for: a panel's broadcast, the pivots...), each local kernel, and the redistributions, by wrapping those names
    in hpcgpu.linalg's routine modules for the duration of a ``with``. Time in none of them is ``other``."""

    def __init__(self):
        self.seconds, self.stack, self.saved = {}, [], []

    def _enter(self, label):
        self.stack.append([label, time.perf_counter(), 0.0])

    def _exit(self):
        label, t0, inner = self.stack.pop()
        dt = time.perf_counter() - t0
        self.seconds[label] = self.seconds.get(label, 0.0) + dt - inner
        if self.stack:
            self.stack[-1][2] += dt

    def _wrap(self, name, f):
        import contextlib
        import re

        if name == "watch":
            @contextlib.contextmanager
            def timed_watch(what, *args, **kw):
                with f(what, *args, **kw):
                    self._enter("wait: " + re.sub(r"\d+", "#", what))
                    try:
                        yield
                    finally:
                        self._exit()
            return timed_watch

        def timed(*args, **kw):
            self._enter(name if name in ("to_cyclic", "from_cyclic", "remap") else "local " + name)
            try:
                return f(*args, **kw)
            finally:
                self._exit()
        return timed

    def __enter__(self):
        import importlib

        for m in _ROUTINE_MODULES:
            try:
                mod = importlib.import_module(f"hpcgpu.linalg.{m}")
            except ImportError:
                continue
            for name in _PHASE_NAMES:
                f = getattr(mod, name, None)
                if callable(f) and not isinstance(f, type(importlib)):
                    self.saved.append((mod, name, f))
                    setattr(mod, name, self._wrap(name, f))
        return self

    def __exit__(self, *exc):
        for mod, name, f in reversed(self.saved):
            setattr(mod, name, f)
        self.saved.clear()


def profile(comm, f):
    """One more call of f with its phases timed on every rank: {phase: [min, mean, max] seconds over ranks}."""
    from mpi4py import MPI

    with Phases() as ph:
        comm.Barrier()
        t0 = MPI.Wtime()
        f()
        total = MPI.Wtime() - t0
    ph.seconds["other"] = total - sum(ph.seconds.values())
    ph.seconds["total"] = total
    every = comm.gather(ph.seconds, root=0)
    if comm.Get_rank() != 0:
        return None
    names = sorted({k for d in every for k in d}, key=lambda k: -max(d.get(k, 0.0) for d in every))
    return {k: [min(d.get(k, 0.0) for d in every), sum(d.get(k, 0.0) for d in every) / len(every),
                max(d.get(k, 0.0) for d in every)] for k in names}


# ---- timing -------------------------------------------------------------------------------------------------

def timed_all_ranks(comm, f) -> float:
    """Seconds of f() on every rank from a barrier: the slowest rank's."""
    from mpi4py import MPI

    comm.Barrier()
    t0 = MPI.Wtime()
    f()
    return comm.allreduce(MPI.Wtime() - t0, op=MPI.MAX)


def idle_wait(comm) -> None:
    """Wait for the other ranks without spinning (MPICH's Barrier busy-polls a core SciPy's threads need)."""
    req = comm.Ibarrier()
    while not req.Test():
        time.sleep(0.002)


SETTLE = 0.3
"""Seconds every rank sleeps before each contender: OpenBLAS's threads spin a while after a call returns (about
2^28 cycles, ``THREAD_TIMEOUT``), and the contender after SciPy's ran beside them: 20 % slower at n = 2048, P = 2
here."""


def settle(comm) -> None:
    """Every rank idle for :data:`SETTLE` seconds, then together (the previous contender's threads asleep)."""
    idle_wait(comm)
    time.sleep(SETTLE)
    idle_wait(comm)


def timed_rank0(comm, f, own: bool = False):
    """Seconds of f() on rank 0 alone while the other ranks sleep (None elsewhere); ``own``: f returns them."""
    t = None
    if comm.Get_rank() == 0:
        t0 = time.perf_counter()
        t = f()
        if not own:
            t = time.perf_counter() - t0
    idle_wait(comm)
    return t


def contenders(routine, a, P, peer_threads, A, b, ga, gb, missing):
    """[(name, nb or None, function of no argument returning seconds (rank 0's figure))] for one routine."""
    from threadpoolctl import threadpool_limits

    from hpcgpu.linalg.cyclic import default_nb

    comm = A.grid.cart
    out = [("hpcgpu", None, lambda: timed_all_ranks(comm, hpcgpu_call(routine, A, b, None)))]
    for nb in a.nbs if takes_nb(routine) else []:
        out.append(("hpcgpu", nb, lambda nb=nb: timed_all_ranks(comm, hpcgpu_call(routine, A, b, nb))))
    if routine != "lstsq":
        # A kept block-cyclic (DistMatrix.to_cyclic, untimed, at hpcgpu's default nb), as ScaLAPACK's harness
        # keeps its matrix: the factorization without the moves in and out. LU on the grid lu_factor picks
        # (A.grid.flat()), B there too.
        grid = A.grid.flat() if routine == "lu" else A.grid
        C, bc = A.to_cyclic(grid=grid), b.redistribute(grid)
        out.append(("hpcgpu.cyclic", None, lambda: timed_all_ranks(comm, hpcgpu_call(routine, C, bc, None))))
    peers = [p for p in a.peers if p not in missing]
    if "scipy" in peers:
        for variant in ("scipy", "scipy.lstsq") if routine == "lstsq" else ("scipy",):
            def sp(variant=variant):
                with threadpool_limits(limits=peer_threads):
                    f = scipy_call(routine, ga, gb, variant) if comm.Get_rank() == 0 else None
                    return timed_rank0(comm, f)
            out.append((variant, None, sp))
    if "dask" in peers:
        def dk():
            with threadpool_limits(limits=1):
                return timed_rank0(comm, dask_call(routine, ga, gb, peer_threads) if comm.Get_rank() == 0 else None)
        out.append(("dask", None, dk))
    if "scalapack" in peers:
        shape = a.lstsq_shape if routine == "lstsq" else (a.n, a.n)
        gshape = (P, 1) if routine == "lstsq" else A.grid.shape
        for nb in a.nbs or [default_nb(np, a.n, A.grid)]:
            out.append(("scalapack", nb, lambda nb=nb: timed_rank0(
                comm, lambda: scalapack_run(a, routine, shape, nb, gshape, P), own=True)))
    return out


def peer_missing(a) -> dict:
    """{peer: why it cannot run here} for the peers asked for."""
    missing = {}
    if "dask" in a.peers:
        try:
            import dask.array  # noqa: F401
        except ImportError as e:
            missing["dask"] = f"{e} (pip install 'hpcgpu[bench]', or dask[array])"
    if "scipy" in a.peers:
        try:
            import scipy.linalg  # noqa: F401
        except ImportError as e:
            missing["scipy"] = str(e)
    if "scalapack" in a.peers:
        why = scalapack_missing(a)
        if why:
            missing["scalapack"] = why
    return missing


def run_routine(routine, a, P, peer_threads, grids, missing, rank):
    """Every contender of one routine, ``a.rounds`` rounds; rank 0's record of the figures."""
    A, b, ga, gb = inputs(routine, a, grids)
    shape = A.gshape
    # One small untimed call of each contender first: the code paths load (imports, BLAS buffers).
    small = argparse.Namespace(**vars(a))
    small.n, small.lstsq_shape = min(a.n, 64), (min(shape[0], 256), min(shape[1], 16))
    sA, sb, sga, sgb = inputs(routine, small, grids)
    for _, _, f in contenders(routine, small, P, peer_threads, sA, sb, sga, sgb,
                              dict(missing, scalapack="not warmed")):
        f()
    runs = contenders(routine, a, P, peer_threads, A, b, ga, gb, missing)
    comm = A.grid.cart
    # and one untimed call of hpcgpu's at the full size: at the small size one rank holds every block, so the
    # others have not yet imported what the local kernels import (scipy.linalg: 0.8 s here, where Python compiles
    # it anew each process), which the first timed call would pay, whichever contender it is
    first = runs[0][2]()
    if rank == 0:
        print(f"{routine}: hpcgpu's first call at this size {first:.3f} s (untimed)", file=sys.stderr, flush=True)
    secs = {(name, nb): [] for name, nb, _ in runs}
    for r in range(a.rounds):
        # each round in another order, the same on every rank (a rotation kept each contender after the same one:
        # hpcgpu's default always ran after the last peer, ScaLAPACK's job of processes of their own)
        order = list(runs)
        random.Random(r).shuffle(order)
        for name, nb, f in order:
            settle(comm)
            t = f()
            if rank == 0:
                secs[(name, nb)].append(t)
                print(f"round {r + 1}: {routine} {name} nb={nb or 'default'}: {t:.3f} s", file=sys.stderr,
                      flush=True)
    phases = {}
    if a.profile:
        for name, nb, _ in runs:
            if name == "hpcgpu":
                phases[nb or "default"] = profile(A.grid.cart, hpcgpu_call(routine, A, b, nb))
    if rank != 0:
        return None
    from hpcgpu.linalg.cyclic import default_nb

    res = summarize(routine, a, shape, secs, default_nb(np, shape[0], A.grid) if takes_nb(routine) else None)
    if phases:
        res["phases"] = phases
    return res


def summarize(routine, a, shape, secs, nb0):
    """Medians, best times and GFLOP/s of each contender; the ratios of hpcgpu (default, tuned) to each peer."""
    fl = flops(routine, shape, a.dtype)
    rows = {}
    for (name, nb), ts in secs.items():
        key = name if nb is None else f"{name}@nb={nb}"
        med = float(np.median(ts))
        rows[key] = {"name": name, "nb": nb, "seconds": ts, "median": med, "best": float(min(ts)),
                     "gflops": fl / med / 1e9}
    ours = {k: v for k, v in rows.items() if v["name"] == "hpcgpu"}
    default = ours["hpcgpu"]
    tuned = min(ours.values(), key=lambda v: v["median"])
    best = {}
    for v in rows.values():  # each peer at its best block size
        if not v["name"].startswith("hpcgpu") and (v["name"] not in best or v["median"] < best[v["name"]]["median"]):
            best[v["name"]] = v
    ratios = {}
    mine = [("default", default), ("tuned", tuned)]
    if "hpcgpu.cyclic" in rows:  # A kept block-cyclic: hpcgpu's default nb
        mine.append(("cyclic", dict(rows["hpcgpu.cyclic"], nb=None)))
    for peer, v in best.items():
        for label, h in mine:
            ratios[f"{label}_vs_{peer}"] = {"ratio": v["median"] / h["median"], "hpcgpu_seconds": h["median"],
                                            "peer_seconds": v["median"], "hpcgpu_nb": h["nb"] or nb0,
                                            "peer_nb": v["nb"]}
    return {"shape": list(shape), "flops": fl, "contenders": rows, "tuned_nb": tuned["nb"] or nb0,
            "ratios": ratios}


def report(res) -> None:
    print(f"{res['ranks']} rank(s) x {res['threads_per_rank']} BLAS thread(s), {res['cores']} cores here; "
          f"SciPy {res['peer_threads']} thread(s), dask {res['peer_threads']} worker(s); {res['dtype']}; "
          f"median of {res['rounds']} rounds; load average {' '.join(f'{x:.2f}' for x in res['load_before'])} "
          f"before, {' '.join(f'{x:.2f}' for x in res['load_after'])} after")
    for peer, why in res["missing"].items():
        print(f"peer {peer}: MISSING: {why}")
    for routine, r in res["routines"].items():
        grid = "x".join(map(str, r["grid"]))
        factor = (" (lower factor)" if res["cholesky_lower"] else " (upper factor)") if routine == "cholesky" else ""
        print(f"\n{routine} {r['shape'][0]}x{r['shape'][1]}{factor}, hpcgpu grid {grid}")
        print(f"{'contender':>22} {'median s':>9} {'best s':>8} {'GFLOP/s':>8}")
        for k, v in r["contenders"].items():
            print(f"{k:>22} {v['median']:>9.3f} {v['best']:>8.3f} {v['gflops']:>8.2f}")
        for nb, ph in r.get("phases", {}).items():
            print(f"  hpcgpu nb={nb}, one call's phases, seconds min/mean/max over ranks:")
            for k, (lo, mean, hi) in ph.items():
                print(f"  {k:>40} {lo:>8.3f} {mean:>8.3f} {hi:>8.3f}")
        for k, v in r["ratios"].items():
            print(f"  {k:>24}: {v['ratio']:.3f} (hpcgpu nb={v['hpcgpu_nb']} {v['hpcgpu_seconds']:.3f} s, peer "
                  f"{v['peer_seconds']:.3f} s)")


def main(argv=None) -> int:
    from threadpoolctl import threadpool_limits

    import hpcgpu
    from hpcgpu.linalg import ProcessGrid, parse_grid

    a = parse(argv)
    global LOWER
    LOWER = not a.upper
    rt = hpcgpu.init("cpu")
    P, rank = rt.size, rt.rank
    cores = os.cpu_count() or 1
    peer_threads = min(P * a.threads, cores)
    grid = ProcessGrid(parse_grid(a.grid) if a.grid else None)
    tall = ProcessGrid((P, 1))
    missing = peer_missing(a)
    load0 = os.getloadavg()
    res = {"ranks": P, "threads_per_rank": a.threads, "cores": cores, "peer_threads": peer_threads,
           "dtype": a.dtype, "rounds": a.rounds, "nb": a.nbs, "peers": a.peers, "missing": missing,
           "cholesky_lower": LOWER, "routines": {}}
    with threadpool_limits(limits=a.threads):
        for routine in a.routines:
            r = run_routine(routine, a, P, peer_threads, (grid, tall), missing, rank)
            if rank == 0:
                r["grid"] = [P, 1] if routine == "lstsq" else list(grid.shape)
                res["routines"][routine] = r
    if rank == 0:
        res["load_before"], res["load_after"] = list(load0), list(os.getloadavg())
        res["mpirun_scalapack"] = a.mpirun if "scalapack" in a.peers else None
        report(res)
        if a.json:
            os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
            with open(a.json, "w") as f:
                json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
