import itertools
import os
import types

import h5py
import numpy as np
import pytest
from _data import write_h5
from mpi4py import MPI

import _mpi
import hpcgpu
from hpcgpu import DistMatrix, ProcessGrid, _gemm
from hpcgpu._partition import block_starts
from hpcgpu.grid import parse_grid
from hpcgpu.summa import panel_width, plan_panels


def _fake_grid(pr, pc):
    return types.SimpleNamespace(col_starts=lambda k: block_starts(k, pc), row_starts=lambda k: block_starts(k, pr))


@pytest.mark.parametrize("k, pr, pc, w", [(10, 2, 3, 4), (97, 3, 2, 5), (5, 4, 4, 100), (1, 2, 2, 1), (7, 1, 1, 3)])
def test_panels_cover_k_and_never_straddle_an_owner(k, pr, pc, w):
    panels = plan_panels(k, _fake_grid(pr, pc), w)
    assert panels[0][0] == 0 and panels[-1][1] == k
    assert all(p[1] == q[0] for p, q in itertools.pairwise(panels))
    a, b = block_starts(k, pc), block_starts(k, pr)
    for k0, k1, ja, ib in panels:
        assert 1 <= k1 - k0 <= w
        assert a[ja] <= k0 and k1 <= a[ja + 1]  # inside A's grid column ja
        assert b[ib] <= k0 and k1 <= b[ib + 1]  # inside B's grid row ib


def test_panel_width_fits_memory():
    w = panel_width(4096, 4096, 4096, (2, 1), 8, 256 * 2**20)
    assert 2 * (2048 + 4096) * 8 * w <= 256 * 2**20 < 2 * (2048 + 4096) * 8 * (w + 1)
    assert panel_width(10, 10, 3, (1, 1), 8) == 3  # never wider than k
    assert panel_width(10**6, 10**6, 10**6, (1, 1), 16, 1) == 1  # at least 1


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "complex128"])
@pytest.mark.parametrize("scipy", [True, False])
def test_local_gemm_accumulates_in_place(dtype, scipy, monkeypatch):
    if not scipy:
        monkeypatch.setattr(_gemm, "_scipy_gemm", lambda dt: None)
    rng = np.random.default_rng(0)
    a = rng.random((7, 5)).astype(dtype)
    b = rng.random((5, 6)).astype(dtype)
    c = rng.random((7, 6)).astype(dtype)
    c0 = c.copy()
    _gemm.gemm(a, b, c, beta=1.0)
    np.testing.assert_allclose(c, c0 + a @ b, rtol=1e-5)
    _gemm.gemm(a[:, ::2], b[::2], c, beta=0.0)  # strided views
    np.testing.assert_allclose(c, a[:, ::2] @ b[::2], rtol=1e-5)


def test_parse_grid():
    assert parse_grid("2x3") == (2, 3) and parse_grid(" 4 X 1 ") == (4, 1)
    for bad in ("2", "0x4", "axb", "2x3x4"):
        with pytest.raises(ValueError, match="--grid"):
            parse_grid(bad)


def test_one_rank_grid_and_errors():
    hpcgpu.init("cpu")
    g = ProcessGrid((1, 1), comm=MPI.COMM_SELF)
    with pytest.raises(ValueError, match="2x2 has 4 places for 1 ranks") as e:
        ProcessGrid((2, 2), comm=MPI.COMM_SELF)
    assert isinstance(e.value, hpcgpu.AgreedError)
    a = DistMatrix.random((3, 4), g, seed=0)
    with pytest.raises(ValueError, match="inner dimensions differ: op\\(A\\) is 3 x 4, op\\(B\\) is 3 x 4"):
        hpcgpu.matmul(a, a)
    with pytest.raises(ValueError, match="dtypes differ"):
        hpcgpu.matmul(a, DistMatrix.random((4, 2), g, "float32"))
    g2 = ProcessGrid((1, 1), comm=MPI.COMM_SELF)  # an equal grid: its matrices multiply with g's
    np.testing.assert_array_equal(hpcgpu.matmul(a, DistMatrix.random((4, 2), g2, seed=1)).local,
                                  hpcgpu.matmul(a, DistMatrix.random((4, 2), g, seed=1)).local)
    with pytest.raises(ValueError, match="not one of float32"):
        DistMatrix.random((2, 2), g, "int64")
    with pytest.raises(ValueError, match="local block has shape"):
        DistMatrix(np.zeros((2, 2)), (3, 3), g)
    c = a @ DistMatrix.random((4, 2), g, seed=1)
    np.testing.assert_allclose(c.local, a.local @ DistMatrix.random((4, 2), g, seed=1).local)
    b = DistMatrix.random((4, 2), g, seed=1)
    cases = {  # PDGEMM's argument errors: every one before any communication, on every rank alike
        "c is 3 x 3 float64 on grid (1, 1); expected 3 x 2": dict(c=DistMatrix.random((3, 3), g)),
        "c is 3 x 2 float32": dict(c=DistMatrix.random((3, 2), g, "float32")),
        "c is 3 x 2 float32 on grid (1, 1); expected 3 x 2 float64": dict(c=DistMatrix.random((3, 2), g2, "float32")),
        "math_mode must be one of default, tf32, full, got 'half'": dict(math_mode="half"),
        "beta = 0.5 needs a c": dict(beta=0.5),
        "transa must be N, T or C": dict(transa="X"),
        "complex alpha or beta for float64": dict(alpha=1j),
        "algorithm must be summa, stationary-a, 2.5d or auto": dict(algorithm="3d"),
        "algorithm 2.5d needs replication": dict(algorithm="2.5d"),
        "replication 2 does not divide the 1 ranks": dict(algorithm="2.5d", replication=2),
        "replication is for algorithm 2.5d": dict(replication=2),
        "2.5-D with replication 1 needs": dict(algorithm="2.5d", replication=1, memory_limit=10),
    }
    for message, kw in cases.items():
        with pytest.raises(ValueError, match=message.replace("(", "\\(").replace(")", "\\)")) as e:
            hpcgpu.matmul(a, b, **kw)
        assert isinstance(e.value, hpcgpu.AgreedError), message
    with pytest.raises(ValueError, match="inner dimensions differ: op\\(A\\) is 4 x 3"):
        hpcgpu.matmul(a, b, transa="T")


@pytest.mark.mpi
@pytest.mark.host  # --device cpu: the device path's twin is tests/device's test_summa_on_device_every_grid_and_dtype
@pytest.mark.parametrize("nprocs", _mpi.cases([1, 2, 3, 4, 6], [1, 2, 3]))  # 6: 2x3 and 3x2, as 8's 2x4
def test_summa_against_numpy(nprocs):
    p = _mpi.script(nprocs, "summa_checks.py", "cpu", timeout=240)
    assert "summa checks: ok" in p.stdout


# -- the command line --------------------------------------------------------------

def _cli(n, *args, timeout=120):
    return _mpi.run(n, ["-m", "hpcgpu", "matmul", *map(str, args)], timeout=timeout)


@pytest.mark.device
@pytest.mark.mpi
def test_cli_multiplies_hdf5_files(tmp_path):
    rng = np.random.default_rng(0)
    A, B = rng.random((23, 19)), rng.random((19, 11)).astype(np.float32)
    write_h5(tmp_path / "a.h5", A=A)
    write_h5(tmp_path / "b.h5", grp__B=B, other=np.zeros(3))
    p = _cli(3, tmp_path / "a.h5", f"{tmp_path / 'b.h5'}:/grp/B", "-o", tmp_path / "out" / "c.h5", "--grid", "3x1",
             "--panel", "4")
    assert p.returncode == 0, p.stderr
    first, last = p.stdout.strip().splitlines()
    assert first.startswith("hpcgpu matmul: 3 rank(s) on ") and "GFLOP/s" in last
    with h5py.File(tmp_path / "out" / "c.h5") as f:
        np.testing.assert_allclose(f["C"][()], A @ B.astype(np.float64), rtol=1e-12)
        assert f["C"].dtype == np.float64  # float64 @ float32 computes in float64
        assert f.attrs["world_size"] == 3 and list(f.attrs["grid"]) == [3, 1]


@pytest.mark.device
@pytest.mark.mpi
@pytest.mark.mpi
def test_cli_transposes_alpha_beta_and_c_in(tmp_path):
    """--transa T --transb C --alpha 2 --beta -1 --c-in: C = 2 A^T B^H - C0, from files, at 3 ranks."""
    rng = np.random.default_rng(0)
    A, B, C0 = rng.random((5, 4)), rng.random((3, 5)) + 1j * rng.random((3, 5)), rng.random((4, 3))
    write_h5(tmp_path / "a.h5", A=A)
    write_h5(tmp_path / "b.h5", B=B)
    write_h5(tmp_path / "c.h5", C0=C0)
    p = _mpi.run(3, ["-m", "hpcgpu", "matmul", str(tmp_path / "a.h5"), str(tmp_path / "b.h5"), "-o",
                     str(tmp_path / "out.h5"), "--transa", "T", "--transb", "C", "--alpha", "2", "--beta", "-1",
                     "--c-in", str(tmp_path / "c.h5"), "--dtype", "complex128"], timeout=60)
    assert p.returncode == 0, p.stderr
    assert "C = 2 opT(A) opC(B) + -1 C: 4 x 5 @ 5 x 3" in p.stdout, p.stdout
    with h5py.File(tmp_path / "out.h5") as f:
        np.testing.assert_allclose(f["C"][()], 2 * A.T @ B.conj().T - C0, rtol=1e-13)


@pytest.mark.device
@pytest.mark.parametrize("dtype, stored, ulp", [("float16", "float16", 2.0**-11), ("bfloat16", "float32", 2.0**-8)])
def test_cli_half_precision(tmp_path, dtype, stored, ulp):
    """--dtype float16 / bfloat16: float32 accumulation, one rounding; HDF5 has no bfloat16, so C is float32."""
    rng = np.random.default_rng(1)
    A, B = rng.random((21, 300)).astype(np.float32), rng.random((300, 9)).astype(np.float32)
    write_h5(tmp_path / "a.h5", A=A)
    write_h5(tmp_path / "b.h5", B=B)
    p = _cli(2, tmp_path / "a.h5", tmp_path / "b.h5", "-o", tmp_path / "c.h5", "--dtype", dtype, "--panel", "7")
    assert p.returncode == 0, p.stderr
    with h5py.File(tmp_path / "c.h5") as f:
        C = f["C"][()]
    assert C.dtype == np.dtype(stored)
    import ml_dtypes

    t = np.dtype(getattr(ml_dtypes, dtype) if dtype == "bfloat16" else dtype)
    ref = A.astype(t).astype(np.float64) @ B.astype(t).astype(np.float64)  # inputs rounded to the type
    assert np.abs(C - ref).max() <= ulp * np.abs(ref).max()


@pytest.mark.device
@pytest.mark.mpi
def test_cli_real_times_complex_and_complex_as_real(tmp_path):
    """Found by the fuzz test: float32 @ complex64 must read A as complex; --dtype float32 must refuse complex."""
    A, B = np.arange(6, dtype=np.float32).reshape(2, 3), (np.arange(6) * (1 + 1j)).astype(np.complex64).reshape(3, 2)
    write_h5(tmp_path / "a.h5", A=A)
    write_h5(tmp_path / "b.h5", B=B)
    p = _cli(2, tmp_path / "a.h5", tmp_path / "b.h5", "-o", tmp_path / "c.h5")
    assert p.returncode == 0, p.stderr
    with h5py.File(tmp_path / "c.h5") as f:
        assert f["C"].dtype == np.complex64
        np.testing.assert_allclose(f["C"][()], A @ B, rtol=1e-6)
    p = _cli(2, tmp_path / "a.h5", tmp_path / "b.h5", "-o", tmp_path / "d.h5", "--dtype", "float32")
    assert p.returncode == 2 and "imaginary" in p.stderr and len(p.stderr.strip().splitlines()) == 1


@pytest.mark.device
@pytest.mark.mpi
def test_cli_bench_reports_ratio():
    p = _cli(2, "--bench", 64, "--repeat", 1, "--json")
    assert p.returncode == 0, p.stderr
    import json

    res = json.loads(p.stdout.strip().splitlines()[-1])
    assert res["N"] == 64 and res["ranks"] == 2 and res["gflops"] > 0 and res["ratio"] > 0
    # whatever --device auto picked: the GPU's own matmul, or one process with both ranks' BLAS threads (as
    # many as the ranks had, asked of the ranks themselves under this launcher, at most the node's cores)
    assert res["local_gemm_threads"] == ("gpu" if res["device"] == "gpu" else _ranks_blas_threads(2)), res
    # a 2 x 1 grid: each rank sends or receives every panel of B (k x n_l = 64 x 64 float64) and none of A
    assert res["comm_bytes_per_rank_max"] == 64 * 64 * 8, res
    text = _cli(2, "--bench", 64, "--repeat", 1)
    assert text.returncode == 0 and f"comm_bytes_per_rank_max={64 * 64 * 8}" in text.stdout.splitlines(), text.stdout
    assert res["math_mode"] == "default", res


def test_cli_records_the_math_mode_asked_for():
    p = _cli(2, "--bench", 16, "--repeat", 1, "--json", "--math-mode", "full")
    assert p.returncode == 0 and p.stderr == "", p.stderr
    import json

    assert json.loads(p.stdout.strip().splitlines()[-1])["math_mode"] == "full"


def _ranks_blas_threads(n):
    """The threads the BLAS of ``n`` ranks run on together after init (each rank's share: its CPU set, its
    cores / ranks, or OMP_NUM_THREADS), capped at this node's cores, as a local GEMM of the ranks' threads."""
    code = ("import sys, hpcgpu\n"
            "hpcgpu.init('cpu')\n"
            "from threadpoolctl import threadpool_info\n"
            "n = max(p['num_threads'] for p in threadpool_info() if p['user_api'] == 'blas')\n"
            "sys.stdout.write(f'threads {n}\\n')\n")  # one write: the ranks' lines must not interleave
    p = _mpi.run(n, ["-c", code], timeout=60, check=True)
    threads = [int(ln.split()[1]) for ln in p.stdout.splitlines() if ln.startswith("threads ")]
    assert len(threads) == n and min(threads) >= 1, p.stdout
    return min(sum(threads), os.cpu_count() or 1)


def _mk(tmp_path):
    write_h5(tmp_path / "a.h5", A=np.ones((4, 5)))
    write_h5(tmp_path / "b.h5", B=np.ones((6, 3)))
    write_h5(tmp_path / "b5.h5", B=np.ones((5, 3)))
    write_h5(tmp_path / "v.h5", V=np.ones(5))
    write_h5(tmp_path / "s.h5", S=np.array([[b"x"]]))
    write_h5(tmp_path / "two.h5", X=np.ones((2, 2)), Y=np.ones((2, 2)))
    (tmp_path / "afile").write_text("not a directory")


BAD = {
    "inner dimensions": (["a.h5", "b.h5"], "inner dimensions differ"),
    "missing file": (["nope.h5", "b5.h5"], "nope.h5: no such file"),
    "missing dataset": (["a.h5:/Z", "b5.h5"], "no dataset /Z"),
    "ambiguous file": (["two.h5", "b5.h5"], "holds 2 datasets"),
    "not 2-D": (["v.h5", "b5.h5"], "must be a 2-D matrix"),
    "not numeric": (["s.h5", "b5.h5"], "must be numeric"),
    "grid product": (["a.h5", "b5.h5", "--grid", "2x2"], "2x2 has 4 places for 3 ranks"),
    "grid syntax": (["a.h5", "b5.h5", "--grid", "3"], "--grid must look like"),
    "unwritable": (["a.h5", "b5.h5", "-o", "{tmp}/afile/c.h5"], "afile is a file, not a directory"),
    "op shapes": (["a.h5", "b5.h5", "--transa", "T"], "inner dimensions differ: op("),
    "beta without C": (["a.h5", "b5.h5", "--beta", "0.5"], "--beta 0.5 needs --c-in"),
    "C of the wrong shape": (["a.h5", "b5.h5", "--beta", "1", "--c-in", "b.h5"],
                             "is 6 x 3, op(A) op(B) is 4 x 3"),
    "complex alpha, real data": (["a.h5", "b5.h5", "--alpha", "1+2j"], "complex values for float64"),
    "unknown trans": (["a.h5", "b5.h5", "--transb", "X"], "argument --transb: invalid choice"),
    "replication not square": (["a.h5", "b5.h5", "--algorithm", "2.5d", "--replication", "2"],
                               "replication 2 does not divide the 3 ranks into 2 squares"),
    "2.5d without c": (["a.h5", "b5.h5", "--algorithm", "2.5d"], "algorithm 2.5d needs replication"),
    "2.5d memory": (["a.h5", "b5.h5", "--algorithm", "2.5d", "--replication", "3", "--memory-limit", "0.000001"],
                    "2.5-D with replication 3 needs"),
}


@pytest.fixture(scope="session")
def bad_cli_runs(tmp_path_factory):
    """Every row of :data:`BAD` at 3 ranks, in one launch (``_mpi.cli_rows``): ``{case: (result, directory)}``."""
    rows, dirs = {}, {}
    for case, (args, _) in BAD.items():
        t = dirs[case] = tmp_path_factory.mktemp("bad")
        _mk(t)
        args = [a.replace("{tmp}", str(t)) if "{tmp}" in a else (str(t / a) if ".h5" in a else a) for a in args]
        rows[case] = ["-m", "hpcgpu", "matmul", *args, *([] if "-o" in args else ["-o", str(t / "c.h5")])]
    runs = _mpi.cli_rows(3, rows, timeout=180)
    return {case: (runs[case], dirs[case]) for case in rows}


@pytest.mark.mpi
@pytest.mark.xdist_group("matmul-bad-input")  # one worker, one launch for the table
@pytest.mark.parametrize("case", list(BAD))
def test_cli_bad_input_exits_2_with_one_line(case, bad_cli_runs):
    p, t = bad_cli_runs[case]
    assert p.returncode == 2, (p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and BAD[case][1] in lines[0], p.stderr
    assert not p.others, p.others
    assert not (t / "c.h5").exists()
