"""Epoch metrics: the sums of the steps of the current epoch, and the history of the finished ones.

Every figure is an exact global mean: the steps' loss and metric sums are
reduced over the ranks, summed over the epoch, and divided once by the
epoch's samples (evaluation likewise by the test set's size), so they do not
depend on the number of ranks. The metric is the task's: the number of
correct predictions (classification: accuracy) or the sum of squared errors
(regression: RMSE, and R^2 on the test set against its own mean).
"""

from __future__ import annotations

import math

import numpy as np
from mpi4py import MPI

from ..errors import agreed

__all__ = ["EpochMetrics", "HeldOut", "metric_names", "UNITS"]

UNITS = {"seconds": "s", "samples_per_second": "1/s", "lr": "1", "epoch": "1", "energy_joules": "J",
         "energy_joules_cpu": "J", "energy_joules_gpu": "J", "gflop": "GFLOP", "joules_per_gflop": "J/GFLOP"}
"""Units of the history's series (others are ``1``), written beside them in results files."""

MIXED = ("loss_scale", "skipped_steps")
"""bf16-mixed and 16-mixed only."""
NORMS = ("grad_norm", "grad_norm_max")
"""With ``clip_grad_norm`` only: the mean and the largest of the epoch's pre-clip gradient norms (of the averaged
gradient, in the loss's units per parameter unit)."""

ENERGY = ("energy_joules", "energy_joules_cpu", "energy_joules_gpu", "gflop", "joules_per_gflop")
"""Per epoch's training steps, over all nodes (:mod:`hpcgpu.energy`): joules in all (the parts that could be
read), of the CPU packages and DRAM (RAPL), of the GPUs (NVML); the step's floating-point operations counted
analytically (GFLOP); joules per GFLOP. NaN where no counter could be read."""


class HeldOut:
    """A held-out set as evaluation reads it: the shard on the device, and for regression R^2's denominator.

    The denominator is the total sum of squares of the set's targets about their global mean.

    Parameters
    ----------
    split : hpcgpu.train.data.Split or None
        This data group's shard (None: no held-out set).
    xp : module
        NumPy or CuPy: where the rows go.
    comm : mpi4py.MPI.Intracomm
        The data-parallel ranks, over which the sums of squares are reduced. Collective over it for regression.

    Attributes
    ----------
    split : Split or None
    X, y : xp.ndarray or None
        The shard's rows ``(n_local, D)`` and targets.
    n_global : int
        Samples over the data-parallel ranks (0 without a set).
    sst : float
        ``sum((y - mean(y))**2)`` over the set (NaN for classification or without a set).
    """

    def __init__(self, split, xp, comm):
        self.split, self.X, self.y, self.sst = split, None, None, math.nan
        self.n_global = 0 if split is None else split.n_global
        if split is None:
            return
        self.X, self.y = xp.asarray(split.X), xp.asarray(split.y)
        if split.task == "regression":
            # the target columns from the shape, not -1: a rank's shard may hold no sample (numpy cannot infer -1)
            y = split.y.reshape(split.y.shape[0], int(np.prod(split.y.shape[1:]))).astype(np.float64)
            sums = np.concatenate([y.sum(axis=0), (y * y).sum(axis=0)])
            comm.Allreduce(MPI.IN_PLACE, sums, op=MPI.SUM)
            k, n = y.shape[1], max(1, split.n_global)
            mean = sums[:k] / n
            self.sst = float((sums[k:] - n * mean * mean).sum())


def metric_names(task: str, held_out: str | None = "test") -> tuple:
    """The history's per-epoch quality series of ``task``. Not collective.

    Parameters
    ----------
    task : {"classification", "regression"}
    held_out : {"test", "val"} or None
        The held-out set's prefix: ``test`` for a data file's ``/test`` split (the command line's), ``val`` for
        a validation set given in Python (arrays, ``validation_split``), as Keras names it; None for a run
        without one (its series are then absent, as in Keras's history, not NaN).

    Returns
    -------
    tuple of str
        ``train_loss, train_accuracy, test_loss, test_accuracy`` or
        ``train_loss, train_rmse, test_loss, test_rmse, test_r2`` (``val_`` for ``test_`` with ``held_out="val"``;
        the training series alone with ``held_out=None``).
    """
    h = held_out
    if task == "classification":
        names = ("train_loss", "train_accuracy", f"{h}_loss", f"{h}_accuracy")
    else:
        names = ("train_loss", "train_rmse", f"{h}_loss", f"{h}_rmse", f"{h}_r2")
    return names if h is not None else names[:2]


class EpochMetrics:
    """The running epoch's sums and the finished epochs' rows.

    Not collective (the sums it is given are already reduced).

    Parameters
    ----------
    task : {"classification", "regression"}
    outputs : int
        The model's outputs per sample (k): RMSE is over ``n k`` values.
    mixed : bool
        Record the loss scale and skipped steps.
    timing_keys : tuple of str
        The timing series (``<phase>_seconds_{min,mean,max}``), empty without timing.
    held_out : {"test", "val"} or None
        The held-out set's prefix (:func:`metric_names`); None: the run has no held-out set.
    norms : bool
        Record the pre-clip gradient norms (:data:`NORMS`, with ``clip_grad_norm``).

    Attributes
    ----------
    metrics : tuple of str
        The series written to results files, per epoch.
    series : tuple of str
        ``metrics`` and the timing series.
    history : dict of list
        One value per finished epoch, by series.
    totals : numpy.ndarray, shape (2,)
        The running epoch's loss sum and metric sum.
    seconds : float
        Training time of the running epoch so far (s).
    skipped : int
        Steps of the running epoch skipped for a gradient overflow.
    norm_sums : list of float
        The running epoch's pre-clip norms: their sum, their largest, their count.
    """

    def __init__(self, task: str, outputs: int = 1, mixed: bool = False, timing_keys: tuple = (),
                 held_out: str | None = "test", norms: bool = False):
        self.task, self.outputs, self.held_out = task, max(1, int(outputs)), held_out
        self.metrics = (("epoch",) + metric_names(task, held_out) + ("lr", "seconds", "samples_per_second")
                        + (MIXED if mixed else ()) + (NORMS if norms else ()) + ENERGY)
        self.norm_sums = [0.0, 0.0, 0]
        self.series = self.metrics + tuple(timing_keys)
        self.history: dict[str, list] = {k: [] for k in self.series}
        self.totals = np.zeros(2)
        self.seconds = 0.0
        self.skipped = 0

    def add_step(self, loss_sum: float, metric_sum: float, step: int, epoch: int, batch: int) -> None:
        """Add a finished step's reduced sums to the running epoch's.

        Parameters
        ----------
        loss_sum, metric_sum : float
            The step's sums over the global batch (reduced over the ranks).
        step, epoch : int
            The step and its epoch, 0-based (named in the error).
        batch : int
            The global batch B (the error gives the mean loss).

        Raises
        ------
        FloatingPointError
            The loss sum is not finite (the same on every rank: an
            :class:`hpcgpu.AgreedError`).
        """
        if not math.isfinite(loss_sum):
            raise agreed(FloatingPointError(
                f"training diverged: the loss of step {step + 1} (epoch {epoch + 1}) is "
                f"{loss_sum / batch}; the last checkpoint is kept; start again with a smaller --lr "
                f"(a resume keeps the checkpoint's --lr)"))
        self.totals += (loss_sum, metric_sum)

    def add_norm(self, norm: float) -> None:
        """Add an update's pre-clip gradient norm (the same on every rank) to the running epoch's.

        Parameters
        ----------
        norm : float
        """
        s = self.norm_sums
        s[0], s[1], s[2] = s[0] + norm, max(s[1], norm), s[2] + 1

    def train_values(self, n: int) -> dict:
        """The running epoch's training loss and metric over ``n`` samples.

        Parameters
        ----------
        n : int
            The epoch's samples (steps x global batch).

        Returns
        -------
        dict
            ``train_loss`` and ``train_accuracy`` or ``train_rmse``.
        """
        loss, metric = self.totals / n
        if self.task == "classification":
            return {"train_loss": loss, "train_accuracy": metric}
        return {"train_loss": loss, "train_rmse": math.sqrt(metric / self.outputs)
                if math.isfinite(metric) else math.nan}

    def test_values(self, sums, n: int, sst: float) -> dict:
        """Test loss and metrics from the reduced evaluation sums over the test set's ``n`` samples.

        Parameters
        ----------
        sums : sequence of float
            ``[loss_sum, metric_sum]`` over the whole test set.
        n : int
            Test samples (0: NaN everywhere).
        sst : float
            Regression: the test targets' sum of squares about their mean (R^2's denominator).

        Returns
        -------
        dict
            ``test_loss`` and ``test_accuracy``, or ``test_loss``, ``test_rmse``, ``test_r2`` (``val_`` for
            ``test_`` where the held-out set is ``val``).
        """
        names = metric_names(self.task, self.held_out or "val")[2:]  # evaluate's, where the run has none
        if n == 0:
            return dict.fromkeys(names, math.nan)
        loss, metric = sums[0] / n, sums[1]
        if self.task == "classification":
            return dict(zip(names, (loss, metric / n), strict=True))
        r2 = 1.0 - metric / sst if sst > 0 else math.nan
        return dict(zip(names, (loss, math.sqrt(metric / (n * self.outputs)), r2), strict=True))

    def append(self, row: dict) -> None:
        """Record a finished epoch's row (every series; missing ones NaN) and start the next epoch's sums.

        Parameters
        ----------
        row : dict
        """
        total, top, count = self.norm_sums
        if count:
            row = {"grad_norm": total / count, "grad_norm_max": top, **row}
        for k in self.series:
            self.history[k].append(row.get(k, math.nan))
        self.totals[:] = 0.0
        self.seconds, self.skipped, self.norm_sums = 0.0, 0, [0.0, 0.0, 0]

    def state_dict(self) -> dict:
        """``epoch_totals``, ``epoch_seconds``, ``skipped_steps``, ``norm_sums``, ``history`` (copies).

        Not collective.
        """
        return dict(epoch_totals=self.totals.tolist(), epoch_seconds=self.seconds, skipped_steps=self.skipped,
                    norm_sums=list(self.norm_sums), history={k: list(v) for k, v in self.history.items()})

    def load_state_dict(self, state: dict) -> None:
        """Take :meth:`state_dict`'s values; series a checkpoint lacks (timing) are NaN for its epochs.

        Parameters
        ----------
        state : dict

        Raises
        ------
        ValueError
            The epoch totals are not two numbers.
        """
        totals = np.asarray(state["epoch_totals"], dtype=np.float64)
        if totals.shape != (2,):
            raise ValueError(f"epoch totals of shape {totals.shape}, expected (2,)")
        self.totals[:] = totals
        self.seconds = float(state["epoch_seconds"])
        self.skipped = int(state.get("skipped_steps", 0))
        total, top, count = state.get("norm_sums", (0.0, 0.0, 0))
        self.norm_sums = [float(total), float(top), int(count)]
        history = state.get("history", {})
        self.history = {k: list(history.get(k, [])) for k in self.series}
        n = len(self.history["epoch"])
        for k in self.series:
            self.history[k] = self.history[k] or [math.nan] * n
