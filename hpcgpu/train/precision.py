"""Training precisions (PyTorch Lightning's names) and the dynamic loss scale of ``16-mixed``.

``64-true`` and ``32-true``: everything in float64 or float32. ``bf16-mixed``
and ``16-mixed`` (Micikevicius et al., "Mixed Precision Training", ICLR 2018):
the master weights, the optimizer's state and the gradient buffer stay in
float32; each step multiplies 16-bit copies of the weights with 16-bit
activations, accumulating in float32 (cuBLAS's ``CUBLAS_COMPUTE_32F``; on
the host, widened to float32 exactly and rounded once); bias, ReLU, softmax
and the loss run in float32, and activations are stored in 16 bits. The
gradient is reduced in float32: MPI has no 16-bit sum, and a 16-bit running
sum over ranks loses digits. float16's range is narrow (largest 65504,
smallest normal 6.1e-5), so ``16-mixed`` multiplies the loss gradient by a
dynamic scale (:class:`LossScaler`); bfloat16 has float32's range and needs
none. bfloat16 on NumPy is ``ml_dtypes.bfloat16``; CuPy (>= 14) takes the
same dtype.
"""

from __future__ import annotations

import numpy as np

__all__ = ["PRECISIONS", "LossScaler", "Precision", "MixedPrecision", "ScaledMixedPrecision", "policy", "resolve"]

PRECISIONS = ("64-true", "32-true", "bf16-mixed", "16-mixed")


def resolve(precision: str | None, dtype: str) -> tuple[str, np.dtype, np.dtype | None]:
    """The precision of a run, from ``--precision`` and its alias ``--dtype``. Not collective.

    Parameters
    ----------
    precision : str or None
        One of :data:`PRECISIONS`; ``None`` or "" to take ``dtype``'s.
    dtype : {"float32", "float64"}
        ``float64`` is ``64-true``, ``float32`` ``32-true`` (and the master
        type of the mixed precisions).

    Returns
    -------
    (precision, master, compute)
        The precision's name; the type of the weights, optimizer state and
        gradient; the 16-bit type of the GEMMs (``None`` for the true
        precisions).

    Raises
    ------
    ValueError
        An unknown precision, or one that contradicts ``dtype``.
    """
    alias = {"float64": "64-true", "float32": "32-true"}
    if dtype not in alias:
        raise ValueError(f"--dtype must be float32 or float64, got {dtype!r}")
    if not precision:
        precision = alias[dtype]
    if precision not in PRECISIONS:
        raise ValueError(f"--precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    master = "float64" if precision == "64-true" else "float32"
    if precision != alias[dtype] and dtype != "float32":
        raise ValueError(f"--precision {precision} keeps {master} weights, but --dtype is {dtype}")
    compute = None
    if precision == "16-mixed":
        compute = np.dtype(np.float16)
    elif precision == "bf16-mixed":
        from .._gemm import bfloat16_dtype

        compute = bfloat16_dtype()
        if compute is None:
            raise ValueError("--precision bf16-mixed needs the ml_dtypes package (pip install ml_dtypes)")
    return precision, np.dtype(master), compute


class LossScaler:
    """Dynamic loss scaling with the constants of ``torch.amp.GradScaler``.

    The loss gradient is multiplied by :attr:`scale` before the backward
    pass, so that small gradients survive float16; the update divides it
    out. A step whose reduced gradient holds an inf or a NaN is skipped (no
    update of weights or momentum) and the scale is multiplied by
    ``backoff``; after ``growth_interval`` clean steps in a row it is
    multiplied by ``growth``.

    Parameters
    ----------
    init_scale : float
        2**16.
    growth, backoff : float
        2.0 and 0.5.
    growth_interval : int
        2000 steps.

    Attributes
    ----------
    scale : float
        The current scale.
    clean_steps : int
        Clean steps since the scale last changed (GradScaler's growth tracker).
    """

    def __init__(self, init_scale=2.0**16, growth=2.0, backoff=0.5, growth_interval=2000):
        self.scale, self.growth, self.backoff = float(init_scale), float(growth), float(backoff)
        self.growth_interval = int(growth_interval)
        self.clean_steps = 0

    def update(self, found_inf: bool) -> None:
        """After a step: back off on an overflow, grow after ``growth_interval`` clean steps. Not collective.

        Parameters
        ----------
        found_inf : bool
            The step's reduced gradient held an inf or a NaN (the step was
            skipped). Every rank must pass the same value (the trainer checks
            the reduced gradient, which is the same everywhere).
        """
        if found_inf:
            self.scale *= self.backoff
            self.clean_steps = 0
            return
        self.clean_steps += 1
        if self.clean_steps == self.growth_interval:
            self.scale *= self.growth
            self.clean_steps = 0

    def state_dict(self) -> dict:
        """``{"scale", "clean_steps"}``: what a resumed run needs to continue exactly."""
        return dict(scale=self.scale, clean_steps=self.clean_steps)

    def load_state_dict(self, state: dict) -> None:
        """Take :meth:`state_dict`'s values.

        Parameters
        ----------
        state : dict
            A :meth:`state_dict`.
        """
        self.scale, self.clean_steps = float(state["scale"]), int(state["clean_steps"])


class Precision:
    """A precision policy: hooks the trainer's step calls, which do nothing by default (``64-true``, ``32-true``).

    Lightning Fabric's precision plugins (``lightning/fabric/plugins/precision``):
    the step asks the policy for the loss scale and whether to skip the
    update, and knows no precision by name. The policy's state (a loss
    scaler's) is checkpointed as its :meth:`state_dict`.

    Parameters
    ----------
    name : str
        One of :data:`PRECISIONS`.
    master : numpy.dtype
        The weights', optimizer state's and gradient's type.
    compute : numpy.dtype or None
        The GEMMs' 16-bit type (mixed precision), else None.

    Attributes
    ----------
    name, master, compute
    """

    def __init__(self, name: str, master, compute=None):
        self.name, self.master = name, np.dtype(master)
        self.compute = None if compute is None else np.dtype(compute)

    @property
    def loss_scale(self) -> float:
        """The factor on the loss gradient before the backward pass (1)."""
        return 1.0

    def skip_update(self, grad, any_rank) -> bool:
        """Whether this step's update must be skipped, after the gradient's reduction (never). Collective in effect.

        Parameters
        ----------
        grad : xp.ndarray
            This rank's reduced gradient (its ZeRO block, or its tensor slice).
        any_rank : callable
            ``any_rank(flag) -> bool``: whether ``flag`` holds on any rank
            whose slice differs (so every rank decides alike).

        Returns
        -------
        bool
        """
        return False

    def state_dict(self) -> dict:
        """The policy's state (none)."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Take :meth:`state_dict`'s values (none).

        Parameters
        ----------
        state : dict
        """


class MixedPrecision(Precision):
    """``bf16-mixed``: 16-bit GEMMs, float32 everything else; bfloat16 has float32's range, so no scaling.

    Parameters
    ----------
    name, master, compute
        As :class:`Precision`.
    """


class ScaledMixedPrecision(MixedPrecision):
    """``16-mixed``: float16 GEMMs with a dynamic loss scale (:class:`LossScaler`).

    The loss gradient is multiplied by :attr:`loss_scale`; a step whose
    reduced gradient holds an inf or a NaN on any rank is skipped (no
    update of weights or optimizer state) and the scale backs off.

    Parameters
    ----------
    name, master, compute
        As :class:`Precision`.
    scaler : LossScaler, optional
        A new one (``torch.amp.GradScaler``'s constants) by default.
    """

    def __init__(self, name: str, master, compute, scaler: LossScaler | None = None):
        super().__init__(name, master, compute)
        self.scaler = scaler if scaler is not None else LossScaler()

    @property
    def loss_scale(self) -> float:
        """The scaler's current scale."""
        return self.scaler.scale

    def skip_update(self, grad, any_rank) -> bool:
        """True, and the scale backed off, when the gradient overflowed on any rank.

        Otherwise the scaler counts a clean step.

        Parameters
        ----------
        grad, any_rank
            As :meth:`Precision.skip_update`.

        Returns
        -------
        bool
        """
        from .. import _device

        xp = _device.cupy_or_none() if _device.is_device_array(grad) else np
        overflow = any_rank(not bool(_device.asnumpy(xp.isfinite(grad).all())))
        self.scaler.update(overflow)
        return overflow

    def state_dict(self) -> dict:
        """The scaler's ``scale`` and ``clean_steps``."""
        return self.scaler.state_dict()

    def load_state_dict(self, state: dict) -> None:
        """Take the scaler's state.

        Parameters
        ----------
        state : dict
        """
        if state:
            self.scaler.load_state_dict(state)


def policy(precision: str | None, dtype: str) -> Precision:
    """The precision policy of ``--precision`` and ``--dtype`` (see :func:`resolve`). Not collective.

    Parameters
    ----------
    precision : str or None
    dtype : {"float32", "float64"}

    Returns
    -------
    Precision
        :class:`Precision`, :class:`MixedPrecision` or :class:`ScaledMixedPrecision`.

    Raises
    ------
    ValueError
        As :func:`resolve`.
    """
    name, master, compute = resolve(precision, dtype)
    if name == "16-mixed":
        return ScaledMixedPrecision(name, master, compute)
    if compute is not None:
        return MixedPrecision(name, master, compute)
    return Precision(name, master)
