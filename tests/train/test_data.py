import itertools

import pytest

import _mpi
from hpcgpu._partition import block_range, block_starts


def test_block_range_is_balanced_and_covers():
    for n in (0, 1, 7, 10, 97):
        for parts in (1, 2, 3, 8, 13):
            ranges = [block_range(n, parts, i) for i in range(parts)]
            assert ranges[0][0] == 0 and ranges[-1][1] == n
            assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
            sizes = [b - a for a, b in ranges]
            assert max(sizes) - min(sizes) <= 1
            assert block_starts(n, parts) == [a for a, _ in ranges] + [n]
    with pytest.raises(ValueError):
        block_range(10, 3, 3)


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs, N, B", [(1, 50, 8), (2, 50, 8), (3, 101, 10), (4, 37, 5)])
def test_sampler_exchange(nprocs, N, B):
    p = _mpi.script(nprocs, "sampler_checks.py", N, B, timeout=60)
    assert "sampler checks: ok" in p.stdout
