"""``mpiexec -n P python -m hpcgpu.train [options]``: data-parallel SGD of an MLP.

Reads an HDF5 data set (``/train/X`` N x D, ``/train/y`` N labels, optional
``/test``), trains with a global batch split among the ranks, and writes
metrics and model to HDF5. Without ``--data`` it trains on scikit-learn's
handwritten digits.
"""

from __future__ import annotations

import argparse

from .._cli import ArgumentParser, run
from .trainer import TrainConfig, Trainer


def _hidden(text: str) -> tuple:
    text = text.strip()
    if text in ("", "none"):
        return ()
    try:
        sizes = tuple(int(t) for t in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected widths like 256,256, got {text!r}") from None
    if any(s < 1 for s in sizes):
        raise argparse.ArgumentTypeError(f"widths must be >= 1, got {text!r}")
    return sizes


def parser() -> ArgumentParser:
    d = TrainConfig()
    p = ArgumentParser(
        prog="python -m hpcgpu.train", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--data", default=None,
                   help="HDF5 input (/train/X, /train/y, optional /test/X, /test/y); "
                        "default: the bundled digits set, cached under $HPCGPU_DATA_DIR or ~/.cache/hpcgpu")
    p.add_argument("--out", default=d.out, help="HDF5 output: /metrics, /model, provenance attributes")
    p.add_argument("--epochs", type=int, default=d.epochs, help="passes over the training set")
    p.add_argument("--batch-size", type=int, default=d.batch_size,
                   help="GLOBAL batch size in samples, split among the ranks (uneven splits are exact)")
    p.add_argument("--lr", type=float, default=d.lr, help="peak learning rate (mean-loss gradient)")
    p.add_argument("--momentum", type=float, default=d.momentum, help="SGD momentum")
    p.add_argument("--weight-decay", type=float, default=d.weight_decay, help="L2 coefficient")
    p.add_argument("--hidden", type=_hidden, default=d.hidden,
                   help="hidden layer widths, comma-separated ('none' for softmax regression)")
    p.add_argument("--seed", type=int, default=d.seed, help="seed of initial weights and sample order")
    p.add_argument("--device", choices=("auto", "cpu", "gpu"), default=d.device,
                   help="gpu: CuPy, one GPU per rank; cpu: NumPy; auto: gpu when every rank has one")
    p.add_argument("--schedule", choices=("cosine", "step", "constant"), default=d.schedule,
                   help="learning-rate decay after warm-up")
    p.add_argument("--warmup-epochs", type=float, default=d.warmup_epochs, help="linear warm-up, in epochs")
    p.add_argument("--lr-step-epochs", type=int, default=d.lr_step_epochs,
                   help="epochs between decays (--schedule step)")
    p.add_argument("--lr-gamma", type=float, default=d.lr_gamma, help="decay factor (--schedule step)")
    p.add_argument("--dtype", choices=("float32", "float64"), default=d.dtype, help="floating-point type")
    p.add_argument("--progress", choices=("auto", "bar", "lines", "none"), default=d.progress,
                   help="rank 0's output: bar on a terminal, one line per epoch otherwise")
    return p


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    trainer = Trainer(TrainConfig(**vars(args)))
    trainer.fit()
    path = trainer.save()
    if trainer.rt.rank == 0 and trainer.config.progress != "none":
        h = trainer.history
        print(f"final test_accuracy {h['test_accuracy'][-1]:.4f}; wrote {path}", flush=True)
    return 0


if __name__ == "__main__":
    run(main, prog="hpcgpu.train")
