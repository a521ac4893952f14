"""The trainer's fused elementwise kernels on a GPU: fewer launches per step.

Each is one ``cupy.ElementwiseKernel``, built once per array module, where
the plain CuPy form takes two to seven launches; on NumPy there are none
(:func:`kernels` returns None) and the callers keep their NumPy form. Each
body is plain C++ (no CUDA-only intrinsics), so the CuPy stand-in of
``tests/device`` compiles it for the host and runs it: the suite checks the
kernels here as written. NaN must survive every kernel as it survives
NumPy's form (the trainer detects divergence from a NaN loss): CUDA's
``max``/``min`` on floats drop a NaN (``fmax``), so they are not used.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

_BUILT: dict = {}

# One row i of z (n, c): z_j += b_j; m, k = the max and its first index (a NaN is the max, as in
# numpy.max and numpy.argmax); e_j = exp(z_j - m); p_j = e_j / sum e; z_j = p_j - (j == y);
# loss = -log(p_y), p_y clamped to tiny below (not max(): CUDA's max is fmax and drops a NaN).
_SOFTMAX_XENT = """
ptrdiff_t r = i * c;
T m = z[r] + b[0];
z[r] = m;
ptrdiff_t k = 0;
for (ptrdiff_t j = 1; j < c; ++j) {
  T v = z[r + j] + b[j];
  z[r + j] = v;
  if (v > m || (v != v && m == m)) { m = v; k = j; }
}
T s = (T)0;
for (ptrdiff_t j = 0; j < c; ++j) { T e = exp(z[r + j] - m); z[r + j] = e; s += e; }
T p = z[r + y] / s;
for (ptrdiff_t j = 0; j < c; ++j) { z[r + j] = z[r + j] / s - (j == y ? (T)1 : (T)0); }
loss = -log(p < tiny ? tiny : p);
hit = k == y ? (T)1 : (T)0;
"""


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
        ``d * 0``, in place (one for two).
        ``softmax_xent(b, y, c, tiny, z, loss, hit)``: for each row ``r`` of
        ``z`` (n, c), C-contiguous: ``z[r] += b`` (the last layer's bias),
        then ``z[r] = softmax(z[r]) - onehot(y[r])`` in place (the gradient of
        the row's loss with respect to its logits), ``loss[r] = -log(max(p_y,
        tiny))`` and ``hit[r] = 1`` where the row's first maximum is at
        ``y[r]`` (``numpy.argmax``'s tie and NaN rule), else 0; one thread a
        row (one launch for some fifteen: bias, max, argmax, compare, exp,
        sum, divide, gather, log, one-hot, and their sums' operands).
        ``sgd(g, mu, scale, wd, lr, v, p)``: ``v = mu v + scale g + wd p``,
        ``p = p - lr v``, in place (one for five to seven; the form of
        :class:`hpcgpu.optim.SGD`); ``sgd_nesterov``, the same arguments:
        ``d = scale g + wd p``, ``v = mu v + d``, ``p = p - lr (d + mu v)``.
        ``adam(g, scale, l2, b1, b2, step, inv_c2, eps, decay, m, v, p)``:
        ``d = scale g + l2 p``, the moments ``m``, ``v`` updated with ``b1``,
        ``b2``, and ``p = decay p - step m / (sqrt(v) inv_c2 + eps)``
        (:class:`hpcgpu.optim.Adam`, ``AdamW`` with ``decay = 1 - lr wd``).
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
            # softmax cross-entropy and its gradient, one thread a row (one launch where CuPy's array
            # form takes some fifteen): adds the last layer's bias, keeps the row's logits' first maximum (NaN first,
            # as numpy.argmax) and overwrites the logits with softmax - onehot
            softmax_xent=E("raw T b, I y, int64 c, T tiny", "raw T z, T loss, T hit", _SOFTMAX_XENT,
                           "hpcgpu_softmax_xent"),
            sgd=E("T g, T mu, T scale, T wd, T lr", "T v, T p", "v = mu * v + scale * g + wd * p; p = p - lr * v",
                  "hpcgpu_sgd"),
            sgd_nesterov=E("T g, T mu, T scale, T wd, T lr", "T v, T p",
                           "T d = scale * g + wd * p; v = mu * v + d; p = p - lr * (d + mu * v)",
                           "hpcgpu_sgd_nesterov"),
            adam=E("T g, T scale, T l2, T b1, T b2, T step, T inv_c2, T eps, T decay", "T m, T v, T p",
                   "T d = scale * g + l2 * p; m = b1 * m + ((T)1 - b1) * d; v = b2 * v + ((T)1 - b2) * d * d; "
                   "p = decay * p - step * m / (sqrt(v) * inv_c2 + eps)", "hpcgpu_adam"),
        )
    return k
