"""``mpiexec -n P python -m hpcgpu solve|lstsq|cholesky ...``: the distributed solvers on HDF5 matrices.

``solve A B -o X`` solves ``A X = B`` (LU with partial pivoting, or Cholesky with ``--assume pos``), ``lstsq A B
-o X`` minimizes ``||A X - B||_2`` (QR), ``cholesky A -o L`` factors ``A = L L^H`` (``--upper``: ``U^H U``).
A, B and the output are ``FILE[:DATASET]``, read and written as ``matmul`` reads and writes them: each rank reads
only its blocks, the output is claimed before any work and written atomically, bad input is one line and exit 2,
and nothing is written on failure.

Every output dataset records how it was made (the operation, its options, its inputs, the grid and ``nb``,
hpcgpu's version) and the backward error of the result, computed after the solve; rank 0's summary line prints
it too. ``--bench N`` solves random matrices of size N instead and compares the time with one process's LAPACK
call of the same size (SciPy; CuPy on a GPU).
"""

from __future__ import annotations

import argparse
import json

import numpy as np
from mpi4py import MPI

from .._cli import add_collectives
from ..errors import agree, agreed
from ..io import split_spec
from ._checks import SOLVER_DTYPES
from ._matmul_cli import (_grid, _idle_wait, _sync, bench_memory_error, input_datasets, out_name_error, provenance,
                          stopped_before, time_alone)

OPERATIONS = {
    "solve": ("X", "solve A X = B (LU with partial pivoting; Cholesky with --assume pos) of HDF5 matrices, "
                   "or --bench N"),
    "lstsq": ("X", "least squares: X minimizing ||A X - B||_2 for a tall A (QR) of HDF5 matrices, or --bench N"),
    "cholesky": ("L", "Cholesky factor of a Hermitian positive definite HDF5 matrix, A = L L^H, or --bench N"),
}
"""Subcommand -> (the output's dataset by default, its help line)."""


def add_parsers(subparsers) -> None:
    """Add the ``solve``, ``lstsq`` and ``cholesky`` subcommands to ``python -m hpcgpu``'s subparsers."""
    for op, (name, text) in OPERATIONS.items():
        p = subparsers.add_parser(op, help=text, description=text)
        p.add_argument("A", nargs="?", help="the matrix, FILE[:DATASET]" + (" (n x n)" if op != "lstsq" else
                                                                              " (m x n, m >= n)"))
        if op != "cholesky":
            p.add_argument("B", nargs="?", help="the right-hand sides, FILE[:DATASET] (" +
                           ("n" if op == "solve" else "m") + " x k)")
        p.add_argument("-o", "--out", help=f"output FILE[:DATASET] (dataset {name} by default): adds or replaces "
                                           "that dataset, atomically, and keeps the file's other objects")
        p.add_argument("--overwrite", action="store_true",
                       help="replace an existing dataset of -o that hpcgpu did not write (refused otherwise)")
        if op == "solve":
            p.add_argument("--assume", choices=("gen", "pos"), default="gen",
                           help="gen: LU with partial pivoting (PDGESV); pos: A is Hermitian positive definite, "
                                "Cholesky (PDPOSV)")
        elif op == "lstsq":
            p.add_argument("--cond", type=float, default=None,
                           help="singular values below cond times the largest count as zero (SciPy's cond)")
        else:
            side = p.add_mutually_exclusive_group()
            side.add_argument("--lower", dest="lower", action="store_true", default=True,
                              help="write L, lower triangular, A = L L^H")
            side.add_argument("--upper", dest="lower", action="store_false",
                              help="write U, upper triangular, A = U^H U (the dataset is then U by default)")
        p.add_argument("--grid", help="process grid ROWSxCOLS, e.g. 2x3 (default: MPI.Compute_dims)")
        if op != "lstsq":  # TSQR works on row blocks, with no block size to choose
            p.add_argument("--nb", type=int, default=None,
                           help="block size of the block-cyclic layout the routine works on (default: about "
                                "10 panels a grid row or column, 64-256 on a CPU, 256-512 on a GPU)")
        p.add_argument("--dtype", choices=SOLVER_DTYPES,
                       help="compute type (default: the inputs'; float64 for integer data, float32 for half)")
        p.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto",
                       help="gpu: CuPy, one GPU per rank; cpu: NumPy; auto: gpu when every rank has one")
        add_collectives(p)
        p.add_argument("--bench", type=int, metavar="N",
                       help="solve random matrices of size N (lstsq: 2N x N) made on the ranks, and time it")
        p.add_argument("--repeat", type=int, default=3, help="--bench: timed repetitions (best is reported)")
        p.add_argument("--json", action="store_true", help="--bench: print one JSON line instead of text")
        p.set_defaults(main=main, op=op)


def main(a: argparse.Namespace) -> int:
    """Run ``python -m hpcgpu solve``, ``lstsq`` or ``cholesky`` (``a.op``) with the parsed options ``a``.

    Collective over ``MPI.COMM_WORLD``.

    Returns
    -------
    int
        The exit status: 0, or 3 when a stop signal (SIGINT, SIGTERM, SIGUSR1) came before the solve began
        (nothing is written). One that comes during the solve lets it finish and write its output.

    Raises
    ------
    AgreedError
        Bad input (an input that is missing, nonconforming, not finite, singular or not positive definite; an
        output that would lose a file), the same on every rank: the guard exits 2 with one line.
    """
    from .._stop import StopRequest

    stop = StopRequest(prog=f"hpcgpu {a.op}").install()  # before any communication
    try:
        return _main(a, stop)
    finally:
        stop.uninstall()


def _options_error(a: argparse.Namespace) -> ValueError | None:
    """The first bad option of ``a`` (the same on every rank), or None."""
    given = a.A and (a.op == "cholesky" or a.B) and a.out
    if a.bench is None and not given:
        need = "A and -o L" if a.op == "cholesky" else "A, B and -o X"
        return ValueError(f"give {need}, or --bench N")
    if a.bench is not None and a.bench < 1:
        return ValueError(f"--bench must be >= 1, got {a.bench}")
    if getattr(a, "nb", None) is not None and a.nb < 1:
        return ValueError(f"--nb must be >= 1, got {a.nb}")
    return out_name_error(a.out, _dataset(a))


def _dataset(a) -> str:
    """The output's dataset when ``-o`` names none."""
    return "U" if a.op == "cholesky" and not a.lower else OPERATIONS[a.op][0]


def _main(a: argparse.Namespace, stop) -> int:
    """:func:`main` under its stop request."""
    from .._outputs import Output, claim
    from .._stop import EXIT_STOPPED
    from ..runtime import init

    err = _options_error(a)
    if err:
        raise agreed(err)  # the same arguments on every rank
    rt = init(a.device, collectives=a.collectives)
    grid = _grid(a.grid, rt.comm)
    prog = f"hpcgpu {a.op}"
    if rt.rank == 0 and not a.json:
        print(f"{prog}: {rt.size} rank(s) on {rt.summary()}, grid {grid.shape[0]}x{grid.shape[1]}", flush=True)
    if a.bench is not None:
        return _bench(a, rt, grid)

    out_path, out_name = split_spec(a.out, _dataset(a))
    specs = [("A", a.A)] + ([("B", a.B)] if a.op != "cholesky" else [])
    claim([Output(out_path, "-o", dataset=out_name)], input_datasets(specs, rt.rank), comm=rt.comm,
          overwrite=a.overwrite, prog=prog)
    A, B = _inputs(a, grid)
    if stopped_before(stop, rt.comm, prog, f"the {a.op}", a.out):
        return EXIT_STOPPED
    rt.comm.Barrier()
    t0 = MPI.Wtime()
    X, more = _run(a, A, B)
    _sync(rt)
    seconds = rt.comm.allreduce(MPI.Wtime() - t0, op=MPI.MAX)
    errors = backward_errors(a.op, A, B, X, lower=a.lower if a.op == "cholesky" else None)
    attrs = provenance(a.op, specs, **_options(a, rt, A.gshape[0], grid), **more, seconds=seconds, device=rt.device,
                       **errors)
    X.to_hdf5(out_path, out_name, attrs=attrs, overwrite=a.overwrite, what="-o")
    if rt.rank == 0:
        print(f"{_formula(a)}: {_shapes(A, B)} {A.dtype} on grid {grid.shape[0]}x{grid.shape[1]}{_nb(attrs)}, "
              f"{seconds:.3f} s{_extra(more)}; {_errors_text(errors)}; wrote {out_path}:{out_name}", flush=True)
    return 0


def _options(a, rt, n: int, grid) -> dict:
    """The options of ``a`` that shaped the result, for the output's attributes (lstsq's TSQR has no ``nb``)."""
    from .cyclic import default_nb

    if a.op == "lstsq":
        return {"cond": a.cond}
    opts = {"nb": a.nb or default_nb(rt.xp, n, grid)}
    if a.op == "solve":
        opts["assume_a"] = a.assume
        if a.assume == "gen":  # LU factors on the flat grid over the same ranks (ProcessGrid.flat)
            from .grid import flat_shape

            opts["factor_grid"] = list(flat_shape(grid.size))
    else:
        opts["lower"] = a.lower
    return opts


def _nb(attrs: dict) -> str:
    return f", nb {attrs['nb']}" if attrs.get("nb") else ""


def _formula(a) -> str:
    if a.op == "cholesky":
        return "L = cholesky(A), A = L L^H" if a.lower else "U = cholesky(A), A = U^H U"
    return f"X = solve(A, B, assume_a={a.assume!r})" if a.op == "solve" else "X = lstsq(A, B)"


def _shapes(A, B) -> str:
    a = f"A {A.gshape[0]} x {A.gshape[1]}"
    return a if B is None else f"{a}, B {B.gshape[0]} x {B.gshape[1]}"


def _extra(more: dict) -> str:
    return f", rank {more['matrix_rank']}" if "matrix_rank" in more else ""


def _errors_text(errors: dict) -> str:
    text = f"backward error {errors['backward_error']:.3g}"
    if "scaled_residual" in errors:
        text += f", scaled residual {errors['scaled_residual']:.3g} (HPL's, < 16 passes)"
    return text


def _inputs(a, grid):
    """A (and B) from their files, in one dtype the solvers take. Collective."""
    from .distmatrix import DistMatrix

    specs = [split_spec(a.A, None)] + ([split_spec(a.B, None)] if a.op != "cholesky" else [])
    mats = [DistMatrix.from_hdf5(p, n, grid, dtype=a.dtype) for p, n in specs]
    wide = np.dtype(mats[0].dtype) if len(mats) == 1 else np.promote_types(mats[0].dtype, mats[1].dtype)
    if wide.name not in SOLVER_DTYPES:  # float16, bfloat16: the solvers' narrowest type
        wide = np.dtype("complex64") if wide.kind == "c" else np.dtype("float32")
    mats = [m if m.dtype == wide else DistMatrix.from_hdf5(p, n, grid, dtype=wide) for m, (p, n) in
            zip(mats, specs, strict=True)]
    return mats[0], (mats[1] if len(mats) > 1 else None)


def _run(a, A, B):
    """The routine of ``a.op`` on A (and B): ``(result, {more attributes})``. Collective."""
    from . import cholesky, lstsq, solve  # the functions (no submodule has these names)

    if a.op == "solve":
        return solve(A, B, assume_a=a.assume, nb=a.nb), {}
    if a.op == "lstsq":
        X, _, rank, _ = lstsq(A, B, cond=a.cond)
        return X, {"matrix_rank": int(rank)}
    return cholesky(A, lower=a.lower, nb=a.nb), {}


# -- backward errors ---------------------------------------------------------------------------------------------

def _copy(m):
    """A DistMatrix of its own with ``m``'s values (the C that :func:`matmul` overwrites)."""
    from .distmatrix import DistMatrix

    return DistMatrix(m.local.copy(), m.gshape, m.grid)


def norm_inf(m) -> float:
    """``||m||_inf``, the largest row sum of absolute values. Collective over ``m.grid.cart``."""
    from .. import _device

    sums = np.ascontiguousarray(_device.asnumpy(abs(m.local).sum(axis=1)), dtype=np.float64)
    m.grid.row_comm.Allreduce(MPI.IN_PLACE, sums, op=MPI.SUM)  # the ranks of a grid row hold one set of rows
    return m.grid.cart.allreduce(float(sums.max(initial=0.0)), op=MPI.MAX)


def norm_fro(m) -> float:
    """``||m||_F``. Collective over ``m.grid.cart``."""
    v = abs(m.local).astype("float64", copy=False)
    local = float((v * v).sum())
    return float(np.sqrt(m.grid.cart.allreduce(local, op=MPI.SUM)))


def _ratio(num: float, den: float) -> float:
    return num / den if den else (0.0 if num == 0 else float("inf"))


def backward_errors(op: str, A, B, X, lower: bool | None = None) -> dict:
    """The backward error of a result, computed from the inputs after the solve. Collective over the grid.

    solve: ``backward_error = ||A X - B||_inf / (||A||_inf ||X||_inf + ||B||_inf)`` and HPL's
    ``scaled_residual``, that divided by ``eps n`` (a correct solve is below 16). lstsq: ``||A^H R||_F /
    (||A||_F ||B||_F)`` with ``R = B - A X`` (zero at the least-squares solution, whatever the residual).
    cholesky: ``||A - L L^H||_F / ||A||_F`` (``U^H U`` for an upper factor). Each costs one :func:`matmul`.

    Returns
    -------
    dict
        ``{"backward_error": float}``, and ``"scaled_residual"`` for solve; the same on every rank.
    """
    from .summa import matmul

    if op == "cholesky":
        E = _copy(A)
        matmul(X, X, E, alpha=1, beta=-1, transa="N" if lower else "C", transb="C" if lower else "N")
        return {"backward_error": _ratio(norm_fro(E), norm_fro(A))}
    R = _copy(B)
    matmul(A, X, R, alpha=-1, beta=1)  # R = B - A X
    if op == "lstsq":
        G = matmul(A, R, transa="C")
        return {"backward_error": _ratio(norm_fro(G), norm_fro(A) * norm_fro(B))}
    be = _ratio(norm_inf(R), norm_inf(A) * norm_inf(X) + norm_inf(B))
    n = A.gshape[0]
    return {"backward_error": be, "scaled_residual": _ratio(be, float(np.finfo(A.dtype).eps) * max(n, 1))}


# -- --bench N ---------------------------------------------------------------------------------------------------

def _flops(op: str, m: int, n: int, k: int, assume: str, dtype) -> float:
    """The floating-point operations of the routine (LAPACK's counts; a complex one is four real)."""
    if op == "cholesky":
        f = n**3 / 3
    elif op == "solve":
        f = (2 * n**3 / 3 if assume == "gen" else n**3 / 3) + 2 * n * n * k
    else:  # Householder QR of m x n, Q^H B and the triangular solve
        f = 2 * m * n * n - 2 * n**3 / 3 + 4 * m * n * k
    return (4.0 if np.dtype(dtype).kind == "c" else 1.0) * f


def _bench_shapes(a) -> tuple[int, int, int]:
    """``(m, n, k)``: A is m x n, B m x k."""
    N = a.bench
    return (2 * N if a.op == "lstsq" else N), N, (0 if a.op == "cholesky" else 1)


def _bench_matrix(a, m: int, n: int, grid, dtype, xp=None):
    """The random A of ``--bench``. Collective over ``grid.cart``.

    General (uniform in [-1, 1)), or for cholesky and ``--assume pos`` Hermitian positive definite,
    ``(R + R^H) / 2 + n I`` (diagonally dominant).
    """
    from .distmatrix import DistMatrix

    R = DistMatrix.random((m, n), grid, dtype, seed=1, xp=xp)
    if not (a.op == "cholesky" or (a.op == "solve" and a.assume == "pos")):
        return R
    local = (R.local + R.H.local) / 2
    xp = R.xp
    diag = xp.arange(max(R.rows.start, R.cols.start), min(R.rows.stop, R.cols.stop))  # global i of local (i, i)
    local[diag - R.rows.start, diag - R.cols.start] += n
    return DistMatrix(local, R.gshape, grid)


def _bench(a, rt, grid) -> int:
    from .distmatrix import DistMatrix

    m, n, k = _bench_shapes(a)
    dtype = np.dtype(a.dtype or "float64")
    pr, pc = grid.shape
    item = dtype.itemsize
    # A, its working copy and factor, the residual's copies, B and X; rank 0 also the reference's A, factor and B
    need = 4 * -(-m // pr) * -(-n // pc) * item + 4 * -(-m // pr) * max(k, 1) * item
    if rt.rank == 0:
        need += 3 * m * n * item
    fix = "give a smaller N (rank 0 also holds the one-process reference's matrices)"
    agree(bench_memory_error(rt, need, f"--bench {a.bench}", fix), comm=rt.comm)
    A = _bench_matrix(a, m, n, grid, dtype)
    B = DistMatrix.random((m, k), grid, dtype, seed=2) if k else None
    X, more = _run(a, A, B)  # warm-up: first touches
    best = float("inf")
    for _ in range(max(1, a.repeat)):
        rt.comm.Barrier()
        t0 = MPI.Wtime()
        X, more = _run(a, A, B)
        _sync(rt)
        best = min(best, rt.comm.allreduce(MPI.Wtime() - t0, op=MPI.MAX))
    errors = backward_errors(a.op, A, B, X, lower=a.lower if a.op == "cholesky" else None)
    # The reference: one process (rank 0) calls LAPACK on the same global matrices with all the threads the
    # ranks had together; the others wait without spinning.
    rt.comm.Barrier()
    ref, threads, routine = (*_reference(a, rt, m, n, k, dtype), _reference_name(a, rt)) if rt.rank == 0 else \
        (None, None, None)
    _idle_wait(rt.comm)
    if rt.rank != 0:
        return 0
    flops = _flops(a.op, m, n, k, a.assume if a.op == "solve" else None, dtype)
    res = dict(operation=a.op, N=a.bench, m=m, n=n, nrhs=k, dtype=str(dtype), ranks=rt.size,
               grid=list(grid.shape), nb=_options(a, rt, m, grid).get("nb"), device=rt.device,
               device_summary=rt.summary(),
               seconds=best, gflops=flops / best / 1e9, local=routine, local_seconds=ref,
               local_gflops=flops / ref / 1e9, local_threads=threads, ratio=ref / best, **errors)
    if a.json:
        print(json.dumps(res), flush=True)
        return 0
    print(f"{a.op} {m} x {n}{f', {k} right-hand side' if k else ''} {dtype} on {rt.size} rank(s), grid "
          f"{pr}x{pc}{_nb(res)}: {best:.3f} s, {res['gflops']:.3g} GFLOP/s; {_errors_text(errors)}\n"
          f"{routine}, 1 process, {threads} thread(s): {ref:.3g} s, {res['local_gflops']:.3g} GFLOP/s\n"
          f"ratio (local time / distributed time): {res['ratio']:.3f}", flush=True)
    return 0


def _reference_name(a, rt) -> str:
    if rt.device != "cpu":
        return f"cupy.linalg.{a.op}"
    if a.op == "solve":
        return f"scipy.linalg.solve(assume_a={a.assume!r})"
    return "scipy.linalg.cholesky" if a.op == "cholesky" else "LAPACK gels (scipy.linalg.lapack)"


def _reference(a, rt, m, n, k, dtype):
    """``(best seconds, threads)`` of the one-process LAPACK call on rank 0's copy of the global matrices."""
    from .distmatrix import DistMatrix
    from .grid import ProcessGrid

    g1 = ProcessGrid((1, 1), comm=MPI.COMM_SELF)
    xp = rt.xp
    A = _bench_matrix(a, m, n, g1, dtype, xp=xp).local
    B = DistMatrix.random((m, k), g1, dtype, seed=2, xp=xp).local if k else None
    try:
        return time_alone(rt, _reference_call(a, rt, A, B), a.repeat)
    finally:
        g1.free()


def _reference_call(a, rt, A, B):
    """The local call that does what ``a.op`` does, on whole matrices: a function of no arguments."""
    if rt.device != "cpu":
        xp = rt.xp
        return {"cholesky": lambda: xp.linalg.cholesky(A), "solve": lambda: xp.linalg.solve(A, B),
                "lstsq": lambda: xp.linalg.lstsq(A, B, rcond=None)}[a.op]
    import scipy.linalg as sl

    if a.op == "cholesky":
        return lambda: sl.cholesky(A, lower=True, check_finite=False)
    if a.op == "solve":
        return lambda: sl.solve(A, B, assume_a=a.assume, check_finite=False)
    gels = sl.lapack.get_lapack_funcs("gels", (A, B))
    return lambda: gels(A, B)
