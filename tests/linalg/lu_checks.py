"""Rank program of tests/linalg/test_lu.py: lu_factor on every grid of this many ranks, every dtype, block sizes no
shape divides and empty blocks, against SciPy's lu_factor on the gathered matrix; then its refusals.

Each case checks: the pivots are SciPy's (random matrices: no ties) and the same on every rank, and the factors'
backward error ``||P A - L U||_F / (||A||_F n eps) < 16``. The matrix whose leading block is scaled by 1e-10 (which
defeats pivoting within a block) has the same bound. Rank 0 prints ``ok``, each rank's number of cases and of
refusals checked (an assert on any rank fails the launch).
"""

import sys

import numpy as np
import scipy.linalg

import hpcgpu
from hpcgpu.linalg import lu_factor

from _common import refused

rt = hpcgpu.init()
comm = rt.comm
rank, size = comm.Get_rank(), comm.Get_size()
rng = np.random.default_rng(7)


def matrix(n, dtype, small_block=0):
    g = rng.standard_normal((n, n))
    if np.dtype(dtype).kind == "c":
        g = g + 1j * rng.standard_normal((n, n))
    if small_block:
        g[:small_block, :small_block] *= 1e-10
    return g.astype(dtype)


def backward_error(g, lu, piv):
    n = g.shape[0]
    pa = g.astype(np.complex128 if g.dtype.kind == "c" else np.float64)
    for i, p in enumerate(piv):
        pa[[i, p]] = pa[[p, i]]
    low = np.tril(lu, -1) + np.eye(n)
    up = np.triu(lu)
    eps = np.finfo(g.dtype).eps
    return np.linalg.norm(pa - low @ up) / (np.linalg.norm(g) * max(n, 1) * eps)


cases = 0
GRIDS = {1: [(1, 1)], 2: [(1, 2), (2, 1)], 3: [(1, 3), (3, 1)], 4: [(2, 2)], 6: [(2, 3), (3, 2)]}
CASES = [  # n, nb, leading block scaled by 1e-10 (its size), dtype
    (1, 1, 0, "float64"), (7, 3, 0, "float32"), (8, 1, 0, "complex128"), (29, 8, 0, "float64"),
    (40, None, 0, "complex128"), (5, 8, 0, "float32"), (4, 3, 0, "float64"), (0, 2, 0, "float64"),
    (24, 4, 4, "float64"), (17, 3, 3, "complex128"), (16, 5, 5, "float32")]
grids = GRIDS[size]
for gi, dims in enumerate(grids):
    grid = hpcgpu.ProcessGrid(dims)
    for ci, (n, nb, small, dtype) in enumerate(CASES[gi::len(grids)]):  # two grids share the cases: fast
        g = matrix(n, dtype, small)
        a = hpcgpu.DistMatrix.from_global(g if rank == 0 else None, grid)
        # every other case on A's grid with no more rows than columns (its transpose where A's has more), so that
        # the panels' gathers, scatters and interchanges across grid rows run at 4 and 6 ranks too; the others
        # on the default flat grid
        on = grid.wide() if ci % 2 else None
        lu, piv = lu_factor(a, nb=nb, grid=on)
        assert isinstance(piv, np.ndarray) and piv.shape == (n,) and piv.dtype == np.int64
        pivs = comm.allgather(piv)
        assert all(np.array_equal(p, piv) for p in pivs), (dims, n, nb, dtype)
        full = lu.to_distmatrix()
        assert full.gshape == (n, n) and full.dtype == np.dtype(dtype) and full.grid is grid
        # factored on the grid asked for (by default pc >= 4 pr: 1 x P below 16 ranks), the results on A's
        assert lu.layout.grid is (on or grid.flat()) and lu.grid is grid
        assert lu.layout.grid.shape == ((min(dims), max(dims)) if on else (1, size)), (dims, lu.layout.grid.shape)
        got = full.gather()
        if rank == 0 and n:
            ref_lu, ref_piv = scipy.linalg.lu_factor(g)
            assert np.array_equal(piv, ref_piv), (dims, n, nb, dtype, piv, ref_piv)
            err = backward_error(g, got, piv)
            assert err < 16, (dims, n, nb, dtype, small, err)
        cases += 1

    # A kept block-cyclic (DistMatrix.to_cyclic), on A's grid and on the flat one: factored where it lies, with its
    # own nb and grid; SciPy's pivots, the same backward error bound
    for n, nb, dtype, on in ((29, 4, "float64", None), (17, 3, "complex128", grid.flat())):
        g = matrix(n, dtype, 3)
        c = hpcgpu.DistMatrix.from_global(g if rank == 0 else None, grid).to_cyclic(nb, grid=on)
        lu, piv = lu_factor(c)
        assert lu.layout.grid is c.grid and lu.grid is c.grid and lu.nb == nb, (dims, lu)
        got = lu.to_distmatrix().gather()
        if rank == 0:
            assert np.array_equal(piv, scipy.linalg.lu_factor(g)[1]), (dims, n, nb, dtype)
            assert backward_error(g, got, piv) < 16, (dims, n, nb, dtype)
        cases += 1

# refusals: one agreed line, the same on every rank
refusals = 0


grid = hpcgpu.ProcessGrid(grids[-1])
g = matrix(29, "float64")
g[:, 17] = 0
sing = hpcgpu.DistMatrix.from_global(g if rank == 0 else None, grid)
for nb in (3, None):
    refusals += refused(lambda nb=nb: lu_factor(sing, nb=nb), np.linalg.LinAlgError,
            "lu_factor: A is singular: U's diagonal is exactly zero at column 17 (LAPACK info 18)")
zero = hpcgpu.DistMatrix.from_global(np.zeros((6, 6)) if rank == 0 else None, grid)
refusals += refused(lambda: lu_factor(zero, nb=2), np.linalg.LinAlgError,
        "lu_factor: A is singular: U's diagonal is exactly zero at column 0 (LAPACK info 1)")
g = matrix(11, "float64")
g[4, 9] = np.nan
nan = hpcgpu.DistMatrix.from_global(g if rank == 0 else None, grid)
refusals += refused(lambda: lu_factor(nan, nb=2), ValueError,
        "lu_factor: A holds NaN or inf (at row 4, column 9): the solvers need finite values")
rect = hpcgpu.DistMatrix.from_global(np.ones((5, 4)) if rank == 0 else None, grid)
refusals += refused(lambda: lu_factor(rect), ValueError, "lu_factor: A must be square, got 5 x 4")
refusals += refused(lambda: lu_factor(zero, nb=0), ValueError, "lu_factor: nb must be >= 1, got 0")
refusals += refused(lambda: lu_factor(zero, nb=2.0), TypeError,
        "lu_factor: nb must be an int (a block size, >= 1) or None, got float")
refusals += refused(lambda: lu_factor(np.eye(3)), TypeError,
                    "lu_factor: A must be an hpcgpu.DistMatrix or CyclicMatrix, got ndarray")
c = zero.to_cyclic(2)
refusals += refused(lambda: lu_factor(c, nb=3), ValueError, "lu_factor: nb=3 but A is block-cyclic with nb 2: leave "
                    "nb out (A is factored in its own layout), or make A with a.to_distmatrix().to_cyclic(nb)")
refusals += refused(lambda: lu_factor(sing.to_cyclic(4)), np.linalg.LinAlgError,
                    "lu_factor: A is singular: U's diagonal is exactly zero at column 17 (LAPACK info 18)")
if size > 1:
    flip = hpcgpu.ProcessGrid((1, size) if grid.shape != (1, size) else (size, 1), comm=grid.cart)
    refusals += refused(lambda: lu_factor(c, grid=flip), ValueError,
                        f"lu_factor: grid {flip.shape[0]}x{flip.shape[1]} but A is block-cyclic on grid "
                        f"{grid.shape[0]}x{grid.shape[1]}: leave grid out (A is factored in its own layout), or make A "
                        "with a.to_distmatrix().to_cyclic(grid=grid)")
refusals += refused(lambda: lu_factor(zero, grid=(1, size)), TypeError,
        "lu_factor: grid must be an hpcgpu.ProcessGrid over A's ranks or None, got tuple")
if size > 1:  # a grid over another order of the ranks (or other ranks): its blocks would not be A's
    reversed_comm = comm.Split(0, size - rank)
    other = hpcgpu.ProcessGrid((1, size), comm=reversed_comm)
    refusals += refused(lambda: lu_factor(zero, grid=other), ValueError,
            f"lu_factor: grid 1x{size} is not over A's ranks in A's order: make it from A's grid, "
            "hpcgpu.ProcessGrid((pr, pc), comm=a.grid.cart)")
    other.free()
    reversed_comm.Free()
    refusals += refused(lambda: lu_factor(zero, grid=other), ValueError,
            "lu_factor: grid was freed (ProcessGrid.free): make it again from A's grid, "
            "hpcgpu.ProcessGrid((pr, pc), comm=a.grid.cart)")
if size > 1:
    refusals += refused(lambda: lu_factor(zero, nb=2 + (rank == 1)), ValueError,
            "lu_factor: nb differs across ranks: 2 on %s, 3 on rank 1"
            % {2: "rank 0", 3: "ranks 0, 2"}.get(size, f"ranks 0, 2-{size - 1}"))

counts = comm.gather((cases, refusals))
if rank == 0:
    print("ok", *(f"{c}/{r}" for c, r in counts), flush=True)
sys.exit(0)
