"""The Gram matrix G = X^T X of a real data set, distributed, from HDF5 to HDF5.

    mpiexec -n 4 python examples/gram.py [--data FILE] [--dataset /train/X] [--out results/gram.h5]

X is N x D (samples x features). Each rank reads its block of X^T straight
from the file (the transposed hyperslab: no redistribution), its block of X,
and SUMMA multiplies them. G (D x D) is written block by block. Without
--data it uses the bundled digits set (N = 1,437, D = 64); with the trainer's
Fashion-MNIST file it is 784 x 784 over 60,000 samples.
"""

import argparse

from mpi4py import MPI

import hpcgpu
from hpcgpu import DistMatrix
from hpcgpu._cli import run


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", help="HDF5 file (default: the bundled digits set)")
    p.add_argument("--dataset", default="/train/X")
    p.add_argument("--out", default="results/gram.h5")
    a = p.parse_args(argv)
    rt = hpcgpu.init()
    if a.data is None:
        from hpcgpu.datasets import ensure_bundled

        a.data = ensure_bundled("digits", rt.comm)
    grid = hpcgpu.ProcessGrid(comm=rt.comm)
    xt = DistMatrix.from_hdf5(a.data, a.dataset, grid, dtype="float64", transpose=True)  # D x N
    x = DistMatrix.from_hdf5(a.data, a.dataset, grid, dtype="float64")  # N x D
    t0 = MPI.Wtime()
    g = hpcgpu.matmul(xt, x)
    seconds = rt.comm.allreduce(MPI.Wtime() - t0, op=MPI.MAX)
    g.to_hdf5(a.out, "G", attrs={"data": a.data, "dataset": a.dataset})
    if rt.rank == 0:
        n, d = x.gshape
        print(f"G = X^T X: X is {n} x {d} ({a.data}:{a.dataset}), grid {grid.shape}, {seconds:.3f} s; wrote {a.out}:G")
    return 0


if __name__ == "__main__":
    run(main, prog="gram")
