"""The same model at any number of ranks, with dropout and BatchNorm.

The built-in ``Dropout`` draws a sample's mask from its place in the step's global batch, so 1, 2 and 3 ranks
train the same parameters (to summation order), with an epoch's last partial step (``drop_last=False``) too;
``sync_batchnorm=True`` makes an ``nn.Torch`` module's BatchNorm normalize over the global batch (PyTorch's
SyncBatchNorm over hpcgpu's collectives), so 1 and 3 ranks agree there too, with or without a partial step, and one
rank's synchronized BatchNorm is PyTorch's own. One launch a rank count trains every model
(``import torch`` costs seconds a rank); the same checks run in process at 1 rank.

Run as a script (``mpiexec -n 3 python tests/train/test_same_model.py``), it prints the checks' JSON from rank 0.
"""

import functools
import importlib.util
import json
import os
import sys

import numpy as np
import pytest

if __name__ == "__main__":  # a rank's script: tests/ (where _mpi is) is not on its sys.path
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import _mpi  # noqa: E402

HAS_TORCH = importlib.util.find_spec("torch") is not None

TORCH_DEVICE = _mpi.torch_device()


def _data(n=90, seed=3):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 6))
    return X, (X[:, 0] + X[:, 1] * X[:, 2] > 0).astype(np.int64)


def _params(t) -> dict:
    from hpcgpu._device import asnumpy

    out = {f"p:{k}": asnumpy(v).tolist() for k, v in t.params.items()}
    out.update({f"b:{k}": asnumpy(v).tolist() for k, v in t.model.buffers().items()})
    return out


def _bn_module():
    """An MLP with two BatchNorm1d and no dropout, float64, the same initial weights on every rank."""
    import torch

    from hpcgpu import nn

    torch.manual_seed(4)
    m = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.BatchNorm1d(12), torch.nn.ReLU(),
                            torch.nn.Linear(12, 8), torch.nn.BatchNorm1d(8, momentum=None), torch.nn.Tanh(),
                            torch.nn.Linear(8, 2)).double()
    return nn.Torch(m, torch.nn.CrossEntropyLoss(reduction="sum"))


def checks(rt) -> dict:
    """Train each model at ``rt``'s number of ranks; its parameters (and buffers), from rank 0."""
    import hpcgpu
    from hpcgpu import nn, optim

    common = dict(batch_size=30, epochs=3, seed=5, runtime=rt, progress="none", dtype="float64")
    X, y = _data()
    out = {}
    for name, rates in (("dropout", (0.4, 0.3)), ("no_dropout", (0.0, 0.0))):
        net = nn.Sequential(nn.Dense(6, 16, "relu"), nn.Dropout(rates[0]), nn.Dense(16, 8, "tanh"),
                            nn.Dropout(rates[1]), nn.Dense(8, 2))
        t = hpcgpu.Trainer(net, loss=nn.SoftmaxCrossEntropy(), optimizer=optim.SGD(0.1, momentum=0.9),
                           grad_accum_steps=2, **common)
        t.fit((X, y))
        out[name] = _params(t)
        t.close()
    # the last partial step (drop_last=False): 90 = 2 x 40 + 10, as 2 micro-batches of 5
    partial = dict(common, batch_size=40, drop_last=False)
    net = nn.Sequential(nn.Dense(6, 16, "relu"), nn.Dropout(0.4), nn.Dense(16, 8, "tanh"), nn.Dropout(0.3),
                        nn.Dense(8, 2))
    t = hpcgpu.Trainer(net, loss=nn.SoftmaxCrossEntropy(), optimizer=optim.SGD(0.1, momentum=0.9),
                       grad_accum_steps=2, **partial)
    t.fit((X, y))
    out["dropout_partial"] = _params(t)
    t.close()
    if rt.size == 2:  # the dropout model split over a tensor group of 2: rank 0's slices
        for name, kw in (("dropout_tensor_parallel", common), ("dropout_tensor_parallel_partial", partial)):
            net = nn.Sequential(nn.Dense(6, 16, "relu"), nn.Dropout(0.4), nn.Dense(16, 8, "tanh"),
                                nn.Dropout(0.3), nn.Dense(8, 2))
            t = hpcgpu.Trainer(net, loss=nn.SoftmaxCrossEntropy(), optimizer=optim.SGD(0.1, momentum=0.9),
                               grad_accum_steps=2, tensor_parallel=2, **kw)
            t.fit((X, y))
            out[name] = _params(t)
            t.close()
    if HAS_TORCH:
        for name, sync, kw in (("bn_sync", True, common), ("bn_local", False, common),
                               ("bn_sync_partial", True, partial)):
            t = hpcgpu.Trainer(_bn_module(), optimizer=optim.SGD(0.05, momentum=0.9), sync_batchnorm=sync, **kw)
            t.fit((X, y), validation=(X[:20], y[:20]))
            out[name] = _params(t)
            out[name + "_val_loss"] = [float(v) for v in t.history["val_loss"]]
            t.close()
    return out


@functools.lru_cache(maxsize=None)
def _one_rank() -> dict:
    import hpcgpu

    return checks(hpcgpu.init())


@functools.lru_cache(maxsize=None)
def _ranks(n: int) -> dict:
    import _mpi

    p = _mpi.run(n, [os.path.abspath(__file__)], timeout=420)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def _close(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.allclose(a[k], b[k], rtol=1e-9, atol=1e-12) for k in a)


def test_dropout_gradient_and_masks():
    """The backward pass through Dropout is the gradient (every activation); a mask is a function of the sample's
    row and the unit alone (any split of rows or units draws the same), drops about ``rate`` of them, and
    changes with the step."""
    from hpcgpu import nn
    from hpcgpu.nn._layers import dropout_keep

    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(7, 5)), rng.integers(0, 3, 7)
    for act in ("relu", "tanh", "gelu"):
        net = nn.Sequential(nn.Dense(5, 9, act), nn.Dropout(0.5), nn.Dense(9, 6, act), nn.Dropout(0.2),
                            nn.Dense(6, 3))
        assert max(nn.check_grad(net, X, y, loss=nn.SoftmaxCrossEntropy()).values()) < 1e-4
    f64 = np.dtype("float64")
    whole = dropout_keep(np, (5, 3, 1), np.arange(100, 140), (0, 50, 50), 0.3, f64)
    rows = np.concatenate([dropout_keep(np, (5, 3, 1), np.arange(a, b), (0, 50, 50), 0.3, f64)
                           for a, b in ((100, 113), (113, 140))])
    cols = np.concatenate([dropout_keep(np, (5, 3, 1), np.arange(100, 140), (a, b, 50), 0.3, f64)
                           for a, b in ((0, 17), (17, 50))], axis=1)
    assert np.array_equal(whole, rows) and np.array_equal(whole, cols)
    assert set(np.unique(whole)) == {0.0, 1 / 0.7}
    assert abs((whole == 0).mean() - 0.3) < 0.05  # 2000 draws: a deviation of 0.05 is 5 sigma
    assert not np.array_equal(whole, dropout_keep(np, (5, 4, 1), np.arange(100, 140), (0, 50, 50), 0.3, f64))


def test_dropout_layer_refusals_and_spec():
    """A rate outside [0, 1), or a Dropout that follows no Dense layer or the last one, is one line; the spec
    round-trips."""
    from hpcgpu import nn

    for rate, want in ((1.0, "Dropout's rate must be in [0, 1), got 1.0"),
                       ("0.5", "Dropout takes a rate, a number in [0, 1), got '0.5'")):
        with pytest.raises((ValueError, TypeError)) as e:
            nn.Dropout(rate)
        assert str(e.value) == want
    place = "Dropout must follow a Dense layer (or its activation) that is not the last"
    for layers in ([nn.Dropout(0.1), nn.Dense(4, 2)], [nn.Dense(4, 3), nn.Dense(3, 2), nn.Dropout(0.1)]):
        with pytest.raises(ValueError) as e:
            nn.Sequential(layers)
        assert str(e.value) == place
    net = nn.Sequential(nn.Dense(4, 3), nn.ReLU(), nn.Dropout(0.25), nn.Dense(3, 2))
    assert nn.from_spec(net.spec()).spec() == net.spec() and net.dropouts == [0.25, 0.0]


@TORCH_DEVICE
def test_one_rank_sync_batchnorm_is_pytorchs():
    """At one rank the synchronized BatchNorm is PyTorch's BatchNorm: the same parameters, running statistics
    and validation losses, to rounding; and dropout trains another model than no dropout."""
    one = _one_rank()
    assert not _close(one["dropout"], one["no_dropout"])
    if HAS_TORCH:
        assert _close(one["bn_sync"], one["bn_local"])
        np.testing.assert_allclose(one["bn_sync_val_loss"], one["bn_local_val_loss"], rtol=1e-10)


@TORCH_DEVICE
@pytest.mark.mpi
@pytest.mark.parametrize("n", _mpi.cases([2, 3], [3]))
def test_same_model_at_any_number_of_ranks(n):
    """Built-in Dropout (with gradient accumulation; at 2 ranks also split over a tensor group) and
    ``sync_batchnorm=True`` give at 2 and 3 ranks the parameters (and BatchNorm's running statistics) of one rank,
    to summation order; BatchNorm without it does not (each rank normalizes over its own rows)."""
    got, one = _ranks(n), _one_rank()
    for run in ("dropout", "dropout_partial"):  # drop_last=False's partial step too (a rank of 3 holds 1 row)
        for k, v in one[run].items():
            np.testing.assert_allclose(got[run][k], v, rtol=1e-9, atol=1e-12, err_msg=f"{run} {k}")
    if n == 2:  # tensor rank 0 holds the first layer's first 8 outputs and the second's first 8 inputs
        for run in ("dropout", "dropout_partial"):
            tp, whole = got[run.replace("dropout", "dropout_tensor_parallel")], \
                {k: np.asarray(v) for k, v in one[run].items()}
            parts = {"p:fc0.weight": whole["p:fc0.weight"][:, :8], "p:fc0.bias": whole["p:fc0.bias"][:8],
                     "p:fc1.weight": whole["p:fc1.weight"][:8], "p:fc1.bias": whole["p:fc1.bias"],
                     "p:fc2.weight": whole["p:fc2.weight"], "p:fc2.bias": whole["p:fc2.bias"]}
            for k, v in parts.items():
                np.testing.assert_allclose(tp[k], v, rtol=1e-9, atol=1e-12, err_msg=f"{run} {k}")
    if HAS_TORCH:
        for run in ("bn_sync", "bn_sync_partial"):
            for k, v in one[run].items():
                np.testing.assert_allclose(got[run][k], v, rtol=1e-9, atol=1e-12, err_msg=f"{run} {k}")
        # the history's losses are float32 sums (the metrics' type): equal to float32's rounding
        np.testing.assert_allclose(got["bn_sync_val_loss"], one["bn_sync_val_loss"], rtol=1e-6)
        assert not _close(got["bn_local"], one["bn_local"])


if __name__ == "__main__":
    import hpcgpu

    rt = hpcgpu.init()
    got = checks(rt)
    if rt.rank == 0:
        print(json.dumps(got))
    sys.exit(0)
