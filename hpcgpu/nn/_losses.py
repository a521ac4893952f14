"""Losses over a micro-batch: the SUM of per-sample losses and its gradient, plus the task's metric sum.

A loss returns sums, never means: the trainer adds them over the ranks and
divides once by the global batch, so the same seed gives the same model at
any number of ranks and uneven shards are exact. Each loss also sums its
task's metric over the batch, into the second of two statistics slots:
the number of correct predictions (classification: accuracy) or the sum of
squared errors (regression: RMSE and R^2).
"""

from __future__ import annotations

import numbers

import numpy as np

from .. import _device
from .._kernels import kernels
from ..errors import agreed

__all__ = ["Loss", "SoftmaxCrossEntropy", "MeanSquaredError", "Huber", "LOSSES", "loss_by_name"]


class Loss:
    """The loss protocol.

    Attributes
    ----------
    task : {"classification", "regression"}
    stats : (str, str)
        The names of the two statistics slots: the loss sum and the task's
        metric sum.
    name : str
        The command line's ``--loss`` name.
    """

    task = "regression"
    stats = ("loss_sum", "sq_err")
    name = ""

    def terms(self, z, y, slots, bias=None):
        """Loss, metric and gradient of a micro-batch. Not collective.

        Parameters
        ----------
        z : xp.ndarray, shape (n, k)
            The model's outputs; overwritten with the gradient of the loss
            sum with respect to them.
        y : xp.ndarray, shape (n,) or (n, k)
            Targets: integer classes for classification, values for regression.
        slots : xp.ndarray, shape (2,)
            Receives the loss sum and the metric sum (of ``z``'s dtype).
        bias : xp.ndarray, shape (k,), optional
            A bias still to be added to ``z`` (the fused GPU kernel of
            :class:`SoftmaxCrossEntropy` takes the last layer's); only where
            :meth:`takes_bias` says so.

        Returns
        -------
        xp.ndarray, shape (n, k)
            ``z``, now the gradient.
        """
        raise NotImplementedError(f"{type(self).__name__} does not define terms")

    def takes_bias(self, xp) -> bool:
        """Whether :meth:`terms` adds the last layer's bias itself on ``xp`` (one launch fewer on a GPU)."""
        return False

    def n_outputs(self, targets: int) -> int:
        """The model outputs this loss needs: the class count, or the targets' width."""
        return targets

    def spec(self) -> dict:
        """The loss as a JSON-able dict (results files and checkpoints record it)."""
        return {"type": type(self).__name__}

    def __repr__(self):
        return f"{type(self).__name__}()"


class SoftmaxCrossEntropy(Loss):
    """Softmax cross-entropy from logits (Keras's ``SparseCategoricalCrossentropy(from_logits=True)``).

    Per sample: ``log(sum_j exp(z_j)) - z_y``, with ``y`` an integer class in
    ``0..C-1``; the gradient is ``softmax(z) - onehot(y)``. The metric is
    the number of samples whose first maximum logit is at ``y``
    (``numpy.argmax``'s rule; a NaN counts as the maximum). On a GPU it is one
    fused kernel that also adds the last layer's bias
    (``hpcgpu/_kernels.py``).
    """

    task = "classification"
    stats = ("loss_sum", "correct")
    name = "cross-entropy"

    def __init__(self):
        self._scratch: dict = {}

    def takes_bias(self, xp) -> bool:
        """True on CuPy (the fused kernel adds it), False on NumPy."""
        return kernels(xp) is not None

    def scratch(self, n: int):
        """The fused kernel's (n, 2) per-row loss and hit buffer, if it made one for ``n`` rows (else None)."""
        return self._scratch.get(n)

    def terms(self, z, y, slots, bias=None):
        """See :meth:`Loss.terms`."""
        xp = np if isinstance(z, np.ndarray) else _device.cupy_or_none()
        n = z.shape[0]
        dtype = np.dtype(z.dtype)
        tiny = dtype.type(np.finfo(dtype).tiny)
        fused = kernels(xp) if bias is not None else None
        if fused is not None:
            lh = self._scratch.get(n)
            if lh is None:
                if len(self._scratch) > 8:  # evaluation's last chunks: keep a few sizes only
                    self._scratch.clear()
                lh = self._scratch[n] = xp.empty((n, 2), dtype=dtype)
            fused.softmax_xent(bias, y, z.shape[1], tiny, z, lh[:, 0], lh[:, 1])
            lh.sum(axis=0, out=slots)
            return z
        if bias is not None:
            z += bias
        rows = xp.arange(n)
        slots[1] = (z.argmax(axis=1) == y).sum()
        z -= z.max(axis=1, keepdims=True)
        xp.exp(z, out=z)
        z /= z.sum(axis=1, keepdims=True)
        # loss_i = log(sum_j exp(z_j)) - z_y, with z shifted; p_y = exp(z_y) / s
        slots[0] = -xp.log(xp.maximum(z[rows, y], tiny)).sum()
        z[rows, y] -= 1
        return z


class MeanSquaredError(Loss):
    """Mean squared error (Keras's ``MeanSquaredError``): per sample, the mean over its k outputs of ``(z - y)^2``.

    The gradient of the sum is ``2 (z - y) / k``; the metric is the sum of
    squared errors over every output (RMSE = sqrt(sum / (n k))).
    """

    name = "mse"

    def terms(self, z, y, slots, bias=None):
        """See :meth:`Loss.terms`."""
        if bias is not None:
            z += bias
        k = z.shape[1]
        z -= y.reshape(z.shape[0], k)
        sq = (z * z).sum()
        slots[1] = sq
        slots[0] = sq / k
        z *= 2.0 / k
        return z


class Huber(Loss):
    """Huber loss (Keras's ``Huber``): per sample, the mean over its k outputs of ``h(z - y)``.

    ``h(r) = r^2 / 2`` for ``|r| <= delta``, ``delta (|r| - delta / 2)``
    beyond (Huber, Ann. Math. Statist. 35, 1964); the gradient of the sum is
    ``clip(z - y, -delta, delta) / k``. The metric is the sum of squared errors.

    Parameters
    ----------
    delta : float
        Where the loss turns from quadratic to linear (> 0).

    Raises
    ------
    ValueError
        ``delta`` is not positive.
    """

    name = "huber"

    def __init__(self, delta: float = 1.0):
        if not isinstance(delta, numbers.Real) or isinstance(delta, bool):
            raise agreed(TypeError(f"Huber's delta must be a number > 0, got {delta!r}"))
        if not float(delta) > 0:
            raise agreed(ValueError(f"Huber's delta must be > 0, got {delta}"))
        self.delta = float(delta)

    def terms(self, z, y, slots, bias=None):
        """See :meth:`Loss.terms`."""
        xp = np if isinstance(z, np.ndarray) else _device.cupy_or_none()
        if bias is not None:
            z += bias
        k, d = z.shape[1], self.delta
        z -= y.reshape(z.shape[0], k)
        slots[1] = (z * z).sum()
        a = xp.abs(z)
        slots[0] = xp.where(a <= d, 0.5 * z * z, d * (a - 0.5 * d)).sum() / k
        xp.clip(z, -d, d, out=z)
        z *= 1.0 / k
        return z

    def spec(self) -> dict:
        """``{"type": "Huber", "delta": delta}``."""
        return {"type": "Huber", "delta": self.delta}

    def __repr__(self):
        return f"Huber(delta={self.delta})"


LOSSES = {"cross-entropy": SoftmaxCrossEntropy, "mse": MeanSquaredError, "huber": Huber}
"""The command line's ``--loss`` names."""


def loss_by_name(name: str) -> Loss:
    """A new loss of the command line's name (``cross-entropy``, ``mse``, ``huber``). Not collective.

    Parameters
    ----------
    name : str

    Returns
    -------
    Loss

    Raises
    ------
    ValueError
        An unknown name.
    """
    if name not in LOSSES:
        raise agreed(ValueError(f"loss must be one of {', '.join(LOSSES)}, got {name!r}"))
    return LOSSES[name]()


def loss_from_spec(spec: dict) -> Loss:
    """The loss a :meth:`Loss.spec` describes. Not collective.

    Parameters
    ----------
    spec : dict

    Returns
    -------
    Loss

    Raises
    ------
    ValueError
        Not a dict, or an unknown loss type (every rank alike).
    """
    if not isinstance(spec, dict):
        raise agreed(ValueError(f"a loss's description must be a JSON object, got {type(spec).__name__}"))
    kinds = {"SoftmaxCrossEntropy": SoftmaxCrossEntropy, "MeanSquaredError": MeanSquaredError, "Huber": Huber}
    kind = spec.get("type")
    if kind not in kinds:
        raise agreed(ValueError(f"unknown loss type {kind!r} in a model description"))
    return Huber(spec.get("delta", 1.0)) if kind == "Huber" else kinds[kind]()
