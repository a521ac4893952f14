"""solve, lu_solve and pdposv: HPL's scaled residual below 16 on every grid, dtype and block size, and the
refusals as one agreed line on every rank."""

import os

import pytest

import _mpi

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.mpi
@pytest.mark.device
@pytest.mark.parametrize("nprocs", _mpi.cases([1, 2, 3, 4, 6], [1, 3, 4]))
def test_scaled_residual_is_below_16_and_refusals_are_one_line(nprocs):
    """Every grid of ``nprocs`` ranks (1xP, Px1, 2x2, 2x3, 3x2), float32, float64 and complex128, nb in {1, 2, 3, 4,
    5, 8, default}, one and many right-hand sides, shapes no nb divides, empty blocks, a leading block scaled by
    1e-10; the factors reused for A X = B, A^T X = B and A^H X = B; Cholesky on a positive definite matrix; a
    CyclicMatrix A; then the refusals (singular at a known column, inf in B, shapes, dtypes, assume_a, trans, piv,
    a CyclicMatrix's nb not its own)."""
    p = _mpi.run(nprocs, [os.path.join(HERE, "solve_checks.py"), "--pos"], timeout=300)
    assert p.returncode == 0, p.stderr
    words = p.stdout.split()
    assert words[0] == "ok" and len(words) == nprocs + 1 and len(set(words[1:])) == 1, p.stdout
    cases, refusals = (int(x) for x in words[1].split("/"))
    assert cases >= 6 and refusals >= 9 + (nprocs > 1), p.stdout
