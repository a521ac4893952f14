"""Evaluation never changes an autograd model, and the kinds of inputs, outputs and precisions it takes.

nn.Torch and nn.Jax are evaluated forward only (PyTorch's module in eval mode under no_grad: BatchNorm's running
statistics untouched), so fit with and without a validation set gives bitwise the same model; integer features
reach the module as int64 (an nn.Embedding trains); predict keeps the model's output shape; every precision the
docs list trains, validates, evaluates and predicts, or is refused in one line at construction; a loss function
that averages is refused at the first step in one agreed line. One launch checks all of it at 3 ranks (``import
torch`` costs seconds a rank), the same checks run in process at 1 rank.

Run as a script (``mpiexec -n 3 python tests/train/test_torch_eval.py``), it prints the checks' JSON from rank 0.
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

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="PyTorch is not installed")
HAS_JAX = importlib.util.find_spec("jax") is not None

MEAN_LOSS = ("model Torch: the loss does not sum over the samples (a micro-batch's loss is not the sum of its "
             "halves'): give a loss with reduction=\"sum\" (torch.nn.functional.cross_entropy(outputs, y, "
             "reduction=\"sum\")); hpcgpu divides by the global batch once")
PRECISIONS = ("64-true", "32-true", "bf16-mixed", "16-mixed")
REFUSED = {"16-mixed": "precision 16-mixed: {kind} computes bf16-mixed only"}
"""The precisions each adapter refuses at construction, with the one line it says."""

TORCH_DEVICE = _mpi.torch_device()


def _data(n=90, seed=3):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 6))
    return X, (X[:, 0] + X[:, 1] > 0).astype(np.int64)


def _bn_dropout(dtype="float64"):
    """An MLP with BatchNorm1d and Dropout; its second BatchNorm frozen (eval mode) by the user."""
    import torch

    from hpcgpu import nn

    torch.manual_seed(4)
    m = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.BatchNorm1d(12), torch.nn.ReLU(), torch.nn.Dropout(0.3),
                            torch.nn.Linear(12, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    m = m.double() if dtype == "float64" else m
    m[5].eval()
    return nn.Torch(m, torch.nn.CrossEntropyLoss(reduction="sum"))


def _jax_model():
    from hpcgpu import nn

    rng = np.random.default_rng(8)
    return nn.Jax(lambda p, x: x @ p["w"] + p["b"], {"w": rng.normal(0, 0.3, (6, 2)).astype(np.float32),
                                                      "b": np.zeros(2, np.float32)})


def _state(t) -> dict:
    from hpcgpu._device import asnumpy

    got = {f"p:{k}": asnumpy(v).copy() for k, v in t.params.items()}
    got.update({f"b:{k}": asnumpy(v).copy() for k, v in t.model.buffers().items()})
    return got


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def checks(rt) -> dict:
    """Every check of this file at ``rt``'s number of ranks: what each found, alike on every rank (agreed)."""
    import torch
    import torch.nn.functional as F

    import hpcgpu
    from hpcgpu import nn, optim

    common = dict(batch_size=30, epochs=3, seed=5, runtime=rt, progress="none")
    out = {}
    X, y = _data()
    Xv, yv = _data(40, seed=9)

    # 1. validation, evaluate and predict change nothing: bitwise the model of a fit without them
    states = []
    for validation in (None, (Xv, yv)):
        model = _bn_dropout()
        t = hpcgpu.Trainer(model, optimizer=optim.SGD(0.05, momentum=0.9), dtype="float64", **common)
        t.fit((X, y), validation=validation)
        states.append(_state(t))
        if validation is not None:
            modes = [m.training for m in model.module.modules()]
            t.evaluate((Xv, yv))
            t.predict(Xv)
            out["evaluate_predict_change_nothing"] = _same(_state(t), states[0])
            out["modes_put_back"] = [m.training for m in model.module.modules()] == modes
            out["frozen_stays_frozen"] = not model.module[5].training and model.module[1].training
            out["val_loss_finite"] = bool(np.isfinite(t.history["val_loss"]).all())
        t.close()
    out["validation_bitwise"] = _same(*states)

    # 2. integer features reach an nn.Embedding as int64; a model of outputs (n,) predicts (N,)
    rng = np.random.default_rng(1)
    Xi = rng.integers(0, 10, size=(90, 3))
    yi = (Xi[:, 0] > 4).astype(np.int64)
    torch.manual_seed(2)
    emb = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Flatten(), torch.nn.Linear(12, 2)).double()
    t = hpcgpu.Trainer(nn.Torch(emb, torch.nn.CrossEntropyLoss(reduction="sum")), optimizer=optim.SGD(0.05),
                       dtype="float64", **common)
    t.fit((Xi, yi), validation=(Xi[:30], yi[:30]))
    out["embedding_loss"] = [float(v) for v in t.history["train_loss"]]
    out["embedding_params"] = {k: np.asarray(v).tolist() for k, v in t.params.items()}
    out["embedding_predict_shape"] = list(t.predict(Xi, root=None).shape)
    t.close()
    torch.manual_seed(2)
    line = torch.nn.Sequential(torch.nn.Linear(6, 1), torch.nn.Flatten(0)).double()
    t = hpcgpu.Trainer(nn.Torch(line, torch.nn.MSELoss(reduction="sum")), optimizer=optim.SGD(0.01),
                       dtype="float64", **common)
    t.fit((X, X[:, 0] - X[:, 1]))
    out["flat_predict_shape"] = list(t.predict(X, root=None).shape)
    t.close()

    # 3. every precision: trained, validated, evaluated, predicted; or one line at construction
    kinds = {"Torch": lambda: _bn_dropout("float32")}
    if HAS_JAX:
        kinds["Jax"] = _jax_model
    for kind, make in kinds.items():
        for precision in PRECISIONS:
            try:
                t = hpcgpu.Trainer(make(), optimizer=optim.SGD(0.05), precision=precision,
                                   dtype="float64" if precision == "64-true" else "float32", **common)
            except hpcgpu.AgreedError as e:
                out[f"{kind} {precision}"] = str(e)
                continue
            t.fit((X, y), validation=(Xv, yv))
            got = [*t.history["train_loss"], *t.history["val_loss"], *t.evaluate((Xv, yv)).values()]
            pred = t.predict(Xv, root=None)
            out[f"{kind} {precision}"] = bool(np.isfinite(got).all() and pred.shape == (40, 2)
                                              and pred.dtype == t.precision.master)
            t.close()

    # 4. a loss function that averages (F.cross_entropy's default): one agreed line at the first step
    try:
        t = hpcgpu.Trainer(nn.Torch(_bn_dropout().module, F.cross_entropy), optimizer=optim.SGD(0.05),
                           dtype="float64", **common)
        t.fit((X, y))
        out["mean_loss"] = None
    except hpcgpu.AgreedError as e:
        out["mean_loss"] = f"{type(e).__name__}: {e}"
    every = rt.comm.allgather(json.dumps(out, sort_keys=True))
    out["alike_on_every_rank"] = all(e == every[0] for e in every)
    return out


def _assert_checks(got: dict) -> None:
    assert got["alike_on_every_rank"]
    assert got["validation_bitwise"], "fit's validation changed the model"
    assert got["evaluate_predict_change_nothing"] and got["modes_put_back"] and got["frozen_stays_frozen"]
    assert got["val_loss_finite"]
    assert got["embedding_loss"][-1] < got["embedding_loss"][0]
    assert got["embedding_predict_shape"] == [90, 2] and got["flat_predict_shape"] == [90]
    for kind in ("Torch", "Jax") if HAS_JAX else ("Torch",):
        for precision in PRECISIONS:
            want = REFUSED[precision].format(kind=kind) if precision in REFUSED else True
            assert got[f"{kind} {precision}"] == want, (kind, precision)
    assert got["mean_loss"] == f"TypeError: {MEAN_LOSS}"


@functools.lru_cache(maxsize=None)
def _one_rank() -> dict:
    """The checks in process, at one rank (once for both tests)."""
    import hpcgpu

    return checks(hpcgpu.init())


@TORCH_DEVICE
def test_evaluation_inputs_outputs_precisions_and_mean_losses_at_1_rank():
    """All the checks in process, at one rank."""
    _assert_checks(_one_rank())


@TORCH_DEVICE
@pytest.mark.mpi
def test_evaluation_inputs_outputs_precisions_and_mean_losses_at_3_ranks():
    """All the checks at 3 ranks, in one launch; the Embedding model is the one of 1 rank (the global batch is the
    same samples whatever the rank count)."""
    import _mpi

    p = _mpi.run(3, [os.path.abspath(__file__)], timeout=420)
    assert p.returncode == 0, p.stderr
    three = json.loads(p.stdout.strip().splitlines()[-1])
    _assert_checks(three)
    one = _one_rank()
    np.testing.assert_allclose(three["embedding_loss"], one["embedding_loss"], rtol=1e-10)
    for k, v in one["embedding_params"].items():
        np.testing.assert_allclose(three["embedding_params"][k], v, rtol=1e-9, atol=1e-12, err_msg=k)


if __name__ == "__main__":
    import hpcgpu

    rt = hpcgpu.init()
    got = checks(rt)
    if rt.rank == 0:
        print(json.dumps(got))
    sys.exit(0)
