"""SUMMA against NumPy on the grid shapes of this many ranks (below); exits 1 everywhere on failure.

Usage: summa_checks.py [cpu|gpu] [all|transport]   (gpu: CuPy, or the stand-in of tests/device on PYTHONPATH)

``transport``: the checks of what a path of the panels (staged, CUDA-aware, NCCL) changes, at the cost of about a
third: every grid shape and shape of matrix, each with one dtype and panel width taking turns (every dtype and width
on every grid), the memory, traffic, HDF5 and redistribution checks; without the PDGEMM interface's op-pair table,
whose index arithmetic is the path's caller's (it runs in full on the host and at the device tests' ``all`` cases).

At 4 and 6 ranks the grids are the two-dimensional ones only (2x2; 2x3 and 3x2): 1 x P and P x 1 are the grids
every smaller count checks (1x2, 2x1, 1x3, 3x1, with empty blocks where a side is shorter than P), and at 4 ranks
they were two thirds of the program's time.
"""

import functools
import sys
import traceback
import tracemalloc

import numpy as np
from mpi4py import MPI

import hpcgpu
from hpcgpu import DistMatrix, ProcessGrid, _device, matmul
from hpcgpu.summa import plan_panels

DEVICE = sys.argv[1] if len(sys.argv) > 1 else "cpu"
TRANSPORT = len(sys.argv) > 2 and sys.argv[2] == "transport"
rt = hpcgpu.init(DEVICE)
assert rt.device == DEVICE, rt.describe()
P, r = rt.size, rt.rank
failures = []

grids = {(2, 3), (3, 2)} if P == 6 else {(2, 2)} if P == 4 else {tuple(MPI.Compute_dims(P, 2)), (1, P), (P, 1)}
SHAPES = [(24, 24, 24), (30, 17, 11), (97, 101, 89), (1, 13, 9), (9, 13, 1), (1, 1, 1), (12, 1, 10),
          (2, 5, 3), (P - 1 if P > 1 else 1, 4, 2), (0, 5, 3), (4, 0, 3), (4, 5, 0)]
TOL = {"float32": 2e-5, "complex64": 2e-5, "float64": 1e-13, "complex128": 1e-13}


def check(what, fn):
    try:
        fn()
    except Exception:
        failures.append(f"[{r}] {what}: {traceback.format_exc()}")


def one(grid, m, k, n, dtype, panel):
    a = DistMatrix.random((m, k), grid, dtype, seed=1)
    b = DistMatrix.random((k, n), grid, dtype, seed=2)
    c = matmul(a, b, panel=panel) if panel != "@" else a @ b
    assert c.gshape == (m, n) and c.dtype == np.dtype(dtype) and c.grid is grid
    assert c.lshape == (c.rows.stop - c.rows.start, c.cols.stop - c.cols.start)
    A, B, C = a.gather(), b.gather(), c.gather()
    if grid.cart.rank == 0:
        ref = A.astype(np.complex128 if "complex" in dtype else np.float64) @ B
        scale = max(1.0, np.abs(ref).max(initial=0.0))
        err = np.abs(C - ref).max() / scale if C.size else 0.0
        assert err <= TOL[dtype] * max(1, k), f"{grid.shape} {m}x{k}x{n} {dtype} panel={panel}: error {err:.2e}"


DTYPES, PANELS = ("float32", "float64", "complex64", "complex128"), (None, 1, 7, "@")
for gi, dims in enumerate(sorted(grids)):
    g = ProcessGrid(dims, comm=rt.comm)
    for si, (m, k, n) in enumerate(SHAPES):
        if TRANSPORT:  # one dtype and width a shape, taking turns: each appears 3 times on every grid
            runs = [(DTYPES[(si + gi) % 4], PANELS[(si // 4 + si + gi) % 4])]
        else:  # every dtype with the whole panel and "@"; float64 with panels of 1 and 7 too
            runs = [(dt, pw) for dt in DTYPES for pw in PANELS if dt == "float64" or pw not in (1, 7)]
        for dtype, panel in runs:
            check(f"matmul {dims} {(m, k, n)} {dtype} {panel}", functools.partial(one, g, m, k, n, dtype, panel))


def _op(x, t):
    return x if t == "N" else (x.T if t == "T" else x.conj().T)


def _draw(rng, shape, dt):
    x = rng.random(shape) + (1j * rng.random(shape) if "complex" in dt else 0)
    return rt.comm.bcast(x.astype(dt))


def pdgemm_interface():
    """C = alpha op(A) op(B) + beta C for every op pair, dtype, alpha/beta (a NaN C with beta = 0 must not
    propagate), non-square, prime and empty shapes, in place into the given C."""
    from hpcgpu._gemm import bfloat16_dtype

    rng = np.random.default_rng(3)
    bad = []  # rank 0 compares; it must not leave the loops (and the collectives) early
    dtypes = ["float32", "float64", "complex64", "complex128", "float16"] + (["bfloat16"] if bfloat16_dtype() else [])
    shapes = [(7, 5, 3), (13, 11, 2), (1, 4, 9), (5, 0, 2), (0, 3, 4), (P + 2, 3, 1)]
    if DEVICE == "gpu":  # the device path differs in its local GEMMs and staging, not in the index arithmetic
        dtypes, shapes = ["float64", "complex64", "float16"], shapes[1:4]
    tol = {"float32": 2e-5, "complex64": 2e-5, "float64": 1e-13, "complex128": 1e-13, "float16": 2e-3,
           "bfloat16": 2e-2}
    pairs = [(x, y) for x in "NTC" for y in "NTC"]
    # At 6 ranks on 2x3 only: 3x2's transposed operands are the redistribution checked below on every grid, and its
    # untransposed products every dtype and shape above; the table on both was half the program's time.
    for dims in sorted(grids)[:1] if P == 6 else sorted(grids):
        g = ProcessGrid(dims, comm=rt.comm)
        for d, dt in enumerate(dtypes):
            wide = np.complex128 if "complex" in dt else np.float64
            # every op pair in float64 and complex64 (where C is not T); a third of them, turn about, in the others,
            # whose index arithmetic is the same: cases d, d + 4, d + 8 (mod 9) meet all three alpha/beta cases
            cases = range(9) if dt in ("float64", "complex64") else sorted({(d + 4 * j) % 9 for j in range(3)})
            for (m, k, n) in shapes:
                for case in cases:
                    ta, tb = pairs[case]
                    # the three alpha/beta cases take turns (all three on every dtype and shape)
                    for alpha, beta, nan in [((1, 0, False), (2.0, 0.5, False), (-1.5, 0, True))[case % 3]]:
                            A = _draw(rng, (m, k) if ta == "N" else (k, m), dt)
                            B = _draw(rng, (k, n) if tb == "N" else (n, k), dt)
                            C0 = np.full((m, n), np.nan, dt) if nan else _draw(rng, (m, n), dt)
                            a = DistMatrix.from_global(A if r == 0 else None, g)
                            b = DistMatrix.from_global(B if r == 0 else None, g)
                            c = DistMatrix.from_global(C0 if r == 0 else None, g)
                            out = matmul(a, b, c, alpha=alpha, beta=beta, transa=ta, transb=tb)
                            got = c.gather()
                            if r == 0:
                                want = alpha * (_op(A.astype(wide), ta) @ _op(B.astype(wide), tb))
                                if beta:
                                    want = want + beta * C0.astype(wide)
                                scale = max(1.0, np.abs(want).max(initial=0.0))
                                err = np.abs(got.astype(wide) - want).max(initial=0.0) / scale
                                if out is not c or not np.isfinite(got).all() or err > tol[dt] * max(1, k):
                                    bad.append(f"{dims} {(m, k, n)} {dt} {ta}{tb} alpha={alpha} beta={beta} "
                                               f"nan-C={nan}: error {err:.2e}")
        g.free()
    assert not bad, bad[:5]


def transposes_and_redistribution_round_trip():
    """T, H and redistribution between every pair of grids: exact, and T.T / H.H give the matrix back."""
    rng = np.random.default_rng(4)
    bad = []
    gs = [ProcessGrid(d, comm=rt.comm) for d in sorted(grids)]
    for d, dt in enumerate(("float64", "complex64", "float16")):
        for i, shape in enumerate([(7, 5), (1, 9), (13, 2), (0, 3), (4, 0), (P + 1, P + 3)]):
            if TRANSPORT and i % 3 != d:  # each shape in one of the three dtypes
                continue
            x = rng.random(shape) + (1j * rng.random(shape) if "complex" in dt else 0)
            x = rt.comm.bcast(x.astype(dt))
            for g in gs:
                a = DistMatrix.from_global(x if r == 0 else None, g)
                t, h, tt, hh = a.T, a.H, a.T.T, a.H.H
                if not (t.gshape == shape[::-1] and t.grid is g and t.lshape == g.block_shape(shape[::-1])):
                    bad.append(f"{g.shape} {shape}: T is {t.gshape} {t.lshape}")
                got = [t.gather(), h.gather(), tt.gather(), hh.gather()]
                moved = [a.redistribute(g2).gather() for g2 in gs]
                if r == 0:
                    wants = [x.T, x.conj().T, x, x] + [x] * len(moved)
                    for y, want in zip(got + moved, wants, strict=True):
                        if not np.array_equal(y, want):
                            bad.append(f"{g.shape} {shape} {dt}")
    for g in gs:
        g.free()
    assert not bad, bad[:5]


def traffic_is_the_analytic_count():
    """Bytes counted in hpcgpu.comm during a matmul: SUMMA's m_l k (pc > 1) + k n_l (pr > 1) elements a rank,
    whatever the panel width; a transposed operand adds what its Alltoallv moves (the block, less what stays)."""
    bad = []
    for dims in sorted(grids):
        g = ProcessGrid(dims, comm=rt.comm)
        pr, pc = dims
        for (m, k, n), dt, panel in [((24, 30, 18), "float64", None), ((13, 7, 5), "complex64", 2),
                                      ((P + 1, 9, 3), "float32", 1)]:
            a = DistMatrix.random((m, k), g, dt, seed=1)
            b = DistMatrix.random((k, n), g, dt, seed=2)
            st = {}
            c = matmul(a, b, panel=panel, stats=st)
            item = np.dtype(dt).itemsize
            want = (c.lshape[0] * k * (pc > 1) + k * c.lshape[1] * (pr > 1)) * item
            if st["comm_bytes"] != want or st["comm_bytes_sent"] + st["comm_bytes_received"] != want:
                bad.append(f"{dims} {(m, k, n)} {dt}: {st} != {want}")
            at = DistMatrix.random((k, m), g, dt, seed=3)
            st2 = {}
            matmul(at, b, transa="T", panel=panel, stats=st2)
            t = at.T  # what the transposed call redistributed: its block, less the part that stays on this rank
            rows, cols = t.rows, t.cols
            own = max(0, min(rows.stop, at.cols.stop) - max(rows.start, at.cols.start)) * \
                max(0, min(cols.stop, at.rows.stop) - max(cols.start, at.rows.start))
            moved_in = (t.local.size - own) * item
            if st2["comm_bytes_received"] - st["comm_bytes_received"] != moved_in:
                bad.append(f"{dims} {(m, k, n)} {dt} transposed: {st2} vs {st}, moved in {moved_in}")
        g.free()
    assert not bad, bad[:5]


def two_and_half_d_is_summa():
    """2.5-D (every c that makes P / c a square, c > 1) against SUMMA, with alpha, beta and a transposed A;
    its traffic: the layers' SUMMA as SUMMA's count on the layer, the reduction two C blocks, parts adding up."""
    from hpcgpu._partition import block_range

    reps = [c for c in range(2, P + 1) if P % c == 0 and int(round((P // c) ** 0.5)) ** 2 == P // c]
    g = ProcessGrid(comm=rt.comm)
    bad = []
    for rep in reps:
        q = int(round((P // rep) ** 0.5))
        for (m, k, n), dt in [((16, 16, 16), "float64"), ((13, 7, 5), "complex128"), ((5, 1, 3), "float32"),
                              ((9, 12, 4), "float16")]:
            a = DistMatrix.random((k, m), g, dt, seed=1)
            b = DistMatrix.random((k, n), g, dt, seed=2)
            c1, c2 = DistMatrix.random((m, n), g, dt, seed=3), DistMatrix.random((m, n), g, dt, seed=3)
            st = {}
            matmul(a, b, c1, alpha=-1.5, beta=0.5, transa="T", algorithm="2.5d", replication=rep, stats=st)
            matmul(a, b, c2, alpha=-1.5, beta=0.5, transa="T")
            x, y = c1.gather(), c2.gather()
            if r == 0:
                tol = {"float64": 1e-13, "complex128": 1e-13, "float32": 1e-5, "float16": 4e-3}[dt]
                err = np.abs(x.astype(np.complex128) - y).max() / max(1.0, np.abs(y).max())
                if err > tol * max(1, k):
                    bad.append(f"c={rep} {(m, k, n)} {dt}: error {err:.2e} against SUMMA")
            layer, pos = divmod(g.rank, q * q)
            i, j = divmod(pos, q)
            kl = block_range(k, rep, layer)
            kl = kl[1] - kl[0]
            mq, nq = np.diff(block_range(m, q, i))[0], np.diff(block_range(n, q, j))[0]
            item = np.dtype(dt).itemsize
            acc = 4 if dt == "float16" else item
            want_summa = (mq * kl * (q > 1) + kl * nq * (q > 1)) * item
            parts = [st[f"comm_bytes_{p}"] for p in ("replicate", "summa", "reduce", "redistribute")]
            # the whole call also holds the transpose's Alltoallv: at least the four parts
            if st["replication"] != rep or st["comm_bytes_summa"] != want_summa or \
                    st["comm_bytes_reduce"] != 2 * mq * nq * acc or sum(parts) > st["comm_bytes"]:
                bad.append(f"c={rep} {(m, k, n)} {dt}: {st}, SUMMA part {want_summa}")
    g.free()
    assert not bad, bad[:5]


def random_is_grid_independent():
    g1 = ProcessGrid((1, 1), comm=MPI.COMM_SELF)
    for dims in grids:
        g = ProcessGrid(dims, comm=rt.comm)
        for dtype in ("float64", "complex64"):
            full = DistMatrix.random((300, 270), g, dtype, seed=5).gather()
            if r == 0:
                one_rank = DistMatrix.random((300, 270), g1, dtype, seed=5).local
                np.testing.assert_array_equal(full, _device.asnumpy(one_rank))
                assert np.abs(full.real).max() <= 1 and np.abs(full).min() >= 0
        g.free()
    g1.free()


def scatter_gather_round_trip():
    g = ProcessGrid(comm=rt.comm)
    glob = np.arange(35 * 8, dtype=np.float32).reshape(35, 8) if r == 0 else None
    d = DistMatrix.from_global(glob, g)
    want = np.arange(35 * 8, dtype=np.float32).reshape(35, 8)[d.rows, d.cols]
    np.testing.assert_array_equal(_device.asnumpy(d.local), want)
    back = d.gather(root=P - 1)
    if r == P - 1:
        np.testing.assert_array_equal(back, np.arange(35 * 8).reshape(35, 8))
    else:
        assert back is None


def _peak_bytes(fn):
    """Run fn(); the peak memory it added: tracemalloc on the host, CuPy's memory pool on the device."""
    if rt.device == "cpu":
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        out = fn()
        peak = tracemalloc.get_traced_memory()[1] - base
        tracemalloc.stop()
        return out, peak
    pool = rt.xp.get_default_memory_pool()
    pool.free_all_blocks()  # the pool keeps every block it made: its total after fn() is the peak
    base = pool.total_bytes()
    out = fn()
    return out, pool.total_bytes() - base


def memory_stays_within_blocks_and_panels():
    """Peak memory of a matmul <= C block + two panel pairs (+ 64 KiB of small objects); pinned staging bounded."""
    g = ProcessGrid(comm=rt.comm)
    m = k = n = 480
    a = DistMatrix.random((m, k), g, "float64", seed=1)
    b = DistMatrix.random((k, n), g, "float64", seed=2)
    w = 16
    _device.free_staging()  # slots keep the size of the widest panel any earlier call staged
    c, peak = _peak_bytes(lambda: matmul(a, b, panel=w))
    m_l, n_l = c.lshape
    bound = c.lnbytes + 2 * (m_l * w + w * n_l) * 8 + 64 * 1024
    assert peak <= bound, f"peak {peak} B > bound {bound} B (C block {c.lnbytes} B)"
    if rt.device == "gpu":
        # Staged panels: four pinned slots (two per operand), each a power of two >= its panel.
        slots, pinned = _device.staging_stats()
        assert pinned <= 2 * 2 * (m_l * w + w * n_l) * 8 + 8 * 4096, (slots, pinned)
    if P > 1:
        assert bound < m * n * 8, "the bound itself must be below one global matrix"
    assert len(plan_panels(k, g, w)) >= k // w


def hdf5_round_trip():
    import os
    import tempfile

    d = rt.comm.bcast(tempfile.mkdtemp() if r == 0 else None)
    g = ProcessGrid(comm=rt.comm)
    x = DistMatrix.random((37, 23), g, "complex128", seed=3)
    path = os.path.join(d, "x.h5")
    x.to_hdf5(path, "X", attrs={"note": "test"})
    assert not [f for f in os.listdir(d) if f.endswith(".tmp")]
    y = DistMatrix.from_hdf5(path, None, g)  # the only dataset
    np.testing.assert_array_equal(_device.asnumpy(y.local), _device.asnumpy(x.local))
    t = DistMatrix.from_hdf5(path, "X", g, transpose=True)
    assert t.gshape == (23, 37)
    full_t, full_x = t.gather(), x.gather()
    if r == 0:
        np.testing.assert_array_equal(full_t, full_x.T)
        import h5py

        with h5py.File(path) as f:
            assert f.attrs["world_size"] == P and list(f.attrs["grid"]) == list(g.shape)
            np.testing.assert_array_equal(f["X"][()], full_x)


def half_precision_sums_panels_in_float32():
    """float16 / bfloat16: C = ones @ ones is k exactly when every panel adds into a float32 sum.

    k = 3000 (float16) and 300 (bfloat16) are exact in the type, but a running sum kept in it
    stalls or rounds once it passes 2048 (float16) / 256 (bfloat16) with panels of 7: a dropped
    float32 accumulator gives the wrong integer. Random values are checked against float64 too,
    and the bfloat16 round trip through HDF5 (stored as float32) and from_global / gather.
    """
    import os
    import tempfile

    from hpcgpu._gemm import half_dtypes

    HALF = half_dtypes()

    bad = []  # asserted at the end: a failed assert in the middle would leave the other ranks in a collective
    for dtype in HALF:
        k = 3000 if dtype == np.float16 else 300
        for dims in sorted(grids)[:1] if TRANSPORT else sorted(grids):  # transport: the 1 x P grid's row panels
            g = ProcessGrid(dims, comm=rt.comm)
            for panel in (None, 7):
                ones_a = DistMatrix(rt.xp.ones(g.block_shape((5, k)), dtype), (5, k), g)
                ones_b = DistMatrix(rt.xp.ones(g.block_shape((k, 4)), dtype), (k, 4), g)
                c = matmul(ones_a, ones_b, panel=panel)
                assert c.dtype == dtype
                full = c.gather()
                if r == 0 and not (full.astype(np.float64) == k).all():
                    bad.append((dtype.name, dims, panel, np.unique(full)))
                a = DistMatrix.random((37, 53), g, dtype, seed=1)
                b = DistMatrix.random((53, 29), g, dtype, seed=2)
                A, B, C = a.gather(), b.gather(), matmul(a, b, panel=panel).gather()
                if r == 0:
                    ref = A.astype(np.float64) @ B.astype(np.float64)
                    ulp = 2.0**-8 if dtype.name == "bfloat16" else 2.0**-11
                    err = np.abs(C.astype(np.float64) - ref).max() / np.abs(ref).max()
                    if err > 2 * ulp:
                        bad.append((dtype.name, dims, panel, err))
            g.free()
    bf16 = HALF[-1]
    if bf16.name == "bfloat16":
        d = rt.comm.bcast(tempfile.mkdtemp() if r == 0 else None)
        g = ProcessGrid(comm=rt.comm)
        x = DistMatrix.random((19, 11), g, bf16, seed=4)
        path = os.path.join(d, "x.h5")
        x.to_hdf5(path, "X")
        y = DistMatrix.from_hdf5(path, "X", g, dtype=bf16)
        np.testing.assert_array_equal(_device.asnumpy(y.local), _device.asnumpy(x.local))
        full = x.gather()
        z = DistMatrix.from_global(full if r == 0 else None, g)
        assert z.dtype == bf16
        np.testing.assert_array_equal(_device.asnumpy(z.local), _device.asnumpy(x.local))
        if r == 0:
            import h5py

            with h5py.File(path) as f:
                assert f["X"].dtype == np.float32
                np.testing.assert_array_equal(f["X"][()], full.astype(np.float32))
        g.free()
    assert not bad, bad


for fn in (random_is_grid_independent, scatter_gather_round_trip, memory_stays_within_blocks_and_panels,
           hdf5_round_trip, half_precision_sums_panels_in_float32, pdgemm_interface,
           transposes_and_redistribution_round_trip, traffic_is_the_analytic_count, two_and_half_d_is_summa):
    if not (TRANSPORT and fn is pdgemm_interface):
        check(fn.__name__, fn)

ok = rt.comm.allreduce(not failures, op=MPI.LAND)
for f in failures[:5]:
    print(f, file=sys.stderr)
if r == 0:
    print("summa checks:", "ok" if ok else "FAILED", f"grids {sorted(grids)} collectives={rt.collectives}",
          "transport" if TRANSPORT else "all")
sys.exit(0 if ok else 1)
