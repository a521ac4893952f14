"""The data-parallel SGD trainer.

One step (Goyal et al., "Accurate, Large Minibatch SGD", 2017, section 2):
every rank runs forward and backward on its local batch, which gives the SUM
of its per-sample gradients in the model's flat gradient buffer; one
``Allreduce(SUM)`` of that buffer (with the loss sum and correct count riding
in its last two slots) gives the global sum; dividing by the global batch
size gives the mean gradient, and every rank applies the same SGD update, so
the parameters stay identical without ever being broadcast again.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import time
from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

from .. import _device
from .._version import __version__
from ..comm import Allreduce, Bcast, agree
from ..io import atomic_path, writable_error
from ..runtime import Runtime, init
from .data import GlobalBatchSampler, check_labels, load_split
from .model import MLP
from .optim import SGD, LRSchedule

__all__ = ["TrainConfig", "Trainer"]


@dataclass
class TrainConfig:
    """Every option of a training run (the command line's, one to one).

    Attributes
    ----------
    data : str or None
        HDF5 file in the layout of :mod:`hpcgpu.datasets`; ``None`` means the
        bundled digits set, written on first use to
        :func:`hpcgpu.datasets.default_data_path`.
    out : str
        HDF5 file for metrics and model, written atomically by rank 0.
    epochs : int
        Passes over the training set.
    batch_size : int
        GLOBAL batch size B (samples per step over all ranks).
    lr : float
        Peak learning rate (per mean-loss gradient).
    momentum, weight_decay : float
        SGD momentum and L2 coefficient.
    hidden : tuple of int
        Hidden layer widths; empty for softmax regression.
    seed : int
        Seeds initial weights and every epoch's sample order.
    device : {"auto", "cpu", "gpu"}
    schedule : {"cosine", "step", "constant"}
    warmup_epochs : float
        Linear warm-up length, in epochs.
    lr_step_epochs : int
        Epochs between decays (``schedule="step"``).
    lr_gamma : float
        Decay factor (``schedule="step"``).
    dtype : {"float32", "float64"}
    progress : {"auto", "bar", "lines", "none"}
        Rank 0's output: a bar on a terminal, one line per epoch otherwise.
    """

    data: str | None = None
    out: str = os.path.join("results", "train.h5")
    epochs: int = 20
    batch_size: int = 64
    lr: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 1e-4
    hidden: tuple = (256, 256)
    seed: int = 0
    device: str = "auto"
    schedule: str = "cosine"
    warmup_epochs: float = 1.0
    lr_step_epochs: int = 10
    lr_gamma: float = 0.1
    dtype: str = "float32"
    progress: str = "auto"

    def validate(self) -> ValueError | None:
        """The first bad option, as an error naming it; ``None`` when all are fine."""
        checks = [
            (self.epochs >= 1, f"--epochs must be >= 1, got {self.epochs}"),
            (self.batch_size >= 1, f"--batch-size must be >= 1, got {self.batch_size}"),
            (self.lr > 0 and math.isfinite(self.lr), f"--lr must be a positive number, got {self.lr}"),
            (0 <= self.momentum < 1, f"--momentum must be in [0, 1), got {self.momentum}"),
            (self.weight_decay >= 0, f"--weight-decay must be >= 0, got {self.weight_decay}"),
            (all(int(h) >= 1 for h in self.hidden), f"--hidden widths must be >= 1, got {self.hidden}"),
            (self.device in ("auto", "cpu", "gpu"), f"--device must be auto, cpu or gpu, got {self.device!r}"),
            (self.schedule in ("cosine", "step", "constant"), f"--schedule: unknown {self.schedule!r}"),
            (self.warmup_epochs >= 0, f"--warmup-epochs must be >= 0, got {self.warmup_epochs}"),
            (self.lr_step_epochs >= 1, f"--lr-step-epochs must be >= 1, got {self.lr_step_epochs}"),
            (self.dtype in ("float32", "float64"), f"--dtype must be float32 or float64, got {self.dtype!r}"),
            (self.progress in ("auto", "bar", "lines", "none"), f"--progress: unknown {self.progress!r}"),
        ]
        for ok, msg in checks:
            if not ok:
                return ValueError(msg)
        return None

    def to_json(self) -> str:
        d = dataclasses.asdict(self)
        d["hidden"] = list(d["hidden"])
        return json.dumps(d, sort_keys=True)


class Trainer:
    """Data-parallel SGD of an MLP on an HDF5 data set.

    Collective: every rank of the runtime's communicator constructs it with
    the same config and calls :meth:`fit` and :meth:`save` together.

    Parameters
    ----------
    config : TrainConfig
    runtime : Runtime, optional
        Made with ``init(config.device)`` when omitted.

    Raises
    ------
    ValueError, FileNotFoundError, OSError
        Bad options or data, on every rank with the same message (attribute
        ``collective``): see :func:`hpcgpu.train.data.load_split` and
        :meth:`TrainConfig.validate`; the global batch larger than the
        training set or smaller than the number of ranks; ``out`` not
        writable.

    Attributes
    ----------
    model : MLP
    history : dict of list
        Per epoch: ``epoch``, ``train_loss``, ``train_accuracy``,
        ``test_loss``, ``test_accuracy``, ``lr``, ``seconds`` (training time
        of the epoch, wall clock, s), ``samples_per_second``.
    """

    METRICS = ("epoch", "train_loss", "train_accuracy", "test_loss", "test_accuracy",
               "lr", "seconds", "samples_per_second")
    UNITS = {"seconds": "s", "samples_per_second": "1/s", "lr": "1", "epoch": "1"}

    def __init__(self, config: TrainConfig, runtime: Runtime | None = None):
        self.config = c = config
        err = c.validate()
        if err is not None:
            err.collective = True  # the same config on every rank: all raise it
            raise err
        self.rt = rt = runtime if runtime is not None else init(c.device)
        comm, self.xp = rt.comm, rt.xp

        agree(writable_error(c.out, "--out") if rt.rank == 0 else None, comm=comm)
        self.data_path = self._data_path(c.data, comm)

        train, nc = load_split(self.data_path, "train", comm, dtype=c.dtype, min_rows=rt.size)
        test, _ = load_split(self.data_path, "test", comm, required=False, dtype=c.dtype, min_rows=0)
        err = None
        if test is not None and test.dim != train.dim:
            err = ValueError(f"--data {self.data_path}: /test/X has {test.dim} features, /train/X has {train.dim}")
        elif c.batch_size > train.n_global:
            err = ValueError(f"--batch-size {c.batch_size} is larger than the training set ({train.n_global} samples)")
        elif c.batch_size < rt.size:
            err = ValueError(f"--batch-size {c.batch_size} is smaller than the number of ranks ({rt.size})")
        agree(err, comm=comm)
        self.num_classes = check_labels(self.data_path, [train, test], nc, comm)
        self.train_split, self.test_split = train, test

        self.model = MLP([train.dim, *c.hidden, self.num_classes], self.xp, c.dtype, c.seed)
        # Same seed gives the same weights everywhere; the Bcast makes sure even
        # with different NumPy builds on different nodes.
        Bcast(self.model.params, root=0, comm=comm)
        self.optimizer = SGD(self.model.params, c.momentum, c.weight_decay)
        self.sampler = GlobalBatchSampler(train, c.batch_size, c.seed, comm)
        steps = self.sampler.steps
        self.schedule = LRSchedule(
            c.lr, c.epochs * steps, round(c.warmup_epochs * steps), c.schedule,
            c.lr_step_epochs * steps, c.lr_gamma,
        )
        if test is not None:
            self._Xt, self._yt = self.xp.asarray(test.X), self.xp.asarray(test.y)
        self.epoch = 0
        self.step = 0
        self.history: dict[str, list] = {k: [] for k in self.METRICS}

    @staticmethod
    def _data_path(data: str | None, comm: MPI.Intracomm) -> str:
        if data is not None:
            return data
        from ..datasets import ensure_bundled

        return ensure_bundled("digits", comm)

    # -- the step ---------------------------------------------------------
    def train_epoch(self, bar=None) -> tuple[float, float, float]:
        """One pass over the training set. Collective.

        Returns
        -------
        (train_loss, train_accuracy, seconds)
            Mean loss and accuracy over the epoch's samples (global), and the
            epoch's wall-clock training time in seconds.
        """
        xp, model, comm = self.xp, self.model, self.rt.comm
        B, lb = self.sampler.B, self.sampler.local_batch
        t0 = MPI.Wtime()
        X_host, y_host = self.sampler.epoch(self.epoch)
        X, y = xp.asarray(X_host), xp.asarray(y_host)
        grad = model.grad[:-2]
        totals = xp.zeros(2, dtype=np.float64)
        for s in range(self.sampler.steps):
            model.loss_and_grad(X[s * lb : (s + 1) * lb], y[s * lb : (s + 1) * lb])
            Allreduce(model.grad, comm=comm)
            totals += model.grad[-2:]
            grad /= B
            self.optimizer.step(grad, self.schedule(self.step))
            self.step += 1
            if bar is not None:
                bar.update(1)
        loss_sum, correct = (float(v) for v in _device.asnumpy(totals))
        seconds = MPI.Wtime() - t0
        n = self.sampler.steps * B
        return loss_sum / n, correct / n, seconds

    def evaluate(self) -> tuple[float, float]:
        """Mean loss and accuracy on the test split (NaN without one). Collective."""
        if self.test_split is None:
            return math.nan, math.nan
        tot = self.model.evaluate(self._Xt, self._yt)
        Allreduce(tot, comm=self.rt.comm)
        loss_sum, correct = (float(v) for v in _device.asnumpy(tot))
        n = self.test_split.n_global
        return loss_sum / n, correct / n

    def fit(self) -> dict[str, list]:
        """Train for the configured epochs, evaluating after each. Collective.

        Raises
        ------
        FloatingPointError
            The training loss became NaN or infinite (on every rank: the
            loss is the reduced one).
        """
        c, rt = self.config, self.rt
        bar = self._progress_bar()
        self._log_header()
        try:
            while self.epoch < c.epochs:
                lr = self.schedule(self.step)
                loss, acc, secs = self.train_epoch(bar)
                if not math.isfinite(loss):
                    err = FloatingPointError(
                        f"training diverged: train loss is {loss} in epoch {self.epoch + 1} "
                        f"(steps {self.step - self.sampler.steps + 1}..{self.step}); try a smaller --lr"
                    )
                    err.collective = True  # the loss is the reduced one, the same on every rank
                    raise err
                test_loss, test_acc = self.evaluate()
                self.epoch += 1
                row = dict(epoch=self.epoch, train_loss=loss, train_accuracy=acc, test_loss=test_loss,
                           test_accuracy=test_acc, lr=lr, seconds=secs,
                           samples_per_second=self.sampler.steps * self.sampler.B / secs)
                for k in self.METRICS:
                    self.history[k].append(row[k])
                if rt.rank == 0:
                    self._log_epoch(row, bar)
        finally:
            if bar is not None:
                bar.close()
        return self.history

    # -- output -----------------------------------------------------------
    def save(self, path: str | None = None) -> str:
        """Write metrics, model and provenance to HDF5, atomically, from rank 0.

        Collective (the outcome is agreed, so a failed write raises on every
        rank). Layout: ``/metrics/<name>`` (one value per epoch, attribute
        ``units``), ``/model/<fc{i}.weight|fc{i}.bias>`` (weights are
        ``(in, out)``), root attributes ``config`` (JSON), ``world_size``,
        ``device``, ``mpi_library``, ``hpcgpu_version``, ``data``,
        ``num_classes``.

        Returns
        -------
        str
            The path written.
        """
        import h5py

        path = self.config.out if path is None else path
        rt, err = self.rt, None
        if rt.rank == 0:
            try:
                with atomic_path(path) as tmp, h5py.File(tmp, "w") as f:
                    m = f.create_group("metrics")
                    for k in self.METRICS:
                        ds = m.create_dataset(k, data=np.asarray(self.history[k]))
                        ds.attrs["units"] = self.UNITS.get(k, "1")
                    g = f.create_group("model")
                    for name, view in self.model.named_parameters():
                        g.create_dataset(name, data=_device.asnumpy(view))
                    f.attrs["config"] = self.config.to_json()
                    f.attrs["world_size"] = rt.size
                    f.attrs["device"] = rt.device
                    f.attrs["mpi_library"] = rt.mpi_library
                    f.attrs["hpcgpu_version"] = __version__
                    f.attrs["data"] = os.path.abspath(self.data_path)
                    f.attrs["num_classes"] = self.num_classes
                    f.attrs["epochs_done"] = self.epoch
                    f.attrs["steps_done"] = self.step
            except OSError as e:
                err = OSError(f"--out {path}: cannot write ({e})")
        agree(err, comm=rt.comm)
        return path

    # -- rank 0's voice -----------------------------------------------------
    def _progress_bar(self):
        mode = self.config.progress
        if self.rt.rank != 0 or mode in ("lines", "none"):
            return None
        if mode == "auto" and not sys.stdout.isatty():
            return None
        from tqdm import tqdm

        return tqdm(total=self.config.epochs * self.sampler.steps, unit="step", dynamic_ncols=True,
                    initial=self.step)

    def _log_header(self) -> None:
        if self.rt.rank != 0 or self.config.progress == "none":
            return
        c, s = self.config, self.sampler
        print(
            f"hpcgpu.train: {self.rt.size} rank(s) on {self.rt.device}, data {self.data_path}: "
            f"N={s.N} D={self.train_split.dim} C={self.num_classes}, model {self.model.sizes} "
            f"({self.model.n_params} parameters), global batch {s.B} "
            f"(local {s.local_batch} on rank 0), {s.steps} steps/epoch",
            flush=True,
        )

    def _log_epoch(self, row, bar) -> None:
        if self.config.progress == "none":
            return
        line = (
            f"epoch {row['epoch']:>3}/{self.config.epochs}  train_loss {row['train_loss']:.4f}  "
            f"test_loss {row['test_loss']:.4f}  test_accuracy {row['test_accuracy']:.4f}  "
            f"{row['seconds']:.2f} s  {row['samples_per_second']:.0f} samples/s"
        )
        if bar is not None:
            bar.write(line)
        else:
            print(line, flush=True)
