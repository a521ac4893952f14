"""Rank program of tests/linalg/test_arithmetic.py: a DistMatrix's and a DistVector's arithmetic, views, reductions
and products against NumPy on the gathered arrays, on every grid of this many ranks, in float64, complex128 and
float32, for shapes no grid divides and empty blocks; the bytes a view's product moves; the refusals' messages.

Usage: arithmetic_checks.py [cpu|auto]. Every rank collects what failed (no rank stops while the others wait in a
collective); rank 0 prints ``ok``, the runtime's device and each rank's number of cases, or the failures, and the
launch exits 1.
"""

import functools
import operator
import sys
import traceback

import numpy as np

import hpcgpu
from hpcgpu import comm as hcomm
from hpcgpu.linalg import DistMatrix, DistVector, norm
from hpcgpu.linalg.distmatrix import TransposeView
from hpcgpu.linalg.summa import variant

rt = hpcgpu.init(sys.argv[1] if len(sys.argv) > 1 else "cpu")
world, P, r = rt.comm, rt.size, rt.rank
grids = sorted({(pr, P // pr) for pr in range(1, P + 1) if P % pr == 0})
SHAPES = [(7, 5), (1, 9), (0, 4), (P + 1, P + 3), (5, 1)]
TOL = {"float32": 1e-5, "float64": 1e-13, "complex128": 1e-13}
bad, cases = [], 0


def same(got, want, what, tol=0.0):
    """A result against NumPy's on the global arrays (every rank makes them from the seed): each rank its own
    block (a DistMatrix, DistVector) or rank 0 a gathered array; dtype and shape exactly, values exactly or
    within ``tol``."""
    if isinstance(got, (DistMatrix, DistVector)):
        if got.shape != want.shape:
            bad.append(f"{what}: global shape {got.shape}, NumPy {want.shape}")
            return
        want = want[got.rows, got.cols] if isinstance(got, DistMatrix) else want[got.span]
        got = hpcgpu._device.asnumpy(got.local)
    elif r != 0:
        return
    if got.dtype != want.dtype or got.shape != want.shape:
        bad.append(f"{what}: {got.dtype} {got.shape}, NumPy {want.dtype} {want.shape}")
    elif tol == 0.0 and not np.array_equal(got, want, equal_nan=True):
        bad.append(f"{what}: differs from NumPy by {np.abs(got - want).max()}")
    elif tol and not np.allclose(got, want, rtol=tol, atol=tol * max(1.0, np.abs(want).max(initial=0))):
        bad.append(f"{what}: differs from NumPy by {np.abs(got - want).max()}")


PENDING = []


def everywhere(value, want, what, tol):
    """A reduction: the same value on every rank (exactly), NumPy's within ``tol``; compared at :func:`settle`."""
    PENDING.append((value, want, what, tol))


def settle():
    """One allgather of the reductions' values since the last: each the same on every rank, and NumPy's."""
    values = world.allgather([repr(v) for v, *_ in PENDING])
    for i, (value, want, what, tol) in enumerate(PENDING):
        if len({rank[i] for rank in values}) != 1:
            bad.append(f"{what}: differs over the ranks: {[rank[i] for rank in values]}")
        elif not np.isclose(value, want, rtol=tol, atol=tol):
            bad.append(f"{what}: {value}, NumPy {want}")
    PENDING.clear()


def glob(shape, dtype, seed, offset=0.0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, shape) + offset
    if dtype == "complex128":
        x = x + 1j * rng.uniform(-1, 1, shape)
    return x.astype(dtype)


def moved(fn):
    """``fn()`` and the bytes this rank's collectives moved meanwhile (hpcgpu.comm's count)."""
    t0 = hcomm.traffic()
    out = fn()
    t1 = hcomm.traffic()
    return out, t1["sent"] - t0["sent"] + t1["received"] - t0["received"]


def elementwise(g, shape, dtype):
    A, B = glob(shape, dtype, 1), glob(shape, dtype, 2, offset=3.0)  # B far from 0: a divisor
    a, b = DistMatrix.from_global(A if r == 0 else None, g), DistMatrix.from_global(B if r == 0 else None, g)
    s = 1.5 if dtype != "complex128" else 1.5 - 0.5j
    pairs = {
        "a + b": (lambda: a + b, A + B), "a - b": (lambda: a - b, A - B), "a * b": (lambda: a * b, A * B),
        "a / b": (lambda: a / b, A / B), "2 * a": (lambda: 2 * a, 2 * A), "a * s": (lambda: a * s, A * s),
        "s - a": (lambda: s - a, s - A), "a + 1": (lambda: a + 1, A + 1), "a / 4": (lambda: a / 4, A / 4),
        "3 / b": (lambda: 3 / b, 3 / B), "-a": (lambda: -a, -A), "+a": (lambda: +a, +A),
        "abs": (lambda: abs(a), abs(A)),
        "conj": (lambda: a.conj(), A.conj()), "real": (lambda: a.real, A.real.copy()),
        "imag": (lambda: a.imag, A.imag.copy() if A.dtype.kind == "c" else np.zeros_like(A)),
        "np.float64 * a": (lambda: np.float64(2) * a, np.float64(2) * A),
        "a + 1j": (lambda: a + 1j, A + 1j), "astype": (lambda: a.astype("complex64"), A.astype("complex64")),
        "copy": (lambda: a.copy(), A.copy()),
        "a.T": (lambda: a.T, A.T), "a.H": (lambda: a.H, A.conj().T), "a.T.T": (lambda: a.T.T, A),
        "2 * a.H": (lambda: 2 * a.H, 2 * A.conj().T), "s * a.H": (lambda: s * a.H, s * A.conj().T),
        "a.T + b.T": (lambda: a.T + b.T, A.T + B.T), "a.H - b.H": (lambda: a.H - b.H, A.conj().T - B.conj().T),
        "a.T + b.T.copy()": (lambda: a.T + b.T.copy(), A.T + B.T), "abs(a.H)": (lambda: abs(a.H), abs(A.conj().T)),
        "a.H.imag": (lambda: a.H.imag, A.conj().T.imag.copy() if A.dtype.kind == "c" else np.zeros_like(A.T)),
        "a.T.conj()": (lambda: a.T.conj(), A.T.conj()), "a.H.T": (lambda: a.H.T, A.conj()),
    }
    for what, (fn, want) in pairs.items():
        same(fn(), want, f"{g.shape} {shape} {dtype} {what}")
    same(a.H.gather(), A.conj().T, f"{g.shape} {shape} {dtype} a.H.gather()")
    # views: nothing moves when one is taken or combined with a scalar or a view of its kind
    for what, fn in {"a.T": lambda: a.T, "2 * a.T": lambda: 2 * a.T, "a.H + b.H": lambda: a.H + b.H,
                     "-a.T.astype": lambda: -a.T.astype("complex128")}.items():
        v, nbytes = moved(fn)
        if not isinstance(v, TransposeView) or v._moved is not None or nbytes:
            bad.append(f"{g.shape} {shape} {dtype} {what}: a {type(v).__name__} that moved {nbytes} bytes")
    if a.T.T is not a or a.H.H is not a:
        bad.append(f"{g.shape} {shape} {dtype}: .T.T or .H.H is not the matrix")
    # in place, keeping the dtype
    c = a.copy()
    c += b
    c *= 2
    c -= 1
    c /= 4
    same(c, (((A + B) * 2) - 1) / 4, f"{g.shape} {shape} {dtype} in place")
    return 1


def promotion(g):
    """NumPy's dtype of each mixed operation, for the dtypes a DistMatrix holds."""
    n = 0
    for dt in ("float32", "float64", "complex64", "complex128"):
        A = glob((3, 4), dt, 3)
        a = DistMatrix.from_global(A if r == 0 else None, g)
        for what, got, want in [("* 2.0", a * 2.0, A * 2.0), ("* np.float64", a * np.float64(2), A * np.float64(2)),
                                ("+ 1j", a + 1j, A + 1j), ("* np.float32", a * np.float32(2), A * np.float32(2)),
                                ("+ float64 matrix", a + a.real.astype("float64"), A + A.real.astype("float64")),
                                ("+ float32 matrix", a + a.real.astype("float32"), A + A.real.astype("float32")),
                                ("abs", abs(a), abs(A))]:
            if got.dtype != want.dtype:
                bad.append(f"{dt} {what}: {got.dtype}, NumPy {want.dtype}")
            n += 1
    return n


def reductions(g, shape, dtype):
    A = glob(shape, dtype, 4)
    a = DistMatrix.from_global(A if r == 0 else None, g)
    tol = TOL[dtype] * 10
    for ord in (None, "fro", 1, -1, np.inf, -np.inf):
        want = np.linalg.norm(A, ord) if A.size else 0.0
        everywhere(a.norm(ord), want, f"{g.shape} {shape} {dtype} norm {ord}", tol)
        if ord is not None and ord != "fro" and A.size:
            everywhere(a.T.norm(ord), np.linalg.norm(A.T, ord), f"{g.shape} {shape} {dtype} a.T.norm {ord}", tol)
    everywhere(norm(a.H), np.linalg.norm(A) if A.size else 0.0, f"{g.shape} {shape} {dtype} norm(a.H)", tol)
    everywhere(a.trace(), np.trace(A), f"{g.shape} {shape} {dtype} trace", tol)
    everywhere(a.H.trace(), np.trace(A.conj().T), f"{g.shape} {shape} {dtype} a.H.trace", tol)
    everywhere(a.sum(), A.sum(), f"{g.shape} {shape} {dtype} sum", tol)
    for layout in ("rows", "cols"):
        same(a.diag(layout), np.diag(A).copy(), f"{g.shape} {shape} {dtype} diag {layout}")
    same(a.H.diag(), np.diag(A).conj(), f"{g.shape} {shape} {dtype} a.H.diag")
    return 1


def vectors(g, n, dtype):
    X, Y = glob(n, dtype, 5), glob(n, dtype, 6, offset=3.0)
    tol = TOL[dtype] * 10
    for layout in ("rows", "cols"):
        x = DistVector.from_global(X if r == 0 else None, g, layout)
        y = DistVector.from_global(Y if r == 0 else None, g, "cols")
        what = f"{g.shape} vector {n} {dtype} {layout}"
        same(x.gather(), X, what)
        y = y.as_layout(layout)
        same(y, Y, f"{what} as_layout")
        same(2 * x - y / 3, 2 * X - Y / 3, f"{what} 2 x - y / 3", tol)
        same(abs(-x), abs(X), f"{what} abs")
        z = x.copy()
        z += y
        same(z, X + Y, f"{what} +=")
        everywhere(x.dot(y), np.dot(X, Y), f"{what} dot", tol)
        everywhere(x @ y, X @ Y, f"{what} x @ y", tol)
        everywhere(x.vdot(y.as_layout("rows" if layout == "cols" else "cols")), np.vdot(X, Y), f"{what} vdot", tol)
        for ord in (None, 2, 1, np.inf, -np.inf):
            everywhere(x.norm(ord), np.linalg.norm(X, ord) if n else 0.0, f"{what} norm {ord}", tol)
        m = x.to_matrix()
        same(m, X.reshape(n, 1), f"{what} to_matrix")
        same(DistVector.from_matrix(m, layout), X, f"{what} from_matrix")
    return 1


def products(g, m, k, dtype):
    """op(A) @ x for a vector and for skinny matrices: NumPy's values; A never moves, nor does a view."""
    A = glob((k, m), dtype, 7)
    a = DistMatrix.from_global(A if r == 0 else None, g)
    tol = TOL[dtype] * max(1, k) * 10
    item = np.dtype(dtype).itemsize
    pr, pc = g.shape
    n = 0
    for op, At in (("T", A.T), ("C", A.conj().T), ("N", A)):
        v = a if op == "N" else (a.T if op == "T" else a.H)
        for cols in (1, 8):
            X = glob((v.gshape[1], cols), dtype, 8)
            x = DistMatrix.from_global(X if r == 0 else None, g)
            y, nbytes = moved(functools.partial(operator.matmul, v, x))
            same(y, At @ X, f"{g.shape} {op}({k}x{m}) @ {cols} {dtype}", tol)
            if op != "N" and v._moved is not None:
                bad.append(f"{g.shape} {op} @ {cols}: the view was moved")
            mm, kk = At.shape
            # stationary A: B's rows, the partial products and C's blocks move, never A's block
            bound = (2 * -(-kk // min(pr, pc)) * cols + 3 * -(-mm // min(pr, pc)) * cols
                     + -(-mm // pr) * -(-cols // pc)) * item
            st = {}
            hpcgpu.matmul(a, x, transa=op, algorithm="summa", stats=st)
            chosen = variant(((mm, kk), (kk, cols)), g.shape, op)
            if cols == 1 and P > 1 and (op != "N" or pc > 1) and chosen != "stationary-a":
                bad.append(f"{g.shape} {op} {mm}x{kk} @ {cols}: SUMMA chosen for a matrix-vector product")
            if chosen == "summa" and nbytes != st["comm_bytes"]:
                bad.append(f"{g.shape} {op}({k}x{m}) @ {cols}: moved {nbytes} bytes, SUMMA {st['comm_bytes']}")
            if chosen == "stationary-a" and (nbytes > bound or cols == 1 and nbytes >= st["comm_bytes"]):
                bad.append(f"{g.shape} {op}({k}x{m}) @ {cols}: moved {nbytes} bytes, bound {bound}, SUMMA "
                           f"{st['comm_bytes']}")
            n += 1
        # a vector: the local GEMV and one Allreduce of y's piece
        xv = glob(v.gshape[1], dtype, 9)
        for layout in ("cols", "rows"):
            x = DistVector.from_global(xv if r == 0 else None, g, layout)
            y = v @ x
            same(y, At @ xv, f"{g.shape} {op}({k}x{m}) @ vector {layout} {dtype}", tol)
            if op == "T":  # NumPy's 1-D x @ M is M^T x
                same(x @ a, xv @ A, f"{g.shape} vector {layout} @ ({k}x{m}) {dtype}", tol)
            if y.layout != ("rows" if op == "N" else "cols"):
                bad.append(f"{g.shape} {op} @ vector: layout {y.layout}")
        x = DistVector.from_global(xv if r == 0 else None, g, "cols" if op == "N" else "rows")
        y, nbytes = moved(functools.partial(operator.matmul, v, x))
        want = y.local.size * (item if op == "N" and pc > 1 or op != "N" and pr > 1 else 0) * 2
        if nbytes != want:
            bad.append(f"{g.shape} {op} @ vector: moved {nbytes} bytes, one Allreduce of y's piece is {want}")
    # a square product through views: read as transa/transb, the view never moved
    B = glob((k, k), dtype, 10)
    b = DistMatrix.from_global(B if r == 0 else None, g)
    t = a.T
    same(t @ b.H, A.T @ B.conj().T, f"{g.shape} a.T @ b.H {dtype}", tol)
    if t._moved is not None:
        bad.append(f"{g.shape} a.T @ b.H: the view was moved")
    c = hpcgpu.matmul(a.H, b, algorithm="stationary-a", alpha=2.0)
    same(c, 2 * A.conj().T @ B, f"{g.shape} stationary-a a.H @ b {dtype}", tol)
    c2 = DistMatrix.from_global(A.T.copy() if r == 0 else None, g)
    hpcgpu.matmul(a, b.T, c2, transa="T", beta=-1.0, algorithm="auto")
    same(c2, A.T @ B.T - A.T, f"{g.shape} auto a^T b^T - c {dtype}", tol)
    return n + 1


def refusals(g):
    """The one-line messages, the same on every rank."""
    a = DistMatrix.from_global(glob((4, 3), "float64", 1) if r == 0 else None, g)
    b = DistMatrix.zeros((3, 4), g)
    x = DistVector.zeros(3, g, dtype="float32")
    tries = {
        "np.asarray of a DistMatrix: it is distributed; .gather() (collective) gives the whole of it on rank 0, "
        ".local this rank's block": lambda: np.asarray(a),
        "np.asarray of a DistVector: it is distributed; .gather() (collective) gives the whole of it on rank 0, "
        ".local this rank's block": lambda: np.array(x),
        "DistMatrix +: the operands differ: 4 x 3 float64 on grid {g} and 3 x 4 float64 on grid {g} (elementwise "
        "needs one shape, layout and grid)": lambda: a + b,
        "DistMatrix +=: the result is complex128, the operand float64: x = x + y makes a new one":
            lambda: a.__iadd__(1j),
        "DistMatrix *= on a transposed view (.T, .H) would change a copy, not its matrix: write v = v * x, or change "
        "the matrix itself": lambda: a.T.__imul__(2),
        "DistMatrix + ndarray: combine with a scalar or a DistMatrix of the same shape and grid "
        "(DistMatrix.from_global distributes an array)": lambda: a + np.ones((4, 3)),
        "norm: ord must be None, 'fro', 1, -1, inf or -inf for a matrix, got 2": lambda: a.norm(2),
        "norm: ord must be None, 2, 1, inf or -inf for a vector, got 'fro'": lambda: x.norm("fro"),
        "DistMatrix @ DistVector: dtypes differ: float64 and float32 (x.astype(a.dtype))": lambda: a @ x,
        "DistMatrix @ ndarray: multiply by a DistMatrix or a DistVector (their from_global distributes an array)":
            lambda: a @ np.ones(3),
        "DistMatrix @ DistVector: shapes do not conform: 3 x 4 and a vector of 3": lambda: a.T @ x.astype("float64"),
        "matmul: c must not be a transposed view (.T, .H): C is written into, and a view's blocks are a copy; pass "
        "a matrix": lambda: hpcgpu.matmul(a, a.T, b.T),
        "astype: dtype int32 is not one of float32, float64, complex64, complex128, float16"
        + (", bfloat16" if any(t.name == "bfloat16" for t in hpcgpu.linalg.distmatrix.DTYPES) else ""):
            lambda: a.astype("int32"),
    }
    n = 0
    for want, fn in tries.items():
        want = want.replace("{g}", f"{g.shape[0]}x{g.shape[1]}")
        try:
            fn()
            bad.append(f"not refused: {want}")
        except (TypeError, ValueError) as e:
            if str(e) != want or not isinstance(e, hpcgpu.AgreedError):
                bad.append(f"refused as {type(e).__name__} {e!r}, expected {want!r}")
        n += 1
    return n


def check(what, fn, *args):
    global cases
    try:
        cases += fn(*args)
        settle()
    except Exception:
        bad.append(f"[{r}] {what}: {traceback.format_exc()}")


for gi, dims in enumerate(grids):
    g = hpcgpu.ProcessGrid(dims, comm=world)
    for si, shape in enumerate(SHAPES):
        if P > 2 and (si + gi) % len(grids):  # from 3 ranks each shape on one of the grids, taking turns
            continue
        for di, dtype in enumerate(("float64", "complex128", "float32")):
            if (si + di) % 2 and dtype != "float64":  # every shape in float64, half of them in each other dtype
                continue
            check(f"elementwise {dims} {shape} {dtype}", elementwise, g, shape, dtype)
            if si % 2 == 0 or dtype == "float64":
                check(f"reductions {dims} {shape} {dtype}", reductions, g, shape, dtype)
    for di, dtype in enumerate(("float64", "complex128", "float32")):
        if P > 2 and (di + gi) % len(grids) and dtype != "float64":  # the others on one grid each, by turns
            continue
        for n in (0, P + 4) if dtype == "float64" else (P + 4,):
            check(f"vectors {dims} {n} {dtype}", vectors, g, n, dtype)
        check(f"products {dims} {dtype}", products, g, 2 * P + 19, 3 * P + 13, dtype)
    check(f"promotion {dims}", promotion, g)
    check(f"refusals {dims}", refusals, g)
    g.free()
failed = world.allgather(bad)
counts = world.gather(cases)
if r == 0:
    lines = [line for rank in failed for line in rank]
    print("ok", rt.device, *counts, flush=True) if not lines else print("FAILED", *lines[:20], sep="\n", flush=True)
sys.exit(1 if any(failed) else 0)
