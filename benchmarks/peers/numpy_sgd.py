"""A plain data-parallel SGD loop in NumPy + mpi4py: the bar hpcgpu's trainer is measured against.

    mpiexec -n P python benchmarks/peers/numpy_sgd.py --data FILE.h5 [--threads 1] [--epochs 4]

The simplest honest form of what the trainer does, written as a user would without hpcgpu: an MLP
D-256-256-C (ReLU, softmax cross-entropy), every parameter and gradient in one flat float32 buffer, each
rank the gradient of its block of the global batch (256 by default), one ``Allreduce(IN_PLACE, SUM)`` a
step, divided by the global batch, SGD with momentum 0.9 (PyTorch's form), He-uniform initial weights.
Every rank reads the whole training set; epochs draw one permutation shared by all ranks. It prints one
line, ``RESULT ranks=P threads=T samples_per_s=S test_accuracy=A``, S timed over epochs 2 and later
(epoch 1 pays for first touches). The thread count is fixed before NumPy loads its BLAS.
"""

import os
import sys


def _threads_first():
    """OMP/OpenBLAS/MKL threads from --threads, set before NumPy (and its BLAS) is imported."""
    n = "1"
    for i, arg in enumerate(sys.argv):
        if arg == "--threads" and i + 1 < len(sys.argv):
            n = sys.argv[i + 1]
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = n
    return int(n)


THREADS = _threads_first()

import argparse  # noqa: E402
import time  # noqa: E402

import h5py  # noqa: E402
import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402


class Net:
    """D-256-256-C on flat buffers: views W_i (in, out) and b_i into params, grads and velocity alike."""

    def __init__(self, sizes, seed):
        self.sizes = sizes
        pairs = list(zip(sizes[:-1], sizes[1:], strict=True))
        n = sum(a * b + b for a, b in pairs)
        self.params, self.grad, self.velocity = (np.zeros(n, np.float32) for _ in range(3))
        self.W, self.b, self.gW, self.gb = [], [], [], []
        off = 0
        rng = np.random.default_rng(seed)
        for a, b in pairs:
            self.W.append(self.params[off : off + a * b].reshape(a, b))
            self.gW.append(self.grad[off : off + a * b].reshape(a, b))
            off += a * b
            self.b.append(self.params[off : off + b])
            self.gb.append(self.grad[off : off + b])
            off += b
        for W in self.W:
            W[...] = rng.uniform(-np.sqrt(6 / W.shape[0]), np.sqrt(6 / W.shape[0]), W.shape)

    def forward(self, x):
        acts = [x]
        for i, (W, b) in enumerate(zip(self.W, self.b, strict=True)):
            z = acts[-1] @ W
            z += b
            if i < len(self.W) - 1:
                np.maximum(z, 0, out=z)
            acts.append(z)
        return acts

    def grad_of_sum(self, x, y):
        """The gradient of the summed cross-entropy of (x, y) into self.grad; returns the loss sum."""
        acts = self.forward(x)
        z = acts.pop()
        z -= z.max(axis=1, keepdims=True)
        np.exp(z, out=z)
        z /= z.sum(axis=1, keepdims=True)
        rows = np.arange(len(y))
        loss = -np.log(np.maximum(z[rows, y], 1e-30)).sum()
        z[rows, y] -= 1
        d = z
        for i in reversed(range(len(self.W))):
            np.matmul(acts[i].T, d, out=self.gW[i])
            d.sum(axis=0, out=self.gb[i])
            if i:
                d = d @ self.W[i].T
                d *= acts[i] > 0
        return float(loss)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--global-batch", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    comm = MPI.COMM_WORLD
    P, rank = comm.size, comm.rank
    with h5py.File(a.data, "r") as f:
        X, y = f["train/X"][()].astype(np.float32), f["train/y"][()].astype(np.int64)
        Xt, yt = f["test/X"][()].astype(np.float32), f["test/y"][()].astype(np.int64)
    net = Net([X.shape[1], 256, 256, int(max(y.max(), yt.max())) + 1], a.seed)
    B = a.global_batch
    lo, hi = rank * B // P, (rank + 1) * B // P  # this rank's block of every global batch
    steps = len(X) // B
    timed, seconds = 0, 0.0
    for epoch in range(a.epochs):
        order = np.random.default_rng([a.seed, epoch]).permutation(len(X))
        comm.Barrier()
        t0 = time.perf_counter()
        for s in range(steps):
            idx = order[s * B + lo : s * B + hi]
            net.grad_of_sum(X[idx], y[idx])
            comm.Allreduce(MPI.IN_PLACE, net.grad, op=MPI.SUM)
            net.velocity *= a.momentum
            net.velocity += net.grad * (1.0 / B)
            net.params -= a.lr * net.velocity
        dt = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
        if epoch:
            timed, seconds = timed + steps * B, seconds + dt
    acc = float(np.mean(net.forward(Xt)[-1].argmax(axis=1) == yt))
    if rank == 0:
        print(f"RESULT ranks={P} threads={THREADS} samples_per_s={timed / seconds:.1f} test_accuracy={acc:.4f}",
              flush=True)


if __name__ == "__main__":
    main()
