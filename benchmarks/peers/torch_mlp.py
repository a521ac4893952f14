"""A plain eager PyTorch training loop: the bar hpcgpu's trainer is measured against on one GPU.

    python benchmarks/peers/torch_mlp.py --data FILE.h5 [--hidden 256,256] [--batch-size 256] [--lr 0.05]
                                         [--momentum 0.9] [--epochs 4] [--seed 0] [--device auto]

What a user writes instead of hpcgpu's trainer on one device, and what ``benchmarks/gpu/train_vs_torch.py``
and ``benchmarks/gpu/setup-and-run.sh`` run beside it with the same options: an MLP D-hidden...-C (ReLU,
softmax cross-entropy, PyTorch's default initialization), SGD with momentum, a constant learning rate, no
weight decay, float32, eager mode (no ``torch.compile``, no CUDA graphs, no AMP). It reads /train/X,
/train/y, /test/X, /test/y (hpcgpu's HDF5 layout: ``python -m hpcgpu.datasets``) and keeps them on the
device; each epoch draws one permutation and runs ``N // batch`` steps. ``--device auto`` takes CUDA when
PyTorch sees it, else the CPU (with PyTorch's own thread count).

It prints a line per epoch, ``epoch E: SECONDS s  SAMPLES samples/s  test_accuracy A``, and one line at the
end, ``RESULT device=D hidden=H batch=B samples_per_s=S test_accuracy=A``: S is the samples over the seconds
of epochs 2 and later (epoch 1 pays for cuBLAS's and the allocator's warm-up; with one epoch, epoch 1). On
CUDA the clock is read only after ``torch.cuda.synchronize()``, so an epoch's time includes all its kernels;
the test accuracy is computed outside the timed part.
"""

import argparse
import time

import h5py
import torch


def mlp(sizes):
    """Linear layers of ``sizes`` with a ReLU between each two."""
    layers = []
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        if i:
            layers.append(torch.nn.ReLU())
        layers.append(torch.nn.Linear(n_in, n_out))
    return torch.nn.Sequential(*layers)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="HDF5 with /train/X, /train/y, /test/X, /test/y")
    p.add_argument("--hidden", default="256,256", help="hidden widths, comma-separated")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    a = p.parse_args()
    dev = torch.device("cuda" if a.device == "cuda" or (a.device == "auto" and torch.cuda.is_available()) else "cpu")

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    with h5py.File(a.data, "r") as f:
        X, y, Xt, yt = (torch.as_tensor(f[k][()]) for k in ("train/X", "train/y", "test/X", "test/y"))
    X, Xt = X.to(dev, torch.float32), Xt.to(dev, torch.float32)
    y, yt = y.to(dev, torch.int64), yt.to(dev, torch.int64)
    torch.manual_seed(a.seed)
    sizes = [X.shape[1], *(int(h) for h in a.hidden.split(",") if h), int(max(y.max(), yt.max())) + 1]
    model = mlp(sizes).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    B = a.batch_size
    steps = len(X) // B
    times, acc = [], float("nan")
    for epoch in range(1, a.epochs + 1):
        model.train()
        sync()
        t0 = time.perf_counter()
        order = torch.randperm(len(X), device=dev)
        for s in range(steps):
            idx = order[s * B : (s + 1) * B]
            loss = torch.nn.functional.cross_entropy(model(X[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        sync()
        times.append(time.perf_counter() - t0)
        model.eval()
        with torch.no_grad():
            acc = (model(Xt).argmax(dim=1) == yt).float().mean().item()
        print(f"epoch {epoch}: {times[-1]:.3f} s  {steps * B / times[-1]:.0f} samples/s  test_accuracy {acc:.4f}",
              flush=True)
    timed = times[1:] or times
    if timed and steps:
        print(f"RESULT device={dev.type} hidden={a.hidden} batch={B} "
              f"samples_per_s={steps * B * len(timed) / sum(timed):.1f} test_accuracy={acc:.4f}", flush=True)


if __name__ == "__main__":
    main()
