# run: mpiexec -n 3
"""Matrices from HDF5 and back: from_hdf5 (each rank reads its block), transposes, to_hdf5, bytes moved."""
import os
import shutil
import tempfile

import h5py
import numpy as np

import hpcgpu

rt = hpcgpu.init(device="cpu")
tmp = rt.comm.bcast(tempfile.mkdtemp() if rt.rank == 0 else None, root=0)  # one directory for all ranks
a_path, out = os.path.join(tmp, "A.h5"), os.path.join(tmp, "C.h5")
if rt.rank == 0:  # any HDF5 file will do; here rank 0 writes a small one
    rng = np.random.default_rng(0)
    with h5py.File(a_path, "w") as f:
        f["X"] = rng.standard_normal((300, 40))
rt.comm.Barrier()

grid = hpcgpu.ProcessGrid((3, 1))      # 3 x 1: each rank reads a band of rows
x = hpcgpu.DistMatrix.from_hdf5(a_path, "X", grid)                   # 300 x 40, rows split 3 ways
xt = hpcgpu.DistMatrix.from_hdf5(a_path, "X", grid, transpose=True)  # 40 x 300: the transposed hyperslab
stats = {}
g = hpcgpu.matmul(xt, x, stats=stats)  # the Gram matrix X^T X, 40 x 40
g2 = hpcgpu.matmul(x, x, transa="T")   # the same product: op(A) = A^T, redistributed first (one Alltoallv)
g.to_hdf5(out, "G", attrs={"source": "A.h5:X"})  # written block by block, atomically (temporary name, rename)

sent = rt.comm.gather(stats["comm_bytes_sent"], root=0)
blocks = rt.comm.gather((x.lshape, x.lnbytes, xt.lshape), root=0)
G1, G2 = g.gather(), g2.gather()  # collective: every rank calls gather, rank 0 gets the matrix
if rt.rank == 0:
    with h5py.File(a_path) as f, h5py.File(out) as f2:
        X, G = f["X"][...], f2["G"]
        print(f"G = X^T X: {G.shape} {G.dtype}, equal to NumPy's: {np.allclose(G[...], X.T @ X)}")
        attrs = dict(f2.attrs) | dict(G.attrs)
        print("attributes:", ", ".join(f"{k}={attrs[k]}" for k in sorted(attrs) if k != "hpcgpu_version"))
    print("transa='T' gives the same G:", np.allclose(G1, G2))
    for r, (ls, nb, lts) in enumerate(blocks):
        print(f"[{r}/{rt.size}] X block {ls} ({nb} bytes of {x.gnbytes}), X^T block {lts}, "
              f"sent {sent[r]} bytes in SUMMA")
    shutil.rmtree(tmp)
