"""The trainer as a library, under mpiexec: prints one JSON line (rank 0) of what the test compares.

    python library_fit.py CASE [OUT]

CASE: ``seq-sgd``, ``seq-adam``, ``seq-adamw`` (a Sequential of every activation, classification), ``mse``,
``huber`` (regression, 2 targets), ``own-sgd``, ``own-adam`` (a model of one's own), ``sharded`` (the same
data as ``seq-adam``, each rank passing its own rows), ``predict`` (predictions of a fixed model, gathered
and written to OUT), ``own-tp`` (a model of one's own asked for tensor parallelism: an agreed error), ``load``
(``hpcgpu.load_model(OUT)``, split over every rank by tensor parallelism, predicting ``data``'s 103 rows),
``autograd DIR`` (the PyTorch and the JAX model of DIR/autograd_models.py, trained).
"""

import json
import sys

import numpy as np

import hpcgpu
from hpcgpu import _device, nn, optim


class Quadratic:
    """y = w . x + b, a model of one's own with the gradient by hand (linear least squares)."""

    def __init__(self, xp):
        self.xp = xp

    def init(self, rng):
        return {"w": rng.normal(0, 0.1, 6), "b": np.zeros(1)}

    def loss_and_grad(self, p, x, y):
        r = x @ p["w"] + p["b"] - y
        return (r * r).sum(), {"w": 2 * (x.T @ r), "b": 2 * r.sum()}

    def predict(self, p, x):
        return x @ p["w"] + p["b"]


def data(task, n=301):
    rng = np.random.default_rng(7)
    X = rng.normal(size=(n, 6))
    if task == "classification":
        y = (X[:, 0] + 0.5 * X[:, 1] > 0).astype(np.int64) + (X[:, 2] > 1)
        return X, y
    W = rng.normal(size=(6, 2))
    return X, X @ W + 0.1 * rng.normal(size=(n, 2))


def standardized_net():
    """Standardize before the MLP: its statistics from the training rows at the first fit."""
    return nn.Sequential(nn.Standardize(), nn.Dense(6, 16, "relu"), nn.Dense(16, 3))


def main(argv):
    case = argv[0]
    rt = hpcgpu.init()
    common = dict(batch_size=24, epochs=3, seed=3, dtype="float64", runtime=rt, progress="none")
    net = nn.Sequential(nn.Dense(6, 16, "relu"), nn.Dense(16, 12), nn.Tanh(), nn.Dense(12, 8, "gelu"),
                        nn.Dense(8, 3))
    out = {}
    if case.startswith("seq-") or case == "sharded":
        X, y = data("classification")
        opt = {"seq-sgd": optim.SGD(lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-3),
               "seq-adam": optim.Adam(lr=1e-2, weight_decay=1e-3), "sharded": optim.Adam(lr=1e-2, weight_decay=1e-3),
               "seq-adamw": optim.AdamW(lr=1e-2)}[case]
        if case == "sharded":  # the same layers as Keras writes them: each Dense's inputs from before it
            net = nn.Sequential(nn.Dense(16, "relu"), nn.Dense(12), nn.Tanh(), nn.Dense(8, activation="gelu"),
                                nn.Dense(3))
        t = hpcgpu.Trainer(net, nn.SoftmaxCrossEntropy(), opt, **common)
        if case == "sharded":  # each rank its own rows: an uneven split of the same set
            cut = np.linspace(0, 250, rt.size + 1).astype(int) ** 2 // 250
            lo, hi = cut[rt.rank], cut[rt.rank + 1]
            t.fit((X[lo:hi], y[lo:hi]), validation=(X[250 + rt.rank :: rt.size], y[250 + rt.rank :: rt.size]),
                  sharded=True)
        else:
            t.fit((X[:250], y[:250]), validation=(X[250:], y[250:]))
    elif case in ("mse", "huber"):
        X, y = data("regression")
        reg = nn.Sequential(nn.Dense(6, 16, "tanh"), nn.Dense(16, 2))
        loss = nn.MeanSquaredError() if case == "mse" else nn.Huber(0.5)
        t = hpcgpu.Trainer(reg, loss, optim.Adam(lr=1e-2), **common)
        t.fit((X[:250], y[:250]), validation=(X[250:], y[250:]))
    elif case.startswith("own-"):
        X, y = data("regression")
        opt = optim.SGD(lr=0.02, momentum=0.5) if case == "own-sgd" else optim.Adam(lr=0.05)
        extra = {"tensor_parallel": 2} if case == "own-tp" else {}
        t = hpcgpu.Trainer(Quadratic(rt.xp), optimizer=opt, **common, **extra)
        t.fit((X[:250], y[:250, 0]), validation=(X[250:], y[250:, 0]))
    elif case == "predict":
        X, _ = data("classification", n=103)
        t = hpcgpu.Trainer(net, nn.SoftmaxCrossEntropy(), optim.SGD(lr=0.1), **common)
        full = t.predict(X)  # the initial model: the same at any number of ranks
        every = t.predict(X, root=None)
        mine = np.array_split(np.arange(103), rt.size)[rt.rank]
        sharded = t.predict(X[mine], sharded=True)
        t.predict(X, out=f"{argv[1]}:preds/y_hat")
        assert np.array_equal(every, t.rt.comm.bcast(full, root=0))
        if rt.rank == 0:
            # the same rows in other blocks: the BLAS may round a block's last rows apart (OpenBLAS 0.3.31: 1 ulp)
            np.testing.assert_allclose(sharded, full, rtol=1e-12, atol=1e-14)
            out["pred"] = full.tolist()
        t.close()
        if rt.rank == 0:
            print(json.dumps(out))
        return 0
    elif case == "autograd":  # the PyTorch and JAX adapters (tests/train/test_autograd.py's models)
        sys.path.insert(0, argv[1])
        import autograd_models

        X, y = autograd_models.data()
        # torch_per_parameter: a bucket per parameter (bucket_mb of 100 bytes), each Allreduce posted as autograd
        # finishes its parameter, during the backward pass
        for name, extra in (("torch", {}), ("torch_per_parameter", {"bucket_mb": 1e-4}), ("jax", {})):
            t = hpcgpu.Trainer(autograd_models.model(name.split("_")[0]), optimizer=optim.SGD(lr=0.05, momentum=0.9),
                               **autograd_models.COMMON, **extra, runtime=rt)
            out[name + "_nbuckets"] = len(t.reducer.buckets)
            t.fit((X, y))
            out[name] = {k: _device.asnumpy(v).tolist() for k, v in t.params.items()}
            out[name + "_loss"] = t.history["train_loss"]
            t.close()
        # BatchNorm: each rank's statistics move with its own rows, and are data rank 0's after fit
        t = hpcgpu.Trainer(autograd_models.model("torch-bn"), optimizer=optim.SGD(lr=0.05, momentum=0.9),
                           **autograd_models.COMMON, runtime=rt)
        t.fit((X, y))
        mine = {k: _device.asnumpy(v).tolist() for k, v in t.model.buffers().items()}
        every = rt.comm.allgather(mine)
        out["bn_alike"] = all(b == every[0] for b in every)
        out["bn_moved"] = any(v != 0 for v in every[0]["1.running_mean"])
        t.close()
        # dropout under ZeRO-1 (Adam's state sharded over the ranks): stopped at a checkpoint after 2 epochs and
        # resumed to 4 is bitwise the uninterrupted run of 4, on every rank
        import os
        import shutil
        import tempfile

        d = rt.comm.bcast(tempfile.mkdtemp() if rt.rank == 0 else None)
        opts = dict(autograd_models.COMMON, zero_stage=1, runtime=rt)
        runs = {}
        for run, extra in (("whole", {}), ("first", {"epochs": 2, "checkpoint": os.path.join(d, "ck.h5")}),
                           ("resumed", {"checkpoint": os.path.join(d, "ck.h5"), "resume": True})):
            t = hpcgpu.Trainer(autograd_models.model("torch-dropout"), optimizer=optim.Adam(0.01),
                               **{**opts, **extra})
            t.fit((X, y))
            runs[run] = (_device.asnumpy(t.model.params).copy(), list(t.history["train_loss"]), t.resumed_from)
            t.close()
        same = bool(np.array_equal(runs["resumed"][0], runs["whole"][0]) and runs["resumed"][1] == runs["whole"][1]
                    and runs["resumed"][2] == os.path.join(d, "ck.h5") and len(runs["first"][1]) == 2)
        out["dropout_zero1_resumed_bitwise"] = all(rt.comm.allgather(same))
        out["dropout_zero1_loss"] = runs["whole"][1]
        rt.comm.Barrier()
        if rt.rank == 0:
            shutil.rmtree(d, ignore_errors=True)
            print(json.dumps(out))
        return 0
    elif case == "autograd-gpu":  # nn.Torch on a GPU at 2 ranks, a bucket per parameter (the GPU kit)
        sys.path.insert(0, argv[1])
        import autograd_models
        import torch

        X, y = autograd_models.data()
        t = hpcgpu.Trainer(autograd_models.model("torch"), optimizer=optim.SGD(lr=0.05, momentum=0.9),
                           **autograd_models.COMMON, bucket_mb=1e-4, runtime=rt)
        with torch.cuda.stream(torch.cuda.Stream()):  # a stream of the user's: ordered with ours by events
            t.fit((X, y))
        out["on_device"] = not isinstance(t.params["0.weight"], np.ndarray)
        out["nbuckets"] = len(t.reducer.buckets)
        out["params"] = {k: _device.asnumpy(v).tolist() for k, v in t.params.items()}
        out["loss"] = t.history["train_loss"]
        t.close()
        if rt.rank == 0:
            print(json.dumps(out))
        return 0
    elif case in ("early", "early-bad"):  # EarlyStopping: the good run's epochs, or the agreed refusal
        from hpcgpu.train import EarlyStopping

        X, y = data("classification")
        t = hpcgpu.Trainer(net, nn.SoftmaxCrossEntropy(), optim.SGD(lr=0.05), **{**common, "epochs": 12})
        stop = EarlyStopping(monitor="train_loss", mode="max", patience=2) if case == "early" else EarlyStopping()
        t.fit((X[:250], y[:250]), callbacks=[stop])
        out.update(epoch=t.epoch, params={k: _device.asnumpy(v).tolist() for k, v in t.params.items()})
        t.close()
        if rt.rank == 0:
            print(json.dumps(out))
        return 0
    elif case == "standardize":  # Standardize's statistics from each rank's own uneven rows (sharded)
        X, y = data("classification")
        X = X * np.array([1.0, 100.0, 0.01, 5.0, 1e3, 1.0]) + np.array([0.0, 50.0, -3.0, 0.0, 1e4, 7.0])
        t = hpcgpu.Trainer(standardized_net(), nn.SoftmaxCrossEntropy(), optim.Adam(lr=1e-2), **common)
        cut = np.linspace(0, 250, rt.size + 1).astype(int) ** 2 // 250
        lo, hi = cut[rt.rank], cut[rt.rank + 1]
        t.fit((X[lo:hi], y[lo:hi]), sharded=True)
        s = t.model.spec()["net"]["layers"][0]
        out.update(mean=s["mean"], std=s["std"])
    elif case == "mixed-shapes":  # each rank its own rows, of samples of another shape: one line, every rank
        X, y = data("classification")
        shape = (2, 3) if rt.rank == 0 else (3, 2)
        t = hpcgpu.Trainer(nn.Sequential(nn.Flatten(), nn.Dense(6, 3)), nn.SoftmaxCrossEntropy(), optim.SGD(0.1),
                           **common)
        t.fit((X[rt.rank :: rt.size].reshape(-1, *shape), y[rt.rank :: rt.size]), sharded=True)
    elif case == "load":
        X, _ = data("classification", n=103)
        t = hpcgpu.load_model(argv[1], runtime=rt, tensor_parallel=rt.size)
        pred = t.predict(X)
        if rt.rank == 0:
            print(json.dumps({"pred": pred.tolist(), "shapes": {k: list(v.shape) for k, v in t.params.items()}}))
        t.close()
        return 0
    else:
        raise SystemExit(f"unknown case {case}")
    h = t.history
    out.update({k: h[k] for k in h if k.startswith(("train_", "val_"))})
    out["params"] = {k: _device.asnumpy(v).tolist() for k, v in t.params.items()}
    out["steps"] = t.step
    t.close()
    if rt.rank == 0:
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    hpcgpu.run_guarded(main, sys.argv[1:], prog="library_fit.py")
