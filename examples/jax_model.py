"""A JAX function trained by hpcgpu: a small network in plain JAX, fitted to scikit-learn's diabetes data.

    mpiexec -n 3 python examples/jax_model.py [--epochs 60] [--seed 0]

What an mpi4jax user writes: the model is a pure function ``apply(params, x)`` of a parameter pytree (here a
dict of arrays: 10 -> 16 -> 1 with tanh), and no gradient is written by hand: ``hpcgpu.nn.Jax`` takes
``jax.value_and_grad`` of the summed squared error under ``jax.jit``, and the trainer does the rest (the
sampler, the Allreduce, AdamW, checkpoints). JAX's 64-bit mode is on, so the run is float64 throughout and
1 and 3 ranks print the same figures. The data as examples/regression.py splits and standardizes it
(train_test_split(test_size=0.2, random_state=42); predictions scaled back to the score's units). Prints the
test RMSE and R^2 (ordinary least squares reaches 0.45 on this split), and the trained pytree's shapes.
"""

import argparse

import numpy as np

import hpcgpu
from hpcgpu import nn, optim


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=60)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "gpu"))
    a = p.parse_args(argv)
    import jax
    import jax.numpy as jnp
    from sklearn.datasets import load_diabetes
    from sklearn.model_selection import train_test_split

    jax.config.update("jax_enable_x64", True)  # float64 gradients, as the trainer's dtype below
    rt = hpcgpu.init(a.device)
    X, y = load_diabetes(return_X_y=True)  # every rank: the whole set (a small one)
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.2, random_state=42)
    mean, std = X_train.mean(axis=0), X_train.std(axis=0)
    X_train, X_test = (X_train - mean) / std, (X_test - mean) / std
    y_mean, y_std = y_train.mean(), y_train.std()

    def apply(params, x):  # pure: the same params and x give the same outputs, (n, 1)
        h = jnp.tanh(x @ params["hidden"]["w"] + params["hidden"]["b"])
        return h @ params["out"]["w"] + params["out"]["b"]

    k1, k2 = jax.random.split(jax.random.PRNGKey(a.seed))  # the initial weights: the same on every rank
    params = {"hidden": {"w": jax.random.normal(k1, (10, 16)) / np.sqrt(10), "b": jnp.zeros(16)},
              "out": {"w": jax.random.normal(k2, (16, 1)) / 4.0, "b": jnp.zeros(1)}}
    model = nn.Jax(apply, params, loss="mse")
    trainer = hpcgpu.Trainer(model, optimizer=optim.AdamW(lr=3e-3, weight_decay=0.01), batch_size=32,
                             epochs=a.epochs, seed=a.seed, dtype="float64", runtime=rt, progress="none")
    trainer.fit((X_train, (y_train - y_mean) / y_std), validation=(X_test, (y_test - y_mean) / y_std))
    pred = trainer.predict(X_test)  # rank 0: (89, 1) in the order of X_test; others: None
    tree = model.tree(trainer.params)  # the trained pytree (host arrays)
    trainer.close()
    if rt.rank == 0:
        score = pred[:, 0] * y_std + y_mean
        rmse = float(np.sqrt(np.mean((score - y_test) ** 2)))
        r2 = 1.0 - float(np.sum((score - y_test) ** 2) / np.sum((y_test - y_test.mean()) ** 2))
        print(f"diabetes, {rt.size} rank(s), {a.epochs} epochs: test RMSE {rmse:.2f}")
        print(f"test R^2 {r2:.4f}")
        print("trained pytree:", jax.tree_util.tree_map(lambda v: v.shape, tree))
    return 0


if __name__ == "__main__":
    hpcgpu.run_guarded(main, prog="jax_model.py")
