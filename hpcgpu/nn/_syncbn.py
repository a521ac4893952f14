"""BatchNorm over the global batch for :class:`hpcgpu.nn.Torch` (``sync_batchnorm=True``).

PyTorch's ``SyncBatchNorm`` on hpcgpu's collectives. Each of a module's ``BatchNorm1d/2d/3d`` is replaced by a
:class:`SyncBatchNorm` holding the same parameter and buffer tensors under the same names (the trainer's flat
buffer, checkpoints and results files see no difference). In training its forward pass normalizes with the mean
and variance of the data-parallel ranks' local batches together: one Allreduce of ``[sum, sum of squares,
count]`` per layer; its backward pass one Allreduce of ``[sum dy, sum dy * xhat]``. The weight's and bias's
gradients stay this rank's sums (the trainer's reducer sums them over the ranks, as DDP does for
``torch.nn.SyncBatchNorm``). Evaluation and prediction use the running statistics and communicate nothing. The
module knows nothing of MPI: it is handed ``allreduce``.
"""

from __future__ import annotations

__all__ = ["convert", "sync_batchnorm"]


def _xp_view(t):
    """A NumPy (host) or CuPy (GPU) view of the contiguous tensor ``t``: what hpcgpu's collectives take."""
    if t.device.type == "cpu":
        return t.numpy()
    import cupy

    return cupy.from_dlpack(t)


def _function(torch):
    """The autograd Function of a synchronized batch normalization (made once PyTorch is imported)."""

    class _Sync(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight, bias, bn):
            dims = [0, *range(2, x.dim())]  # every axis but the channels'
            xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
            sums = torch.cat([xf.sum(dims), (xf * xf).sum(dims),
                              xf.new_full((1,), float(x.numel() // x.shape[1]))])
            bn.allreduce(_xp_view(sums))
            C = x.shape[1]
            n = sums[-1]
            mean = sums[:C] / n
            var = (sums[C : 2 * C] / n - mean * mean).clamp_min(0)  # biased, as batch normalization divides
            invstd = torch.rsqrt(var + bn.eps)
            shape = [1, C] + [1] * (x.dim() - 2)
            xhat = (xf - mean.view(shape)) * invstd.view(shape)
            bn.update_running(mean, var, n)
            w = weight if weight is not None else xf.new_ones(C)
            b = bias if bias is not None else xf.new_zeros(C)
            ctx.save_for_backward(xhat, w, invstd)
            ctx.bn, ctx.n, ctx.has = bn, n, (weight is not None, bias is not None)
            return (xhat * w.view(shape) + b.view(shape)).to(x.dtype)

        @staticmethod
        def backward(ctx, dy):
            xhat, w, invstd = ctx.saved_tensors
            dims = [0, *range(2, xhat.dim())]
            C = xhat.shape[1]
            shape = [1, C] + [1] * (xhat.dim() - 2)
            dyf = dy.to(xhat.dtype)
            local = torch.cat([dyf.sum(dims), (dyf * xhat).sum(dims)])
            grad_w = local[C:].clone() if ctx.has[0] else None  # this rank's sums: the reducer adds the ranks'
            grad_b = local[:C].clone() if ctx.has[1] else None
            ctx.bn.allreduce(_xp_view(local))
            mean_dy, mean_dy_xhat = local[:C] / ctx.n, local[C:] / ctx.n
            dx = (dyf - mean_dy.view(shape) - xhat * mean_dy_xhat.view(shape)) * (w * invstd).view(shape)
            return dx.to(dy.dtype), grad_w, grad_b, None

    return _Sync


def _make_class(torch):
    """:class:`SyncBatchNorm`'s class (made once PyTorch is imported)."""
    base = torch.nn.modules.batchnorm._BatchNorm
    sync = _function(torch)

    class SyncBatchNorm(base):
        """A BatchNorm whose training statistics are the data-parallel ranks' global batch's.

        Made by :func:`convert` from a ``BatchNormNd``, sharing its parameters and buffers. Collective in
        training: every data-parallel rank runs it in the same order (the trainer's step does).
        """

        def __init__(self, bn, allreduce):
            torch.nn.Module.__init__(self)
            self.num_features, self.eps, self.momentum = bn.num_features, bn.eps, bn.momentum
            self.affine, self.track_running_stats = bn.affine, bn.track_running_stats
            self.weight, self.bias = bn.weight, bn.bias  # the same Parameters: their names stay
            for name in ("running_mean", "running_var", "num_batches_tracked"):
                self.register_buffer(name, getattr(bn, name, None))
            self.training = bn.training
            self.allreduce, self._dims = allreduce, bn._check_input_dim

        def _check_input_dim(self, x):
            self._dims(x)

        def update_running(self, mean, var, n) -> None:
            """The running statistics as ``torch.nn.BatchNorm`` updates them (the unbiased variance)."""
            if not self.track_running_stats:
                return
            with torch.no_grad():
                self.num_batches_tracked.add_(1)
                m = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
                unbiased = var * (n / (n - 1).clamp_min(1))
                self.running_mean.mul_(1 - m).add_(mean.to(self.running_mean.dtype), alpha=m)
                self.running_var.mul_(1 - m).add_(unbiased.to(self.running_var.dtype), alpha=m)

        def forward(self, x):
            self._check_input_dim(x)
            if not self.training:  # evaluation communicates nothing: the running statistics (or the rows' own)
                return torch.nn.functional.batch_norm(x, self.running_mean, self.running_var, self.weight,
                                                      self.bias, self.running_mean is None, 0.0, self.eps)
            return sync.apply(x, self.weight, self.bias, self)

    return SyncBatchNorm


_CLASS = None


def convert(module, allreduce) -> int:
    """Replace each ``BatchNorm1d/2d/3d`` inside ``module`` by a :class:`SyncBatchNorm`, in place. Not collective.

    PyTorch's ``SyncBatchNorm.convert_sync_batchnorm``, with hpcgpu's collective: the new module holds the old
    one's parameter and buffer tensors under the same names, and its mode.

    Parameters
    ----------
    module : torch.nn.Module
    allreduce : callable
        ``allreduce(buf)`` sums the host (NumPy) or device (CuPy) array ``buf`` in place over the data-parallel
        ranks (collective over them).

    Returns
    -------
    int
        The number of layers replaced (0: the module has no BatchNorm).
    """
    global _CLASS
    import torch

    if _CLASS is None:
        _CLASS = _make_class(torch)
    kinds = (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d, torch.nn.BatchNorm3d)
    count = 0
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, kinds) and not isinstance(child, _CLASS):
                setattr(parent, name, _CLASS(child, allreduce))
                count += 1
    return count


def sync_batchnorm(model, allreduce) -> int:
    """The trainer's ``sync_batchnorm=True``: synchronize the BatchNorm layers of an :class:`hpcgpu.nn.Torch`.

    Not collective. Other models have nothing to synchronize: the built-in layers (:mod:`hpcgpu.nn`) have no
    BatchNorm, :class:`hpcgpu.nn.Jax` and :class:`hpcgpu.nn.Keras` carry no statistics across steps.

    Parameters
    ----------
    model : TrainModel or Model
        The trainer's model (a :class:`hpcgpu.nn.FlatModel` around the user's, or the built-in network).
    allreduce : callable
        As for :func:`convert`.

    Returns
    -------
    int
        The number of BatchNorm layers synchronized.
    """
    from ._autograd import Torch

    inner = getattr(model, "model", model)
    return convert(inner.module, allreduce) if isinstance(inner, Torch) else 0
