"""hpcgpu's collectives on device arrays, each buffer written by kernels just before the call.

Run under mpiexec with ``--device gpu``: real CuPy on a GPU, or the stand-in
(tests/device/standin first on PYTHONPATH), whose kernels land only when the
stream is synchronized. A collective that hands MPI a buffer before its
kernels landed gives wrong numbers here. HPCGPU_CUDA_AWARE_MPI chooses the
path (1: device pointers to MPI, 0: staged through pinned host memory).

Usage: collective_checks.py [N]   (N elements per buffer; large on a GPU, so the kernels take time)
Prints "collective checks: ok <path>" on rank 0; exits 1 on every rank on failure.
"""

import sys
import traceback

import numpy as np
from mpi4py import MPI

import hpcgpu
from hpcgpu import _device
from hpcgpu import comm as C

rt = hpcgpu.init("gpu")
xp, r, P = rt.xp, rt.rank, rt.size
N = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
failures = []


def check(name, fn):
    try:
        fn()
    except Exception:
        failures.append(f"[{r}] {name}: {traceback.format_exc()}")


def fresh(n, value_of_rank):
    """A device buffer whose content comes from several kernels queued just now."""
    a = xp.empty(n, dtype=xp.float64)
    a[...] = xp.arange(n, dtype=xp.float64)
    a *= 2.0
    a += value_of_rank  # the last kernel before the collective
    return a


def host(a):
    return _device.asnumpy(a)


def allreduce_in_place():
    a = fresh(N, r)
    C.Allreduce(a)
    np.testing.assert_array_equal(host(a), P * 2.0 * np.arange(N) + P * (P - 1) / 2)
    a *= 0.5  # later kernels read what MPI wrote
    np.testing.assert_array_equal(host(a), P * np.arange(N) + P * (P - 1) / 4)


def allreduce_out_of_place_max():
    a = fresh(N, r)
    b = xp.zeros(N, dtype=xp.float64)
    C.Allreduce(a, b, op=MPI.MAX)
    np.testing.assert_array_equal(host(b), 2.0 * np.arange(N) + (P - 1))
    np.testing.assert_array_equal(host(a), 2.0 * np.arange(N) + r)


def bcast_from_every_root():
    got = []
    for root in range(P):  # every rank makes every call, whatever it receives
        a = fresh(N, 100 * r)
        C.Bcast(a, root=root)
        got.append(host(a))
    for root in range(P):
        np.testing.assert_array_equal(got[root], 2.0 * np.arange(N) + 100 * root)


def two_ibcasts_in_flight_with_default_slots():
    a, b = fresh(N, 10 * r), fresh(N // 2 + 1, 1000 * r)
    reqs = [C.Ibcast(a, root=0), C.Ibcast(b, root=P - 1)]
    for q in reversed(reqs):
        q.Wait()
    np.testing.assert_array_equal(host(a), 2.0 * np.arange(N))
    np.testing.assert_array_equal(host(b), 2.0 * np.arange(N // 2 + 1) + 1000 * (P - 1))


def two_iallreduces_in_flight():
    """The device buffers hold the sums only after Wait (staged: copied back there), each request its own slot."""
    a, b = fresh(N, r), fresh(N // 2 + 1, 10 * r)
    reqs = [C.Iallreduce(a), C.Iallreduce(b)]
    for q in reqs:
        q.Wait()
    np.testing.assert_array_equal(host(a), P * 2.0 * np.arange(N) + P * (P - 1) / 2)
    np.testing.assert_array_equal(host(b), P * 2.0 * np.arange(N // 2 + 1) + 10 * P * (P - 1) / 2)


def named_slot_reused_in_flight_is_an_error():
    if (rt.cuda_aware and rt.nonblocking_device) or P == 1:
        return  # nothing is staged on this path (at one rank no MPI call is made)
    a, b = fresh(8, r), fresh(8, r)
    q = C.Ibcast(a, root=0, slot="mine")
    try:
        C.Ibcast(b, root=0, slot="mine")
    except RuntimeError as e:
        assert "held by a request not yet waited for" in str(e)
    else:
        raise AssertionError("a slot in flight was handed out twice")
    finally:
        q.Wait()
    C.Ibcast(b, root=0, slot="mine").Wait()  # free again once waited for


def allgather():
    s = fresh(5, 10 * r)
    out = xp.empty((P, 5), dtype=xp.float64)
    C.Allgather(s, out)
    np.testing.assert_array_equal(host(out), [2.0 * np.arange(5) + 10 * q for q in range(P)])


def staging_stays_bounded_over_many_sizes():
    """One growable pinned buffer per slot: a sweep over sizes leaves two slots, each at most twice the largest."""
    _device.free_staging()
    for n in list(range(1, 400, 7)) + [4096, 1 << 16, 3, 1 << 15]:
        a = fresh(n, r)
        C.Allreduce(a)
        req = C.Ibcast(a, root=0)
        req.Wait()
    slots, nbytes = _device.staging_stats()
    if rt.cuda_aware and rt.nonblocking_device or P == 1:
        assert (slots, nbytes) == (0, 0), (slots, nbytes)
        return
    assert slots <= 2, f"{slots} staging slots after many sizes"
    assert nbytes <= 2 * 2 * (1 << 16) * 8, f"{nbytes} bytes of pinned staging"


for name, fn in list(globals().items()):
    if callable(fn) and getattr(fn, "__module__", None) == "__main__" and name not in ("check", "fresh", "host"):
        check(name, fn)

all_ok = rt.comm.allreduce(not failures, op=MPI.LAND)
for f in failures:
    print(f, file=sys.stderr)
path = "aware" if rt.cuda_aware else "staged"
if r == 0:
    print("collective checks:", "ok" if all_ok else "FAILED", path, f"(nonblocking_device={rt.nonblocking_device})")
sys.exit(0 if all_ok else 1)
