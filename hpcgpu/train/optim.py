"""SGD with momentum and weight decay on a flat parameter buffer, and schedules."""

from __future__ import annotations

import math

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

    def __call__(self, step: int) -> float:
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

    With gradient ``g`` of the mean loss: ``g += weight_decay * p``;
    ``v = momentum * v + g``; ``p -= lr * v`` (the PyTorch form; Sutskever
    et al., ICML 2013). All on one flat buffer, identically on every rank.

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
        self._tmp = params * 0

    def step(self, grad, lr: float) -> None:
        """Apply one update with the mean gradient ``grad`` (n,), overwritten. Not collective."""
        p, v = self.params, self.velocity
        if self.weight_decay:
            grad += self.weight_decay * p
        if self.momentum:
            v *= self.momentum
            v += grad
        else:
            v[...] = grad
        self._tmp[...] = v
        self._tmp *= lr
        p -= self._tmp
