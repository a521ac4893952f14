"""The models of test_autograd.py, shared with its launched runs (tests/mpi/library_fit.py autograd): a PyTorch
module and a JAX function of the same MLP (6 -> 16 ReLU -> 3) on one initialization, float64."""

import numpy as np

COMMON = dict(batch_size=30, epochs=4, seed=5, dtype="float64", progress="none")


def data(n=240):
    rng = np.random.default_rng(11)
    X = rng.normal(size=(n, 6))
    return X, (X[:, 0] > 0).astype(np.int64) + (X[:, 1] > 1)


def weights():
    """The MLP's initial weights in the built-in layers' layout ((in, out), biases)."""
    rng = np.random.default_rng(12)
    return [rng.normal(0, 0.4, (6, 16)), rng.normal(0, 0.1, 16), rng.normal(0, 0.4, (16, 3)), rng.normal(0, 0.1, 3)]


def model(kind):
    from hpcgpu import nn

    w1, b1, w2, b2 = weights()
    if kind.startswith("torch"):  # torch-dropout: a Dropout(0.3) after the ReLU; torch-bn: a BatchNorm1d before it
        import torch

        drop = [torch.nn.Dropout(0.3)] if kind == "torch-dropout" else []
        bn = [torch.nn.BatchNorm1d(16)] if kind == "torch-bn" else []
        m = torch.nn.Sequential(torch.nn.Linear(6, 16), *bn, torch.nn.ReLU(), *drop, torch.nn.Linear(16, 3)).double()
        with torch.no_grad():
            for layer, w, b in ((m[0], w1, b1), (m[-1], w2, b2)):
                layer.weight.copy_(torch.from_numpy(w.T))
                layer.bias.copy_(torch.from_numpy(b))
        return nn.Torch(m, torch.nn.CrossEntropyLoss(reduction="sum"))
    import jax

    jax.config.update("jax_enable_x64", True)  # float64, as the built-in run it is compared with

    def apply(p, x):
        return jax.nn.relu(x @ p["fc0"]["w"] + p["fc0"]["b"]) @ p["fc1"]["w"] + p["fc1"]["b"]

    return nn.Jax(apply, {"fc0": {"w": w1, "b": b1}, "fc1": {"w": w2, "b": b2}})
