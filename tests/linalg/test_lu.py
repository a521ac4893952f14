"""lu_factor: partial pivoting over the whole column on the block-cyclic layout, against SciPy's, and its
refusals as one agreed line on every rank."""

import os

import pytest

import _mpi

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.mpi
@pytest.mark.device
@pytest.mark.parametrize("nprocs", _mpi.cases([1, 2, 3, 4, 6], [1, 3, 4]))
def test_pivots_are_scipys_and_the_backward_error_is_small(nprocs):
    """Every grid of ``nprocs`` ranks (1xP, Px1, 2x2, 2x3, 3x2), float32, float64 and complex128, nb in {1, 2, 3, 4, 5,
    8, default}, shapes no nb divides, empty blocks, a leading block scaled by 1e-10, factored on the default flat
    grid and on A's grid (so that 4 and 6 ranks take the panels across grid rows), and a CyclicMatrix factored in
    its own layout; then the refusals (exactly singular at a known column, NaN, not square, bad nb, no DistMatrix,
    a grid of another kind, over other ranks' order or freed, a CyclicMatrix's nb or grid not its own, nb
    differing across ranks)."""
    p = _mpi.run(nprocs, [os.path.join(HERE, "lu_checks.py")], timeout=300)
    assert p.returncode == 0, p.stderr
    words = p.stdout.split()
    assert words[0] == "ok" and len(words) == nprocs + 1 and len(set(words[1:])) == 1, p.stdout
    cases, refusals = (int(x) for x in words[1].split("/"))
    assert cases >= 7 and refusals == 11 + 4 * (nprocs > 1), p.stdout


@pytest.mark.parametrize("seed", range(5))
def test_the_interchanges_as_one_move_are_lapacks_in_order(seed):
    """``_swaps`` (a panel's) and ``full_permutation`` (all of piv's) give the rows LAPACK's interchanges, applied
    one after another, leave in each place; rows that stay are left out."""
    import numpy as np

    from hpcgpu.linalg.lu import _swaps, full_permutation

    rng = np.random.default_rng(seed)
    n, k0 = 23, 5
    piv = np.array([i + rng.integers(0, n - i) for i in range(n)])
    rows = np.arange(n)
    for i, p in enumerate(piv):
        rows[[i, p]] = rows[[p, i]]
    dst, src = full_permutation(piv)
    moved = np.arange(n)
    moved[dst] = src
    assert np.array_equal(moved, rows) and np.all(dst != src)
    ipiv = piv[k0:k0 + 6] - k0
    rows = np.arange(n)
    for i, p in enumerate(ipiv):
        rows[[k0 + i, k0 + p]] = rows[[k0 + p, k0 + i]]
    dst, src = _swaps(k0, ipiv)
    moved = np.arange(n)
    moved[dst] = src
    assert np.array_equal(moved, rows) and np.all(dst != src) and np.all(np.diff(dst) > 0)
