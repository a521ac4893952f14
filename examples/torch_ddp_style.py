"""PyTorch DDP's first program through hpcgpu: the tutorial's model as a torch.nn.Module, autograd's gradient.

    mpiexec -n 3 python examples/torch_ddp_style.py [--epochs 30] [--seed 0] [--out torch_ddp_style.h5]

The module of PyTorch's DDP tutorial (two linear layers and a ReLU, here 64 -> 50 -> 10 for the digits' 8 x 8
pixels and ten classes), cross-entropy summed over the samples (hpcgpu divides by the global batch once, so the
model does not depend on the number of ranks), and what would be ``torch.optim.SGD(model.parameters(), lr=0.01,
momentum=0.9)`` given to hpcgpu's SGD as the same hyperparameters (PyTorch's momentum form). What DDP's program
does around the module, hpcgpu does: the process group (``hpcgpu.init``), the sampler (each rank its block of every
batch), the Allreduce of the gradient (buckets posted as autograd finishes each parameter), the optimizer step, the
checkpoints. scikit-learn's digits, split as its tutorials do; float64, so 1 and 3 ranks print the same figures.
Prints the last epoch's training loss and the test accuracy, writes the results file (metrics, the parameters by
the module's names), and loads the trained weights from it into a plain PyTorch module, whose own forward pass
predicts the same.
"""

import argparse

import numpy as np

import hpcgpu
from hpcgpu import nn, optim


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "gpu"))
    p.add_argument("--out", default="torch_ddp_style.h5", help="the results file (HDF5)")
    a = p.parse_args(argv)
    import torch
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    rt = hpcgpu.init(a.device)
    X, y = load_digits(return_X_y=True)  # every rank: the whole set (a small one); y: integer labels
    X_train, X_test, y_train, y_test = train_test_split(X / 16.0, y, test_size=0.2, random_state=0)

    class MyModel(torch.nn.Module):  # the DDP tutorial's ToyModel, sized for the digits
        def __init__(self):
            super().__init__()
            self.net1 = torch.nn.Linear(64, 50)
            self.relu = torch.nn.ReLU()
            self.net2 = torch.nn.Linear(50, 10)

        def forward(self, x):
            return self.net2(self.relu(self.net1(x)))

    torch.manual_seed(a.seed)  # the module's initial weights: the same on every rank
    model = MyModel().double()
    module = nn.Torch(model, torch.nn.CrossEntropyLoss(reduction="sum"))
    trainer = hpcgpu.Trainer(module,
                             optimizer=optim.SGD(lr=0.01, momentum=0.9), batch_size=32, epochs=a.epochs,
                             seed=a.seed, dtype="float64", runtime=rt, progress="none")
    history = trainer.fit((X_train, y_train), validation=(X_test, y_test))
    logits = trainer.predict(X_test)  # rank 0: (360, 10) in the order of X_test; others: None
    trainer.save_results(a.out)  # collective: the history, the parameters by the module's names, provenance
    trainer.close()
    if rt.rank == 0:
        print(f"digits, {rt.size} rank(s), {a.epochs} epochs")
        print(f"final train_loss {history['train_loss'][-1]:.4f}")
        print(f"test_accuracy {np.mean(logits.argmax(axis=1) == y_test):.4f}")
        print(f"wrote {a.out}")
        plain = MyModel().double()  # back into plain PyTorch, from the HDF5 file by name (no torch.load)
        plain.load_state_dict(module.state_dict(a.out))
        with torch.no_grad():
            same = np.allclose(plain(torch.from_numpy(X_test)).numpy(), logits, rtol=1e-12, atol=1e-12)
        print(f"plain PyTorch predicts the same: {same}")
    return 0


if __name__ == "__main__":
    hpcgpu.run_guarded(main, prog="torch_ddp_style.py")
