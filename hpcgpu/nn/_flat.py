"""Parameters in one flat buffer, seen by name: what the trainer's two model engines share.

A data-parallel step reduces every gradient with one Allreduce of one buffer
and the optimizer updates every parameter with a few vector operations, so
the parameters, the gradient and the step's statistics live in flat buffers;
weights and biases are views into them (:func:`views`).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["views", "FlatParams"]


def views(flat, shapes) -> dict:
    """``{name: view of flat}`` for parameters laid out back to back in ``shapes``' order. Not collective.

    Parameters
    ----------
    flat : xp.ndarray, shape (n,)
        With ``n >= sum(prod(shape))``; what is beyond the last is not viewed.
    shapes : sequence of (str, tuple of int)

    Returns
    -------
    dict of str to xp.ndarray
        Views (no copy), C-ordered, in ``shapes``' order.
    """
    out, off = {}, 0
    for name, shape in shapes:
        n = math.prod(shape)
        out[name] = flat[off : off + n].reshape(shape)
        off += n
    return out


class FlatParams:
    """Flat ``params``, ``grad`` and ``stats`` buffers with views by name (base of the model engines).

    A subclass sets ``shapes`` (this rank's ``(name, shape)`` in buffer
    order), ``global_shapes`` (the unsplit model's), ``n_params``, ``xp``
    and ``dtype``, then calls :meth:`_bind`. Not collective.
    """

    shapes: list
    global_shapes: list
    n_params: int

    def release(self) -> None:
        """Drop what the model keeps on the trainer's buffers besides its views (its trainer is closing).

        Not collective. Nothing here; a model of one's own (:class:`hpcgpu.nn.Torch`'s leaf tensors) may.
        """

    def _bind(self, grad, stats, params) -> None:
        """Take the caller's buffers (checked) or allocate them; make the views."""
        for name, view, n in (("grad", grad, self.n_params), ("stats", stats, 2), ("params", params, self.n_params)):
            if view is not None and (view.shape != (n,) or view.dtype != self.dtype):
                raise ValueError(f"{name} must be of shape ({n},) and dtype {self.dtype}, "
                                 f"got {view.shape} {view.dtype}")
        xp = self.xp
        self.params = xp.zeros(self.n_params, dtype=self.dtype) if params is None else params
        self.grad = xp.zeros(self.n_params, dtype=self.dtype) if grad is None else grad
        self.stats = xp.zeros(2, dtype=self.dtype) if stats is None else stats
        self._p, self._g = self._views(self.params), self._views(self.grad)

    def _views(self, flat) -> dict:
        return views(flat, self.shapes)

    def global_views(self, full) -> dict:
        """The unsplit model's flat parameters ``full`` (n_global,) as ``{name: view}``. Not collective.

        Parameters
        ----------
        full : numpy.ndarray, shape (n_global,)
            Laid out as the unsplit model's :attr:`params` (what
            :meth:`global_of` returns, what the results file's ``/model``
            group holds by name).

        Returns
        -------
        dict of str to numpy.ndarray
            Views into ``full``, of the parameters' global shapes.
        """
        return views(full, self.global_shapes)

    def named_parameters(self) -> list:
        """``[(name, view)]`` in buffer order; views into :attr:`params` (this rank's slices)."""
        return list(self._p.items())

    def state_dict(self) -> dict:
        """``{"params": host copy of params}`` (numpy, (n_params,)). Not collective."""
        from .. import _device

        return {"params": _device.asnumpy(self.params).copy()}

    def load_state_dict(self, state: dict) -> None:
        """Copy ``state["params"]`` (n_params,) into :attr:`params` in place. Not collective.

        Parameters
        ----------
        state : dict
            A :meth:`state_dict` (the array may be of another float dtype).

        Raises
        ------
        ValueError
            The array is not of shape ``(n_params,)``.
        """
        p = np.asarray(state["params"])
        if p.shape != (self.n_params,):
            raise ValueError(f"params of shape {p.shape} for a model of {self.n_params} parameters")
        self.params[...] = self.xp.asarray(p.astype(self.dtype, copy=False))
