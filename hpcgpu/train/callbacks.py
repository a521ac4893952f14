"""Callbacks of ``hpcgpu.Trainer.fit``: a user's hook at each epoch's end, and early stopping.

Every rank calls each callback with the same epoch row, rank 0's (broadcast once an epoch), so the
decisions they take (stop now, this epoch is the best) are the same on every rank by construction: no rank
goes on training while another has stopped. Keras's ``Callback`` and ``EarlyStopping``, in that shape.
"""

from __future__ import annotations

import math

__all__ = ["Callback", "EarlyStopping"]


class Callback:
    """A hook into ``hpcgpu.Trainer.fit``; subclass it and override what you need. Not collective.

    Each method is called on every rank with the same arguments; a callback must not communicate.
    """

    def on_fit_start(self, trainer) -> None:
        """Before the first epoch of this ``fit``.

        Parameters
        ----------
        trainer : hpcgpu.Trainer
        """

    def on_epoch_end(self, trainer, row: dict) -> bool | None:
        """After each epoch; True ends the training after it.

        Parameters
        ----------
        trainer : hpcgpu.Trainer
        row : dict
            The epoch's metrics by :attr:`hpcgpu.Trainer.history`'s names, rank 0's on every rank.

        Returns
        -------
        bool or None
            True to end the training after this epoch.
        """
        return None

    def on_fit_end(self, trainer) -> None:
        """After the last epoch of this ``fit`` (also after an early stop, not after a stop signal).

        Parameters
        ----------
        trainer : hpcgpu.Trainer
        """


class EarlyStopping(Callback):
    """End the training when a metric has stopped improving (Keras's ``EarlyStopping``). Not collective.

    Parameters
    ----------
    monitor : str, optional
        A metric of the epoch rows: ``"val_loss"``, ``"val_accuracy"`` (a validation set given in Python),
        ``"test_loss"`` (a data file's ``/test`` split), ``"train_loss"``...; by default the held-out set's
        loss, whichever its name.
    patience : int
        Epochs without improvement before the training ends.
    min_delta : float
        The least change that counts as an improvement.
    mode : {"auto", "min", "max"}
        Whether smaller or larger is better; ``"auto"``: larger for accuracy and R^2, smaller otherwise.
    restore_best : bool
        At the end, put back the parameters of the best epoch (each rank its own slice of them).
    **others
        Nothing is taken: an argument of Keras's (``restore_best_weights``, ``baseline``...) is refused in one
        line that names hpcgpu's.

    Attributes
    ----------
    best : float
        The best value seen (NaN before any).
    best_epoch : int
        The epoch it was seen in (1-based; 0 before any).
    stopped_epoch : int
        The epoch after which the training ended early (0 if it did not).

    Raises
    ------
    ValueError
        ``patience`` below 0, an unknown ``mode``; at the first epoch, a ``monitor`` the rows do not have or
        that is NaN (no validation set for ``val_*`` or ``test_*``).
    TypeError
        An argument it does not take (Keras's ``restore_best_weights``, ``baseline``...), named in one line.
    """

    def __init__(self, monitor: str | None = None, patience: int = 5, min_delta: float = 0.0, mode: str = "auto",
                 restore_best: bool = True, **others):
        from ..errors import agreed

        if others:  # Keras's other arguments: one line on every rank alike, not a traceback each
            name = next(iter(others))
            hint = " (Keras's name; hpcgpu's is restore_best, True by default)" if name == "restore_best_weights" \
                else ""
            raise agreed(TypeError(f"EarlyStopping: no argument {name}{hint}: it takes monitor, patience, "
                                   f"min_delta, mode and restore_best"))
        if patience < 0 or mode not in ("auto", "min", "max"):
            raise agreed(ValueError(f"EarlyStopping: patience must be >= 0 and mode auto, min or max, got patience="
                                    f"{patience!r}, mode={mode!r}"))
        self.monitor, self.patience, self.min_delta, self.restore_best = monitor, int(patience), min_delta, restore_best
        self._given, self._mode = monitor, mode
        self.larger = monitor is not None and self._larger(monitor)
        self._best_params = None
        self.best, self.best_epoch, self.stopped_epoch = math.nan, 0, 0

    def on_fit_start(self, trainer) -> None:
        """Forget the previous fit's best.

        Parameters
        ----------
        trainer : hpcgpu.Trainer
        """
        if self._given is None:  # the held-out set's loss: val_loss, or test_loss for a data file's /test split
            self.monitor = f"{trainer.metrics.held_out or 'val'}_loss"
            self.larger = self._larger(self.monitor)
        self._best_params = None
        self.best, self.best_epoch, self.stopped_epoch = math.nan, 0, 0

    def _larger(self, monitor: str) -> bool:
        """Whether a larger ``monitor`` is better (``mode``; ``auto``: accuracy and R^2)."""
        return self._mode == "max" or (self._mode == "auto" and monitor.endswith(("accuracy", "_r2")))

    def on_epoch_end(self, trainer, row: dict) -> bool:
        """Keep the best value (and parameters); True after ``patience`` epochs without improvement.

        Parameters
        ----------
        trainer : hpcgpu.Trainer
        row : dict
            The epoch's metrics by :attr:`hpcgpu.Trainer.history`'s names, rank 0's on every rank.

        Returns
        -------
        bool
        """
        value = row.get(self.monitor)
        if value is None or math.isnan(value):
            from ..errors import agreed

            held = any(k.startswith(("test_", "val_")) for k in row)
            why = "no validation set" if self.monitor.startswith(("test_", "val_")) and not held else "not a metric"
            names = [k for k, v in row.items() if k.startswith(("train_", "val_", "test_")) and "_seconds_" not in k
                     and isinstance(v, (int, float)) and not math.isnan(v)]  # the metrics, not lr or timings
            raise agreed(ValueError(f"EarlyStopping: the epochs have no {self.monitor} ({why}"
                                    f"): monitor one of {', '.join(names)}"))
        better = (value > self.best + self.min_delta) if self.larger else (value < self.best - self.min_delta)
        if self.best_epoch == 0 or better:
            self.best, self.best_epoch = float(value), int(row["epoch"])
            if self.restore_best:
                self._best_params = trainer.model.params.copy()
            return False
        if row["epoch"] - self.best_epoch >= self.patience:
            self.stopped_epoch = int(row["epoch"])
            return True
        return False

    def on_fit_end(self, trainer) -> None:
        """Put back the best epoch's parameters (``restore_best``).

        Parameters
        ----------
        trainer : hpcgpu.Trainer
        """
        if self.restore_best and self._best_params is not None:
            trainer.model.params[...] = self._best_params
