# run: mpiexec -n 4
"""A process grid, distributed matrices from local blocks, and SUMMA: C = A @ B."""
import numpy as np

import hpcgpu

rt = hpcgpu.init(device="cpu")
grid = hpcgpu.ProcessGrid()  # MPI.Compute_dims: 2 x 2 at 4 ranks; ProcessGrid((4, 1)) for another shape
m, k, n = 7, 5, 6            # uneven blocks are fine


def a_global(rows, cols):
    """A[i, j] = i - 2 j, computed for any rows and columns: no rank needs all of A."""
    i, j = np.mgrid[rows, cols]
    return (i - 2.0 * j).astype(np.float64)


# From local blocks: each rank builds only the block it owns.
rows, cols = grid.block((m, k))             # this rank's slices of the global rows and columns
a = hpcgpu.DistMatrix(rt.xp.asarray(a_global(rows, cols)), (m, k), grid)
b = hpcgpu.DistMatrix.random((k, n), grid, seed=2)  # the same global matrix for seed 2 on any grid

c = hpcgpu.matmul(a, b)                     # collective; a @ b does the same
A, B, C = a.gather(), b.gather(), c.gather()  # whole matrices on rank 0, None elsewhere (small ones only)

d = hpcgpu.DistMatrix.random((m, n), grid, seed=3)
hpcgpu.matmul(a, b, d, alpha=2.0, beta=-1.0, transa="N")  # PDGEMM's form: d = 2 A B - d, in place
D0, D = hpcgpu.DistMatrix.random((m, n), grid, seed=3).gather(), d.gather()

blocks = rt.comm.gather((grid.row, grid.col, a.rows, a.cols, a.lshape, c.lshape), root=0)
if rt.rank == 0:
    print(f"grid {grid.shape[0]}x{grid.shape[1]}; A is {a.gshape}, B {b.gshape}, C {c.gshape}")
    for r, (i, j, rs, cs, ashape, cshape) in enumerate(blocks):
        print(f"[{r}/{rt.size}] grid ({i}, {j}): A rows {rs.start}:{rs.stop} cols {cs.start}:{cs.stop}, "
              f"A block {ashape}, C block {cshape}")
    print("C == A @ B:", np.allclose(C, A @ B, rtol=1e-12, atol=1e-12))
    print("D == 2 A B - D0:", np.allclose(D, 2 * A @ B - D0, rtol=1e-12, atol=1e-12))
    print(repr(c))
