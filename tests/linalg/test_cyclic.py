"""The 2-D block-cyclic layout: ScaLAPACK's placement, element by element, and the moves in and out of it."""

import os

import pytest

import _mpi

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.mpi
@pytest.mark.device
@pytest.mark.parametrize("nprocs", _mpi.cases([1, 2, 3, 4, 6], [1, 3, 4]))
def test_every_element_lands_where_scalapack_puts_it_and_comes_back(nprocs):
    p = _mpi.run(nprocs, [os.path.join(HERE, "cyclic_checks.py")], timeout=300)
    assert p.returncode == 0, p.stderr
    words = p.stdout.split()
    assert words[0] == "ok" and len(words) == nprocs + 1 and len(set(words[1:])) == 1 and int(words[1]) >= 18, \
        p.stdout


def test_the_default_block_size_leaves_about_10_panels_a_grid_row_or_column():
    """n / (10 max(pr, pc)) rounded down to a multiple of 32 (128 on a device), within 64-256 on a host and
    256-512 on a device; without a size or grid the largest."""
    from types import SimpleNamespace

    import numpy as np

    from hpcgpu.linalg.cyclic import default_nb

    def grid(pr, pc):
        return SimpleNamespace(shape=(pr, pc))

    assert default_nb() == 256 and default_nb(np, 4096) == 256
    assert default_nb(np, 4096, grid(1, 1)) == 256  # one rank: the one LAPACK call ignores it
    assert default_nb(np, 4096, grid(2, 2)) == 192 == default_nb(np, 4096, grid(1, 2)) == default_nb(np, 4096,
                                                                                                    grid(2, 1))
    assert default_nb(np, 2048, grid(2, 2)) == 96 and default_nb(np, 4096, grid(4, 2)) == 96
    assert default_nb(np, 16384, grid(2, 2)) == 256 and default_nb(np, 5119, grid(2, 2)) == 224
    assert default_nb(np, 50, grid(2, 3)) == 64 and default_nb(np, 0, grid(2, 2)) == 64  # never below 64
    device = object()  # any module but NumPy: the device's sizes
    assert default_nb(device) == 512 and default_nb(device, 4096, grid(2, 2)) == 256
    assert default_nb(device, 8192, grid(2, 2)) == 384 and default_nb(device, 32768, grid(2, 2)) == 512
