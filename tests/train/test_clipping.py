"""Gradient clipping (``clip_grad_norm``, ``clip_grad_value``) against a reference computed by hand in NumPy.

A linear model of one's own (two parameters: the norm is global over both) on full batches, so each step's
gradient is the whole set's mean whatever the ranks and the sample order: the reference clips it and steps,
as PyTorch's ``clip_grad_norm_`` after DDP's all-reduce does. The same file is the ranks' script
(``python test_clipping.py``): every case at 3 ranks in one launch.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys

import numpy as np
import pytest

from hpcgpu._device import asnumpy

N, D, K = 24, 4, 2  # samples (one full batch a step), inputs, outputs
EPOCHS, LR = 4, 0.1
CASES = {  # name: (Trainer options, momentum)
    "norm": (dict(clip_grad_norm=0.5), 0.0),
    "value": (dict(clip_grad_value=0.05), 0.0),
    "accumulated": (dict(clip_grad_norm=0.5, grad_accum_steps=2), 0.0),
    "zero1": (dict(clip_grad_norm=0.5, zero_stage=1), 0.9),
    "unclipped_big_bound": (dict(clip_grad_norm=1e6), 0.0),
}


def data():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(N, D))
    return X, X @ rng.normal(size=(D, K)) * 3.0 + 1.0


def start():
    rng = np.random.default_rng(4)
    return {"w": rng.normal(size=(D, K)), "b": rng.normal(size=K)}


class Linear:
    """``x @ w + b`` with half the summed squared error: the gradient in closed form."""

    def init(self, rng):
        return start()

    def loss_and_grad(self, params, x, y):
        r = x @ params["w"] + params["b"] - y
        return 0.5 * float((r * r).sum()), {"w": x.T @ r, "b": r.sum(axis=0)}

    def predict(self, params, x):
        return x @ params["w"] + params["b"]


def fit(case: str):
    """The trainer's run of ``case`` (collective): parameters and the history."""
    import hpcgpu
    from hpcgpu import optim

    options, momentum = CASES[case]
    t = hpcgpu.Trainer(Linear(), optimizer=optim.SGD(lr=LR, momentum=momentum, weight_decay=0.0),
                       batch_size=N, epochs=EPOCHS, dtype="float64", progress="none", seed=1, **options)
    t.fit(data())
    params = {k: asnumpy(v).tolist() for k, v in t.params.items()}
    hist = {k: list(map(float, t.history[k])) for k in ("grad_norm", "grad_norm_max") if k in t.history}
    t.close()
    return {"params": params, "history": hist}


def reference(case: str):
    """The same run by hand: mean gradient, clip (PyTorch's formulas), SGD with momentum."""
    options, momentum = CASES[case]
    X, Y = data()
    p = start()
    v = {k: np.zeros_like(a) for k, a in p.items()}
    norms = []
    for _ in range(EPOCHS):
        r = X @ p["w"] + p["b"] - Y
        g = {"w": X.T @ r / N, "b": r.sum(axis=0) / N}
        if "clip_grad_value" in options:
            c = options["clip_grad_value"]
            g = {k: np.clip(a, -c, c) for k, a in g.items()}
        if "clip_grad_norm" in options:
            norm = np.sqrt(sum((a * a).sum() for a in g.values()))
            norms.append(norm)
            coef = min(1.0, options["clip_grad_norm"] / (norm + 1e-6))
            g = {k: a * coef for k, a in g.items()}
        for k in p:
            v[k] = momentum * v[k] + g[k]
            p[k] = p[k] - LR * v[k]
    return p, norms


def _check(case: str, got: dict) -> None:
    want, norms = reference(case)
    for k, a in want.items():
        np.testing.assert_allclose(np.asarray(got["params"][k]), a, rtol=1e-10, atol=1e-12, err_msg=f"{case}: {k}")
    if norms:  # one step an epoch: the epoch's mean and largest are the step's
        np.testing.assert_allclose(got["history"]["grad_norm"], norms, rtol=1e-10, err_msg=case)
        np.testing.assert_allclose(got["history"]["grad_norm_max"], norms, rtol=1e-10, err_msg=case)
    else:
        assert got["history"] == {}, case  # no norm series without clip_grad_norm


def test_the_reference_clips():
    """The cases clip (else they would not test it): the first step's norm is above the bound."""
    _, norms = reference("norm")
    assert norms[0] > 0.5 and reference("norm")[0]["b"][0] != reference("unclipped_big_bound")[0]["b"][0]
    X, Y = data()
    r = X @ start()["w"] + start()["b"] - Y
    assert np.abs(X.T @ r / N).max() > 0.05  # the value bound bites


@pytest.mark.parametrize("case", ["norm", "value", "accumulated", "unclipped_big_bound"])
def test_clipping_at_one_rank_is_the_reference(case):
    _check(case, fit(case))


def test_zero1_at_one_rank_is_the_reference():
    _check("zero1", fit("zero1"))


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 3])
def test_clipping_at_several_ranks_is_the_reference(ranks):
    """Every case in one launch: the norm is the reduced gradient's (ZeRO-1: over the ranks' blocks), the same
    on every rank, and the model the reference's."""
    import _mpi

    p = _mpi.run(ranks, [os.path.abspath(__file__)], timeout=240)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert sorted(got) == sorted(CASES)
    for case, run in got.items():
        assert run["alike"], case  # every rank has rank 0's parameters and norms
        _check(case, run)


def _sequential_run(**options):
    import hpcgpu
    from hpcgpu import nn, optim

    X, Y = data()
    t = hpcgpu.Trainer(nn.Sequential([nn.Dense(D, 8, "relu"), nn.Dense(8, K)]), nn.MeanSquaredError(),
                       optim.SGD(lr=0.05, momentum=0.9), batch_size=8, epochs=3, progress="none", seed=2, **options)
    t.fit((X.astype(np.float32), Y.astype(np.float32)))
    return t


def test_the_built_in_layers_clip_and_a_bound_above_the_norm_changes_nothing():
    """The built-in layers: a bound the norm never reaches is the unclipped run, bitwise; one below it changes
    the model."""
    free = _sequential_run()
    loose = _sequential_run(clip_grad_norm=1e9)
    np.testing.assert_array_equal(asnumpy(loose.model.params), asnumpy(free.model.params))
    assert "grad_norm" not in free.history and all(n > 0 for n in loose.history["grad_norm"])
    bound = 0.5 * min(loose.history["grad_norm"])
    tight = _sequential_run(clip_grad_norm=bound)
    assert not np.array_equal(asnumpy(tight.model.params), asnumpy(free.model.params))


def test_mixed_precision_clips_the_unscaled_gradient():
    """16-mixed scales the loss (by 65536 at first): the norm clipped is the unscaled gradient's, so every update
    that is not skipped for an overflow moves the parameters by exactly lr x the bound (plain SGD, a bound far
    below the norm); a skipped step leaves them alone."""
    import hpcgpu
    from hpcgpu import nn, optim

    X, Y = data()
    lr, bound = 0.05, 1e-3
    t = hpcgpu.Trainer(nn.Sequential([nn.Dense(D, K)]), nn.MeanSquaredError(), optim.SGD(lr=lr, weight_decay=0.0),
                       batch_size=N, epochs=1, progress="none", precision="16-mixed", clip_grad_norm=bound)
    moves = []
    for epoch in range(1, 9):  # one step an epoch
        before = asnumpy(t.model.params).astype(np.float64)
        t.fit(*([(X.astype(np.float32), Y.astype(np.float32))] if epoch == 1 else []), epochs=epoch)
        moves.append(float(np.linalg.norm(asnumpy(t.model.params).astype(np.float64) - before)))
    skipped = t.history["skipped_steps"]
    assert 0 < sum(skipped) < 8, skipped  # some steps overflowed, some were applied
    for move, skip in zip(moves, skipped, strict=True):
        assert move == 0.0 if skip else abs(move - lr * bound) < 1e-3 * lr * bound, (moves, skipped)


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed")
def test_an_nn_jax_model_clips_as_the_reference():
    """The linear model as a JAX function (its gradient autograd's): clipped by norm, the reference."""
    import hpcgpu
    import jax
    from hpcgpu import nn, optim

    jax.config.update("jax_enable_x64", True)

    def apply(p, x):
        return x @ p["w"] + p["b"]

    want, norms = reference("zero1")  # clip_grad_norm=0.5, momentum 0.9
    t = hpcgpu.Trainer(nn.Jax(apply, start(), loss="mse"), optimizer=optim.SGD(lr=LR, momentum=0.9,
                                                                                weight_decay=0.0),
                       batch_size=N, epochs=EPOCHS, dtype="float64", progress="none", clip_grad_norm=0.5)
    t.fit(data())
    # nn.Jax's "mse" sums the squared errors: twice the reference's loss, so twice its gradient; every step is
    # clipped to the bound (the norms are above it), so the updates, and the model, are the reference's up to
    # clip_grad_norm_'s 1e-6 added to the norm (of a norm twice as large: 1e-7 relative)
    assert min(norms) > 0.5
    np.testing.assert_allclose(t.history["grad_norm"], 2 * np.asarray(norms), rtol=1e-6)
    for k, a in want.items():
        np.testing.assert_allclose(asnumpy(t.params[k]), a, rtol=1e-6, atol=1e-9, err_msg=k)


@pytest.mark.mpi
def test_the_command_line_clips_and_writes_the_norms(tmp_path):
    import _mpi
    import h5py

    out = tmp_path / "run.h5"
    p = _mpi.run(2, ["-m", "hpcgpu.train", "--out", out, "--hidden", "8", "--epochs", "2", "--batch-size", "64",
                     "--clip-grad-norm", "0.5", "--progress", "none"], timeout=180)
    assert p.returncode == 0, p.stderr
    with h5py.File(out) as f:
        norms = f["metrics/grad_norm"][()]
        assert norms.shape == (2,) and (norms > 0).all() and (f["metrics/grad_norm_max"][()] >= norms).all()
    p = _mpi.run(1, ["-m", "hpcgpu.train", "--out", out, "--clip-grad-value", "-1", "--progress", "none"],
                 timeout=60)
    assert p.returncode == 2 and p.stderr.strip() == "hpcgpu.train: error: --clip-grad-value must be a positive " \
        "number, got -1.0", p.stderr


@pytest.mark.parametrize("options, message", [
    (dict(clip_grad_norm=0.0), "clip_grad_norm must be a positive number, got 0.0"),
    (dict(clip_grad_value=-1.0), "clip_grad_value must be a positive number, got -1.0"),
    (dict(clip_grad_norm=float("nan")), "clip_grad_norm must be a positive number, got nan"),
    (dict(clip_grad_norm=1.0, clip_grad_value=1.0), "clip_grad_norm and clip_grad_value: give one of them"),
    (dict(clip_grad_norm="1"), "clip_grad_norm must be a number, got '1'"),
])
def test_bad_clipping_options_are_one_line_naming_them(options, message):
    import hpcgpu

    with pytest.raises((ValueError, TypeError)) as e:
        hpcgpu.Trainer(Linear(), **options)
    assert str(e.value) == message


if __name__ == "__main__":  # the ranks' script: every case, rank 0 prints what it got
    from mpi4py import MPI

    out = {}
    for name in CASES:
        run = fit(name)
        runs = MPI.COMM_WORLD.allgather(run)
        run["alike"] = all(r == runs[0] for r in runs)
        out[name] = run
    if MPI.COMM_WORLD.rank == 0:
        print(json.dumps(out), flush=True)
    sys.exit(0)
