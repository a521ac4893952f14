import os
import sys

import h5py
import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def pytest_report_header(config):
    from mpi4py import MPI

    import _mpi

    lib = " ".join(MPI.Get_library_version().splitlines()[0].split())
    return [f"MPI: {lib} (MPI {'%d.%d' % MPI.Get_version()}), launcher {_mpi.mpiexec()}, "
            f"world size of this process {MPI.COMM_WORLD.Get_size()}; multi-rank tests start their own ranks"]


def write_h5(path, **datasets):
    """Write ``{"train/X": array, ...}`` (keys with '/' or '__') and attrs ``attr_*``."""
    with h5py.File(path, "w") as f:
        for key, value in datasets.items():
            if key.startswith("attr_"):
                f.attrs[key[5:]] = value
            else:
                f.create_dataset(key.replace("__", "/"), data=value)
    return str(path)


def blobs(n=240, d=6, c=3, seed=0, dtype=np.float32):
    """A small separable classification problem (same classes for every seed)."""
    centers = np.random.default_rng(12345).normal(0, 3, (c, d))
    rng = np.random.default_rng(seed)
    y = rng.integers(0, c, n)
    X = (centers[y] + rng.normal(0, 1, (n, d))).astype(dtype)
    return X, y.astype(np.int64)


@pytest.fixture
def small_h5(tmp_path):
    X, y = blobs(240)
    Xt, yt = blobs(61, seed=1)
    return write_h5(tmp_path / "small.h5", train__X=X, train__y=y, test__X=Xt, test__y=yt)
