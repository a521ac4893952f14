"""The last partial batch: left out of its epoch (``drop_last=True``), the same samples at any number of ranks.

N = 50 samples in global batches of B = 8: 6 steps an epoch, the last 2 samples of each epoch's order not trained
in it. A model trained at 1 rank and at 3 ranks is the same (to summation order); changing the two samples an
epoch leaves out changes nothing of its model; ``drop_last=False`` is refused in one line.

Run as a script (``mpiexec -n 3 python tests/train/test_partial_batch.py``), it prints the checks' JSON from rank 0.
"""

import functools
import json
import os
import sys

import numpy as np
import pytest

N, B = 50, 8


def _data():
    rng = np.random.default_rng(7)
    X = rng.normal(size=(N, 5))
    return X, (X[:, 0] - X[:, 1] * X[:, 2] > 0).astype(np.int64)


def _fit(rt, X, y, epochs: int):
    import hpcgpu
    from hpcgpu import nn, optim

    net = nn.Sequential(nn.Dense(5, 7, "tanh"), nn.Dense(7, 2))
    t = hpcgpu.Trainer(net, loss=nn.SoftmaxCrossEntropy(), optimizer=optim.SGD(0.2, momentum=0.9), batch_size=B,
                       epochs=epochs, seed=3, runtime=rt, progress="none", dtype="float64")
    t.fit((X, y))
    return t


def checks(rt) -> dict:
    """Train at ``rt``'s number of ranks: the parameters, and what the sampler says of the partial batch."""
    from hpcgpu._device import asnumpy

    X, y = _data()
    t = _fit(rt, X, y, 3)
    out = {"params": {k: asnumpy(v).tolist() for k, v in t.params.items()},
           "steps": t.sampler.steps, "dropped": t.sampler.dropped, "losses": list(t.history["train_loss"])}
    t.close()
    # One epoch on the data, then on the data with the samples that epoch leaves out replaced by others
    t = _fit(rt, X, y, 1)
    left_out = t.sampler.order(0)[t.sampler.steps * B :]
    one = {k: asnumpy(v).copy() for k, v in t.params.items()}
    t.close()
    X2, y2 = X.copy(), y.copy()
    X2[left_out], y2[left_out] = 100.0, 1 - y2[left_out]
    t = _fit(rt, X2, y2, 1)
    out["left_out"] = left_out.tolist()
    out["unchanged"] = all(np.array_equal(one[k], asnumpy(v)) for k, v in t.params.items())
    t.close()
    return out


@functools.lru_cache(maxsize=None)
def _one_rank() -> dict:
    import hpcgpu

    return checks(hpcgpu.init())


@functools.lru_cache(maxsize=None)
def _ranks(n: int) -> dict:
    import _mpi

    p = _mpi.run(n, [os.path.abspath(__file__)], timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def _check(got: dict) -> None:
    assert got["steps"] == N // B and got["dropped"] == N % B and len(got["left_out"]) == N % B
    assert got["unchanged"], "the samples an epoch leaves out changed its model"


def test_one_rank_leaves_the_partial_batch_out():
    _check(_one_rank())


@pytest.mark.mpi
def test_same_model_at_three_ranks():
    """3 ranks leave out the same samples as 1 rank and train the same parameters, to summation order."""
    got, one = _ranks(3), _one_rank()
    _check(got)
    assert got["left_out"] == one["left_out"]
    for k, v in one["params"].items():
        np.testing.assert_allclose(got["params"][k], v, rtol=1e-9, atol=1e-12, err_msg=k)
    np.testing.assert_allclose(got["losses"], one["losses"], rtol=1e-6)


def test_drop_last_false_is_refused():
    import hpcgpu
    from hpcgpu.errors import AgreedError
    from hpcgpu.train.data import GlobalBatchSampler, from_arrays

    rt = hpcgpu.init()
    X, y = _data()
    with pytest.raises(ValueError) as e:
        GlobalBatchSampler(from_arrays(X, y, rt.comm), B, 0, rt.comm, drop_last=False)
    assert isinstance(e.value, AgreedError)
    assert str(e.value) == ("drop_last=False: only drop_last=True is supported (the last N mod B samples of each "
                            "epoch's order are left out of it)")


if __name__ == "__main__":
    import hpcgpu

    rt = hpcgpu.init()
    got = checks(rt)
    if rt.rank == 0:
        print(json.dumps(got))
    sys.exit(0)
