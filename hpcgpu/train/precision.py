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

__all__ = ["PRECISIONS", "LossScaler", "resolve"]

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
