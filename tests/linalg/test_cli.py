"""``python -m hpcgpu solve | lstsq | cholesky`` (and matmul's provenance): HDF5 in, HDF5 out, checked against SciPy.

Each table runs in one launch of ranks (``_mpi.cli_rows``): the good runs at 1 and 3 ranks, the refusals at 3.
"""

import json
import os

import h5py
import numpy as np
import pytest
import scipy.linalg as sl
from _data import write_h5

import _mpi
import hpcgpu
from test_names import test_help_says_each_default_once_and_every_option_what_it_does as help_check


def _inputs(d) -> str:
    """The matrices of both tables, in ``d/in.h5``: n = 37, tall 60 x 11, three right-hand sides."""
    rng = np.random.default_rng(7)
    n = 37
    A = rng.standard_normal((n, n))
    S = A @ A.T + n * np.eye(n)
    Z = rng.standard_normal((n, n)) + 1j * rng.standard_normal((n, n))
    nan = A.copy()
    nan[5, 30] = np.nan
    singular = A.copy()
    singular[:, 4] = 0.0  # an exactly zero pivot, whatever the order of elimination
    indefinite = S.copy()
    indefinite[3, 3] = -1.0
    return write_h5(os.path.join(d, "in.h5"), A=A, S=S, B=rng.standard_normal((n, 3)),
                    Z=Z, ZB=rng.standard_normal((n, 2)) + 1j * rng.standard_normal((n, 2)),
                    F=A.astype(np.float32), FB=rng.standard_normal((n, 3)).astype(np.float32),
                    T=rng.standard_normal((60, 11)), TB=rng.standard_normal((60, 2)),
                    TT=rng.standard_normal((11, 37)),
                    B36=np.ones((36, 3)), NAN=nan, SINGULAR=singular, INDEFINITE=indefinite)


GOOD = {  # case: (operation, arguments after the output, the output's dataset)
    "solve": ("solve", ["{in}:A", "{in}:B", "-o", "{out}", "--nb", "4"], "X"),
    "solve pos": ("solve", ["{in}:S", "{in}:B", "-o", "{out}:XP", "--assume", "pos", "--nb", "5"], "XP"),
    "solve complex128": ("solve", ["{in}:Z", "{in}:ZB", "-o", "{out}", "--nb", "8"], "X"),
    "solve float32": ("solve", ["{in}:F", "{in}:FB", "-o", "{out}", "--nb", "3"], "X"),
    "lstsq": ("lstsq", ["{in}:T", "{in}:TB", "-o", "{out}"], "X"),
    "cholesky": ("cholesky", ["{in}:S", "-o", "{out}", "--nb", "4"], "L"),
    "cholesky upper": ("cholesky", ["{in}:S", "-o", "{out}", "--upper", "--nb", "6"], "U"),
    "matmul": ("matmul", ["{in}:A", "{in}:B", "-o", "{out}", "--transa", "T", "--alpha", "2", "--beta", "-1",
                          "--c-in", "{in}:B"], "C"),
}


GOOD_GROUP = pytest.mark.xdist_group("linalg-cli-good")
"""The tests of :data:`GOOD` share their two launches on one pytest-xdist worker."""


@pytest.fixture(scope="module", params=[1, 3])
def good_runs(request, tmp_path_factory):
    """Every row of :data:`GOOD` whose routine has landed, in one launch: ``(nprocs, {case: (result, out)}, in)``."""
    d = tmp_path_factory.mktemp("good")
    src = _inputs(d)
    rows, outs = {}, {}
    for case, (op, args, _) in GOOD.items():
        outs[case] = str(d / (case.replace(" ", "-") + ".h5"))
        rows[case] = ["-m", "hpcgpu", op, *(a.replace("{in}", src).replace("{out}", outs[case]) for a in args)]
    runs = _mpi.cli_rows(request.param, rows, timeout=240) if rows else {}
    return request.param, {case: (runs[case], outs[case]) for case in rows}, src


def _read(path, name):
    with h5py.File(path, "r") as f:
        return f[name][()], dict(f[name].attrs)


def _good(good_runs, case):
    nprocs, runs, src = good_runs
    p, out = runs[case]
    assert p.returncode == 0, (p.stdout, p.stderr, p.others)
    assert p.stderr == "" and p.others == "", (p.stderr, p.others)
    x, attrs = _read(out, GOOD[case][2])
    with h5py.File(src, "r") as f:
        mats = {k: f[k][()] for k in f}
    assert attrs["world_size"] == nprocs and attrs["hpcgpu_version"] == hpcgpu.__version__
    assert attrs["operation"] == GOOD[case][0] and attrs["A_file"] == os.path.abspath(src)
    return x, attrs, mats, p.stdout.strip().splitlines()[-1]


EPS = {np.dtype("float32"): np.finfo(np.float32).eps, np.dtype("float64"): np.finfo(np.float64).eps,
       np.dtype("complex128"): np.finfo(np.float64).eps}


@pytest.mark.mpi
@GOOD_GROUP
@pytest.mark.parametrize("case, a, b", [("solve", "A", "B"), ("solve pos", "S", "B"),
                                        ("solve complex128", "Z", "ZB"), ("solve float32", "F", "FB")])
def test_solve_writes_x_with_its_backward_error_and_provenance(good_runs, case, a, b):
    x, attrs, m, line = _good(good_runs, case)
    A, B = m[a], m[b]
    assert x.dtype == A.dtype and x.shape == B.shape
    np.testing.assert_allclose(x, sl.solve(A.astype(np.float64 if A.dtype == np.float32 else A.dtype), B),
                               rtol=1e-3 if A.dtype == np.float32 else 1e-9, atol=1e-4 if A.dtype == np.float32 else 0)
    n, eps = A.shape[0], EPS[A.dtype]
    # HPL's test: the scaled residual, recomputed here from the file, is small, and the attribute is that measure
    inf = lambda v: np.abs(v.astype(np.complex128)).sum(axis=1).max()  # noqa: E731
    x64, A64, B64 = (v.astype(np.complex128) for v in (x, A, B))
    mine = inf(A64 @ x64 - B64) / (inf(A64) * inf(x64) + inf(B64))
    assert 0 < attrs["backward_error"] < 16 * n * eps and mine < 16 * n * eps, (attrs["backward_error"], mine)
    assert attrs["scaled_residual"] == pytest.approx(attrs["backward_error"] / (eps * n), rel=1e-12)
    assert attrs["A_dataset"] == a and attrs["B_dataset"] == b and attrs["B"].endswith(f":{b}")
    assert attrs["assume_a"] == ("pos" if case == "solve pos" else "gen")
    assert attrs["nb"] == int(GOOD[case][1][GOOD[case][1].index("--nb") + 1])
    assert list(attrs["grid"]) == {1: [1, 1], 3: [3, 1]}[good_runs[0]]
    if attrs["assume_a"] == "gen":  # the grid LU factored on: flat over the same ranks
        assert list(attrs["factor_grid"]) == [1, good_runs[0]]
    else:
        assert "factor_grid" not in attrs
    assert line.startswith(f"X = solve(A, B, assume_a='{attrs['assume_a']}'): A {n} x {n}, B {n} x {B.shape[1]} "
                           f"{A.dtype} on grid ") and f"backward error {attrs['backward_error']:.3g}, scaled " \
        f"residual {attrs['scaled_residual']:.3g} (HPL's, < 16 passes); wrote " in line, line


@pytest.mark.mpi
@GOOD_GROUP
def test_lstsq_writes_the_least_squares_solution_and_its_backward_error(good_runs):
    x, attrs, m, line = _good(good_runs, "lstsq")
    A, B = m["T"], m["TB"]
    np.testing.assert_allclose(x, sl.lstsq(A, B)[0], rtol=1e-9, atol=1e-12)
    mine = np.linalg.norm(A.T @ (B - A @ x)) / (np.linalg.norm(A) * np.linalg.norm(B))
    assert 0 < attrs["backward_error"] < 16 * A.shape[0] * EPS[A.dtype] and mine < 16 * A.shape[0] * EPS[A.dtype]
    assert attrs["matrix_rank"] == 11 and attrs["A_dataset"] == "T" and attrs["B_dataset"] == "TB"
    assert attrs["cond"] == "" and "nb" not in attrs  # SciPy's default; TSQR has no block size
    assert f"rank 11; backward error {attrs['backward_error']:.3g}; wrote" in line, line


@pytest.mark.mpi
@GOOD_GROUP
@pytest.mark.parametrize("case", ["cholesky", "cholesky upper"])
def test_cholesky_writes_the_factor_and_its_backward_error(good_runs, case):
    c, attrs, m, line = _good(good_runs, case)
    S = m["S"]
    lower = case == "cholesky"
    np.testing.assert_allclose(c, sl.cholesky(S, lower=lower), rtol=1e-10, atol=1e-12)
    n, eps = S.shape[0], EPS[S.dtype]
    assert 0 < attrs["backward_error"] < 16 * n * eps
    assert attrs["lower"] == lower and attrs["A_dataset"] == "S" and "B" not in attrs
    head = "L = cholesky(A), A = L L^H" if lower else "U = cholesky(A), A = U^H U"
    assert line.startswith(f"{head}: A {n} x {n} float64 on grid ") and line.endswith(
        f"; backward error {attrs['backward_error']:.3g}; wrote {good_runs[1][case][1]}:{'L' if lower else 'U'}")


@pytest.mark.mpi
@GOOD_GROUP
def test_matmul_records_its_operation_and_options(good_runs):
    c, attrs, m, _ = _good(good_runs, "matmul")
    np.testing.assert_allclose(c, 2 * m["A"].T @ m["B"] - m["B"], rtol=1e-12, atol=1e-12)
    assert (attrs["transa"], attrs["transb"], attrs["alpha"], attrs["beta"]) == ("T", "N", 2, -1)
    assert attrs["c_in"].endswith(":B") and attrs["c_in_dataset"] == "B" and attrs["algorithm"] == "summa"


# -- refusals: one line, exit 2, nothing written ------------------------------------------------------------------

BAD = {  # case: (operation, arguments, the one line on stderr after "hpcgpu: error: ")
    "output is an input": ("solve", ["{in}:A", "{in}:B", "-o", "{in}:B"],
                           "-o {in}:B: is also an input (B {in}:B); writing it would replace what is read: "
                           "choose another output"),
    "missing dataset": ("cholesky", ["{in}:NOPE", "-o", "{out}"], "{in}: no dataset NOPE"),
    "no right-hand side": ("solve", ["{in}:A", "-o", "{out}"], "give A, B and -o X, or --bench N"),
    "nb": ("cholesky", ["{in}:S", "-o", "{out}", "--nb", "0"], "--nb must be >= 1, got 0"),
    "wide": ("lstsq", ["{in}:TT", "{in}:TT", "-o", "{out}"],
             "lstsq: A is 11 x 37; served: tall or square A (m >= n >= 1) whose n x n R fits one rank (TSQR)"),
    "nonconforming": ("solve", ["{in}:A", "{in}:B36", "-o", "{out}"],
                      "solve: shapes do not conform: A is 37 x 37, B has 36 rows (A's 37 needed)"),
    "NaN in A": ("solve", ["{in}:NAN", "{in}:B", "-o", "{out}"],
                 "solve: A holds NaN or inf (at row 5, column 30): the solvers need finite values"),
    "singular": ("solve", ["{in}:SINGULAR", "{in}:B", "-o", "{out}"],
                 "solve: A is singular: U's diagonal is exactly zero at column 4 (LAPACK info 5)"),
    "not positive definite": ("cholesky", ["{in}:INDEFINITE", "-o", "{out}"],
                              "cholesky: A is not positive definite: the leading minor of order 4 is not "
                              "(column 3 of 0..36)"),
}
"""The last five are the routines' own lines (their entry checks, ``hpcgpu.linalg._checks``, and factorizations); the
command line's own come before any routine runs."""


@pytest.fixture(scope="module")
def bad_runs(tmp_path_factory):
    """Every row of :data:`BAD` whose routine has landed, at 3 ranks in one launch: ``{case: (result, out)}``."""
    d = tmp_path_factory.mktemp("bad")
    src = _inputs(d)
    rows, outs = {}, {}
    for case, (op, args, _) in BAD.items():
        outs[case] = str(d / (case.replace(" ", "-") + ".h5"))
        rows[case] = ["-m", "hpcgpu", op, *(a.replace("{in}", src).replace("{out}", outs[case]) for a in args)]
    runs = _mpi.cli_rows(3, rows, timeout=240) if rows else {}
    return {case: (runs[case], outs[case]) for case in rows}, src


@pytest.mark.mpi
@pytest.mark.xdist_group("linalg-cli-refusals")  # one worker, one launch for the table
@pytest.mark.parametrize("case", list(BAD))
def test_refusal_is_one_line_exit_2_and_nothing_written(bad_runs, case):
    runs, src = bad_runs
    p, out = runs[case]
    want = "hpcgpu: error: " + BAD[case][2].replace("{in}", src)
    assert p.returncode == 2 and not p.others, (p.stdout, p.stderr, p.others)
    lines = p.stderr.splitlines()
    assert lines == [want], p.stderr
    assert not os.path.exists(out)
    with h5py.File(src, "r") as f:
        assert "X" not in f and len(f) == 14  # the input file as it was


# -- --bench ------------------------------------------------------------------------------------------------------

def _reference_missing(op: str):
    """Skipped in the stand-in's pass where the stand-in lacks the CuPy call ``--bench`` times on a device
    (``cupy.linalg.solve``, ``lstsq``, ``cholesky``: CuPy has them)."""
    import hpcgpu._device as d

    missing = _mpi.standin() and not hasattr(getattr(d.cupy_or_none(), "linalg", None), op)
    return pytest.mark.skipif(missing, reason=f"the CuPy stand-in has no cupy.linalg.{op}, --bench's reference")


@pytest.mark.mpi
@pytest.mark.parametrize("op, extra", [
    pytest.param("solve", ["--assume", "pos"], marks=_reference_missing("solve")),
    pytest.param("lstsq", [], marks=_reference_missing("lstsq")),
    pytest.param("cholesky", ["--dtype", "complex128"], marks=_reference_missing("cholesky"))])
def test_bench_times_the_routine_against_one_process_lapack(op, extra):
    nb = [] if op == "lstsq" else ["--nb", "5"]
    p = _mpi.run(2, ["-m", "hpcgpu", op, "--bench", "24", *nb, "--repeat", "1", "--json", *extra], timeout=180)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    res = json.loads(p.stdout.strip().splitlines()[-1])
    assert (res["operation"], res["N"], res["ranks"], res["nb"]) == (op, 24, 2, None if op == "lstsq" else 5), res
    assert (res["m"], res["n"], res["nrhs"]) == {"solve": (24, 24, 1), "lstsq": (48, 24, 1),
                                                 "cholesky": (24, 24, 0)}[op]
    assert res["seconds"] > 0 and res["local_seconds"] > 0 and res["ratio"] == pytest.approx(
        res["local_seconds"] / res["seconds"]) and res["gflops"] > 0
    assert 0 < res["backward_error"] < 16 * 48 * np.finfo(np.float64).eps, res


@pytest.mark.mpi
def test_bench_refuses_a_size_beyond_memory_before_making_a_matrix():
    p = _mpi.run(2, ["-m", "hpcgpu", "cholesky", "--bench", "10000000"], timeout=120)
    lines = p.stderr.splitlines()
    assert p.returncode == 2 and len(lines) == 1 and lines[0].startswith("hpcgpu: error: --bench 10000000: "), \
        p.stderr


@pytest.mark.parametrize("op", ["solve", "lstsq", "cholesky"])
def test_help_says_every_option_and_each_default_once(op):
    help_check(["hpcgpu", op])


# -- the stop policy ------------------------------------------------------------------------------------------------

@pytest.mark.mpi
@pytest.mark.parametrize("op", ["solve", "cholesky"])
def test_a_stop_before_the_solve_writes_nothing_and_exits_3(op, tmp_path):
    """One rank gets SIGTERM while it starts (held before the MPI library loads, as test_signals holds matmul's):
    the command stops at its safe point before the routine, says so in one line, exits 3, writes nothing."""
    import signal

    from test_signals import HOLD_AT_MPI, _end, _launch, _ours, _ranks, _taken, _wait_until

    src = _inputs(tmp_path)
    (tmp_path / "sitecustomize.py").write_text(HOLD_AT_MPI)
    marker, go, out = tmp_path / "at-mpi-", tmp_path / "go", tmp_path / "x.h5"
    env = {"PYTHONPATH": f"{tmp_path}{os.pathsep}{_mpi.ROOT}", "HOLD_MARKER": str(marker), "HOLD_GO": str(go)}
    args = [f"{src}:S", *([f"{src}:B"] if op == "solve" else []), "-o", out]
    job = _launch(2, ["-m", "hpcgpu", op, *args], tmp_path, env)
    try:
        _wait_until(job, lambda: all(os.path.exists(f"{marker}{r}") for r in range(2)))
        os.kill(_ranks(job, 2)[1], signal.SIGTERM)
        _taken([_ranks(job, 2)[1]], signal.SIGTERM)
    finally:
        go.touch()
        stdout, stderr = _end(job)
    assert job.returncode == 3 and _ours(stderr) == [], (stdout, stderr)
    assert stdout.splitlines()[-1] == f"hpcgpu {op}: stopped (SIGTERM) before the {op}; nothing written to {out}"
    assert not out.exists()
