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


NCCL = rt.collectives == "nccl"
STANDIN = xp.__version__.endswith("+standin")


def named_slot_reused_in_flight_is_an_error():
    if (rt.cuda_aware and rt.nonblocking_device) or P == 1 or NCCL:
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


def reduce_scatter_block():
    s = fresh(3 * P, r)
    out = xp.empty(3, dtype=xp.float64)
    C.Reduce_scatter_block(s, out)
    np.testing.assert_array_equal(host(out), P * 2.0 * np.arange(3 * r, 3 * r + 3) + P * (P - 1) / 2)


def complex_sums_and_what_nccl_lacks():
    """Complex sums (NCCL: two float parts), an op NCCL lacks (LAND) and a dtype it lacks (int16): all right."""
    z = fresh(6, r).astype(xp.complex128) * (1 + 2j)
    C.Allreduce(z)
    want = (P * 2.0 * np.arange(6) + P * (P - 1) / 2) * (1 + 2j)
    np.testing.assert_array_equal(host(z), want)
    flags = xp.zeros(4, dtype=xp.int32)
    flags[...] = 1 if r != P - 1 or P == 1 else 0
    C.Allreduce(flags, op=MPI.LAND)
    np.testing.assert_array_equal(host(flags), np.full(4, int(P == 1)))
    small = xp.zeros(5, dtype=xp.int16)
    small[...] = r + 1
    C.Allreduce(small)
    np.testing.assert_array_equal(host(small), np.full(5, P * (P + 1) // 2))


def nccl_collectives_never_wait_for_the_gpu():
    """Over NCCL, a blocking collective queues work and returns: no host synchronization (the stand-in counts)."""
    if not (NCCL and STANDIN and P > 1):
        return
    import cupy
    from cupy.cuda import nccl

    a, b = fresh(N, r), xp.empty((P, 7), dtype=xp.float64)
    nccl.clear_calls()
    cupy._standin.reset_counters()
    C.Allreduce(a)
    C.Bcast(a, root=P - 1)
    C.Allgather(a[:7], b)
    C.Iallreduce(a).Wait()
    a *= 2
    assert cupy._standin.counters()["host_syncs"] == 0, cupy._standin.counters()
    assert [c["op"] for c in nccl.calls()] == ["allReduce", "bcast", "allGather", "allReduce"], nccl.calls()
    got = host(a)
    base = P * (2.0 * np.arange(N)) + P * (P - 1) / 2  # the Allreduce; the Bcast sends the same on every rank
    np.testing.assert_array_equal(got, 2 * P * base)  # the Iallreduce sums the P equal copies again


def staging_stays_bounded_over_many_sizes():
    """One growable pinned buffer per slot: a sweep over sizes leaves two slots, each at most twice the largest."""
    _device.free_staging()
    for n in list(range(1, 400, 7)) + [4096, 1 << 16, 3, 1 << 15]:
        a = fresh(n, r)
        C.Allreduce(a)
        req = C.Ibcast(a, root=0)
        req.Wait()
    slots, nbytes = _device.staging_stats()
    if rt.cuda_aware and rt.nonblocking_device or P == 1 or NCCL:
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
path = "nccl" if NCCL else "aware" if rt.cuda_aware else "staged"
if r == 0:
    print("collective checks:", "ok" if all_ok else "FAILED", path, f"(nonblocking_device={rt.nonblocking_device})")
sys.exit(0 if all_ok else 1)
