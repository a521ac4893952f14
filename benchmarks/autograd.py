"""Models with autograd through hpcgpu's trainer against a plain PyTorch loop (one rank) and against DDP.

    python benchmarks/autograd.py [--hidden 256,256] [--batch-size 64] [--epochs 4] [--rows 20000]
    python benchmarks/autograd.py --ranks 1,2,4 [--repeats 3] [--device cpu|cuda] [--batch-size 256] ...
    python benchmarks/autograd.py --host-rounds 5 --hidden 16 [--epochs 2]

The same MLP (64 features, ReLU, 10 classes, float32, SGD with momentum 0.9 at a constant rate) trained four
ways on one synthetic set: a plain eager PyTorch loop (what a user writes: ``torch.optim.SGD``, the module's
own parameters), hpcgpu's trainer with ``nn.Torch`` of the same module, with ``nn.Jax`` of the same network,
and with the built-in layers. It prints samples/s over epochs 2 and later for each and the ratios to the
plain loop: what the adapters cost (the gradient's copy into the flat buffer, the reducer and optimizer of
hpcgpu, ``functional_call``'s dispatch; for JAX the copies at each ``jit`` call).

With ``--ranks``, the same PyTorch module at each number of ranks (``mpiexec -n R``), trained by hpcgpu's
trainer with ``nn.Torch`` and by PyTorch's DistributedDataParallel (``benchmarks/peers/torch_ddp.py``: gloo on
the CPU, NCCL with ``--device cuda``), the two launches alternating ``--repeats`` times: the median samples/s
of each (epochs 2 and later, rank 0's clock), the same global batch, data and optimizer (SGD, momentum 0.9),
and the ratio hpcgpu / DDP.
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


def plain_torch(X, y, hidden, batch, epochs, lr, cpu=None, ddp=False):
    """The plain eager PyTorch loop; with ``ddp``, the same loop on ``DistributedDataParallel`` at one rank.

    DDP runs over gloo at a world of one, in this process (what ``benchmarks/peers/torch_ddp.py`` runs at one
    rank: DDP keeps its reducer, buckets and all-reduce), its process group made at the first call (a file
    rendezvous in a temporary folder) and kept. Returns each epoch's seconds; ``cpu`` gets its CPU seconds.
    """
    import torch

    torch.manual_seed(0)
    m = _module(hidden)
    if ddp:
        import tempfile

        import torch.distributed as dist

        if not dist.is_initialized():
            rdv = os.path.join(tempfile.mkdtemp(prefix="hpcgpu-ddp-"), "rendezvous")
            dist.init_process_group("gloo", init_method=f"file://{rdv}", rank=0, world_size=1)
        m = torch.nn.parallel.DistributedDataParallel(m)
    opt = torch.optim.SGD(m.parameters(), lr=lr, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    Xt, yt = torch.from_numpy(X), torch.from_numpy(y)
    seconds = []
    g = torch.Generator().manual_seed(0)
    for _ in range(epochs):
        t0, c0 = time.perf_counter(), time.process_time()
        order = torch.randperm(len(X), generator=g)
        for s in range(len(X) // batch):
            idx = order[s * batch:(s + 1) * batch]
            opt.zero_grad()
            loss_fn(m(Xt[idx]), yt[idx]).backward()
            opt.step()
        seconds.append(time.perf_counter() - t0)
        if cpu is not None:
            cpu.append(time.process_time() - c0)
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


def through_hpcgpu(kind, X, y, hidden, batch, epochs, lr, cpu=None):
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
    t.fit((X, y), callbacks=[_CPUClock(cpu)] if cpu is not None else ())
    seconds = list(t.history["seconds"])
    t.close()
    if threads:  # nn.Torch leaves NumPy's BLAS on one thread: the next way gets the rank's threads again
        _blas.set_threads(threads)
    return seconds


class _CPUClock:
    """A trainer callback: the process's CPU seconds of each epoch appended to ``cpu``."""

    def __init__(self, cpu):
        self.cpu = cpu

    def on_fit_start(self, trainer):
        self.c0 = time.process_time()

    def on_epoch_end(self, trainer, row):
        c = time.process_time()
        self.cpu.append(c - self.c0)
        self.c0 = c

    def on_fit_end(self, trainer):
        pass


def host_time(a):
    """``--host-rounds``: CPU time per step of the plain loop, DDP at one rank and hpcgpu + nn.Torch, one thread.

    CPU time (``time.process_time``) is what the host spends on a step whatever else loads the machine; a tiny
    model makes it the adapter's and the trainer's Python work (as on a GPU, where the host only queues kernels).
    Each round runs the three ways once, in turn, ``--epochs`` epochs each; the CPU time of epochs 2 and later
    counts. DDP is PyTorch's ``DistributedDataParallel`` over gloo at a world of one, in this process.
    """
    import statistics

    import torch

    torch.set_num_threads(1)
    hidden = [int(h) for h in a.hidden.split(",")]
    X, y = data(a.rows)
    steps = max(1, a.epochs - 1) * (a.rows // a.batch_size)
    got = {"plain PyTorch loop": [], "PyTorch DDP (gloo)": [], "hpcgpu + nn.Torch": []}
    for _ in range(a.host_rounds):
        for way in got:
            cpu = []
            if way == "plain PyTorch loop":
                plain_torch(X, y, hidden, a.batch_size, a.epochs, a.lr, cpu)
            elif way == "PyTorch DDP (gloo)":
                plain_torch(X, y, hidden, a.batch_size, a.epochs, a.lr, cpu, ddp=True)
            else:
                through_hpcgpu("torch", X, y, hidden, a.batch_size, a.epochs, a.lr, cpu)
            got[way].append(1e3 * sum(cpu[1:] or cpu) / steps)
    print(f"MLP 64-{a.hidden}-10, batch {a.batch_size}, 1 rank, 1 thread, CPU ms per step over {a.host_rounds} "
          "rounds: median (min-max)")
    for way, ms in got.items():
        print(f"  {way:22s} {statistics.median(ms):.3f} ({min(ms):.3f}-{max(ms):.3f})")
    plain, ddp, ours = (statistics.median(v) for v in got.values())
    print(f"  ratio plain / nn.Torch {plain / ours:.2f}, DDP / nn.Torch {ddp / ours:.2f}")


def worker(a):
    """One rank of the hpcgpu side of ``--ranks`` (run under mpiexec): the RESULT line on rank 0."""
    import torch

    import hpcgpu
    from hpcgpu import nn, optim

    hidden = [int(h) for h in a.hidden.split(",")]
    X, y = data(a.rows)
    torch.manual_seed(0)
    t = hpcgpu.Trainer(nn.Torch(_module(hidden), torch.nn.CrossEntropyLoss(reduction="sum")),
                       optimizer=optim.SGD(a.lr, momentum=0.9), batch_size=a.batch_size, epochs=a.epochs,
                       progress="none", seed=0, dtype="float32", device="gpu" if a.device == "cuda" else "cpu")
    t.fit((X, y))
    secs = list(t.history["seconds"])[1:] or list(t.history["seconds"])
    n = (a.rows // a.batch_size) * a.batch_size
    if t.rt.rank == 0:
        print(f"RESULT ranks={t.rt.size} device={a.device} samples_per_s={n * len(secs) / sum(secs):.1f}", flush=True)
    t.close()


def versus_ddp(a):
    """The ``--ranks`` table: hpcgpu + nn.Torch against DDP, launches alternating, medians."""
    import re
    import shutil
    import statistics
    import subprocess
    import tempfile

    here = os.path.dirname(os.path.abspath(__file__))
    launcher = os.environ.get("MPIEXEC") or shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or "mpiexec"
    common = ["--hidden", a.hidden, "--batch-size", str(a.batch_size), "--epochs", str(a.epochs), "--rows",
              str(a.rows), "--lr", str(a.lr), "--device", a.device]
    ways = {"hpcgpu + nn.Torch": [os.path.abspath(__file__), "--worker"],
            "PyTorch DDP": [os.path.join(here, "peers", "torch_ddp.py")]}
    print(f"MLP 64-{a.hidden}-10, global batch {a.batch_size}, {a.rows} rows, float32, {a.device}, "
          f"median of {a.repeats} (samples/s, epochs 2-{a.epochs}):")
    tmp = tempfile.mkdtemp(prefix="hpcgpu-ddp-")
    for ranks in (int(r) for r in a.ranks.split(",")):
        got = {w: [] for w in ways}
        for _ in range(a.repeats):
            for way, cmd in ways.items():
                extra = []
                if way == "PyTorch DDP":
                    rdv = os.path.join(tmp, f"rendezvous-{ranks}-{len(got[way])}")
                    extra = ["--rendezvous", rdv]
                p = subprocess.run([launcher, "-n", str(ranks), sys.executable, *cmd, *common, *extra],
                                   capture_output=True, text=True, timeout=900)
                m = re.search(r"samples_per_s=([0-9.]+)", p.stdout)
                if p.returncode != 0 or m is None:
                    sys.exit(f"{way} at {ranks} rank(s) exited {p.returncode}:\n{p.stdout}\n{p.stderr[-3000:]}")
                got[way].append(float(m.group(1)))
        ours, theirs = (statistics.median(got[w]) for w in ways)
        print(f"  {ranks} rank(s): hpcgpu + nn.Torch {ours:10.0f}  DDP {theirs:10.0f}  ratio {ours / theirs:.2f}",
              flush=True)
    shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hidden", default="256,256")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--ranks", help="against DDP at these numbers of ranks, e.g. 1,2,4")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--host-rounds", type=int, help="CPU time per step against the plain loop and DDP at one rank, "
                    "this many rounds")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(a)
    if a.ranks:
        return versus_ddp(a)
    if a.host_rounds:
        return host_time(a)
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
