"""MPI check of the CuPy stand-in: run with ``mpiexec -n 2`` and the stand-in first on PYTHONPATH.

mpi4py takes stand-in arrays through ``__cuda_array_interface__`` (the pip
MPICH is not CUDA-aware, but the "device" memory is host memory). Checks:

1. a kernel that was not synchronized is not what MPI reads: an in-place
   Allreduce sees the poison (NaN), a Bcast the stale values;
2. after ``synchronize`` the Allreduce gives the right sum;
3. what MPI wrote is what later kernels read (the exposed-allocation rule);
4. ``Ibcast`` works on a stand-in array.

Prints ``OK <rank>`` on success; any failure aborts the job.
"""

import sys
import traceback

import numpy as np
from mpi4py import MPI

import cupy


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def landed(a):
    """What MPI sees: the memory behind the CUDA array interface pointer, read without any sync."""
    cai = a.__cuda_array_interface__
    n = int(np.prod(cai["shape"]))
    buf = (np.ctypeslib.ctypes.c_char * (n * a.itemsize)).from_address(cai["data"][0])
    return np.frombuffer(buf, dtype=a.dtype, count=n).copy()


def main():
    comm = MPI.COMM_WORLD
    rank, size = comm.rank, comm.size
    total = size * (size + 1) / 2  # sum of rank + 1
    expect(cupy.__version__.endswith("+standin"), f"not the stand-in: {cupy.__file__}")

    # 1. no synchronize: MPI reduces the poison, not the kernel's values
    a = cupy.empty(4, dtype=np.float64)
    a[...] = rank + 1.0
    comm.Allreduce(MPI.IN_PLACE, a)
    seen = landed(a)
    expect(np.isnan(seen).all(), f"unsynchronized Allreduce should reduce poison, got {seen}")
    expect(not np.allclose(a.get(), total), "unsynchronized Allreduce must not give the right sum")

    # 2. with synchronize: the right sum
    b = cupy.empty(4, dtype=np.float64)
    b[...] = rank + 1.0
    cupy.cuda.get_current_stream().synchronize()
    comm.Allreduce(MPI.IN_PLACE, b)
    expect(np.array_equal(landed(b), np.full(4, total)), f"synchronized Allreduce: {landed(b)}")

    # 3. the result is in the array for later kernels (MPI wrote the landed bytes)
    c = b * 2
    expect(np.array_equal(c.get(), np.full(4, 2 * total)), f"kernel after Allreduce read {c.get()}")
    b += 1
    expect(np.array_equal(b.get(), np.full(4, total + 1)), f"in-place kernel after Allreduce: {b.get()}")

    # Bcast: the root forgot to synchronize -> the others get the stale zeros
    d = cupy.zeros(3, dtype=np.float32)
    cupy.cuda.Device().synchronize()
    if rank == 0:
        d[...] = 7.0
    comm.Bcast(d, root=0)
    if rank != 0:
        expect(np.array_equal(d.get(), np.zeros(3, np.float32)), f"unsynchronized root Bcast gave {d.get()}")
    # ... and with synchronize the value
    if rank == 0:
        d[...] = 8.0
        cupy.cuda.get_current_stream().synchronize()
    comm.Bcast(d, root=0)
    expect(np.array_equal((d + 0).get(), np.full(3, 8.0, np.float32)), f"Bcast: {d.get()}")

    # 4. Ibcast on a stand-in array
    e = cupy.zeros(5, dtype=np.int64)
    if rank == 0:
        e[...] = cupy.arange(5, dtype=np.int64)
    cupy.cuda.get_current_stream().synchronize()
    req = comm.Ibcast(e, root=0)
    req.Wait()
    expect(np.array_equal((e * 1).get(), np.arange(5)), f"Ibcast: {e.get()}")

    comm.Barrier()
    print(f"OK {rank}", flush=True)


if __name__ == "__main__":
    try:
        main()
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(1)
