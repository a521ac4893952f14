"""benchmarks/linalg.py runs at a tiny size and writes every figure and ratio it promises (no timing asserted)."""

import json
import math
import os

import pytest

import _mpi

BENCH = os.path.join(_mpi.ROOT, "benchmarks", "linalg.py")

TOP = {"ranks", "threads_per_rank", "cores", "peer_threads", "dtype", "rounds", "nb", "peers", "missing", "routines",
       "load_before", "load_after", "mpirun_scalapack", "cholesky_lower"}
RATIOS = {"cholesky": {"scipy"}, "lu": {"scipy"}, "lstsq": {"scipy", "scipy.lstsq"}}


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 2])
def test_tiny_run_writes_every_ratio_as_a_positive_number(nprocs, tmp_path):
    out = tmp_path / "bench.json"
    # ScaLAPACK through an mpirun that is not there: the peer is reported missing, the run goes on
    p = _mpi.run(nprocs, [BENCH, "--n", "64", "--lstsq", "300x12", "--nb", "16", "--rounds", "1",
                          "--peers", "scipy,scalapack", "--mpirun", str(tmp_path / "no-mpirun"), "--profile",
                          "--json", str(out), *(["--upper"] if nprocs == 2 else [])],
                 timeout=300)
    assert p.returncode == 0, p.stderr
    res = json.loads(out.read_text())
    assert set(res) == TOP
    assert res["ranks"] == nprocs and res["threads_per_rank"] == 1
    assert res["cholesky_lower"] is (nprocs != 2)  # --upper: SciPy's and hpcgpu's default factor
    assert set(res["missing"]) == {"scalapack"}
    assert f"peer scalapack: MISSING: {res['missing']['scalapack']}" in p.stdout.splitlines()
    assert set(res["routines"]) == set(RATIOS)
    for routine, peers in RATIOS.items():
        r = res["routines"][routine]
        # TSQR has no block size, nor a block-cyclic A kept (hpcgpu.cyclic: A.to_cyclic() made untimed)
        tuned = {"hpcgpu@nb=16", "hpcgpu.cyclic"} if routine != "lstsq" else set()
        assert set(r["contenders"]) == {"hpcgpu"} | tuned | peers, routine
        mine = ("default", "tuned", "cyclic") if routine != "lstsq" else ("default", "tuned")
        assert set(r["ratios"]) == {f"{v}_vs_{peer}" for v in mine for peer in peers}, routine
        for key, v in r["ratios"].items():
            assert math.isfinite(v["ratio"]) and v["ratio"] > 0, (routine, key, v)
            assert v["ratio"] == pytest.approx(v["peer_seconds"] / v["hpcgpu_seconds"]), (routine, key, v)
        assert set(r["phases"]) == ({"default", "16"} if routine != "lstsq" else {"default"}), routine
        for ph in r["phases"].values():
            assert {"total", "other"} <= set(ph) and all(len(v) == 3 for v in ph.values()), (routine, ph)
        assert r["grid"] == ([nprocs, 1] if routine == "lstsq" else r["grid"]) and math.prod(r["grid"]) == nprocs
