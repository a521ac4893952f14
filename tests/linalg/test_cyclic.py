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
