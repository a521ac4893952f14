import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _data import blobs, write_h5  # noqa: E402


def pytest_report_header(config):
    from mpi4py import MPI

    import _mpi

    lib = " ".join(MPI.Get_library_version().splitlines()[0].split())
    return [f"MPI: {lib} (MPI {'%d.%d' % MPI.Get_version()}), launcher {_mpi.mpiexec()}, "
            f"world size of this process {MPI.COMM_WORLD.Get_size()}; multi-rank tests start their own ranks"]


@pytest.fixture
def small_h5(tmp_path):
    X, y = blobs(240)
    Xt, yt = blobs(61, seed=1)
    return write_h5(tmp_path / "small.h5", train__X=X, train__y=y, test__X=Xt, test__y=yt)
