"""A model of one's own: the parameters of a physical law fitted to measurements, its gradient by hand.

    mpiexec -n 4 python examples/decay.py [--epochs 40]

A source's count rate decays as y(t) = a exp(-k t) + c (activity a, decay constant k, background c).
The model keeps hpcgpu's contract: init(rng) gives the parameters by name, loss_and_grad(params, t, y) the
SUM of squared residuals over the micro-batch and its gradient, predict(params, t) the curve. The trainer
sums the gradient over the ranks and divides by the global batch; nn.check_grad compares the hand-written
gradient with finite differences before training. 20,000 noisy measurements, each rank its own share
(sharded=True, as an instrument's readout split by rank would come).
"""

import argparse

import numpy as np

import hpcgpu
from hpcgpu import nn, optim

TRUE = {"a": 5.0, "k": 0.25, "c": 0.5}


class Decay:
    """y = a exp(-k t) + c, by least squares."""

    def init(self, rng):
        return {"a": np.ones(1), "k": np.full(1, 0.1), "c": np.zeros(1)}

    def loss_and_grad(self, p, t, y):
        xp = nn.array_module(t)  # CuPy in training on a GPU, NumPy in check_grad
        e = xp.exp(-p["k"] * t[:, 0])
        r = p["a"] * e + p["c"] - y  # residuals
        return (r * r).sum(), {"a": 2 * (r * e).sum(), "k": -2 * (r * p["a"] * t[:, 0] * e).sum(),
                               "c": 2 * r.sum()}

    def predict(self, p, t):
        return p["a"] * nn.array_module(t).exp(-p["k"] * t[:, 0]) + p["c"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--device", default="auto", choices=("auto", "cpu", "gpu"))
    a = ap.parse_args(argv)
    rt = hpcgpu.init(a.device)
    n = 20_000 // rt.size + (rt.rank < 20_000 % rt.size)  # this rank's measurements
    rng = np.random.default_rng(1000 + rt.rank)
    t = rng.uniform(0, 20, (n, 1))
    y = TRUE["a"] * np.exp(-TRUE["k"] * t[:, 0]) + TRUE["c"] + rng.normal(0, 0.05, n)

    errors = nn.check_grad(Decay(), t[:8], y[:8])  # raises when the hand-written gradient is wrong
    trainer = hpcgpu.Trainer(Decay(), optimizer=optim.Adam(lr=0.02), batch_size=500, epochs=a.epochs,
                             seed=0, dtype="float64", runtime=rt, progress="none")
    history = trainer.fit((t, y), sharded=True)
    fitted = {k: float(v[0]) for k, v in trainer.params.items()}
    if rt.rank == 0:
        print(f"gradient check: largest relative error {max(errors.values()):.1e}")
        print(f"{rt.size} rank(s), {a.epochs} epochs: train RMSE {history['train_loss'][-1] ** 0.5:.4f}")
        print("fitted " + ", ".join(f"{k} = {fitted[k]:.3f} (true {TRUE[k]})" for k in TRUE))
    trainer.close()
    return 0


if __name__ == "__main__":
    hpcgpu.run_guarded(main, prog="decay.py")
