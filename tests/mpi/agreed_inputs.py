"""Cases of arguments that differ on the last rank (or are refused on every rank), run one after another.

Usage: agreed_inputs.py DIRECTORY CASE [CASE ...]

Each rank writes one line per case to DIRECTORY/lines.RANK: ``CASE: TYPE: MESSAGE`` for the error the case raised
(``TYPE`` its ordinary type, ``agreed`` added when it is an :class:`hpcgpu.AgreedError`), ``CASE: ok`` when it
raised none. A case that hangs or aborts ends the launch, which the test sees.

The hang cases (``stall_*``) do not return: a rank sleeps where the others wait, and the stall watchdog (the
test sets ``HPCGPU_STALL_TIMEOUT``) must end the job.
"""

import os
import sys
import time

import numpy as np

import hpcgpu
from hpcgpu import nn, optim
from hpcgpu.errors import AgreedError, agree_inputs, plain_type

rt = hpcgpu.init("cpu")
R, P = rt.rank, rt.size
LAST = R == P - 1
rng = np.random.default_rng(0)
X = rng.normal(size=(60, 4))
Y = (X[:, 0] > 0).astype(np.int64)


def model(width=8):
    return nn.Sequential(nn.Dense(4, width, activation="relu"), nn.Dense(width, 2))


def trainer(*args, **kw):
    kw.setdefault("progress", "none")
    kw.setdefault("batch_size", 12)
    return hpcgpu.Trainer(*args or (model(), nn.SoftmaxCrossEntropy()), **kw)


def fitted():
    t = trainer(epochs=1)
    t.fit((X, Y))
    return t


def matrices():
    grid = hpcgpu.ProcessGrid((P, 1))
    return grid, hpcgpu.DistMatrix.random((8, 8), grid), hpcgpu.DistMatrix.random((8, 8), grid, seed=1)


class Linear:
    """A model of one's own whose width comes from an argument (the last rank is given another)."""

    def __init__(self, width):
        self.width = width

    def init(self, rng):
        return {"w": rng.normal(size=(4, self.width)) * 0.1}

    def loss_and_grad(self, params, x, y):
        r = x @ params["w"] - y[:, None]
        return float((r * r).sum()), {"w": 2 * x.T @ r}

    def predict(self, params, x):
        return x @ params["w"]


class OpaqueLinear(Linear):
    """Linear with its width in a slot, not in its attributes: the ranks' arguments look alike, the parameter
    count differs."""

    __slots__ = ("width",)


class Ranked(Linear):
    """Linear holding per-rank state of its own (its rank), as a science model may: not an argument that differs."""

    def __init__(self, width):
        super().__init__(width)
        self.rank = R


def stall_before(where):
    """The last rank sleeps (a rank hung in I/O) before ``where``, which the others enter."""
    if LAST:
        time.sleep(300)
    return where()


def stall_in_summa():
    grid, a, b = matrices()
    if LAST:  # after the agreement: the others wait in the first panel's broadcast
        import hpcgpu.summa as summa

        real = summa._summa
        summa._summa = lambda *args, **kw: (time.sleep(300), real(*args, **kw))
    return hpcgpu.matmul(a, b, panel=2)


def late_contract(at, **kw):
    """A PyTorch model whose forward breaks the contract on the last rank at its call ``at`` (a later step)."""
    import torch

    class Late(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b, self.c = torch.nn.Linear(4, 64), torch.nn.Linear(64, 64), torch.nn.Linear(64, 1)
            self.calls = 0

        def forward(self, x):
            self.calls += 1
            out = self.c(torch.relu(self.b(torch.relu(self.a(x))))).reshape(-1)
            return (out, out) if self.calls >= at and LAST else out

    t = trainer(nn.Torch(Late(), torch.nn.MSELoss(reduction="sum")), epochs=3, bucket_mb=0.005, **kw)
    t.fit((X, Y.astype(np.float64)))


def own_runtime():
    """Each rank its own job: a Trainer under a process-wide runtime over one rank agrees over that rank only."""
    from mpi4py import MPI

    from hpcgpu import runtime

    own = hpcgpu.init("cpu", comm=MPI.COMM_WORLD.Split(R, 0))
    runtime._RUNTIME = own  # what a task's process has (hpcgpu.tasks._isolate pins its one-rank runtime)
    try:
        t = trainer(lr=0.1 * (R + 1), epochs=1)
        assert t.rt is own, "the Trainer is not on the process-wide runtime"
    finally:
        runtime._RUNTIME = rt


CASES = {
    # the Trainer's construction: one rank given another value
    "sgd_lr": lambda: trainer(model(), nn.SoftmaxCrossEntropy(), optim.SGD(lr=0.5 if LAST else 0.1)),
    "sgd_or_adam": lambda: trainer(model(), nn.SoftmaxCrossEntropy(), optim.Adam() if LAST else optim.SGD(lr=0.1)),
    "batch_size": lambda: trainer(batch_size=13 if LAST else 12),
    "epochs": lambda: trainer(epochs=3 if LAST else 2),
    "negative_lr": lambda: trainer(lr=-0.1 if LAST else 0.1),
    "dense_width": lambda: trainer(model(9 if LAST else 8), nn.SoftmaxCrossEntropy()),
    "loss": lambda: trainer(model(), nn.Huber() if LAST else nn.SoftmaxCrossEntropy()),
    "own_model_width": lambda: hpcgpu.Trainer(OpaqueLinear(2 if LAST else 1), batch_size=12, progress="none"),
    "own_model_rank": lambda: hpcgpu.Trainer(Ranked(1), batch_size=12, progress="none") and None,
    # the Trainer's construction: a bad type on every rank
    "batch_size_str": lambda: trainer(batch_size="12"),
    "epochs_float": lambda: trainer(epochs=2.5),
    "lr_str": lambda: trainer(lr="0.1"),
    "sgd_lr_str": lambda: optim.SGD(lr="0.1"),
    "adam_betas": lambda: optim.Adam(betas=0.9),
    "own_runtime": own_runtime,
    # fit, evaluate, predict
    "fit_epochs": lambda: trainer().fit((X, Y), epochs=3 if LAST else 2),
    "fit_rows": lambda: trainer().fit((X[:59] if LAST else X, Y[:59] if LAST else Y)),
    "fit_keras": lambda: trainer().fit((X, Y), verbose=0),
    "evaluate_rows": lambda: fitted().evaluate((X[:30] if LAST else X, Y[:30] if LAST else Y)),
    "predict_root": lambda: fitted().predict(X, root=P - 1 if LAST else 0),
    "fit_ok": lambda: fitted() and None,
    # the agreement itself: one rank's own refusal, the same arguments
    "own_refusal": lambda: agree_inputs("check", {"x": 1}, error=ValueError("check: refused by rank 1")
                                        if R == 1 else None),
    # a later step's contract error on one rank, the reduction overlapping the backward pass in several buckets
    "late_contract_buckets": lambda: late_contract(9),
    "late_contract_accumulated_9": lambda: late_contract(9, grad_accum_steps=2),
    "late_contract_accumulated_10": lambda: late_contract(10, grad_accum_steps=2),
    # matrices
    "grid_dims": lambda: hpcgpu.ProcessGrid((1, P) if LAST else (P, 1)),
    "random_shape": lambda: hpcgpu.DistMatrix.random((9, 8) if LAST else (8, 8), hpcgpu.ProcessGrid((P, 1))),
    "zeros_dtype": lambda: hpcgpu.DistMatrix.zeros((8, 8), hpcgpu.ProcessGrid((P, 1)),
                                                   dtype="float32" if LAST else np.float64),
    "from_global_root": lambda: hpcgpu.DistMatrix.from_global(np.ones((8, 8)), hpcgpu.ProcessGrid((P, 1)),
                                                              root=P - 1 if LAST else 0),
    "from_global_bad_root": lambda: hpcgpu.DistMatrix.from_global(np.ones((8, 8)), root=9 if LAST else 0),
    "zeros_grid_type": lambda: hpcgpu.DistMatrix.zeros((8, 8), grid="x" if LAST else None),
    "random_grid_type": lambda: hpcgpu.DistMatrix.random((8, 8), grid="x"),
    "redistribute_type": lambda: (lambda g, m: m.redistribute("x" if LAST else g))(hpcgpu.ProcessGrid((1, P)),
                                                                                 matrices()[1]),
    "matmul_transb": lambda: (lambda g, a, b: hpcgpu.matmul(a, b, transb="T" if LAST else "N"))(*matrices()),
    "matmul_alpha": lambda: (lambda g, a, b: hpcgpu.matmul(a, b, alpha=2.0 if LAST else 1.0))(*matrices()),
    "matmul_ok": lambda: (lambda g, a, b: hpcgpu.matmul(a, b) and None)(*matrices()),
    # the task farm
    "map_retries": lambda: hpcgpu.tasks.map(abs, {"x": [1, -2, 3]}, retries=1 if LAST else 0, isolate=False),
    # hangs: the watchdog ends them
    "stall_trainer": lambda: stall_before(trainer),
    "stall_summa": stall_in_summa,
}


def main(directory, names):
    lines = []
    for name in names:
        try:
            CASES[name]()
            line = f"{name}: ok"
        except AgreedError as e:
            line = f"{name}: {plain_type(e).__name__} agreed: {e}"
        except (ValueError, TypeError) as e:  # a refusal that is not agreed: the test says so
            line = f"{name}: {type(e).__name__}: {e}"
        lines.append(line)
        with open(os.path.join(directory, f"lines.{R}"), "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")


main(sys.argv[1], sys.argv[2:])
