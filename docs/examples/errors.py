# run: mpiexec -n 3
"""The error contract: an error one rank finds is raised on every rank (agree, on_root)."""
import os
import shutil
import tempfile

import hpcgpu
import hpcgpu.io

rt = hpcgpu.init(device="cpu")

# Each rank checks what it can see; agree() makes them all raise the lowest failing rank's error.
err = None
if rt.rank == 2:
    err = ValueError("shard 2: labels outside 0..9")
try:
    hpcgpu.agree(err)
except hpcgpu.AgreedError as e:
    caught = f"{type(e).__name__}: {e} (a ValueError too: {isinstance(e, ValueError)})"
seen = rt.comm.gather(caught, root=0)
if rt.rank == 0:
    for r, line in enumerate(seen):
        print(f"[{r}/{rt.size}] {line}")

# on_root: rank 0 does the I/O, every rank learns whether it worked.
tmp = rt.comm.bcast(tempfile.mkdtemp() if rt.rank == 0 else None, root=0)
missing = os.path.join(tmp, "no-such-dir", "out.txt")


def write():
    with open(missing, "w") as f:
        f.write("x")


try:
    hpcgpu.io.on_root(write, comm=rt.comm, error=lambda e: OSError("--out: cannot write there"))
except OSError as e:
    ok = rt.comm.allreduce(isinstance(e, hpcgpu.AgreedError))
    if rt.rank == 0:
        print(f"on_root: {e} (raised on {ok} of {rt.size} ranks)")

if rt.rank == 0:
    shutil.rmtree(tmp)
