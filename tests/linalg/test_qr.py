"""TSQR's qr, lstsq and svd: LAPACK's test ratios and SciPy's answers at 1-6 ranks, and their one-line refusals."""

import os

import pytest

import _mpi

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.mpi
@pytest.mark.device
@pytest.mark.parametrize("nprocs", _mpi.cases([1, 2, 3, 4, 6], [1, 3, 4]))
def test_qr_lstsq_and_svd_meet_lapacks_bounds_on_every_grid_and_refuse_in_one_line(nprocs):
    p = _mpi.run(nprocs, [os.path.join(HERE, "qr_checks.py")], timeout=300)
    assert p.returncode == 0, p.stderr
    words = p.stdout.split()
    assert words[0] == "ok" and len(words) == nprocs + 1 and len(set(words[1:])) == 1, p.stdout
    cases, refusals = (int(v) for v in words[1].split("/"))
    assert cases == 8 and refusals >= 13, p.stdout


def test_the_leaf_of_a_least_squares_is_a_and_b_side_by_side_in_lapacks_order():
    """lstsq's leaf ``[A | B]``: bands of rows copied into a Fortran-ordered block (more rows than one band, and a
    last band cut short) hold exactly A then B; its R (one geqrf in place) is NumPy's up to the rows' signs."""
    import numpy as np

    from hpcgpu.linalg import _local, tsqr

    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(3 * tsqr._BAND + 17, 6)), rng.normal(size=(3 * tsqr._BAND + 17, 2))
    w = np.empty((a.shape[0], 8), order="F")
    tsqr._put_columns(w, 0, a)
    tsqr._put_columns(w, 6, b)
    assert w.flags.f_contiguous and np.array_equal(w, np.hstack([a, b]))
    want = np.linalg.qr(np.hstack([a, b]), mode="r")
    r = _local.qr_r(w, overwrite=True)
    assert r.shape == (8, 8) and np.allclose(np.abs(r), np.abs(want))
    kept = np.hstack([a, b])
    r2 = _local.qr_r(kept)  # not the caller's scratch: left as it was
    assert np.array_equal(kept, np.hstack([a, b])) and np.allclose(np.abs(r2), np.abs(want))
