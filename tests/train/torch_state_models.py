"""The PyTorch modules of test_torch_state.py, and its launched ranks (``python torch_state_models.py OUT``).

Two modules, float64, each initialized from a seed that a test can make differ from rank to rank:
``frozen_tied`` (a frozen first layer, a weight tied between two layers) and ``frozen_bn`` (a frozen first layer,
then BatchNorm). The ranks' run trains both with every rank's module initialized from its own seed and writes,
from rank 0, one JSON line: what each rank holds after fit and after a checkpoint's resume.
"""

import json
import sys

import numpy as np

COMMON = dict(batch_size=30, epochs=3, seed=5, dtype="float64", progress="none")


def data(n=240):
    rng = np.random.default_rng(11)
    X = rng.normal(size=(n, 6))
    return X, (X[:, 0] > 0).astype(np.int64) + (X[:, 1] > 1)


def module(kind, seed):
    """``frozen_tied`` or ``frozen_bn``, its parameters drawn from torch's generator seeded with ``seed``."""
    import torch

    torch.manual_seed(seed)
    if kind == "frozen_bn":
        m = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(),
                                torch.nn.Linear(16, 3)).double()
        m[0].requires_grad_(False)
        return m

    class FrozenTied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Linear(6, 8).requires_grad_(False)  # frozen
            self.hidden = torch.nn.Linear(8, 8)
            self.out = torch.nn.Linear(8, 8, bias=False)
            self.out.weight = self.hidden.weight  # tied: one parameter under two names
            self.head = torch.nn.Linear(8, 3)
            self.register_buffer("scratch", torch.zeros(2), persistent=False)  # not in state_dict

        def forward(self, x):
            h = torch.tanh(self.hidden(torch.tanh(self.embed(x))))
            return self.head(torch.tanh(self.out(h)))

    return FrozenTied().double()


def model(kind, seed):
    import torch

    from hpcgpu import nn

    return nn.Torch(module(kind, seed), torch.nn.CrossEntropyLoss(reduction="sum"))


def main(argv) -> int:
    """Each rank's module from seed 100 + rank: train, checkpoint and resume in the directory ``argv[0]``; rank 0
    prints what every rank holds."""
    import hpcgpu
    from hpcgpu import _device, optim

    tmp = argv[0]

    rt = hpcgpu.init()
    X, y = data()
    out = {}

    def held(t):
        return {"params": {k: _device.asnumpy(v).tolist() for k, v in t.params.items()},
                "buffers": {k: _device.asnumpy(v).tolist() for k, v in t.model.buffers().items()}}

    t = hpcgpu.Trainer(model("frozen_tied", 100 + rt.rank), optimizer=optim.SGD(lr=0.05, momentum=0.9), **COMMON,
                       runtime=rt)
    t.fit((X, y))
    out["frozen_tied"] = rt.comm.gather(held(t))
    out["frozen_tied_loss"] = t.history["train_loss"]
    t.close()
    # frozen layer and BatchNorm: 3 epochs, and 1 epoch with a checkpoint resumed to 3 by a module of other initial
    # values (the checkpoint gives it the frozen layer and the statistics), on every rank
    opts = dict(COMMON, optimizer=optim.Adam(0.01), runtime=rt)
    ck = f"{tmp}/ck.h5"
    runs = {}
    for run, seed, extra in (("whole", 100, {}), ("first", 100, {"epochs": 1, "checkpoint": ck}),
                             ("resumed", 300, {"checkpoint": ck, "resume": True})):
        t = hpcgpu.Trainer(model("frozen_bn", seed + rt.rank), **{**opts, **extra})
        t.fit((X, y))
        runs[run] = held(t), t.history["train_loss"]
        t.close()
    out["bn_resumed_bitwise"] = all(rt.comm.allgather(runs["whole"] == runs["resumed"]))
    out["bn"] = rt.comm.gather(runs["whole"][0])
    if rt.rank == 0:
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    import hpcgpu

    hpcgpu.run_guarded(main, sys.argv[1:], prog="torch_state_models.py")  # anything unexpected aborts the job
