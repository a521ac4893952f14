# run: mpiexec -n 3
"""Any block layout to any other with hpcgpu.blocks.remap: row panels, as a science code holds them, to
column panels, in one Alltoallv."""
import numpy as np

import hpcgpu
from hpcgpu.blocks import remap
from mpi4py import MPI

rt = hpcgpu.init(device="cpu")
M, N, P, me = 6, 9, rt.size, rt.rank
full = np.arange(M * N, dtype=np.float64).reshape(M, N)  # the global matrix, here only to check


def panel(n, i):
    """Slice i of n split into P nearly equal parts."""
    return slice(i * n // P, (i + 1) * n // P)


def rows(rank):                                       # a layout: rank -> (rows, cols) it holds, or None
    return panel(M, rank), slice(0, N)


def cols(rank):
    return slice(0, M), panel(N, rank)


def rows_t(rank):                                     # row panels of the 9 x 6 transpose
    return panel(N, rank), slice(0, M)


mine = full[rows(me)].copy()                         # this rank's row panel, 2 x 9
out = remap(mine, rows, cols, rt.comm)               # collective: this rank's column panel, 6 x 3
back = remap(out, cols, rows_t, rt.comm, transpose=True)  # the transpose, 3 x 6: the target's orientation
ok = np.array_equal(out, full[cols(me)]) and np.array_equal(back, full.T[rows_t(me)])
ok = rt.comm.allreduce(ok, op=MPI.LAND)
if rt.rank == 0:
    print("row panel", mine.shape, "-> column panel", out.shape, "-> row panel of the transpose", back.shape)
    print("every rank's blocks match the global matrix:", ok)
