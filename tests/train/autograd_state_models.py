"""The models of test_autograd_state.py, and its launched ranks (``python autograd_state_models.py DIR``).

``jax_model(seed)``: a JAX function whose pytree holds non-trainable leaves (a fixed float projection and an int32
permutation, marked by ``trainable=``) before a trained layer, float64, every leaf drawn from ``seed``.
``embedding_model()``: a PyTorch ``nn.Embedding`` first layer, whose features are integer indices, and
``write_indices(path)`` the HDF5 file of them. The ranks' run trains both, every rank's JAX leaves from its own
seed, and writes from rank 0 one JSON line: what each rank holds after fit and after a checkpoint's resume.
"""

import json
import sys

import numpy as np

COMMON = dict(batch_size=30, epochs=3, seed=5, dtype="float64", progress="none")
TRAINABLE = {"fixed": False, "fc": True}
"""The mask of ``jax_model``'s pytree: the whole ``fixed`` subtree is not trained (a prefix of the pytree)."""


def data(n=240):
    rng = np.random.default_rng(11)
    X = rng.normal(size=(n, 6))
    return X, (X[:, 0] > 0).astype(np.int64) + (X[:, 1] > 1)


def jax_params(seed):
    """The pytree: ``fixed`` (``proj`` (6, 8) float64, ``perm`` (8,) int32) and ``fc`` (``w`` (8, 3), ``b``)."""
    rng = np.random.default_rng(seed)
    return {"fixed": {"proj": rng.normal(0, 0.5, (6, 8)), "perm": rng.permutation(8).astype(np.int32)},
            "fc": {"w": rng.normal(0, 0.3, (8, 3)), "b": rng.normal(0, 0.1, 3)}}


def jax_apply(p, x):
    import jax.numpy as jnp

    return jnp.tanh(x @ p["fixed"]["proj"])[:, p["fixed"]["perm"]] @ p["fc"]["w"] + p["fc"]["b"]


def jax_model(seed, trainable=TRAINABLE):
    import jax

    from hpcgpu import nn

    jax.config.update("jax_enable_x64", True)  # float64, as the trainer's
    return nn.Jax(jax_apply, jax_params(seed), trainable=trainable)


def stats_params(seed):
    """Flax's variables of a layer with running statistics: ``params`` (``w1`` (6, 8), ``w2`` (8, 3)) and
    ``batch_stats`` (``mean`` (8,), the hidden layer's running mean; ``xsum`` (6,), the sum of every training row;
    ``count``, 0-d int64, the training rows seen)."""
    rng = np.random.default_rng(seed)
    return {"params": {"w1": rng.normal(0, 0.5, (6, 8)), "w2": rng.normal(0, 0.3, (8, 3))},
            "batch_stats": {"mean": np.zeros(8), "xsum": np.zeros(6), "count": np.zeros((), np.int64)}}


def stats_apply(v, x, train):
    """As a flax module with BatchNorm is called: in training the batch's mean centres the hidden layer and
    ``(outputs, updates)`` comes back (flax's ``apply(..., mutable=["batch_stats"])``); otherwise the running
    mean does, and the outputs come back alone."""
    p, s = v["params"], v["batch_stats"]
    h = x @ p["w1"]
    if not train:
        return (h - s["mean"]) @ p["w2"]
    mean = h.mean(0)
    return (h - mean) @ p["w2"], {"batch_stats": {"mean": 0.9 * s["mean"] + 0.1 * mean, "xsum": s["xsum"] + x.sum(0),
                                                  "count": s["count"] + x.shape[0]}}


def stats_model(seed):
    import jax

    from hpcgpu import nn

    jax.config.update("jax_enable_x64", True)
    return nn.Jax(stats_apply, stats_params(seed), trainable={"params": True, "batch_stats": False},
                  mutable="batch_stats")


def indices(n=240, vocab=10, width=4):
    """Integer features (indices into a vocabulary of ``vocab``) and labels from them."""
    rng = np.random.default_rng(13)
    X = rng.integers(0, vocab, size=(n, width))
    return X, (X[:, 0] + X[:, 1] > vocab - 1).astype(np.int64)


def write_indices(path):
    """``/train`` and ``/test`` of :func:`indices` in the trainer's layout, the features int64."""
    import h5py

    X, y = indices()
    with h5py.File(path, "w") as f:
        f["/train/X"], f["/train/y"] = X[:200], y[:200]
        f["/test/X"], f["/test/y"] = X[200:], y[200:]
    return path


def embedding_model():
    """``Embedding(10, 3)``, ``Flatten``, ``Linear(12, 2)``: its input must be integer (torch.long) indices."""
    import torch

    from hpcgpu import nn

    torch.manual_seed(7)
    m = torch.nn.Sequential(torch.nn.Embedding(10, 3), torch.nn.Flatten(), torch.nn.Linear(12, 2)).double()
    return nn.Torch(m, torch.nn.CrossEntropyLoss(reduction="sum"))


def main(argv) -> int:
    """Train in the directory ``argv[0]``; rank 0 prints what every rank holds."""
    import hpcgpu
    from hpcgpu import _device, optim

    tmp = argv[0]
    rt = hpcgpu.init()
    out = {}

    def held(t):
        return {"params": {k: _device.asnumpy(v).tolist() for k, v in t.params.items()},
                "buffers": {k: _device.asnumpy(v).tolist() for k, v in t.model.buffers().items()}}

    # every rank's leaves from its own seed: data rank 0's non-trainable leaves (and parameters) on every rank
    t = hpcgpu.Trainer(jax_model(100 + rt.rank), optimizer=optim.SGD(lr=0.05, momentum=0.9), **COMMON, runtime=rt)
    t.fit(data())
    out["jax"], out["jax_loss"] = rt.comm.gather(held(t)), t.history["train_loss"]
    t.close()
    # 3 epochs, and 1 epoch with a checkpoint resumed to 3 by a model of other leaves (the checkpoint gives them)
    ck = f"{tmp}/ck.h5"
    runs = {}
    for run, seed, extra in (("whole", 100, {}), ("first", 100, {"epochs": 1, "checkpoint": ck}),
                             ("resumed", 300, {"checkpoint": ck, "resume": True})):
        t = hpcgpu.Trainer(jax_model(seed + rt.rank), optimizer=optim.Adam(0.01), **{**COMMON, **extra}, runtime=rt)
        t.fit(data())
        runs[run] = held(t), t.history["train_loss"]
        t.close()
    out["jax_resumed_bitwise"] = all(rt.comm.allgather(runs["whole"] == runs["resumed"]))
    # running statistics (mutable=): each rank updates rank 0's from its own rows at each step, as DDP's BatchNorm
    t = hpcgpu.Trainer(stats_model(100 + rt.rank), optimizer=optim.SGD(lr=0.05), **COMMON, runtime=rt)
    t.fit(data())
    out["stats_after_fit"] = rt.comm.gather(held(t)["buffers"])
    t.predict(data()[0][:5])  # every rank takes data rank 0's before it
    out["stats"] = rt.comm.gather(held(t)["buffers"])
    t.close()
    # integer features from an HDF5 file (written by the test) into an Embedding
    t = hpcgpu.Trainer(embedding_model(), optimizer=optim.SGD(lr=0.05, momentum=0.9), **COMMON, runtime=rt)
    t.fit(f"{tmp}/indices.h5")
    out["embedding"], out["embedding_history"] = rt.comm.gather(held(t)), t.history
    t.close()
    if rt.rank == 0:
        print(json.dumps(out, default=float))
    return 0


if __name__ == "__main__":
    import hpcgpu

    hpcgpu.run_guarded(main, sys.argv[1:], prog="autograd_state_models.py")  # anything unexpected aborts the job
