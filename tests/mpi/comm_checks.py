"""Checks of hpcgpu.comm at any number of ranks; exits 1 on every rank if any fails."""

import sys
import traceback

import numpy as np
from mpi4py import MPI

import hpcgpu
from hpcgpu import comm as C

rt = hpcgpu.init("cpu")
r, P = rt.rank, rt.size
failures = []


def check(name, fn):
    try:
        fn()
    except Exception:
        failures.append(f"[{r}] {name}: {traceback.format_exc()}")


def allreduce_in_place():
    for dtype in (np.float32, np.float64, np.complex128, np.int64):
        a = np.arange(1000, dtype=dtype) * (r + 1)
        out = C.Allreduce(a)
        assert out is a
        np.testing.assert_array_equal(a, np.arange(1000, dtype=dtype) * (P * (P + 1) // 2))


def allreduce_out_of_place_max():
    a = np.full((3, 4), r, dtype=np.float64)
    b = np.empty_like(a)
    C.Allreduce(a, b, op=MPI.MAX)
    assert (b == P - 1).all() and (a == r).all()


def bcast_from_every_root():
    for root in range(P):
        a = np.full(17, r, dtype=np.float32)
        C.Bcast(a, root=root)
        assert (a == root).all()


def ibcast_overlaps():
    a = np.arange(10.0) if r == 0 else np.zeros(10)
    b = np.arange(5.0) + 100 if r == P - 1 else np.zeros(5)
    reqs = [C.Ibcast(a, root=0, slot="a"), C.Ibcast(b, root=P - 1, slot="b")]
    for q in reqs:
        q.Wait()
    np.testing.assert_array_equal(a, np.arange(10.0))
    np.testing.assert_array_equal(b, np.arange(5.0) + 100)


def iallreduces_in_flight():
    a = np.full(7, r, dtype=np.float64)
    b = np.full((3, 2), 2 * r + 1, dtype=np.float32)
    reqs = [C.Iallreduce(a), C.Iallreduce(b, op=MPI.MAX)]
    for q in reversed(reqs):
        q.Wait()
    assert (a == P * (P - 1) / 2).all() and (b == 2 * P - 1).all()
    try:
        C.Iallreduce(np.zeros(3, np.float16))
    except ValueError as e:
        assert "use Allreduce" in str(e)
    else:
        raise AssertionError("a float16 Iallreduce was posted")


def allgather():
    s = np.array([r, 10 * r], dtype=np.int32)
    out = np.empty((P, 2), dtype=np.int32)
    C.Allgather(s, out)
    np.testing.assert_array_equal(out, [[q, 10 * q] for q in range(P)])


def agree_raises_everywhere():
    mine = ValueError(f"bad on rank {r}") if r == P - 1 else None
    try:
        hpcgpu.errors.agree(mine)
    except ValueError as e:
        assert str(e) == f"bad on rank {P - 1}" and isinstance(e, hpcgpu.AgreedError)
    else:
        raise AssertionError("agree did not raise")
    hpcgpu.errors.agree(None)  # nobody failed: returns


def non_contiguous_rejected():
    a = np.zeros((4, 4))[:, 1]
    try:
        C.Allreduce(a)
    except ValueError as e:
        assert "contiguous" in str(e)
    else:
        raise AssertionError("non-contiguous buffer accepted")


for name, fn in list(globals().items()):
    if callable(fn) and getattr(fn, "__module__", None) == "__main__" and name != "check":
        check(name, fn)

all_ok = rt.comm.allreduce(not failures, op=MPI.LAND)
for f in failures:
    print(f, file=sys.stderr)
if r == 0:
    print("comm checks:", "ok" if all_ok else "FAILED")
sys.exit(0 if all_ok else 1)
