"""GlobalBatchSampler: every rank gets exactly its positions of each global batch (sharded or replicated,
with and without micro-batches).

Row g of the synthetic data holds g in every column, so a received row tells
which global row it is. Usage: sampler_checks.py N B
"""

import sys

import numpy as np
from mpi4py import MPI

import hpcgpu
from hpcgpu._partition import block_range
from hpcgpu.train.data import GlobalBatchSampler, Split

N, B = int(sys.argv[1]), int(sys.argv[2])
rt = hpcgpu.init("cpu")
r, P = rt.rank, rt.size
start, stop = block_range(N, P, r)
rows = np.arange(start, stop)
shard = Split(np.repeat(rows[:, None], 3, axis=1).astype(np.float64), rows * 7, start, stop, N, 3)
ok = True
Ks = [k for k in (1, 2) if B % k == 0 and B // k >= P]
for replicate in (False, True):
    for K in Ks:
        s = GlobalBatchSampler(Split(shard.X.copy(), shard.y.copy(), start, stop, N, 3), B, seed=11, comm=rt.comm,
                               micro_batches=K, replicate=replicate)
        for epoch in (0, 1, 5):
            s.start_epoch(epoch)
            batches = [tuple(a.copy() for a in s.batch(k)) for k in range(s.steps)]  # batch() reuses its buffers
            X = np.concatenate([b[0] for b in batches]) if batches else np.empty((0, 3))
            y = np.concatenate([b[1] for b in batches]) if batches else np.empty(0)
            perm = np.random.default_rng([11, epoch]).permutation(N)  # the documented order, independent of P
            lo, hi = block_range(B // K, P, r)  # each micro-batch of B / K split as a global batch is
            expect = perm[: (N // B) * B].reshape(N // B, K, B // K)[:, :, lo:hi].ravel()
            ok &= X.shape == (len(expect), 3) and s.local_batch == K * (hi - lo) and s.steps == N // B
            ok &= bool((X == expect[:, None]).all() and (y == 7 * expect).all())
            # The ranks together cover each global batch exactly once.
            got = rt.comm.allgather(X[:, 0].reshape(s.steps, s.local_batch))
            cover = np.concatenate(got, axis=1)
            ok &= bool((np.sort(cover, axis=1) == np.sort(perm[: s.steps * B].reshape(s.steps, B), axis=1)).all())
        ok &= s.replicated == replicate and (not replicate or s._pool_X.shape[0] == N)
        s.free()
ok = rt.comm.allreduce(ok, op=MPI.LAND)
if r == 0:
    print("sampler checks:", "ok" if ok else "FAILED")
sys.exit(0 if ok else 1)
