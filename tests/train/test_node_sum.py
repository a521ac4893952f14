"""The gradient reducer's own Allreduce on one node (hpcgpu.train.reducer.NodeSum): each rank's buffer a part of one
shared-memory segment, summed by loads between barriers."""

import pytest

import _mpi

_SUMS = r'''
import os
import numpy as np
from mpi4py import MPI
from hpcgpu.train import reducer
comm = MPI.COMM_WORLD
mine = f"hpcgpu-allreduce-{comm.bcast(os.getpid(), root=0)}-"  # the segments this job makes are named so
for dtype in ("float32", "float64"):
    for n in (1, 2, 5, 1000, 269325):
        ns = reducer.NodeSum.make(n, dtype, comm)
        assert ns is not None and ns.mine.shape == (n,) and ns.mine.dtype == dtype and not ns.mine.any()
        for rep in range(3):  # the same segment again and again, as a trainer's steps
            ns.mine[...] = np.random.default_rng([rep, comm.rank, n]).standard_normal(n)
            every = comm.allgather(ns.mine.copy())
            want = every[0] + every[1]
            for a in every[2:]:
                want = want + a  # rank order: every rank gets these bits
            ns.allreduce()
            assert np.array_equal(ns.mine, want), (dtype, n, rep)
        assert not [f for f in os.listdir(reducer.SHM_DIR) if f.startswith(mine)]  # unlinked once mapped
assert reducer.NodeSum.make(10, "int64", comm) is None and reducer.NodeSum.make(10, "float16", comm) is None
reducer.SHM_DIR = "/no/such/dir"  # no tmpfs: every rank falls back, none waits
assert reducer.NodeSum.make(10, "float32", comm) is None
os.write(1, b"ok\n")
'''


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [2, 3])
def test_every_rank_gets_the_sum_in_rank_order_and_no_segment_is_left(tmp_path, nprocs):
    (tmp_path / "sums.py").write_text(_SUMS)
    p = _mpi.run(nprocs, [str(tmp_path / "sums.py")], timeout=120)
    assert (p.returncode, p.stdout) == (0, "ok\n" * nprocs), p.stderr


_TRAIN = r'''
import json, os, sys
import numpy as np
from sklearn.datasets import load_digits
import hpcgpu
from hpcgpu import nn, optim
from hpcgpu.train import reducer
if sys.argv[1] == "mpi":
    reducer.SHM_DIR = "/no/such/dir"  # the MPI library's Allreduce
rt = hpcgpu.init("cpu")
X, y = load_digits(return_X_y=True)
t = hpcgpu.Trainer(nn.Sequential(nn.Dense(64, 32, activation="relu"), nn.Dense(32, 10)), nn.SoftmaxCrossEntropy(),
                   optim.SGD(lr=0.05, momentum=0.9), batch_size=60, epochs=2, seed=0, dtype=sys.argv[2],
                   runtime=rt, progress="none")
t.fit((X / 16, y))
used = t.reducer.node_sum is not None
params = np.asarray(t.model.params).copy()
t.close()
if rt.rank == 0:
    np.save(sys.argv[3], params)
    print(json.dumps({"node_sum": used}))
'''


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs, dtype", [(2, "float32"), (3, "float64")])
def test_a_trainer_on_one_node_sums_in_shared_memory_and_trains_the_mpi_allreduces_model(tmp_path, nprocs, dtype):
    """On one node the reducer sums in shared memory by default; its model is the MPI library's Allreduce's: bitwise
    at 2 ranks (a + b either way), to rounding at 3 (the order of the sum is the library's own)."""
    import json

    import numpy as np

    (tmp_path / "train.py").write_text(_TRAIN)
    got = {}
    for how in ("node", "mpi"):
        p = _mpi.run(nprocs, [str(tmp_path / "train.py"), how, dtype, str(tmp_path / f"{how}.npy")], timeout=180)
        assert p.returncode == 0, p.stderr
        got[how] = (json.loads(p.stdout.strip().splitlines()[-1])["node_sum"], np.load(tmp_path / f"{how}.npy"))
    assert got["node"][0] is True and got["mpi"][0] is False
    if nprocs == 2:
        assert np.array_equal(got["node"][1], got["mpi"][1])
    else:
        np.testing.assert_allclose(got["node"][1], got["mpi"][1], rtol=1e-9, atol=1e-12)
