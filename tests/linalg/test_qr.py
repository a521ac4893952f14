"""TSQR's qr, lstsq and svd: LAPACK's test ratios and SciPy's answers at 1-6 ranks, and their one-line refusals."""

import os

import pytest

import _mpi

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.mpi
@pytest.mark.device
@pytest.mark.parametrize("nprocs", [1, 2, 3, 4, 6])
def test_qr_lstsq_and_svd_meet_lapacks_bounds_on_every_grid_and_refuse_in_one_line(nprocs):
    p = _mpi.run(nprocs, [os.path.join(HERE, "qr_checks.py")], timeout=300)
    assert p.returncode == 0, p.stderr
    words = p.stdout.split()
    assert words[0] == "ok" and len(words) == nprocs + 1 and len(set(words[1:])) == 1, p.stdout
    cases, refusals = (int(v) for v in words[1].split("/"))
    assert cases == 8 and refusals >= 13, p.stdout
