"""The gradient reducer: named slots, buckets, overlap bitwise the single Allreduce."""

import h5py
import numpy as np
import pytest
from mpi4py import MPI

import _mpi
from hpcgpu.train import MLP
from hpcgpu.train.reducer import GradientReducer

pytestmark = pytest.mark.device  # every test here reaches the device path


def test_slots_are_named_views_after_the_gradient():
    r = GradientReducer(5, np, np.float64, MPI.COMM_SELF)
    assert r.buffer.shape == (8,) and np.shares_memory(r.grad, r.buffer) and r.grad.shape == (5,)
    r.set("stop", 1.0)
    r.view("loss_sum", 2)[...] = [3.0, 4.0]
    assert r.read() == {"loss_sum": 3.0, "correct": 4.0, "stop": 1.0}
    with pytest.raises(ValueError, match="run past the buffer"):
        r.view("correct", 3)


def test_buckets_are_whole_layers_in_reverse_order():
    """784-1024-1024-10 in float32 (7.4 MB of gradient) at 2 MB: the last two layers' 4.2 MB close the first
    bucket (with the slots), the first layer's 3.2 MB the second; at 25 MB one bucket."""
    sizes = [784, 1024, 1024, 10]
    layers = MLP.ranges_of(sizes)
    n = layers[-1][1]
    assert layers[0] == (0, 784 * 1024 + 1024) and n == 1863690
    r = GradientReducer(n, np, np.float32, MPI.COMM_SELF, layers=layers, bucket_bytes=2e6)
    assert r.buckets == [(layers[1][0], n + 3), (0, layers[1][0])]
    assert r._last_layer == {1: 0, 0: 1}
    assert GradientReducer(n, np, np.float32, MPI.COMM_SELF, layers=layers, bucket_bytes=25e6).buckets == [(0, n + 3)]
    tiny = GradientReducer(n, np, np.float32, MPI.COMM_SELF, layers=layers, bucket_bytes=1)
    assert tiny.buckets == [(layers[2][0], n + 3), (layers[1][0], layers[2][0]), (0, layers[1][0])]
    with pytest.raises(ValueError, match="do not cover"):
        GradientReducer(n, np, np.float32, MPI.COMM_SELF, layers=layers[1:], bucket_bytes=1)


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [2, 3])
def test_overlapped_buckets_are_bitwise_the_single_allreduce(nprocs, tmp_path):
    """--bucket-mb 0.01 (four buckets for 64-256-128-64-10, each posted by Iallreduce mid-backward) against the
    default one bucket (one Allreduce after backward): the same bits, with gradient accumulation too.

    At 2 ranks every element is one sum of two values, the same bits whatever the algorithm. At 3 ranks the
    bits depend on the order of the sums: one bucket on one node is the reducer's own sum in rank order
    (NodeSum), which MPICH's and Intel MPI's Iallreduce match; Open MPI's non-blocking collectives (libnbc)
    sum in another order, so there the last bits differ (float64: checked to 1e-9 after two epochs)."""
    from _data import blobs, write_h5

    X, y = blobs(240, d=64, c=10)
    data = write_h5(tmp_path / "d.h5", train__X=X, train__y=y)
    models = {}
    for mb in ("25", "0.01"):
        out = tmp_path / f"o{mb}.h5"
        p = _mpi.run(nprocs, ["-m", "hpcgpu.train", "--data", data, "--out", str(out), "--epochs", "2",
                              "--batch-size", "30", "--hidden", "256,128,64", "--bucket-mb", mb,
                              "--grad-accum-steps", "2", "--dtype", "float64", "--progress", "none"], timeout=120)
        assert p.returncode == 0, p.stderr
        with h5py.File(out) as f:
            models[mb] = {k: f["model"][k][()] for k in f["model"]}
    bitwise = nprocs == 2 or _mpi.flavor() in ("mpich", "impi")
    for k, want in models["25"].items():
        if bitwise:
            np.testing.assert_array_equal(models["0.01"][k], want, err_msg=k)
        else:
            np.testing.assert_allclose(models["0.01"][k], want, rtol=1e-9, atol=1e-12, err_msg=k)
