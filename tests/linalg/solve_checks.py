"""Rank program of tests/linalg/test_solve.py: solve and lu_solve on every grid of this many ranks, every dtype, block
sizes no shape divides, empty blocks, one and many right-hand sides, by HPL's scaled residual; then the refusals.

HPL's check: ``||A x - b||_inf / (eps (||A||_inf ||x||_inf + ||b||_inf) n) < 16`` for each column of B, with
``eps`` the dtype's. Rank 0 prints ``ok``, each rank's number of cases and of refusals checked (an assert on any
rank fails the launch).
"""

import sys

import numpy as np

import hpcgpu
from hpcgpu.errors import AgreedError
from hpcgpu.linalg import lu_factor, lu_solve, pdgesv, pdposv, solve

from _common import dist, refused

rt = hpcgpu.init()
comm = rt.comm
rank, size = comm.Get_rank(), comm.Get_size()
rng = np.random.default_rng(11)
POS = "--pos" in sys.argv  # solve(assume_a="pos") too: Cholesky is there


def random(shape, dtype):
    g = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        g = g + 1j * rng.standard_normal(shape)
    return g.astype(dtype)


def scaled_residual(a, x, b, dtype, trans=0):
    """HPL's scaled residual of each column, computed in double precision; the largest."""
    wide = np.complex128 if np.dtype(dtype).kind == "c" else np.float64
    a, x, b = (v.astype(wide) for v in (a, x, b))
    op = {0: a, 1: a.T, 2: a.conj().T}[trans]
    n = a.shape[0]
    eps = np.finfo(dtype).eps
    r = np.abs(op @ x - b).max(axis=0)
    scale = eps * (np.abs(op).sum(axis=1).max() * np.abs(x).max(axis=0) + np.abs(b).max(axis=0)) * n
    return float((r / scale).max())


cases = 0
GRIDS = {1: [(1, 1)], 2: [(1, 2), (2, 1)], 3: [(1, 3), (3, 1)], 4: [(2, 2)], 6: [(2, 3), (3, 2)]}
CASES = [  # n, nrhs, nb, leading block scaled by 1e-10 (its size), dtype
    (1, 1, 1, 0, "float64"), (7, 1, 3, 0, "float32"), (11, 4, 1, 0, "complex128"), (29, 3, 8, 0, "float64"),
    (40, 2, None, 0, "complex128"), (5, 7, 8, 0, "float32"), (4, 1, 3, 0, "float64"), (0, 2, 2, 0, "float64"),
    (24, 2, 4, 4, "float64"), (17, 1, 3, 3, "complex128"), (16, 3, 5, 5, "float32")]
grids = GRIDS[size]
for gi, dims in enumerate(grids):
    grid = hpcgpu.ProcessGrid(dims)
    for n, nrhs, nb, small, dtype in CASES[gi::len(grids)]:  # two grids share the cases: the suite stays fast
        g = random((n, n), dtype)
        g[:small, :small] *= 1e-10
        rhs = random((n, nrhs), dtype)
        a, b = dist(g, grid), dist(rhs, grid)
        x = solve(a, b, nb=nb)
        cases += 1
        assert x.gshape == (n, nrhs) and x.dtype == np.dtype(dtype) and x.grid is grid
        got = x.gather()
        if rank == 0 and n:
            res = scaled_residual(g, got, rhs, dtype)
            assert res < 16, (dims, n, nrhs, nb, dtype, small, res)
        if gi % 2 != cases % 2:  # every other case: the factors kept for other right-hand sides, A^T, A^H
            lu, piv = lu_factor(a, nb=nb)
            for trans in (cases % 3, (cases + 1) % 3):
                rhs2 = random((n, 2), dtype)
                x2 = lu_solve((lu, piv), dist(rhs2, grid), trans=trans).gather()
                if rank == 0 and n:
                    res = scaled_residual(g, x2, rhs2, dtype, trans)
                    assert res < 16, (dims, n, nb, dtype, small, trans, res)
        elif POS:  # the others: a Hermitian positive definite matrix by Cholesky
            spd = g @ g.conj().T + n * np.eye(n, dtype=dtype)
            x3 = pdposv(dist(spd, grid), b, nb=nb).gather()
            if rank == 0 and n:
                res = scaled_residual(spd, x3, rhs, dtype)
                assert res < 16, (dims, n, nb, dtype, "pos", res)

    # A kept block-cyclic (DistMatrix.to_cyclic): solved in its own layout (LU on its grid), X on A's grid
    g = random((23, 23), "float64")
    g[:4, :4] *= 1e-10
    rhs = random((23, 2), "float64")
    c = dist(g, grid).to_cyclic(3)
    x = solve(c, dist(rhs, grid))
    assert x.gshape == (23, 2) and x.grid is grid
    got = x.gather()
    if rank == 0:
        assert scaled_residual(g, got, rhs, "float64") < 16, (dims, "cyclic")
    cases += 1

# refusals: one agreed line, the same on every rank
refusals = 0


grid = hpcgpu.ProcessGrid(grids[-1])
g = random((29, 29), "float64")
g[:, 17] = 0
b = dist(random((29, 2), "float64"), grid)
sing = dist(g, grid)
refusals += refused(lambda: pdgesv(sing, b, nb=3), np.linalg.LinAlgError,
        "solve: A is singular: U's diagonal is exactly zero at column 17 (LAPACK info 18)")
indefinite = np.eye(29)
indefinite[11, 11] = -1.0  # the leading minor of order 12 is the first that is not positive
refusals += refused(lambda: solve(dist(indefinite, grid), b, assume_a="pos", nb=4), np.linalg.LinAlgError,
        "solve: A is not positive definite: the leading minor of order 12 is not (column 11 of 0..28)")
a = dist(random((29, 29), "float64"), grid)
bad = random((29, 2), "float64")
bad[20, 1] = np.inf
refusals += refused(lambda: solve(a, dist(bad, grid), nb=4), ValueError,
        "solve: B holds NaN or inf (at row 20, column 1): the solvers need finite values")
refusals += refused(lambda: solve(a, dist(random((28, 1), "float64"), grid)), ValueError,
        "solve: shapes do not conform: A is 29 x 29, B has 28 rows (A's 29 needed)")
refusals += refused(lambda: solve(a, b, assume_a="sym"), ValueError,
        "solve: assume_a must be 'gen' (LU) or 'pos' (Cholesky), got 'sym'")
refusals += refused(lambda: solve(a, dist(random((29, 1), "float32"), grid)), TypeError,
        "solve: A is float64 and B is float32: give both one dtype (b.astype(a.dtype))")
refusals += refused(lambda: solve(a.to_cyclic(4), b, nb=5), ValueError, "solve: nb=5 but A is block-cyclic with nb 4: "
                    "leave nb out (A is factored in its own layout), or make A with a.to_distmatrix().to_cyclic(nb)")
lu, piv = lu_factor(a, nb=4)
refusals += refused(lambda: lu_solve((lu, piv), b, trans=3), ValueError,
        "lu_solve: trans must be 0, 1 or 2 (A X = B, A^T X = B, A^H X = B), got 3")
refusals += refused(lambda: lu_solve((lu, piv[:-1]), b), ValueError,
        "lu_solve: piv must be lu_factor's pivots, 29 integers, got (28,)")
refusals += refused(lambda: lu_solve(a, b), TypeError,
                    "lu_solve: the factors must be lu_factor's (lu, piv), got DistMatrix")
if size > 1:
    other = piv.copy()
    if rank == 1:
        other[0] = 28 if other[0] != 28 else 27
    try:
        lu_solve((lu, other), b)
        raise AssertionError("no refusal: piv differs")
    except AgreedError as e:
        assert str(e).startswith("lu_solve: piv differs across ranks: "), str(e)
        refusals += 1

counts = comm.gather((cases, refusals))
if rank == 0:
    print("ok", *(f"{c}/{r}" for c, r in counts), flush=True)
sys.exit(0)
