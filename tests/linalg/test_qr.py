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
    assert cases == 9 and refusals >= 13, p.stdout


@pytest.mark.parametrize("dtype", ["float64", "float32", "complex128"])
def test_a_tall_blocks_r_by_bands_is_backward_stable_and_leaves_its_inputs(monkeypatch, dtype):
    """The leaf's R by bands of rows (geqrf of the first, tpqrt of [R; band] after, the last band cut short), of
    ``[A | B]`` given as two blocks never formed: ``R^H R`` is ``W^H W`` to a backward error of a few eps, R is
    upper triangular and NumPy's up to the rows' signs, and neither block is written. Bands of 8 rows make 39
    of them; the same with the default band (one geqrf for 317 rows, below two bands) agrees."""
    import numpy as np

    from hpcgpu.linalg import _local

    rng = np.random.default_rng(0)
    m = 317

    def make(k):
        x = rng.normal(size=(m, k))
        return (x + 1j * rng.normal(size=(m, k)) if dtype == "complex128" else x).astype(dtype)

    a, b = make(6), make(2)
    a0, b0 = a.copy(), b.copy()
    w = np.hstack([a, b]).astype(np.complex128 if dtype == "complex128" else np.float64)
    want = np.linalg.qr(w, mode="r")
    eps = np.finfo(dtype).eps
    rs, calls, bands = {}, [], _local._qr_r_bands
    monkeypatch.setattr(_local, "_qr_r_bands", lambda *args: calls.append(args[-1]) or bands(*args))
    for band in (8, _local.QR_BAND):
        monkeypatch.setattr(_local, "QR_BAND", band)
        r = rs[band] = _local.qr_r([a, b])
        assert calls == [8]  # the bands' path is the one under test, and only for a tall block
        assert r.shape == (8, 8) and r.dtype == np.dtype(dtype) and np.array_equal(r, np.triu(r))
        back = np.linalg.norm(r.conj().T @ r - w.conj().T @ w) / (np.linalg.norm(w) ** 2 * m * eps)
        assert back < 1, (band, back)
        assert np.allclose(np.abs(r), np.abs(want), rtol=100 * eps * m, atol=100 * eps * m * np.abs(want).max())
    assert np.array_equal(a, a0) and np.array_equal(b, b0)
    one = _local.qr_r(np.hstack([a, b]))  # one block in C order: the same R
    assert np.allclose(np.abs(one), np.abs(rs[_local.QR_BAND]), atol=100 * eps * m * np.abs(want).max())


@pytest.mark.parametrize("dtype", ["float64", "float32", "complex128"])
def test_a_tall_blocks_q_by_bands_is_orthonormal_and_gives_back_the_block(monkeypatch, dtype):
    """The leaf's Q and R by bands of rows (tpmqrt of each band's reflectors back to the first, ormqr or unmqr
    of the first's): LAPACK's test ratios ``||A - QR|| / (||A|| m eps)`` and ``||I - Q^H Q|| / (m eps)`` below
    1, R upper triangular, Q C-ordered in A's dtype, A not written; bands of 8 rows (40 of them, the last cut
    short) and, for a block below two default bands, SciPy's one call."""
    import numpy as np

    from hpcgpu.linalg import _local

    rng = np.random.default_rng(1)
    m, n = 317, 7
    a = rng.normal(size=(m, n))
    a = (a + 1j * rng.normal(size=(m, n)) if dtype == "complex128" else a).astype(dtype)
    a0 = a.copy()
    eps = np.finfo(dtype).eps
    calls, bands = [], _local._qr_q_bands
    monkeypatch.setattr(_local, "_qr_q_bands", lambda *args: calls.append(args[-1]) or bands(*args))
    for band in (8, _local.QR_BAND):
        monkeypatch.setattr(_local, "QR_BAND", band)
        q, r = _local.qr(a, "reduced")
        assert calls == [8]  # the bands' path is the one under test, and only for a tall block
        assert q.shape == (m, n) and r.shape == (n, n) and q.dtype == r.dtype == np.dtype(dtype)
        assert np.array_equal(r, np.triu(r)) and (q.flags.c_contiguous or band != 8)
        assert np.linalg.norm(a - q @ r) / (np.linalg.norm(a) * m * eps) < 1, band
        assert np.linalg.norm(np.eye(n) - q.conj().T @ q) / (m * eps) < 1, band
    assert np.array_equal(a, a0)
