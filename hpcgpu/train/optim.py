"""SGD with momentum and weight decay on a flat parameter buffer, and schedules."""

from __future__ import annotations

import math

import numpy as np

from .. import _blas, _device
from ._kernels import kernels as _kernels

__all__ = ["SGD", "LRSchedule"]


class LRSchedule:
    """Learning rate per step: linear warm-up, then cosine, step or constant.

    Parameters
    ----------
    lr : float
        Peak learning rate (after warm-up).
    total_steps : int
        Steps in the whole run.
    warmup_steps : int
        Steps of linear warm-up from ``lr / warmup_steps`` to ``lr``.
    kind : {"cosine", "step", "constant"}
        After warm-up: cosine decay to 0 at ``total_steps`` (Loshchilov &
        Hutter, "SGDR", ICLR 2017), or ``lr * gamma ** (step // step_size)``,
        or constant.
    step_size : int
        Steps between decays for ``kind="step"``.
    gamma : float
        Decay factor for ``kind="step"``.
    """

    def __init__(self, lr, total_steps, warmup_steps=0, kind="cosine", step_size=1, gamma=0.1):
        if kind not in ("cosine", "step", "constant"):
            raise ValueError(f"schedule must be cosine, step or constant, got {kind!r}")
        self.lr, self.total, self.warmup = float(lr), int(total_steps), int(warmup_steps)
        self.kind, self.step_size, self.gamma = kind, max(1, int(step_size)), float(gamma)

    def state_dict(self) -> dict:
        """The schedule's settings (it has no other state: the rate is a function of the step)."""
        return dict(lr=self.lr, total_steps=self.total, warmup_steps=self.warmup, kind=self.kind,
                    step_size=self.step_size, gamma=self.gamma)

    def load_state_dict(self, state: dict) -> None:
        """Take the settings of :meth:`state_dict`.

        Parameters
        ----------
        state : dict
            A :meth:`state_dict`.
        """
        self.__init__(**state)

    def __call__(self, step: int) -> float:
        """The learning rate of global step ``step`` (0-based)."""
        if step < self.warmup:
            return self.lr * (step + 1) / self.warmup
        t = step - self.warmup
        if self.kind == "cosine":
            span = max(1, self.total - self.warmup)
            return 0.5 * self.lr * (1.0 + math.cos(math.pi * min(t, span) / span))
        if self.kind == "step":
            return self.lr * self.gamma ** (t // self.step_size)
        return self.lr


class SGD:
    """Stochastic gradient descent with heavy-ball momentum and L2 weight decay.

    With the summed gradient ``g`` and ``scale`` (1 / global batch):
    ``v = momentum * v + scale * g + weight_decay * p``; ``p -= lr * v``
    (the PyTorch form, Sutskever et al., ICML 2013). On one flat buffer,
    identically on every rank. On the host it is two or three BLAS passes
    over the buffer (axpby, axpy) and no temporary (the update is memory-bound: a
    naive NumPy form made eight passes and cost as much as a fifth of a
    step's GEMMs), by NumPy's own BLAS, the one that runs the GEMMs: a
    second library would keep a second thread pool spinning
    (``hpcgpu._blas``). On a GPU it is one fused kernel, one pass
    (``hpcgpu.train._kernels``).

    Parameters
    ----------
    params : xp.ndarray, shape (n,)
        Updated in place.
    momentum, weight_decay : float

    Attributes
    ----------
    velocity : xp.ndarray, shape (n,)
    """

    def __init__(self, params, momentum=0.9, weight_decay=0.0):
        self.params, self.momentum, self.weight_decay = params, float(momentum), float(weight_decay)
        self.velocity = params * 0
        self._host = isinstance(params, np.ndarray) and _blas.scal(1.0, self.velocity)  # NumPy's BLAS binds
        self._fused = _kernels(_device.cupy_or_none()) if _device.is_device_array(params) else None

    def state_dict(self) -> dict:
        """``{"velocity": host copy}`` (numpy, (n,)). Not collective."""
        return {"velocity": _device.asnumpy(self.velocity).copy()}

    def load_state_dict(self, state: dict) -> None:
        """Copy ``state["velocity"]`` (n,) into :attr:`velocity` in place. Not collective.

        Parameters
        ----------
        state : dict
            A :meth:`state_dict`.

        Raises
        ------
        ValueError
            The array is not of the parameters' shape.
        """
        v = np.asarray(state["velocity"])
        if v.shape != self.velocity.shape:
            raise ValueError(f"velocity of shape {v.shape} for parameters of shape {self.velocity.shape}")
        v = v.astype(self.velocity.dtype, copy=False)
        self.velocity[...] = _device.cupy_or_none().asarray(v) if _device.is_device_array(self.velocity) else v

    def step(self, grad, lr: float, scale: float = 1.0) -> None:
        """Apply one update with the gradient ``scale * grad`` (n,). Not collective.

        ``grad`` is left unchanged on the host path (NumPy's BLAS) and may be
        overwritten on the device path, or on a host whose NumPy BLAS
        cannot be bound (then plain array arithmetic does the update).

        Parameters
        ----------
        grad : xp.ndarray, shape (n,)
            Gradient, in the same array module and dtype as ``params``
            (summed over the global batch in data-parallel training).
        lr : float
            Learning rate of this step.
        scale : float
            Factor applied to ``grad`` (1 / global batch size turns a summed
            gradient into a mean).
        """
        p, v, mu = self.params, self.velocity, self.momentum
        if self._host and grad.dtype == p.dtype and grad.flags.c_contiguous:
            if not mu:
                v[...] = 0
            if not _blas.axpby(scale, grad, mu, v):  # v = scale * g + mu * v in one pass where the BLAS has it
                _blas.scal(mu, v)
                _blas.axpy(scale, grad, v)
            if self.weight_decay:
                _blas.axpy(self.weight_decay, p, v)
            _blas.axpy(-lr, v, p)
            return
        if self._fused is not None and grad.dtype == p.dtype:  # one kernel on a GPU
            t = p.dtype.type  # scalars of the arrays' own type: no type inference to trust
            self._fused.sgd(grad, t(mu), t(scale), t(self.weight_decay), t(lr), v, p)
            return
        v *= mu
        grad *= scale
        v += grad
        if self.weight_decay:
            v += self.weight_decay * p
        p -= lr * v
