"""The last partial batch: left out of its epoch (``drop_last=True``, the default) or trained as a last, smaller
step (``drop_last=False``), the same samples at any number of ranks.

N = 50 samples in global batches of B = 8. With ``drop_last``: 6 steps an epoch, the last 2 samples of each
epoch's order not trained in it; changing them changes nothing of the model. Without: 7 steps, the 7th of 2 samples
averaged over its own 2, against a plain NumPy loop over the same order (an independent reference), with and
without gradient accumulation; at 3 ranks one rank holds no row of that step. A model trained at 1 rank and at
3 ranks is the same (to summation order), dropout included (its masks are drawn by the global sample's position).

Run as a script (``mpiexec -n 3 python tests/train/test_partial_batch.py``), it prints the checks' JSON from rank 0.
"""

import functools
import json
import os
import sys

import numpy as np
import pytest

if __name__ == "__main__":  # a rank's script: tests/ (where _mpi is) is not on its sys.path
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import _mpi  # noqa: E402

N, B = 50, 8
LR, MOMENTUM = 0.2, 0.9


def _data():
    rng = np.random.default_rng(7)
    X = rng.normal(size=(N, 5))
    return X, (X[:, 0] - X[:, 1] * X[:, 2] > 0).astype(np.int64)


def _trainer(rt, epochs: int, dropout: bool = False, **kw):
    import hpcgpu
    from hpcgpu import nn, optim

    layers = [nn.Dense(5, 7, "tanh"), *([nn.Dropout(0.3)] if dropout else []), nn.Dense(7, 2)]
    return hpcgpu.Trainer(nn.Sequential(*layers), loss=nn.SoftmaxCrossEntropy(),
                          optimizer=optim.SGD(LR, momentum=MOMENTUM), batch_size=B, epochs=epochs, seed=3,
                          runtime=rt, progress="none", dtype="float64", schedule="constant", warmup_epochs=0, **kw)


def _fit(rt, X, y, epochs: int, **kw):
    t = _trainer(rt, epochs, **kw)
    t.fit((X, y))
    return t


def _params(t) -> dict:
    from hpcgpu._device import asnumpy

    return {k: asnumpy(v).tolist() for k, v in t.params.items()}


def checks(rt) -> dict:
    """Train at ``rt``'s number of ranks: the parameters, and what the sampler says of the partial batch."""
    X, y = _data()
    t = _fit(rt, X, y, 3)
    out = {"params": _params(t), "steps": t.sampler.steps, "dropped": t.sampler.dropped,
           "losses": list(t.history["train_loss"])}
    t.close()
    # One epoch on the data, then on the data with the samples that epoch leaves out replaced by others
    t = _fit(rt, X, y, 1)
    left_out = t.sampler.order(0)[t.sampler.steps * B :]
    one = {k: np.asarray(v) for k, v in _params(t).items()}
    t.close()
    X2, y2 = X.copy(), y.copy()
    X2[left_out], y2[left_out] = 100.0, 1 - y2[left_out]
    t = _fit(rt, X2, y2, 1)
    out["left_out"] = left_out.tolist()
    out["unchanged"] = all(np.array_equal(one[k], np.asarray(v)) for k, v in _params(t).items())
    t.close()
    # Without drop_last: 2 epochs, with K = 1 and 2 micro-batches, and with dropout
    for name, kw in (("kept", {}), ("kept_accum", {"grad_accum_steps": 2}), ("kept_dropout", {"dropout": True})):
        t = _trainer(rt, 2, drop_last=False, **kw)
        init = _params(t)
        t.fit((X, y))
        out[name] = {"init": init, "params": _params(t), "steps": t.sampler.steps, "dropped": t.sampler.dropped,
                     "last": t.sampler.last_batch, "losses": list(t.history["train_loss"]),
                     "orders": [t.sampler.order(e).tolist() for e in range(2)]}
        t.close()
    out["broken"] = rt.comm.allgather(_broken_on_one_row(rt, X, y))
    return out


class _OneRowBug:
    """A model of one's own whose gradient has the wrong shape for a one-row batch only."""

    def init(self, rng):
        return {"w": np.zeros((5, 1)), "b": np.zeros(1)}

    def loss_and_grad(self, p, x, y):
        r = (x @ p["w"] + p["b"])[:, 0] - y
        gw = x.T @ r[:, None]
        return float((r * r).sum() / 2), {"w": gw[:3] if x.shape[0] == 1 else gw, "b": r.sum(keepdims=True)}

    def predict(self, p, x):
        return x @ p["w"] + p["b"]


def _broken_on_one_row(rt, X, y):
    """49 = 6 x 8 + 1: the partial step gives one rank one row (the others none at 3 ranks), and the model breaks
    its contract there; what this rank raised (None: nothing)."""
    import hpcgpu
    from hpcgpu import optim
    from hpcgpu.errors import AgreedError

    t = hpcgpu.Trainer(_OneRowBug(), optimizer=optim.SGD(0.01), batch_size=B, epochs=1, runtime=rt,
                       progress="none", dtype="float64", drop_last=False, task="regression")
    try:
        t.fit((X[:49], X[:49, 0].copy()))
    except TypeError as e:
        return f"{'agreed ' if isinstance(e, AgreedError) else ''}{e}"
    finally:
        t.close()
    return None


def reference(init: dict, orders, X, y) -> tuple[dict, list]:
    """Plain NumPy: the tanh MLP, mean softmax cross-entropy of each batch of the orders (the last one smaller), SGD
    with PyTorch's heavy-ball momentum; the parameters and each epoch's mean training loss."""
    W0, b0, W1, b1 = (np.array(init[k]) for k in ("fc0.weight", "fc0.bias", "fc1.weight", "fc1.bias"))
    v = [np.zeros_like(p) for p in (W0, b0, W1, b1)]
    losses = []
    for order in orders:
        total = 0.0
        for s in range(0, N, B):
            idx = np.asarray(order[s : s + B])
            a0 = X[idx]
            a1 = np.tanh(a0 @ W0 + b0)
            z = a1 @ W1 + b1
            z = z - z.max(axis=1, keepdims=True)
            p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
            total -= np.log(p[np.arange(len(idx)), y[idx]]).sum()
            d = p.copy()
            d[np.arange(len(idx)), y[idx]] -= 1
            d /= len(idx)  # the mean over this step's samples
            g = [a0.T @ ((d @ W1.T) * (1 - a1**2)), ((d @ W1.T) * (1 - a1**2)).sum(0), a1.T @ d, d.sum(0)]
            for i, (p_, g_) in enumerate(zip((W0, b0, W1, b1), g, strict=True)):
                v[i] = MOMENTUM * v[i] + g_
                p_ -= LR * v[i]
        losses.append(total / N)
    return {"fc0.weight": W0, "fc0.bias": b0, "fc1.weight": W1, "fc1.bias": b1}, losses


@functools.lru_cache(maxsize=None)
def _one_rank() -> dict:
    import hpcgpu

    return checks(hpcgpu.init())


@functools.lru_cache(maxsize=None)
def _ranks(n: int) -> dict:
    p = _mpi.run(n, [os.path.abspath(__file__)], timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def _check(got: dict) -> None:
    # the model that breaks its contract on the partial step: the same agreed line on every rank, naming the rank
    # that holds the one row (the last one), where the ranks without a row never call the model
    last = len(got["broken"]) - 1
    assert got["broken"] == [f"agreed model _OneRowBug: the gradient of w has shape (3, 1), the parameter (5, 1) "
                             f"(at step 7, rank {last})"] * len(got["broken"]), got["broken"]
    assert got["steps"] == N // B and got["dropped"] == N % B and len(got["left_out"]) == N % B
    assert got["unchanged"], "the samples an epoch leaves out changed its model"
    X, y = _data()
    for name in ("kept", "kept_accum"):
        run = got[name]
        assert (run["steps"], run["dropped"], run["last"]) == (N // B + 1, 0, N % B), name
        params, losses = reference(run["init"], run["orders"], X, y)
        for k, v in params.items():
            np.testing.assert_allclose(run["params"][k], v, rtol=1e-10, atol=1e-12, err_msg=f"{name} {k}")
        np.testing.assert_allclose(run["losses"], losses, rtol=1e-10, err_msg=name)


def test_one_rank_leaves_the_partial_batch_out_or_trains_it():
    _check(_one_rank())


@pytest.mark.mpi
def test_same_model_at_three_ranks():
    """3 ranks leave out (or train) the same samples as 1 rank and train the same parameters, to summation order;
    at 3 ranks the partial step's 2 samples leave one rank without a row."""
    got, one = _ranks(3), _one_rank()
    _check(got)
    assert got["left_out"] == one["left_out"]
    for run in ("params", "kept", "kept_accum", "kept_dropout"):
        mine, theirs = (got[run], one[run]) if run == "params" else (got[run]["params"], one[run]["params"])
        for k, v in theirs.items():
            np.testing.assert_allclose(mine[k], v, rtol=1e-9, atol=1e-12, err_msg=f"{run} {k}")
    np.testing.assert_allclose(got["losses"], one["losses"], rtol=1e-6)


def test_a_resume_just_before_the_partial_step_ends_where_the_run_does(tmp_path, monkeypatch):
    """A stop after an epoch's last full step (SIGUSR1 while step 6 of 7 runs); the resume's first step is the
    partial one; the parameters are bitwise those of the uninterrupted run. A resume with the other drop_last is
    refused in one line."""
    import signal

    import hpcgpu
    from hpcgpu.train.data import GlobalBatchSampler

    X, y = _data()
    rt = hpcgpu.init()
    whole = _fit(rt, X, y, 2, drop_last=False)
    batch = GlobalBatchSampler.batch

    def signalled(self, step):
        if step == N // B - 1 and not signalled.sent:
            signalled.sent = True
            os.kill(os.getpid(), signal.SIGUSR1)
        return batch(self, step)

    signalled.sent = False
    monkeypatch.setattr(GlobalBatchSampler, "batch", signalled)
    ck = str(tmp_path / "c.h5")
    stopped = _fit(rt, X, y, 2, drop_last=False, checkpoint=ck)
    assert (stopped.stopped_by, stopped.step) == ("SIGUSR1", N // B)
    monkeypatch.setattr(GlobalBatchSampler, "batch", batch)
    resumed = _fit(rt, X, y, 2, drop_last=False, checkpoint=ck, resume=True)
    assert resumed.step == 2 * (N // B + 1)
    for k, v in _params(whole).items():
        np.testing.assert_array_equal(_params(resumed)[k], v, err_msg=k)
    with pytest.raises(ValueError, match=r"resume=True: .*c\.h5 was written with drop_last=False, this run has "
                                         r"drop_last=True$"):
        _fit(rt, X, y, 3, checkpoint=ck, resume=True)


def test_drop_last_must_be_a_bool():
    import hpcgpu
    from hpcgpu.errors import AgreedError
    from hpcgpu.train.data import GlobalBatchSampler, from_arrays

    rt = hpcgpu.init()
    X, y = _data()
    with pytest.raises(ValueError) as e:
        GlobalBatchSampler(from_arrays(X, y, rt.comm), B, 0, rt.comm, drop_last="no")
    assert isinstance(e.value, AgreedError)
    assert str(e.value) == "drop_last='no': must be True or False"
    with pytest.raises(TypeError, match="^drop_last must be True or False, got 'no'$"):
        _trainer(rt, 1, drop_last="no")


def test_sync_batchnorm_needs_a_row_on_every_rank_of_the_partial_step():
    """sync_batchnorm=True sums BatchNorm's statistics over every rank in each forward pass: a partial step whose
    micro-batches are smaller than the number of ranks is refused at fit, in one line naming the way out (at one
    rank a micro-batch of 1 of N mod B = 2 with K = 2 is the smallest case that passes)."""
    import hpcgpu
    from hpcgpu.errors import AgreedError

    X, y = _data()
    rt = hpcgpu.init()
    _fit(rt, X, y, 1, drop_last=False, sync_batchnorm=True, grad_accum_steps=2)  # 2 // 2 = 1 >= 1 rank
    with pytest.raises(ValueError) as e:
        _fit(rt, X, y, 1, drop_last=False, sync_batchnorm=True, grad_accum_steps=4)  # 2 // 4 = 0
    assert isinstance(e.value, AgreedError)
    assert str(e.value) == ("drop_last=False with sync_batchnorm=True: the last step's 2 samples in 4 "
                            "micro-batches leave a rank without a row, and SyncBatchNorm's statistics need every "
                            "rank's: use drop_last=True, or a batch_size that leaves at least 4 samples (or none) "
                            "for the last step")


@_mpi.torch_device()
def test_a_model_refusing_the_small_partial_step_is_one_agreed_line():
    """PyTorch's BatchNorm refuses a training batch of one row: a partial step of 1 sample (49 = 6 x 8 + 1) is one
    agreed error naming the step, the rank and PyTorch's words, not one rank's traceback while the others wait."""
    torch = pytest.importorskip("torch")
    import hpcgpu
    from hpcgpu import nn, optim
    from hpcgpu.errors import AgreedError

    X, y = _data()
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(),
                            torch.nn.Linear(8, 2)).double()
    t = hpcgpu.Trainer(nn.Torch(m, torch.nn.CrossEntropyLoss(reduction="sum")), optimizer=optim.SGD(0.1),
                       batch_size=B, epochs=1, runtime=hpcgpu.init(), progress="none", dtype="float64",
                       drop_last=False)
    with pytest.raises(ValueError) as e:
        t.fit((X[:49], y[:49]))
    assert isinstance(e.value, AgreedError)
    assert str(e.value) == ("the epoch's last, partial step (1 samples, drop_last=False), on rank 0 (1 rows): "
                            "Expected more than 1 value per channel when training, got input size "
                            "torch.Size([1, 8])")


if __name__ == "__main__":
    import hpcgpu

    rt = hpcgpu.init()
    got = checks(rt)
    if rt.rank == 0:
        print(json.dumps(got))
    sys.exit(0)
