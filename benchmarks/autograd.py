"""Models with autograd through hpcgpu's trainer against a plain PyTorch loop, one rank, on the CPU.

    python benchmarks/autograd.py [--hidden 256,256] [--batch-size 64] [--epochs 4] [--rows 20000]

The same MLP (64 features, ReLU, 10 classes, float32, SGD with momentum 0.9 at a constant rate) trained four
ways on one synthetic set: a plain eager PyTorch loop (what a user writes: ``torch.optim.SGD``, the module's
own parameters), hpcgpu's trainer with ``nn.Torch`` of the same module, with ``nn.Jax`` of the same network,
and with the built-in layers. It prints samples/s over epochs 2 and later for each and the ratios to the
plain loop: what the adapters cost (the gradient's copy into the flat buffer, the reducer and optimizer of
hpcgpu, ``functional_call``'s dispatch; for JAX the copies at each ``jit`` call).
"""

import argparse
import os
import sys
import time

import numpy as np


def data(rows, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(rows, 64)).astype(np.float32)
    W = rng.normal(size=(64, 10)).astype(np.float32)
    return X, (X @ W).argmax(1).astype(np.int64)


def plain_torch(X, y, hidden, batch, epochs, lr):
    import torch

    torch.manual_seed(0)
    m = _module(hidden)
    opt = torch.optim.SGD(m.parameters(), lr=lr, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    Xt, yt = torch.from_numpy(X), torch.from_numpy(y)
    seconds = []
    g = torch.Generator().manual_seed(0)
    for _ in range(epochs):
        t0 = time.perf_counter()
        order = torch.randperm(len(X), generator=g)
        for s in range(len(X) // batch):
            idx = order[s * batch:(s + 1) * batch]
            opt.zero_grad()
            loss_fn(m(Xt[idx]), yt[idx]).backward()
            opt.step()
        seconds.append(time.perf_counter() - t0)
    return seconds


def _module(hidden):
    """The peer loop's MLP (benchmarks/peers/torch_mlp.py), 64 features in, 10 classes out."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))
    from torch_mlp import mlp

    return mlp([64, *hidden, 10])


def _jax_model(hidden):
    import jax

    from hpcgpu import nn

    sizes = [64, *hidden, 10]
    rng = np.random.default_rng(0)
    params = [{"w": rng.normal(0, a ** -0.5, (a, b)).astype(np.float32), "b": np.zeros(b, np.float32)}
              for a, b in zip(sizes[:-1], sizes[1:], strict=True)]

    def apply(p, x):
        for layer in p[:-1]:
            x = jax.nn.relu(x @ layer["w"] + layer["b"])
        return x @ p[-1]["w"] + p[-1]["b"]

    return nn.Jax(apply, params)


def through_hpcgpu(kind, X, y, hidden, batch, epochs, lr):
    import hpcgpu
    from hpcgpu import nn, optim

    common = dict(batch_size=batch, epochs=epochs, progress="none", seed=0, dtype="float32", device="cpu")
    if kind == "torch":
        import torch

        torch.manual_seed(0)
        t = hpcgpu.Trainer(nn.Torch(_module(hidden), torch.nn.CrossEntropyLoss(reduction="sum")),
                           optimizer=optim.SGD(lr, momentum=0.9), **common)
    elif kind == "jax":
        t = hpcgpu.Trainer(_jax_model(hidden), optimizer=optim.SGD(lr, momentum=0.9), **common)
    else:
        layers = [nn.Dense(a, b, "relu") for a, b in zip([64, *hidden[:-1]], hidden, strict=True)]
        t = hpcgpu.Trainer(nn.Sequential(*layers, nn.Dense(hidden[-1], 10)), nn.SoftmaxCrossEntropy(),
                           optim.SGD(lr, momentum=0.9), **common)
    from hpcgpu import _blas

    threads = _blas.threads()
    t.fit((X, y))
    seconds = list(t.history["seconds"])
    t.close()
    if threads:  # nn.Torch leaves NumPy's BLAS on one thread: the next way gets the rank's threads again
        _blas.set_threads(threads)
    return seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hidden", default="256,256")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--lr", type=float, default=0.05)
    a = ap.parse_args()
    hidden = [int(h) for h in a.hidden.split(",")]
    X, y = data(a.rows)
    n = (a.rows // a.batch_size) * a.batch_size
    runs = {"plain PyTorch loop": plain_torch(X, y, hidden, a.batch_size, a.epochs, a.lr)}
    for kind, name in (("torch", "hpcgpu + nn.Torch"), ("jax", "hpcgpu + nn.Jax"), ("built-in", "hpcgpu layers")):
        runs[name] = through_hpcgpu(kind, X, y, hidden, a.batch_size, a.epochs, a.lr)
    base = None
    print(f"MLP 64-{a.hidden}-10, batch {a.batch_size}, {a.rows} rows, float32, 1 rank, CPU; epochs 2-{a.epochs}:")
    for name, secs in runs.items():
        later = secs[1:] or secs
        sps = n * len(later) / sum(later)
        base = base or sps
        print(f"  {name:22s} {sps:10.0f} samples/s  ratio {sps / base:.2f}")


if __name__ == "__main__":
    main()
