import os

import h5py
import numpy as np
import pytest
from _data import blobs, write_h5

import _mpi

GRAM = os.path.join(_mpi.ROOT, "examples", "gram.py")


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 3])
def test_gram_matches_numpy_on_digits(nprocs, tmp_path):
    out = tmp_path / "g.h5"
    p = _mpi.run(nprocs, [GRAM, "--out", str(out)], timeout=120, env={"HPCGPU_DATA_DIR": str(tmp_path / "cache")})
    assert p.returncode == 0, p.stderr
    with h5py.File(tmp_path / "cache" / "digits.h5") as f:
        X = f["train/X"][()].astype(np.float64)
    with h5py.File(out) as f:
        np.testing.assert_allclose(f["G"][()], X.T @ X, rtol=1e-12)
        assert f["G"].shape == (64, 64)


@pytest.mark.mpi
def test_gram_on_a_given_file(tmp_path):
    X, y = blobs(50, d=7)
    data = write_h5(tmp_path / "d.h5", train__X=X, train__y=y)
    p = _mpi.run(2, [GRAM, "--data", data, "--out", str(tmp_path / "g.h5")], timeout=60)
    assert p.returncode == 0, p.stderr
    with h5py.File(tmp_path / "g.h5") as f:
        np.testing.assert_allclose(f["G"][()], X.T.astype(np.float64) @ X, rtol=1e-10)
