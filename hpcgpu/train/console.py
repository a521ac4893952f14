"""Rank 0's voice during training: the first line, a progress bar or a line per epoch."""

from __future__ import annotations

import math

import sys

__all__ = ["Console"]


class Console:
    """What a run prints, from rank 0 only (other ranks' calls do nothing).

    Parameters
    ----------
    rank : int
        This rank; only rank 0 prints.
    progress : {"auto", "bar", "lines", "none"}
        ``bar``: a tqdm bar of steps (``auto``: when stdout is a terminal),
        the epoch lines written above it; ``lines``: a line per epoch;
        ``none``: nothing.
    epochs, steps_per_epoch : int
        The bar's length is ``epochs * steps_per_epoch`` steps.
    task : {"classification", "regression"}
        Which held-out metric an epoch's line shows (accuracy, or RMSE and R^2).
    held_out : {"test", "val"} or None
        The held-out set's prefix in the line and the rows (:func:`hpcgpu.train.metrics.metric_names`).
    """

    def __init__(self, rank: int, progress: str, epochs: int, steps_per_epoch: int, task: str = "classification",
                 held_out: str | None = "test"):
        self.talk = rank == 0 and progress != "none"
        self.task, self.held_out = task, held_out
        self.progress, self.epochs, self.steps_per_epoch = progress, epochs, steps_per_epoch
        self.bar = None

    def open_bar(self, done: int):
        """Start the progress bar (rank 0, ``bar``, or ``auto`` on a terminal).

        Parameters
        ----------
        done : int
            Steps already done (a resumed run's bar starts there).

        Returns
        -------
        tqdm.tqdm or None
        """
        if not self.talk or self.progress == "lines":
            return None
        if self.progress == "auto" and not sys.stdout.isatty():
            return None
        from tqdm import tqdm

        self.bar = tqdm(total=self.epochs * self.steps_per_epoch, unit="step", dynamic_ncols=True, initial=done)
        return self.bar

    def close_bar(self) -> None:
        """Close the bar, if there is one."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def say(self, line: str) -> None:
        """Print one line (above the bar when there is one).

        Parameters
        ----------
        line : str
        """
        if not self.talk:
            return
        if self.bar is not None:
            self.bar.write(line)
        else:
            print(line, flush=True)

    def epoch(self, row: dict) -> None:
        """The line of a finished epoch: losses, the held-out set's metrics (if any), seconds, samples/s.

        Parameters
        ----------
        row : dict
            The epoch's metrics (:attr:`hpcgpu.train.Trainer.history`'s names).
        """
        h, test = self.held_out, ""
        if h is not None and not math.isnan(row.get(h + "_loss", math.nan)):  # only the metrics that exist
            test = (f"{h}_accuracy {row[h + '_accuracy']:.4f}" if self.task == "classification"
                    else f"{h}_rmse {row[h + '_rmse']:.4g}  {h}_r2 {row[h + '_r2']:.4f}")
            test = f"{h}_loss {row[h + '_loss']:.4f}  {test}  "
        self.say(
            f"epoch {row['epoch']:>3}/{self.epochs}  train_loss {row['train_loss']:.4f}  {test}"
            f"{row['seconds']:.2f} s  {row['samples_per_second']:.0f} samples/s"
        )
