"""cholesky, cho_factor and cho_solve (PDPOTRF, PDPOTRS) on the block-cyclic layout: LAPACK's backward error of
the factor and HPL's scaled residual of the solve at 1-6 ranks, and the refusals as one agreed line on every rank."""

import os

import pytest

import _mpi

HERE = os.path.dirname(os.path.abspath(__file__))


def _launch(nprocs, device="cpu"):
    p = _mpi.run(nprocs, [os.path.join(HERE, "cholesky_checks.py"), device], timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    words = p.stdout.split()
    assert words[0] == "ok" and len(words) == nprocs + 2 and len(set(words[2:])) == 1, p.stdout
    assert words[1] == ("gpu" if device == "auto" and _mpi.standin() else "cpu" if device == "cpu" else words[1])
    cases, refusals = (int(x) for x in words[2].split("/"))
    assert cases >= 8 + 7 * (nprocs == 1) and refusals >= 19 + 2 * (nprocs > 1), p.stdout


@pytest.mark.mpi
@pytest.mark.host  # --device cpu: its device-path twin below is marked device
@pytest.mark.parametrize("nprocs", _mpi.cases([1, 2, 3, 4, 6], [1, 3, 4]))
def test_factor_and_solve_are_backward_stable_and_every_refusal_is_one_line(nprocs):
    """Every grid of ``nprocs`` ranks (1xP, Px1, 2x2, 4x1, 2x3, 3x2), float32, float64, complex128, lower and upper,
    nb in {1, 3, 4, 8, default}, n of 37 and 50, empty blocks, junk in the triangle not read, a kept and a
    DistMatrix factor, a CyclicMatrix factored in its own layout; on one rank a single potrf; then not positive
    definite at a known column, NaN in A or B, nonconforming B, another dtype, a factor of the other triangle, not
    square, bad nb or lower, no DistMatrix, a CyclicMatrix's nb not its own, nb differing across ranks
    (tests/linalg/cholesky_checks.py)."""
    _launch(nprocs)


@pytest.mark.device
@pytest.mark.mpi
def test_factor_and_solve_on_the_device_path():
    """The same checks with the runtime's device (the stand-in's, in its pass): cuSOLVER's potrf, cuBLAS's TRSM."""
    _launch(2, "auto")
