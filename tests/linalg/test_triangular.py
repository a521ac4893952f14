"""solve_triangular (PDTRSM) on the block-cyclic layout: the scaled residual of every kind of solve at 1-6 ranks,
and its refusals as one agreed line on every rank."""

import os

import pytest

import _mpi

HERE = os.path.dirname(os.path.abspath(__file__))


def _launch(nprocs, device="cpu"):
    p = _mpi.run(nprocs, [os.path.join(HERE, "triangular_checks.py"), device], timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    words = p.stdout.split()
    assert words[0] == "ok" and len(words) == nprocs + 2 and len(set(words[2:])) == 1, p.stdout
    assert words[1] == ("gpu" if device == "auto" and _mpi.standin() else "cpu" if device == "cpu" else words[1])
    cases, refusals = (int(x) for x in words[2].split("/"))
    assert cases >= 40 and refusals >= 9 + 2 * (nprocs > 1), p.stdout


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 2, 3, 4, 6])
def test_every_solve_has_a_small_residual_and_every_refusal_is_one_line(nprocs):
    """Every grid of ``nprocs`` ranks (1xP, Px1, 2x2, 4x1, 2x3, 3x2), float32, float64, complex128, lower and upper,
    trans 0/1/2 (and "N"/"T"/"C"), unit diagonal, nb in {1, 3, 4, 8, default}, shapes no nb divides, empty blocks,
    junk in the triangle not read; then NaN in A or B, nonconforming B, another dtype, not square, nb=0, a bad
    trans, a non-bool flag, no DistMatrix, lower differing across ranks (tests/linalg/triangular_checks.py)."""
    _launch(nprocs)


@pytest.mark.device
@pytest.mark.mpi
def test_every_solve_on_the_device_path():
    """The same checks with the runtime's device (the stand-in's, in its pass): cuSOLVER's and cuBLAS's kernels."""
    _launch(2, "auto")
