# run: mpiexec -n 2
"""The runtime and the collectives on xp arrays: init, Allreduce, Bcast."""
import hpcgpu  # before mpi4py.MPI: the GPU is chosen before MPI_Init
from mpi4py import MPI

rt = hpcgpu.init(device="cpu")  # collective; the default "auto" takes the GPU where every rank has one
xp = rt.xp                      # numpy here, cupy on a GPU

g = xp.full(4, float(rt.rank + 1))
hpcgpu.Allreduce(g)             # in place, SUM over rt.comm (the runtime's Dup of COMM_WORLD)

w = xp.arange(3.0) if rt.rank == 0 else xp.zeros(3)
hpcgpu.Bcast(w, root=0)         # every rank now holds rank 0's values

parts = xp.full(2, float(rt.rank))
every = xp.empty(2 * rt.size)
hpcgpu.Allgather(parts, every)  # rank r's block at [2r, 2r + 2)

if rt.rank == 0:
    print(f"{rt.size} ranks, device {rt.device}, xp {xp.__name__}")
    same = MPI.Comm.Compare(rt.comm, MPI.COMM_WORLD) == MPI.CONGRUENT
    print("rt.comm has the ranks of COMM_WORLD but is not it:", same)
    print("Allreduce:", g.tolist())
    print("Bcast:", w.tolist())
    print("Allgather:", every.tolist())
