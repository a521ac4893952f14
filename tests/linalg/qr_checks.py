"""Rank program of tests/linalg/test_qr.py: qr, lstsq and svd (TSQR) on every grid of this many ranks, every dtype,
shapes no grid divides, row blocks shorter than n and empty blocks, against LAPACK's test ratios and SciPy on the
gathered matrix; then their refusals.

The measures are those of LAPACK's test programs (xQRT01, xQRT17, xBDT01), each below 16, the bound the guide
promises (LAPACK's own threshold is 30): ``||A - QR||_F / (||A||_F m eps)``, ``||I - Q^H Q||_F / (m eps)``,
``||A^H r||_F / (||A||_F ||b||_F m eps)`` and ``||A - U S V^H||_F / (||A||_F m eps)``. Rank 0 prints ``ok``, each
rank's number of cases and of refusals checked (an assert on any rank fails the launch).
"""

import sys

import numpy as np
import scipy.linalg

import hpcgpu
from hpcgpu.errors import AgreedError
from hpcgpu.linalg import lstsq, pdgels, pdgeqrf, qr, svd

from _common import dist, refused

rt = hpcgpu.init()
comm = rt.comm
rank, size = comm.Get_rank(), comm.Get_size()
rng = np.random.default_rng(63)
BOUND = 16  # docs/guide/linalg.rst's "Accuracy" (LAPACK's tests allow 30)
GRIDS = {1: [(1, 1)], 2: [(1, 2), (2, 1)], 3: [(1, 3), (3, 1)], 4: [(2, 2), (4, 1), (1, 4)],
         6: [(2, 3), (3, 2), (6, 1), (1, 6)]}
SHAPES = [  # m, n, nrhs: uneven, fewer rows a rank than n (10 x 8 at 4 ranks), square, m smaller than P, n = 1
    (37, 5, 3), (10, 8, 2), (6, 6, 1), (3, 2, 2), (29, 1, 1), (61, 13, 4)]
DTYPES = ("float32", "float64", "complex128")


def draw(shape, dtype):
    g = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        g = g + 1j * rng.standard_normal(shape)
    return g.astype(dtype)


def host(x):
    return hpcgpu._device.asnumpy(x)


def fro(x):
    return float(np.linalg.norm(x))


def same_everywhere(*values):
    """The values (ints, or arrays: their bytes) are the same on every rank."""
    got = comm.allgather([host(v).tobytes() if hasattr(v, "shape") else v for v in values])
    assert all(v == got[0] for v in got), got


def check_qr(g, a):
    m, n = g.shape
    eps = np.finfo(g.dtype).eps
    q, r = qr(a)
    (r_only,) = pdgeqrf(a, mode="r")
    assert q.gshape == (m, n) and r.gshape == (n, n) and q.grid is a.grid and q.dtype == g.dtype
    Q, R, R1 = q.gather(), r.gather(), r_only.gather()
    if rank == 0:
        assert np.array_equal(R, np.triu(R)), R
        assert fro(g - Q @ R) / (fro(g) * m * eps) < BOUND, (g.shape, a.grid.shape)
        assert fro(np.eye(n) - Q.conj().T @ Q) / (m * eps) < BOUND, (g.shape, a.grid.shape)
        # no Q formed, the same R up to its rows' signs (a leaf of many bands takes tpqrt's, where Q's geqrf's)
        d = np.diagonal(R1)
        phase = np.where(d == 0, 1, np.diagonal(R) / np.where(d == 0, 1, d))
        phase = phase / np.where(phase == 0, 1, np.abs(phase))
        assert fro(R1 * phase[:, None] - R) <= BOUND * n * eps * fro(R), (g.shape, a.grid.shape)
        assert np.allclose(np.abs(phase), 1), phase


def check_lstsq(g, gb, a):
    m, n = g.shape
    nrhs = gb.shape[1]
    eps = np.finfo(g.dtype).eps
    x, res, rk, s = lstsq(a, dist(gb, a.grid))
    assert x.gshape == (n, nrhs) and x.grid is a.grid and x.dtype == g.dtype
    same_everywhere(rk, s, res)
    X = x.gather()
    if rank == 0:
        r = gb - g @ X
        assert fro(g.conj().T @ r) / (fro(g) * fro(gb) * m * eps) < BOUND, (g.shape, a.grid.shape)
        xr, rr, kr, sr = scipy.linalg.lstsq(g, gb)
        assert rk == kr == n, (rk, kr)
        cond = sr[0] / sr[-1]
        assert fro(X - xr) <= BOUND * cond * n * eps * fro(xr), (g.shape, a.grid.shape)
        assert np.abs(host(s) - sr).max() <= BOUND * m * eps * sr[0], (host(s), sr)
        assert host(res).shape == rr.shape == ((nrhs,) if m > n else (0,)), (host(res).shape, rr.shape)
        assert np.allclose(host(res), rr, rtol=BOUND * cond * m * eps, atol=BOUND * m * eps * fro(gb) ** 2)


def check_rank_deficient(dtype, grid):
    """A column that is the sum of two others: rank n - 1, the minimum-norm solution, no residues.

    ``cond`` well above the rounding: the column is the others' sum only to the dtype's rounding, so A's smallest
    singular value is about ``eps s[0]``, the default ``cond``'s cut, where either side of it is right (rank 5
    here in float32 at 6 ranks with one build of LAPACK, 4 with another)."""
    m, n = 23, 5
    eps = np.finfo(dtype).eps
    cond = 100 * m * eps
    g = draw((m, n), dtype)
    g[:, 3] = g[:, 0] + g[:, 1]
    gb = draw((m, 2), dtype)
    x, res, rk, s = pdgels(dist(g, grid), dist(gb, grid), cond=cond)
    X = x.gather()
    if rank == 0:
        xr, rr, kr, sr = scipy.linalg.lstsq(g, gb, cond=cond)
        # hpcgpu's residues of a rank-deficient A are empty, as NumPy's and SciPy's before 1.18 (which gives NaNs)
        assert rk == kr == n - 1 and host(res).shape == (0,), (rk, kr, host(res).shape)
        assert rr.size == 0 or np.isnan(rr).all(), rr
        assert fro(X - xr) <= 1e3 * m * eps * fro(xr), (fro(X - xr), fro(xr))


def check_zero(grid):
    """A zero A: rank 0, x zero, and still an orthonormal Q (no R row stands for a block's missing rows)."""
    g = np.zeros((13, 4))
    a = dist(g, grid)
    q, r = qr(a)
    x, res, rk, s = lstsq(a, dist(draw((13, 1), "float64"), grid))
    Q, X = q.gather(), x.gather()
    if rank == 0:
        assert rk == 0 and not X.any() and not host(s).any() and host(res).shape == (0,), (rk, X, host(s))
        assert fro(np.eye(4) - Q.T @ Q) / (13 * np.finfo(float).eps) < BOUND


def check_svd(g, a):
    m, n = g.shape
    eps = np.finfo(g.dtype).eps
    u, s, vh = svd(a)
    s_only = svd(a, compute_uv=False)
    assert u.gshape == (m, n) and vh.gshape == (n, n) and u.grid is a.grid
    same_everywhere(s)
    U, VH = u.gather(), vh.gather()
    if rank == 0:
        s, s_only = host(s), host(s_only)
        sr = np.linalg.svd(g, compute_uv=False)
        assert fro(g - (U * s) @ VH) / (fro(g) * m * eps) < BOUND, (g.shape, a.grid.shape)
        assert fro(np.eye(n) - U.conj().T @ U) / (m * eps) < BOUND, (g.shape, a.grid.shape)
        assert fro(np.eye(n) - VH @ VH.conj().T) / (n * eps) < BOUND, (g.shape, a.grid.shape)
        tol = BOUND * m * eps * sr[0]
        assert np.abs(s - sr).max() <= tol and np.abs(s_only - sr).max() <= tol, (s, s_only, sr)


# Every shape once a launch, on the grids in turn, its dtype turning with the shape and the number of ranks, so
# that the launches at 1-6 ranks see every shape in every dtype (a launch of every combination takes minutes here)
cases = 0
grids = [hpcgpu.ProcessGrid(dims) for dims in GRIDS[size]]
for k, (m, n, nrhs) in enumerate(SHAPES):
    grid, dtype = grids[k % len(grids)], DTYPES[(k + size) % len(DTYPES)]
    g, gb = draw((m, n), dtype), draw((m, nrhs), dtype)
    a = dist(g, grid)
    check_qr(g, a)
    check_lstsq(g, gb, a)
    check_svd(g, a)
    cases += 1
check_rank_deficient(DTYPES[size % len(DTYPES)], grids[-1])
check_zero(grids[0])
cases += 2
# Each rank's leaf by many bands of rows (hpcgpu.linalg._local.qr_r and qr: geqrf, then tpqrt a band), which a block
# takes from two bands of 1,024 rows on: bands of 8 rows here, the last cut short
local = sys.modules["hpcgpu.linalg._local"]
band, local.QR_BAND = local.QR_BAND, 8
g, gb = draw((40 * size + 7, 5), DTYPES[size % len(DTYPES)]), draw((40 * size + 7, 3), DTYPES[size % len(DTYPES)])
a = dist(g, grids[-1])
check_qr(g, a)
check_lstsq(g, gb, a)
check_svd(g, a)
local.QR_BAND = band
cases += 1

# Square: "full" is "reduced"; and the refusals, each one line on every rank before any work
grid = hpcgpu.ProcessGrid()
sq = dist(draw((4, 4), "float64"), grid)
q, r = qr(sq, mode="full")
u, s, vh = svd(sq, full_matrices=True)
assert q.gshape == u.gshape == (4, 4)
tall, wide = dist(draw((9, 3), "float64"), grid), dist(draw((3, 9), "float64"), grid)
b = dist(draw((9, 2), "float64"), grid)
served = "served: tall or square A (m >= n >= 1) whose n x n R fits one rank (TSQR)"
refusals = 0
refusals += refused(lambda: qr(wide), ValueError, f"qr: A is 3 x 9; {served}")
refusals += refused(lambda: lstsq(wide, dist(draw((3, 1), "float64"), grid)), ValueError,
                    f"lstsq: A is 3 x 9; {served}")
refusals += refused(lambda: svd(wide), ValueError, f"svd: A is 3 x 9; {served}")
refusals += refused(lambda: qr(tall, mode="full"), ValueError,
                    "qr: mode 'full' (Q of 9 x 9) is not served for a tall A (9 x 3); mode 'reduced' gives Q 9 x 3 "
                    "and R 3 x 3")
refusals += refused(lambda: qr(tall, mode="complete"), ValueError,
                    "qr: mode must be 'reduced', 'economic', 'r' or 'full', got 'complete'")
refusals += refused(lambda: svd(tall, full_matrices=True), ValueError,
                    "svd: full_matrices=True (U of 9 x 9) is not served for a tall A (9 x 3); full_matrices=False "
                    "gives U 9 x 3")
refusals += refused(lambda: svd(tall, compute_uv="yes"), TypeError, "svd: compute_uv must be True or False, got 'yes'")
refusals += refused(lambda: lstsq(tall, b, cond=-1.0), ValueError,
                    "lstsq: cond must be None or a finite number >= 0, got -1.0")
refusals += refused(lambda: lstsq(tall, dist(draw((8, 2), "float64"), grid)), ValueError,
                    "lstsq: shapes do not conform: A is 9 x 3, B has 8 rows (A's 9 needed)")
refusals += refused(lambda: lstsq(tall, dist(draw((9, 2), "float32"), grid)), TypeError,
                    "lstsq: A is float64 and B is float32: give both one dtype (b.astype(a.dtype))")
refusals += refused(lambda: qr(np.ones((9, 3))), TypeError, "qr: A must be an hpcgpu.DistMatrix, got ndarray")
nan = draw((9, 3), "float64")
nan[7, 2] = np.nan
refusals += refused(lambda: qr(dist(nan, grid)), ValueError,
                    "qr: A holds NaN or inf (at row 7, column 2): the solvers need finite values")
# work that does not fit the last rank's memory (its device's, alone; its node's, with the other ranks there):
# one line, the same on every rank, before any work
tsqr = sys.modules["hpcgpu.linalg.tsqr"]
fits = tsqr._work_bytes
tsqr._work_bytes = lambda a, extra, want_q: 1 << 60 if rank == size - 1 else fits(a, extra, want_q)
try:
    qr(tall)
    raise AssertionError("not refused: work beyond memory")
except MemoryError as e:
    assert isinstance(e, AgreedError) and str(e).startswith("qr: ") and "\n" not in str(e), str(e)
    assert str(e).endswith("GiB): use more ranks or nodes, or a smaller problem"), str(e)
    assert len(set(comm.allgather(str(e)))) == 1
    refusals += 1
tsqr._work_bytes = fits
# a cond that differs across the ranks is named, not a hang
if size > 1:
    refusals += refused(lambda: lstsq(tall, b, cond=0.1 if rank == 0 else 0.2), ValueError,
                        f"lstsq: cond differs across ranks: 0.1 on rank 0, 0.2 on rank{'s' if size > 2 else ''} 1"
                        f"{'-' + str(size - 1) if size > 2 else ''}")

counts = comm.gather((cases, refusals))
if rank == 0:
    print("ok", *[f"{c}/{r}" for c, r in counts], flush=True)
sys.exit(0)
