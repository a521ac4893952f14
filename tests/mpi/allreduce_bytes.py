"""Allreduce of a gradient-sized buffer: the slowest rank's median seconds, and the bytes this rank's node sent
on its eth0 meanwhile (0 where there is no eth0: one host). Argument: float32 elements. One JSON line on rank 0."""

import json
import sys

import numpy as np
from mpi4py import MPI

import hpcgpu
from hpcgpu.comm import Allreduce


def eth0_tx() -> int:
    """Bytes sent on eth0 of this process's network namespace (/proc/net/dev is per namespace)."""
    with open("/proc/net/dev") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name.strip() == "eth0":
                return int(rest.split()[8])
    return 0


rt = hpcgpu.init("cpu")
comm = rt.comm
buf = np.ones(int(sys.argv[1]), np.float32)
Allreduce(buf, comm=comm)
reps = 10
comm.Barrier()
tx0 = eth0_tx()
times = []
for _ in range(reps):
    comm.Barrier()
    t0 = MPI.Wtime()
    Allreduce(buf, comm=comm)
    times.append(comm.allreduce(MPI.Wtime() - t0, op=MPI.MAX))
comm.Barrier()
tx = eth0_tx() - tx0
sent = comm.gather(tx if rt.local_rank == 0 else 0, root=0)  # one reading per node: the namespace's counter
if comm.rank == 0:
    print(json.dumps({"ranks": comm.size, "bytes": buf.nbytes, "median_s": float(np.median(times)),
                      "node_tx_bytes": int(sum(sent)), "reps": reps,
                      "hosts": sorted(set(comm.allgather(rt.host)))}), flush=True)
else:
    comm.allgather(rt.host)
