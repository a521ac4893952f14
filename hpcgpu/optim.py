"""Optimizers as state transitions on flat buffers (SGD, Adam, AdamW), and learning-rate schedules.

An optimizer holds only its hyperparameters. ``init(params)`` makes its
state: flat arrays laid out like the parameters (SGD's ``velocity``,
Adam's ``m`` and ``v``), and ``update(grad, state, params, lr=, scale=,
count=)`` applies one step in place (optax's ``init``/``update``,
``optax/_src/base.py``). So the trainer treats every optimizer alike:
broadcast, ZeRO-1 sharding (each rank's state covers its block of the
parameters) and checkpoints (state arrays by name) need no case per
optimizer.

On the host an update is a few passes of NumPy's own BLAS (axpy, axpby,
scal) over the buffers: the update is memory-bound, and the BLAS that runs
the GEMMs has the thread pool already (``hpcgpu._blas``). On a GPU it is one
fused kernel, one pass (``hpcgpu._kernels``).
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from . import _blas, _device
from ._kernels import kernels as _kernels
from .errors import agreed

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "OPTIMIZERS", "optimizer_by_name", "LRSchedule", "TorchOptimizer",
           "TorchSchedule"]


def _number(name: str, value, ok, want: str) -> float:
    """``value`` as a float: a real number (not a bool, not a string) for which ``ok`` holds. Not collective.

    Otherwise one agreed line naming ``name`` and what it wants (``want``): a ``TypeError`` for another type, a
    ``ValueError`` for a number out of range. Agreed: the arguments are the same on every rank (the trainer
    agrees them, :func:`hpcgpu.errors.agree_inputs`).
    """
    if not isinstance(value, numbers.Real) or isinstance(value, (bool, np.bool_)):
        raise agreed(TypeError(f"{name} must be {want}, got {value!r}"))
    if not ok(float(value)):
        raise agreed(ValueError(f"{name} must be {want}, got {value!r}"))
    return float(value)


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
            raise agreed(ValueError(f"schedule must be cosine, step or constant, got {kind!r}"))
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


def _on_device(a) -> bool:
    return _device.is_device_array(a)


class Optimizer:
    """The optimizer protocol: hyperparameters, ``init`` and ``update``.

    Parameters
    ----------
    lr : float
        The peak learning rate (> 0).

    Raises
    ------
    ValueError
        ``lr`` is not a positive number.

    Attributes
    ----------
    name : str
        The command line's ``--optimizer`` name.
    state_names : tuple of str
        The names of :meth:`init`'s arrays (checkpoints store them so).
    lr : float
        The peak learning rate; the trainer's schedule scales it per step.
    """

    name = ""
    state_names: tuple = ()

    def __init__(self, lr: float):
        self.lr = _number("lr", lr, lambda v: v > 0 and math.isfinite(v), "a positive number")

    def init(self, params) -> dict:
        """The state for ``params`` (n,): zeros of its shape, dtype and array module, by name. Not collective.

        Parameters
        ----------
        params : xp.ndarray, shape (n,)

        Returns
        -------
        dict of str to xp.ndarray
        """
        return {k: params * 0 for k in self.state_names}

    def update(self, grad, state: dict, params, *, lr: float, scale: float = 1.0, count: int = 1) -> None:
        """One step: ``params`` and ``state`` updated in place from ``scale * grad``. Not collective.

        Parameters
        ----------
        grad : xp.ndarray, shape (n,)
            The gradient (the trainer's: summed over the global batch, so
            ``scale`` is 1 / B); may be overwritten on the device path.
        state : dict
            :meth:`init`'s arrays for these parameters.
        params : xp.ndarray, shape (n,)
        lr : float
            This step's learning rate.
        scale : float
            Multiplies ``grad``.
        count : int
            The number of updates applied so far, this one included (1 at
            the first): Adam's bias correction.
        """
        raise NotImplementedError(f"{type(self).__name__} does not define update")

    def config(self) -> dict:
        """The name and every hyperparameter, JSON-able: a resumed run must have the same."""
        return {"name": self.name, "lr": self.lr}

    def describe(self) -> dict:
        """What the ranks must agree on (:func:`hpcgpu.errors.agree_inputs`): :meth:`config`. Not collective."""
        return self.config()

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.config().items() if k != "name")
        return f"{type(self).__name__}({args})"


class SGD(Optimizer):
    """Stochastic gradient descent with heavy-ball or Nesterov momentum and L2 weight decay.

    With the summed gradient ``g`` and ``scale`` (1 / global batch), the
    PyTorch form (Sutskever et al., ICML 2013): ``v = momentum * v + scale * g
    + weight_decay * p``; then ``p -= lr * v``, or with Nesterov
    ``p -= lr * (scale * g + weight_decay * p + momentum * v)``. One flat
    buffer, identically on every rank. On the host two to four BLAS passes
    over the buffer (axpby, axpy, scal) and no temporary; on a GPU one fused
    kernel.

    Parameters
    ----------
    lr : float
        Peak learning rate (> 0).
    momentum : float
        In [0, 1).
    nesterov : bool
    weight_decay : float
        L2 coefficient (>= 0).

    Raises
    ------
    ValueError
        A hyperparameter out of its range.
    """

    name = "sgd"
    state_names = ("velocity",)
    _host_blas = True  # NumPy's BLAS on the host where it binds (the tests turn it off to run the array form)

    def __init__(self, lr: float = 0.01, momentum: float = 0.0, nesterov: bool = False, weight_decay: float = 0.0):
        super().__init__(lr)
        momentum = _number("momentum", momentum, lambda v: 0 <= v < 1, "a number in [0, 1)")
        weight_decay = _number("weight_decay", weight_decay, lambda v: v >= 0, "a number >= 0")
        if not isinstance(nesterov, (bool, np.bool_)):
            raise agreed(TypeError(f"nesterov must be True or False, got {nesterov!r}"))
        if nesterov and not momentum:
            raise agreed(ValueError("Nesterov momentum needs momentum > 0"))
        self.momentum, self.nesterov, self.weight_decay = momentum, bool(nesterov), weight_decay
        self._blas_checked: tuple = (None, False)

    def config(self) -> dict:
        """``name``, ``lr``, ``momentum``, ``nesterov``, ``weight_decay``."""
        return {"name": self.name, "lr": self.lr, "momentum": self.momentum, "nesterov": self.nesterov,
                "weight_decay": self.weight_decay}

    def update(self, grad, state: dict, params, *, lr: float, scale: float = 1.0, count: int = 1) -> None:
        """One step, in place; ``grad`` is left unchanged on the host path (NumPy's BLAS). Not collective.

        Parameters
        ----------
        grad, state, params, lr, scale, count
            As :meth:`Optimizer.update` (``count`` is not used).
        """
        p, v = params, state["velocity"]
        key = (id(p), id(v), id(grad))  # the same buffers step after step: check them once
        if self._blas_checked[0] != key:
            self._blas_checked = (key, self._host_blas and _blas.vector_ops(p, v, grad))
        if self._blas_checked[1]:
            self._update_blas(grad, v, p, lr, scale)
            return
        fused = _kernels(_device.cupy_or_none()) if _on_device(p) else None
        if fused is not None and grad.dtype == p.dtype:  # one kernel on a GPU
            t = p.dtype.type  # scalars of the arrays' own type: no type inference to trust
            kernel = fused.sgd_nesterov if self.nesterov else fused.sgd
            kernel(grad, t(self.momentum), t(scale), t(self.weight_decay), t(lr), v, p)
            return
        self._update_arrays(grad, v, p, lr, scale)

    def _update_blas(self, grad, v, p, lr: float, scale: float) -> None:
        """The host update by NumPy's BLAS: two to four passes, no temporary; ``grad`` unchanged."""
        mu, wd = self.momentum, self.weight_decay
        if not mu:
            v[...] = 0
        if not _blas.axpby(scale, grad, mu, v):  # v = scale * g + mu * v in one pass where the BLAS has it
            _blas.scal(mu, v)
            _blas.axpy(scale, grad, v)
        if wd:
            _blas.axpy(wd, p, v)
        if not self.nesterov:
            _blas.axpy(-lr, v, p)
            return
        # p_new = (1 - lr wd) p - lr mu v_new - lr scale g, v_new = mu v + scale g + wd p
        if wd:
            _blas.scal(1.0 - lr * wd, p)
        _blas.axpy(-lr * mu, v, p)
        _blas.axpy(-lr * scale, grad, p)

    def _update_arrays(self, grad, v, p, lr: float, scale: float) -> None:
        """The update in array arithmetic (``grad`` is overwritten), where neither BLAS nor a kernel serves."""
        mu, wd = self.momentum, self.weight_decay
        grad *= scale
        if self.nesterov:
            if wd:
                grad += wd * p
            v *= mu
            v += grad
            grad += mu * v
            p -= lr * grad
            return
        v *= mu
        v += grad
        if wd:
            v += wd * p
        p -= lr * v


class Adam(Optimizer):
    """Adam (Kingma & Ba, ICLR 2015, Algorithm 1), with L2 weight decay added to the gradient (PyTorch's ``Adam``).

    ``g = scale * grad + weight_decay * p``; ``m = b1 m + (1 - b1) g``;
    ``v = b2 v + (1 - b2) g^2``; ``p -= lr / (1 - b1^t) * m / (sqrt(v / (1 - b2^t)) + eps)``
    at update ``t``. State ``m`` and ``v``, laid out like the parameters.

    Parameters
    ----------
    lr : float
        Peak learning rate (> 0); Keras's and PyTorch's default 1e-3.
    betas : (float, float)
        The moments' decay rates, each in [0, 1).
    eps : float
        Added to the root of the second moment (> 0).
    weight_decay : float
        L2 coefficient (>= 0).

    Raises
    ------
    ValueError
        A hyperparameter out of its range.
    """

    name = "adam"
    state_names = ("m", "v")
    decoupled = False

    def __init__(self, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0):
        super().__init__(lr)
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise agreed(TypeError(f"betas must be a pair of numbers in [0, 1), got {betas!r}"))
        b1, b2 = (_number("betas", b, lambda v: 0 <= v < 1, "a pair of numbers in [0, 1)") for b in betas)
        eps = _number("eps", eps, lambda v: v > 0 and math.isfinite(v), "a positive number")
        weight_decay = _number("weight_decay", weight_decay, lambda v: v >= 0, "a number >= 0")
        self.betas, self.eps, self.weight_decay = (b1, b2), eps, weight_decay
        self._scratch = None

    def config(self) -> dict:
        """``name``, ``lr``, ``betas``, ``eps``, ``weight_decay``."""
        return {"name": self.name, "lr": self.lr, "betas": list(self.betas), "eps": self.eps,
                "weight_decay": self.weight_decay}

    def update(self, grad, state: dict, params, *, lr: float, scale: float = 1.0, count: int = 1) -> None:
        """One step, in place: one fused kernel on a GPU, a few array passes on the host. Not collective.

        Parameters
        ----------
        grad, state, params, lr, scale
            As :meth:`Optimizer.update`.
        count : int
            ``t`` of the bias correction: the updates applied, this one included.
        """
        p, m, v = params, state["m"], state["v"]
        (b1, b2), t = self.betas, max(1, int(count))
        l2, decay = (0.0, 1.0 - lr * self.weight_decay) if self.decoupled else (self.weight_decay, 1.0)
        step = lr / (1.0 - b1**t)
        inv_c2 = 1.0 / math.sqrt(1.0 - b2**t)
        fused = _kernels(_device.cupy_or_none()) if _on_device(p) else None
        if fused is not None and grad.dtype == p.dtype:
            T = p.dtype.type  # noqa: N806
            fused.adam(grad, T(scale), T(l2), T(b1), T(b2), T(step), T(inv_c2), T(self.eps), T(decay), m, v, p)
            return
        xp = _device.cupy_or_none() if _on_device(p) else np
        g = self._buffer(p, xp)
        xp.multiply(grad, scale, out=g)
        if l2:
            g += l2 * p
        m *= b1
        m += (1.0 - b1) * g
        xp.multiply(g, g, out=g)
        v *= b2
        v += (1.0 - b2) * g
        xp.sqrt(v, out=g)
        g *= inv_c2
        g += self.eps
        xp.divide(m, g, out=g)
        if decay != 1.0:
            p *= decay
        p -= step * g

    def _buffer(self, p, xp):
        """A scratch array like ``p`` (kept between steps: the update allocates nothing)."""
        s = self._scratch
        if s is None or s.shape != p.shape or s.dtype != p.dtype or _on_device(s) != _on_device(p):
            s = self._scratch = xp.empty_like(p)
        return s


class AdamW(Adam):
    """AdamW: Adam with decoupled weight decay (Loshchilov & Hutter, ICLR 2019, Algorithm 2; PyTorch's ``AdamW``).

    ``p *= 1 - lr * weight_decay`` before Adam's step, which sees the
    gradient alone.

    Parameters
    ----------
    lr, betas, eps
        As :class:`Adam`.
    weight_decay : float
        The decoupled decay rate (>= 0); 0.01 by default, PyTorch's.

    Raises
    ------
    ValueError
        A hyperparameter out of its range.
    """

    name = "adamw"
    decoupled = True

    def __init__(self, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.01):
        super().__init__(lr, betas, eps, weight_decay)


OPTIMIZERS = {"sgd": SGD, "adam": Adam, "adamw": AdamW}
"""The command line's ``--optimizer`` names."""


def optimizer_by_name(name: str, lr: float, momentum: float = 0.0, weight_decay: float = 0.0) -> Optimizer:
    """The command line's optimizer: ``sgd`` (with ``momentum``), ``adam`` or ``adamw``. Not collective.

    Parameters
    ----------
    name : {"sgd", "adam", "adamw"}
    lr, momentum, weight_decay : float
        ``momentum`` is SGD's only.

    Returns
    -------
    Optimizer

    Raises
    ------
    ValueError
        An unknown name, or a hyperparameter out of range.
    """
    if name == "sgd":
        return SGD(lr, momentum=momentum, weight_decay=weight_decay)
    if name in ("adam", "adamw"):
        return OPTIMIZERS[name](lr, weight_decay=weight_decay)
    raise agreed(ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {name!r}"))


# -- PyTorch's optimizers and schedulers on the trainer's buffers ---------------------------------

def _torch_state_names(optimizer) -> tuple | None:
    """The per-parameter state a PyTorch optimizer keeps, by name (None: a class hpcgpu does not know)."""
    kind = type(optimizer).__name__
    groups = optimizer.param_groups
    if kind == "SGD":
        return ("momentum_buffer",) if any(g.get("momentum", 0) for g in groups) else ()
    if kind in ("Adam", "AdamW"):
        return ("exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) if any(g.get("amsgrad") for g in groups) else ())
    return None


def _is_torch_optimizer(obj) -> bool:
    import sys

    torch = sys.modules.get("torch")  # never imported here: a torch object means torch is loaded already
    return torch is not None and isinstance(obj, torch.optim.Optimizer)


class TorchOptimizer(Optimizer):
    """A ``torch.optim`` optimizer of an :class:`hpcgpu.nn.Torch` module, stepping on the trainer's buffers.

    Made by the trainer from the ``optimizer=`` it is given (:func:`as_optimizer`). At binding
    (:meth:`attach`) each of the module's parameters becomes a view of the trainer's flat parameter buffer
    (``param.data``) and its ``.grad`` a view of the flat gradient, so ``optimizer.step()`` reads the reduced
    gradient and writes the parameters every rank holds, with no copy. Its state (SGD's
    ``momentum_buffer``, Adam's ``exp_avg`` and ``exp_avg_sq``) lives in flat arrays laid out like the
    parameters (:meth:`init`), so checkpoints store and restore it as they do hpcgpu's optimizers'; Adam's
    ``step`` is the trainer's update count. Not collective.

    Parameters
    ----------
    optimizer : torch.optim.SGD, torch.optim.Adam or torch.optim.AdamW
        Built on the module's parameters (``module.parameters()``, or groups of them).
    scheduler : torch.optim.lr_scheduler.LRScheduler, optional
        Of ``optimizer``: stepped by the trainer (:class:`TorchSchedule`).
    interval : {"epoch", "step"}
        When the scheduler steps: after each epoch's last step, or after every step (Lightning's
        ``interval``).

    Raises
    ------
    TypeError
        Another ``torch.optim`` class, or a scheduler of another optimizer (every rank alike).
    ValueError
        ``interval`` is neither ``"epoch"`` nor ``"step"``.

    Attributes
    ----------
    torch_optimizer : torch.optim.Optimizer
    name : str
        ``"torch.optim.SGD"``...
    lr, momentum, weight_decay : float
        The first parameter group's at construction (the config's record of the run).
    """

    def __init__(self, optimizer, scheduler=None, interval: str = "epoch"):
        kind = type(optimizer).__name__
        names = _torch_state_names(optimizer)
        if names is None:
            raise agreed(TypeError(f"optimizer must be an hpcgpu.optim optimizer (SGD, Adam, AdamW) or "
                                   f"torch.optim.SGD, Adam or AdamW, got torch.optim.{kind}"))
        if scheduler is not None and getattr(scheduler, "optimizer", None) is not optimizer:
            raise agreed(TypeError("scheduler must be a torch.optim.lr_scheduler of the optimizer given as "
                                   "optimizer="))
        if interval not in ("epoch", "step"):
            raise agreed(ValueError(f"scheduler_interval must be epoch or step, got {interval!r}"))
        g = optimizer.param_groups[0]
        super().__init__(g.get("initial_lr", g["lr"]))
        self.torch_optimizer, self.scheduler, self.interval = optimizer, scheduler, interval
        self.name, self.state_names = f"torch.optim.{kind}", names
        self.momentum, self.weight_decay = float(g.get("momentum", 0.0)), float(g.get("weight_decay", 0.0))
        self._shapes: list = []  # the module's trainable parameters in the flat layout: (param, offset, shape)

    def config(self) -> dict:
        """``name``, ``lr`` (the first group's initial one) and the optimizer's ``defaults`` that are numbers."""
        defaults = {k: v for k, v in self.torch_optimizer.defaults.items()
                    if isinstance(v, (bool, int, float, str, type(None))) or
                    isinstance(v, (tuple, list)) and all(isinstance(e, (int, float)) for e in v)}
        out = {"name": self.name, "lr": self.lr, **{k: list(v) if isinstance(v, tuple) else v
                                                    for k, v in defaults.items() if k != "lr"}}
        if self.scheduler is not None:
            out["scheduler"] = type(self.scheduler).__name__
            out["scheduler_interval"] = self.interval
        return out

    def attach(self, module, shapes, params, grad) -> TypeError | None:
        """Make the module's parameters views of ``params`` and their ``.grad`` views of ``grad``. Not collective.

        Parameters
        ----------
        module : torch.nn.Module
            The :class:`hpcgpu.nn.Torch` model's module.
        shapes : list of (str, tuple)
            The trainable parameters' names and shapes in the flat buffers' order.
        params, grad : xp.ndarray, shape (n,)
            The trainer's flat parameter and gradient buffers.

        Returns
        -------
        TypeError or None
            Why the optimizer cannot train this module: a parameter that is not the module's (None: it can).
        """
        import torch

        def tensor(a):
            return torch.from_numpy(a) if isinstance(a, np.ndarray) else torch.from_dlpack(a)

        mine = {id(p): n for n, p in module.named_parameters()}
        where, offset = {}, 0
        for n, shape in shapes:
            size = math.prod(shape)
            where[n] = (offset, shape)
            offset += size
        self._shapes = []
        for group in self.torch_optimizer.param_groups:
            for p in group["params"]:
                name = mine.get(id(p))
                if name is None:
                    return TypeError(f"optimizer: {self.name} holds a tensor that is not a parameter of the "
                                     f"module; build it on module.parameters()")
                if name not in where:  # frozen: no gradient, torch's step passes it by
                    continue
                lo, shape = where[name]
                n = math.prod(shape)
                with torch.no_grad():
                    p.data = tensor(params[lo : lo + n]).view(shape)
                p.grad = tensor(grad[lo : lo + n]).view(shape)
                self._shapes.append((p, lo, shape))
        return None

    def update(self, grad, state: dict, params, *, lr: float, scale: float = 1.0, count: int = 1) -> None:
        """``grad *= scale`` (in place: the parameters' ``.grad`` see it), then ``optimizer.step()``.

        ``lr`` is not used: the learning rate is the optimizer's own (its scheduler's). At the first update
        of a run torch makes its state itself (so the run is plain PyTorch's); it is then moved into
        ``state``'s arrays and torch holds views of them; a resumed run's torch takes the views at once.

        Parameters
        ----------
        grad, state, params, scale, count
            As :meth:`Optimizer.update`.
        lr : float
            Not used (the optimizer's own rate, :class:`TorchSchedule`).
        """
        import contextlib

        import torch

        grad *= scale
        opt = self.torch_optimizer
        fresh = count == 1
        ours = contextlib.nullcontext()
        if not isinstance(grad, np.ndarray):  # on a GPU torch runs on the trainer's (CuPy's) stream: ordered by it
            ours = torch.cuda.stream(torch.cuda.ExternalStream(_device.cupy_or_none().cuda.get_current_stream().ptr))
        with ours, torch.no_grad():
            if not fresh:
                self._share(state, opt.state, count)
            opt.step()
            if fresh:
                self._share(state, opt.state, count + 1)

    def _share(self, state: dict, torch_state, count: int) -> None:
        """Torch's per-parameter state as views of ``state``'s flat arrays (copied in where torch made its own).

        ``count``: the update about to run (1-based); Adam's ``step`` is ``count - 1`` before it.
        """
        import torch

        for p, lo, shape in self._shapes:
            s = torch_state[p]
            n = math.prod(shape)
            for name in self.state_names:
                flat = state[name][lo : lo + n]
                view = torch.from_numpy(flat).view(shape) if isinstance(flat, np.ndarray) else \
                    torch.from_dlpack(flat).view(shape)
                have = s.get(name)
                if have is not None and have.data_ptr() == view.data_ptr():
                    continue
                if have is not None:
                    view.copy_(have)
                s[name] = view
            if self.name != "torch.optim.SGD":  # Adam's bias correction counts the updates
                step = s.get("step")
                if step is None:
                    s["step"] = torch.tensor(float(count - 1), dtype=torch.float32)
                else:
                    step.fill_(count - 1)


class TorchSchedule:
    """The learning rate of a run with a PyTorch optimizer: its own, stepped by its scheduler (if any).

    Stands in for :class:`LRSchedule` (the trainer reads the rate and checkpoints ``state_dict()``). Not
    collective.

    Parameters
    ----------
    optimizer : TorchOptimizer
    steps : int
        Global steps an epoch.
    """

    stateful = True
    """Checkpoints hold :meth:`state_dict` (the rates and the scheduler's counters are not the options')."""

    def __init__(self, optimizer: TorchOptimizer, steps: int):
        self.optimizer, self.steps, self.total = optimizer, int(steps), 0
        self.epoch_lr = self._lr()

    def _lr(self) -> float:
        return float(self.optimizer.torch_optimizer.param_groups[0]["lr"])

    def __call__(self, step: int) -> float:
        """The first parameter group's learning rate at the start of the current epoch (the history's ``lr``)."""
        return self.epoch_lr

    def stepped(self, step: int) -> None:
        """Global step ``step`` is done: step the scheduler per step, or after an epoch's last.

        Parameters
        ----------
        step : int
            The global step, 0-based.
        """
        sched, last = self.optimizer.scheduler, (step + 1) % self.steps == 0
        if sched is not None and (self.optimizer.interval == "step" or last):
            sched.step()
        if last:
            self.epoch_lr = self._lr()

    def state_dict(self) -> dict:
        """``lrs`` (each parameter group's rate), ``epoch_lr`` and ``scheduler`` (its ``state_dict()``, or None)."""
        sched = self.optimizer.scheduler
        return {"lrs": [float(g["lr"]) for g in self.optimizer.torch_optimizer.param_groups],
                "epoch_lr": self.epoch_lr, "scheduler": None if sched is None else sched.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Take :meth:`state_dict`'s rates and scheduler state.

        Parameters
        ----------
        state : dict
        """
        for g, lr in zip(self.optimizer.torch_optimizer.param_groups, state["lrs"], strict=True):
            g["lr"] = lr
        self.epoch_lr = float(state.get("epoch_lr", self._lr()))
        if state.get("scheduler") is not None and self.optimizer.scheduler is not None:
            self.optimizer.scheduler.load_state_dict(state["scheduler"])


def as_optimizer(optimizer, scheduler=None, interval: str = "epoch"):
    """The Trainer's ``optimizer=`` as hpcgpu holds it: a ``torch.optim`` one wrapped (:class:`TorchOptimizer`).

    Not collective. Anything else is returned as it is (the trainer's own check refuses what is not an
    optimizer).

    Parameters
    ----------
    optimizer : hpcgpu.optim.Optimizer, torch.optim.Optimizer or None
    scheduler : torch.optim.lr_scheduler.LRScheduler, optional
    interval : {"epoch", "step"}

    Raises
    ------
    TypeError
        A scheduler without a ``torch.optim`` optimizer, or as :class:`TorchOptimizer`.
    """
    if _is_torch_optimizer(optimizer):
        return TorchOptimizer(optimizer, scheduler, interval)
    if scheduler is not None:
        raise agreed(TypeError("scheduler: a torch.optim.lr_scheduler steps a torch.optim optimizer given as "
                               "optimizer=; hpcgpu's optimizers follow schedule= (cosine, step, constant)"))
    return optimizer
