"""The trainer's fused elementwise kernels on a GPU (issue 24: fewer launches per step).

Each is one ``cupy.ElementwiseKernel``, built once per array module, where
the plain CuPy form takes two to seven launches; on NumPy there are none
(:func:`kernels` returns None) and the callers keep their NumPy form. The C
of each stays inside the subset the CuPy stand-in of ``tests/device``
interprets (assignments, arithmetic, comparisons, ``?:``, ``exp``, ``log``,
``(T)`` casts), so the suite runs them here too. NaN must survive every
kernel as it survives NumPy's form (the trainer detects divergence from a NaN
loss): CUDA's ``max``/``min`` on floats drop a NaN (``fmax``), so they are
not used.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

_BUILT: dict = {}


def kernels(xp) -> SimpleNamespace | None:
    """The fused kernels of ``xp`` (CuPy), or None on NumPy. Not collective.

    Parameters
    ----------
    xp : module
        The array module (``cupy``; ``numpy`` or None give None).

    Returns
    -------
    types.SimpleNamespace or None
        ``bias_relu(b, z)``: ``z = max(z + b, 0)`` in place, ``b`` broadcast
        over the rows, NaN kept as ``numpy.maximum`` keeps it (one launch
        for two). ``relu_backward(a, d)``: ``d`` where ``a > 0``, else
        ``d * 0``, in place (one for two). ``exp_shifted(m, z)``: ``z = exp(z - m)`` in
        place, ``m`` the row maxima (one for two). ``neg_log(p, tiny)``: a
        new array ``-log(max(p, tiny))``, NaN kept (one for three).
        ``sgd(g, mu, scale, wd, lr, v, p)``: ``v = mu v + scale g + wd p``,
        ``p = p - lr v``, in place (one for five to seven; the form of
        :class:`hpcgpu.train.optim.SGD`).
    """
    if xp is np or not hasattr(xp, "ElementwiseKernel"):
        return None
    k = _BUILT.get(xp)
    if k is None:
        E = xp.ElementwiseKernel  # noqa: N806
        k = _BUILT[xp] = SimpleNamespace(
            bias_relu=E("T b", "T z", "T v = z + b; z = v <= (T)0 ? (T)0 : v", "hpcgpu_bias_relu"),
            # d * 0, not 0: a NaN or inf in d stays NaN and a negative d gives -0, as NumPy's d *= a > 0
            relu_backward=E("T a", "T d", "d = a > (T)0 ? d : d * (T)0", "hpcgpu_relu_backward"),
            exp_shifted=E("T m", "T z", "z = exp(z - m)", "hpcgpu_exp_shifted"),
            # not max(p, tiny): CUDA's max is fmax, which drops a NaN, and a diverged loss must stay NaN
            neg_log=E("T p, T tiny", "T l", "T q = p < tiny ? tiny : p; l = -log(q)", "hpcgpu_neg_log"),
            sgd=E("T g, T mu, T scale, T wd, T lr", "T v, T p", "v = mu * v + scale * g + wd * p; p = p - lr * v",
                  "hpcgpu_sgd"),
        )
    return k
