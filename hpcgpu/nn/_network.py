"""A stack of Dense layers and a loss, run on flat buffers: the trainer's engine for built-in models.

Every weight and bias is a view into ``params``; every gradient a view into
``grad``. A data-parallel step therefore reduces all gradients with one
Allreduce of one buffer, and the optimizer updates all parameters with a few
vector operations. Written in ``xp``: the same code runs on NumPy and CuPy.

:class:`Network` runs a :class:`hpcgpu.nn.Sequential` of :class:`hpcgpu.nn.Dense`
layers with the semantics of their own forward and backward passes, and
adds what a fast step needs: on a GPU a layer's bias and ReLU are one
kernel, and the softmax cross-entropy kernel adds the last bias; GEMMs go
through :func:`hpcgpu._gemm.gemm` (capturable in a CUDA graph) on their
planned host threads; layers split over a tensor-parallel group; 16-bit
GEMMs for mixed precision. :class:`MLP` is the ReLU network with softmax
cross-entropy of the command line.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from types import ModuleType

import numpy as np

from .. import _blas, _gemm
from ..errors import agreed
from .._kernels import kernels as _fused
from ._flat import FlatParams, views
from ._capabilities import BUILT_IN
from ._layers import Dense, Sequential, _whole, activation_backward, activation_forward, dropout_keep, uniform_block
from ._losses import Loss, SoftmaxCrossEntropy

__all__ = ["Network", "MLP", "relu_stack", "layer_plan", "local_layout"]


def layer_plan(sizes, tensor: int = 1, rank: int = 0) -> list[dict]:
    """Each layer's slice on tensor-parallel rank ``rank`` of ``tensor`` (Megatron-LM's pattern). Not collective.

    With ``tensor > 1`` the layers pair up, ``(0, 1), (2, 3), ...``: the first
    of a pair is column-parallel (its output features split, with its bias),
    the second row-parallel (its input features split, its output summed
    over the tensor group, its bias whole); a last unpaired layer (the
    classifier of an odd number of layers) is whole on every rank. Splits
    are ``block_range``: a width that does not divide by ``tensor`` splits
    unevenly, with nothing lost. With ``tensor == 1`` every layer is whole.

    Parameters
    ----------
    sizes : sequence of int
        ``[D, h_1, ..., C]``.
    tensor : int
        T, the tensor-parallel degree.
    rank : int
        This rank in the tensor group, ``0 <= rank < T``.

    Returns
    -------
    list of dict
        Per layer: ``kind`` (``"col"``, ``"row"`` or ``"full"``), ``rows``
        and ``cols`` (the ``[lo, hi)`` of the global weight ``(in, out)``
        held here), ``bias`` (the bias's ``[lo, hi)``), ``start`` (offset of
        the global weight in the global flat parameters: weight row-major,
        then bias, layer by layer).

    References
    ----------
    M. Shoeybi et al., "Megatron-LM", arXiv:1909.08053, 2019, section 3.
    """
    from .._partition import block_range

    if isinstance(sizes, (str, bytes)) or not hasattr(sizes, "__iter__") or not all(map(_whole, sizes)):
        raise agreed(TypeError(f"layer sizes must be a sequence of integers [D, h_1, ..., C], got {sizes!r}"))
    sizes = [int(s) for s in sizes]
    L = len(sizes) - 1
    plan, start = [], 0
    for i, (a, b) in enumerate(itertools.pairwise(sizes)):
        kind = "full"
        if tensor > 1 and i % 2 == 0 and i + 1 < L:
            kind = "col"
        elif tensor > 1 and i % 2 == 1:
            kind = "row"
        rows, cols = (0, a), (0, b)
        if kind == "col":
            cols = block_range(b, tensor, rank)
        elif kind == "row":
            rows = block_range(a, tensor, rank)
        plan.append(dict(kind=kind, rows=rows, cols=cols, bias=cols, start=start, shape=(a, b)))
        start += a * b + b
    return plan


def _slices(i: int, lay: dict) -> tuple:
    """Layer ``i``'s weight and bias names, each with the index of a tensor rank's slice in the whole."""
    return ((f"fc{i}.weight", (slice(*lay["rows"]), slice(*lay["cols"]))), (f"fc{i}.bias", slice(*lay["bias"])))


def local_layout(sizes, tensor: int = 1, rank: int = 0) -> tuple[list, int]:
    """The order and size of tensor rank ``rank``'s flat parameters. Not collective.

    With ``tensor == 1``: layer by layer, weight then bias (the global
    layout). With ``tensor > 1``: first the parameters every rank of the
    tensor group holds whole (the row-parallel layers' biases, the unpaired
    classifier), in layer order, then this rank's slices, then zeros up to
    the largest rank's length: every rank of a tensor group has a buffer of
    the same length with the whole parameters at the same offsets, so its
    data group sums them in the same order as every other's, and they stay
    bitwise the same on the whole group (uneven splits would otherwise give
    the ranks buffers of different lengths, reduced by different schedules).

    Parameters
    ----------
    sizes : sequence of int
        ``[D, h_1, ..., C]``.
    tensor, rank : int
        As in ``layer_plan``.

    Returns
    -------
    (list of (str, tuple), int)
        ``(name, local shape)`` in buffer order, and the buffer's length.
    """
    def entries(t):
        whole, split = [], []
        for i, lay in enumerate(layer_plan(sizes, tensor, t)):
            (r0, r1), (c0, c1), (b0, b1) = lay["rows"], lay["cols"], lay["bias"]
            w, b = (f"fc{i}.weight", (r1 - r0, c1 - c0)), (f"fc{i}.bias", (b1 - b0,))
            if tensor == 1:
                whole += [w, b]
            elif lay["kind"] == "full":
                whole += [w, b]
            elif lay["kind"] == "row":
                whole.append(b)
                split.append(w)
            else:
                split += [w, b]
        return whole, split

    whole, split = entries(rank)
    size = sum(math.prod(s) for _, s in whole + split)
    if tensor > 1:
        size = sum(math.prod(s) for _, s in whole) + max(
            sum(math.prod(s) for _, s in entries(t)[1]) for t in range(tensor))
    return whole + split, size


class Network(FlatParams):
    """A :class:`~hpcgpu.nn.Sequential` of Dense layers and a loss, on flat parameter and gradient buffers.

    Not collective, except through ``tensor_allreduce`` with tensor
    parallelism. The model contract of the trainer (see
    :class:`hpcgpu.nn.Model`) in its fast form: the gradient of the SUM of
    per-sample losses is written into :attr:`grad`, the loss sum and the
    metric sum into :attr:`stats`.

    Parameters
    ----------
    net : hpcgpu.nn.Sequential
        Dense layers only (each with its activation: ReLU, tanh, GELU or none).
    loss : hpcgpu.nn.Loss
        Softmax cross-entropy, mean squared error or Huber.
    xp : module
        ``numpy`` or ``cupy``; arrays are allocated with it.
    dtype : str or numpy.dtype
        ``float32`` or ``float64``.
    seed : int
        Initial weights: He-uniform (bound ``sqrt(6 / fan_in)``), biases 0,
        drawn on the host from a counter-based Philox stream per layer
        (:func:`uniform_block`), so every rank, device and tensor split gets
        the same values.
    grad : xp.ndarray, shape (n_params,), optional
        Where :meth:`loss_and_grad` writes the gradient: a view the caller
        owns (the trainer's ``hpcgpu.train.reducer.GradientReducer``
        buffer); allocated when omitted.
    stats : xp.ndarray, shape (2,), optional
        Where :meth:`loss_and_grad` writes the loss sum and the metric sum
        (the loss's ``stats``); allocated when omitted.
    compute_dtype : numpy.dtype, optional
        float16 or bfloat16 for mixed precision (``hpcgpu.train.precision``):
        the GEMMs multiply 16-bit copies of the weights (refreshed from
        :attr:`params` at each :meth:`loss_and_grad` that does not
        accumulate, and each :meth:`evaluate_sums`) with 16-bit activations,
        accumulating in float32; bias, activations and the loss stay in
        ``dtype`` (float32). ``None``: everything in ``dtype``.
    tensor : (int, int)
        ``(T, t)``: this model is tensor rank ``t``'s slice of a model split
        over T ranks (``layer_plan``); ``(1, 0)``: the whole model. Then
        :attr:`params`, :attr:`grad` and :attr:`shapes` are the slice's, and
        :attr:`n_global` the unsplit model's size.
    tensor_allreduce : callable, optional
        ``f(buf)`` sums ``buf`` (an ``xp`` array) in place over the tensor
        group: required with ``T > 1`` (the trainer passes
        :func:`hpcgpu.comm.Allreduce` on its tensor communicator, so the
        forward and backward passes are collective over it).
    params : xp.ndarray, shape (n_params,), optional
        Where the parameters live (ZeRO keeps them in a padded buffer);
        allocated when omitted.

    Attributes
    ----------
    params : xp.ndarray, shape (n_params,)
        All parameters, layer by layer: ``fc{i}.weight`` of shape
        ``(sizes[i], sizes[i+1])`` (input-major, so a layer is ``x @ W + b``),
        then ``fc{i}.bias`` of shape ``(sizes[i+1],)``.
    grad : xp.ndarray, shape (n_params,)
        Gradient of the SUM of per-sample losses of the last
        :meth:`loss_and_grad`, laid out like ``params``.
    stats : xp.ndarray, shape (2,)
        The loss sum and the metric sum of the last :meth:`loss_and_grad`,
        of the model's dtype.
    sizes : list of int
        ``[D, h_1, ..., k]``.
    activations : list
        Each layer's activation.
    gemm_threads : dict of str to int, or None
        Host BLAS threads for each GEMM of :meth:`loss_and_grad`, by the keys
        of :meth:`gemm_shapes` (see ``hpcgpu.train.gemm_threads.plan_gemm_threads``);
        ``None`` (the default): every GEMM on the rank's BLAS threads.
        Ignored on a GPU.

    Raises
    ------
    ValueError
        A layer that is not Dense; buffers of the wrong shape or dtype;
        mixed precision with other than float32 weights; tensor parallelism
        without ``tensor_allreduce``.

    References
    ----------
    K. He et al., "Delving Deep into Rectifiers", ICCV 2015 (initialization).
    """

    def __init__(self, net: Sequential, loss: Loss, xp: ModuleType = np, dtype="float32", seed: int = 0, grad=None,
                 stats=None, compute_dtype=None, tensor: tuple = (1, 0), tensor_allreduce=None, params=None):
        if net.sizes is None:
            raise ValueError(f"the trainer runs Dense layers with their activations; {net} has other layers")
        self.net, self.loss = net, loss
        sizes = net.sizes
        self.sizes, self.xp, self.dtype = sizes, xp, np.dtype(dtype)
        self.activations = list(net.activations)
        self.dropouts = list(net.dropouts)
        if any(self.dropouts):  # the masks change every step: a captured graph would replay one
            self.capabilities = dataclasses.replace(BUILT_IN, cuda_graphs=False)
        self._where = (0, 0)  # (step, first row): where the next training micro-batch sits (randomness)
        self._dropped = {}  # layer -> (multiplier, output before dropout) of the last training forward pass
        self.tensor = (int(tensor[0]), int(tensor[1]))
        if self.tensor[0] > 1 and tensor_allreduce is None:
            raise ValueError("a tensor-parallel model needs tensor_allreduce")
        self._tp_reduce = tensor_allreduce
        self.plan = layer_plan(sizes, *self.tensor)
        self.shapes, self.n_params = local_layout(sizes, *self.tensor)  # padded with zeros at T > 1
        self.global_shapes, self.n_global = local_layout(sizes)
        self._bind(grad, stats, params)
        self.gemm_threads: dict[str, int] | None = None
        self.compute_dtype = None if compute_dtype is None else _gemm.as_dtype(compute_dtype)
        if self.compute_dtype is not None:
            if self.dtype != np.float32 or not _gemm.is_half(self.compute_dtype):
                raise ValueError(f"mixed precision is float32 weights with float16 or bfloat16 GEMMs, "
                                 f"not {self.dtype} with {self.compute_dtype}")
            self._params16 = xp.zeros(self.n_params, dtype=self.compute_dtype)
            self._p16 = self._views(self._params16)
        self._part = None  # a micro-batch's loss sum and metric sum, before they are added
        self._fused = _fused(xp)  # one kernel where CuPy's form takes several; None on NumPy
        # The loss kernel adds the last layer's bias (softmax cross-entropy on a GPU): one launch fewer.
        self._bias_in_loss = self.activations[-1] is None and loss.takes_bias(xp)
        self._shift = self._std = None  # the inputs' standardization (a leading Standardize), once known
        self._take_standardization()
        self.reset(seed)

    @staticmethod
    def layout(sizes, tensor: int = 1, rank: int = 0) -> tuple:
        """``(n_params, layer ranges)`` of tensor rank ``rank``'s slice of a network of ``sizes``. Not collective.

        Parameters
        ----------
        sizes : sequence of int
            ``[D, h_1, ..., k]``.
        tensor, rank : int
            As in ``layer_plan``.

        Returns
        -------
        (int, list of (int, int) or None)
            The flat buffer's length (:func:`local_layout`), and each
            layer's ``[lo, hi)`` in it (:meth:`ranges_of`).
        """
        return local_layout(sizes, tensor, rank)[1], Network.ranges_of(sizes, tensor, rank)

    capabilities = BUILT_IN
    """Everything (:class:`hpcgpu.nn.Capabilities`): tensor parallelism, mixed precision, CUDA graphs,
    a GEMM thread plan; the task is the loss's."""

    @property
    def task(self) -> str:
        """``"classification"`` or ``"regression"``: the loss's."""
        return self.loss.task

    @property
    def n_inputs(self) -> int:
        """The features the first layer takes, ``sizes[0]``."""
        return self.sizes[0]

    @property
    def n_outputs(self) -> int:
        """The outputs of the last layer, ``sizes[-1]``."""
        return self.sizes[-1]

    @property
    def num_classes(self) -> int | None:
        """Classification: ``sizes[-1]`` (labels must be below it); None for regression."""
        return self.sizes[-1] if self.task == "classification" else None

    @property
    def loss_name(self) -> str:
        """The loss's name (``cross-entropy``, ``mse``, ``huber``)."""
        return self.loss.name

    @property
    def hidden(self) -> tuple:
        """The hidden widths, ``sizes[1:-1]``."""
        return tuple(self.sizes[1:-1])

    def describe(self) -> str:
        """``"model [64, 32, 10] (2410 parameters), loss cross-entropy"`` (and this rank's share when split)."""
        share = f", {self.n_params} on rank 0" if self.n_params != self.n_global else ""
        return f"model {self.sizes} ({self.n_global} parameters{share}), loss {self.loss.name}"

    def flops_per_sample(self) -> float:
        """Floating-point operations of one sample's forward and backward pass (analytic). Not collective.

        A layer of ``a`` inputs and ``b`` outputs costs ``2ab`` forward, ``2ab`` for its weight gradient and,
        past the first layer, ``2ab`` for its input gradient: ``6 sum(ab) - 2 a_0 b_0`` in all (bias,
        activation and loss terms left out: O(sum b)).

        Returns
        -------
        float
        """
        pairs = list(itertools.pairwise(self.sizes))
        return float(6 * sum(a * b for a, b in pairs) - 2 * pairs[0][0] * pairs[0][1])

    def spec(self) -> dict:
        """The model as JSON-able dicts: ``{"net": Sequential spec, "loss": loss spec}``. Not collective."""
        return {"net": self.net.spec(), "loss": self.loss.spec()}

    @property
    def n_layers(self) -> int:
        """Number of linear layers, ``len(sizes) - 1``."""
        return len(self.sizes) - 1

    def reset(self, seed: int) -> None:
        """Draw new initial parameters from ``seed`` (not collective).

        Weights He-uniform (bound ``sqrt(6 / fan_in)``), biases 0, drawn on
        the host and copied into :attr:`params` in place (views and the
        optimizer stay valid); :attr:`grad` is left as it is. Layer ``i``'s
        weight element ``(r, c)`` is draw ``r * out + c`` of the counter-based
        stream ``(seed, i)`` (:func:`uniform_block`): a tensor-parallel rank
        draws only its slice, and every split has the unsplit model's values.

        Parameters
        ----------
        seed : int
            The same values on every rank and device, at any tensor degree.
        """
        self.seed = int(seed)  # dropout's masks are keyed by it too
        host = np.zeros(self.n_params, dtype=self.dtype)
        views = self._views(host)
        for i, lay in enumerate(self.plan):
            views[f"fc{i}.weight"][...] = uniform_block(seed, i, lay["shape"], lay["rows"], lay["cols"],
                                                        math.sqrt(6.0 / lay["shape"][0]))
        self.params[...] = self.xp.asarray(host)

    def local_of(self, full: np.ndarray) -> np.ndarray:
        """This rank's slice of the global flat parameters ``full`` (n_global,): (n_params,). Not collective.

        Parameters
        ----------
        full : numpy.ndarray, shape (n_global,)
            Laid out as the unsplit model's :attr:`params`.

        Returns
        -------
        numpy.ndarray, shape (n_params,)
        """
        out = np.zeros(self.n_params, dtype=full.dtype)  # the padding (tensor parallelism) stays 0
        mine, whole = self._views(out), self.global_views(full)
        for i, lay in enumerate(self.plan):
            for name, where in _slices(i, lay):
                mine[name][...] = whole[name][where]
        return out

    def global_of(self, pieces) -> np.ndarray:
        """The global flat parameters from every tensor rank's local flat ``pieces`` (in tensor-rank order).

        Not collective (the caller gathers the pieces).

        Parameters
        ----------
        pieces : sequence of numpy.ndarray
            ``T`` arrays, tensor rank ``t``'s :attr:`params` (or anything
            laid out alike: the momentum).

        Returns
        -------
        numpy.ndarray, shape (n_global,)
        """
        T = self.tensor[0]
        full = np.empty(self.n_global, dtype=pieces[0].dtype)
        whole = self.global_views(full)
        for t, piece in enumerate(pieces):
            theirs = views(piece, local_layout(self.sizes, T, t)[0])
            for i, lay in enumerate(layer_plan(self.sizes, T, t)):
                for name, where in _slices(i, lay):
                    whole[name][where] = theirs[name]
        return full

    def layer_ranges(self) -> list[tuple[int, int]]:
        """Each layer's ``[lo, hi)`` in :attr:`params` and :attr:`grad` (weight, then bias), in forward order.

        Not collective.
        """
        return self.ranges_of(self.sizes, *self.tensor)

    @staticmethod
    def ranges_of(sizes, tensor: int = 1, rank: int = 0) -> list[tuple[int, int]]:
        """:meth:`layer_ranges` of a model of layer sizes ``sizes`` on tensor rank ``rank`` of ``tensor``.

        Not collective.

        Parameters
        ----------
        sizes : sequence of int
            ``[D, h_1, ..., C]``.
        tensor, rank : int
            As in ``layer_plan``.

        Returns
        -------
        list of (int, int) or None
            None with ``tensor > 1``: a rank's buffer is not layer by layer
            there (:func:`local_layout`).
        """
        if tensor > 1:  # the whole parameters come first (local_layout): layers are not contiguous
            return None
        return [(lay["start"], lay["start"] + lay["shape"][0] * lay["shape"][1] + lay["shape"][1])
                for lay in layer_plan(sizes)]

    def gemm_shapes(self, n: int) -> list[tuple[str, tuple[int, int, int], bool, bool]]:
        """The GEMMs of one :meth:`loss_and_grad` over ``n`` samples, in the order it runs them.

        Not collective. Layer ``i`` has ``fc{i}.forward`` (``a @ W``),
        ``fc{i}.wgrad`` (``a.T @ dz``, the weight gradient) and, except the
        first, ``fc{i}.dgrad`` (``dz @ W.T``, the input gradient).

        Parameters
        ----------
        n : int
            Samples of the local batch.

        Returns
        -------
        list of (key, (m, k, n), trans_a, trans_b)
            ``C (m x n) = op(A) (m x k) @ op(B) (k x n)``; ``trans_a``:
            ``A`` is stored ``(k, m)`` and used transposed, likewise ``trans_b``.
        """
        dims = [dict(self.shapes)[f"fc{i}.weight"] for i in range(self.n_layers)]  # this rank's slices
        out = []
        for i, (d_in, d_out) in enumerate(dims):
            out.append((f"fc{i}.forward", (n, d_in, d_out), False, False))
        for i in reversed(range(self.n_layers)):
            d_in, d_out = dims[i]
            out.append((f"fc{i}.wgrad", (d_in, n, d_out), True, False))
            if i > 0:
                out.append((f"fc{i}.dgrad", (n, d_out, d_in), False, True))
        return out

    def _threads(self, key: str) -> None:
        n = self.gemm_threads.get(key)
        if n is not None and n != self._now:
            _blas.set_threads(n)
            self._now = n

    def forward(self, X):
        """The network's outputs for a batch ``X``: (n, D) -> (n, k). Not collective.

        Parameters
        ----------
        X : xp.ndarray, shape (n, D)
            Features, of the model's dtype.

        Returns
        -------
        xp.ndarray, shape (n, k)
            The last layer's outputs (logits, before the softmax, for
            classification), a new array.
        """
        if self.compute_dtype is not None:
            self._refresh16()
        z = self._forward(X)
        if self._bias_in_loss:
            z += self._p[f"fc{self.n_layers - 1}.bias"]
        return z

    def buffers(self) -> dict:
        """Nothing: the built-in layers hold no state but their parameters. Not collective.

        Returns
        -------
        dict
            Empty.
        """
        return {}

    def randomness(self, step: int, micro_batch: int, rank: int, first: int = 0) -> None:
        """Say where the next training micro-batch sits, for :class:`~hpcgpu.nn.Dropout`'s masks. Not collective.

        A sample's mask is a function of ``(seed, step, its position in the step's global batch, layer,
        unit)`` (:func:`~hpcgpu.nn._layers.dropout_keep`): the same at any number of data-parallel ranks.

        Parameters
        ----------
        step, micro_batch, rank : int
            The global step, the micro-batch in it and the data-parallel rank about to compute.
        first : int
            The position in the step's global batch of the micro-batch's first local row (rows follow on).
        """
        self._where = (int(step), int(first))

    def predict(self, X, chunk: int = 8192):
        """:meth:`forward` in chunks of ``chunk`` rows (bounded temporaries). Not collective.

        Parameters
        ----------
        X : xp.ndarray, shape (n, D)
        chunk : int

        Returns
        -------
        xp.ndarray, shape (n, k)
        """
        if X.shape[0] <= chunk:
            return self.forward(X)
        return self.xp.concatenate([self.forward(X[s : s + chunk]) for s in range(0, X.shape[0], chunk)])

    def _take_standardization(self) -> None:
        """The leading Standardize's statistics as arrays of the model's dtype on its device (when known)."""
        std = getattr(self.net, "standardize", None)
        if std is not None and std.adapted:
            self._shift = self.xp.asarray(std.mean, dtype=self.dtype)
            self._std = self.xp.asarray(std.std, dtype=self.dtype)

    def set_sample_shape(self, shape: tuple) -> None:
        """Accept samples of ``shape`` where the first layer is :class:`~hpcgpu.nn.Flatten`. Not collective.

        Parameters
        ----------
        shape : tuple of int
            One sample's shape (``X.shape[1:]``), of more than one axis.

        Raises
        ------
        ValueError
            The model takes rows of features (no Flatten first).
        """
        if len(shape) > 1 and not getattr(self.net, "flatten", False):
            raise ValueError(f"the model takes rows of features (n, D), got samples of shape {tuple(shape)}: put "
                             f"nn.Flatten() first (Keras's Flatten), or reshape the features to (n, "
                             f"{math.prod(shape)})")

    def adapt_inputs(self, X, comm) -> None:
        """A leading Standardize's statistics from the training rows, if it has none. Collective over ``comm``.

        Keras's ``Normalization.adapt``, over every rank's rows: the global mean of each feature, then the
        global standard deviation about it (two passes, float64 sums over ``comm``); a feature of zero deviation
        is only shifted (its deviation taken as 1). Nothing to do (and no communication) for a model without
        a Standardize or one whose statistics are known.

        Parameters
        ----------
        X : numpy.ndarray, shape (n_local, D)
            This rank's training rows.
        comm : mpi4py.MPI.Intracomm
            The data-parallel ranks, whose rows together are the training set.
        """
        std = getattr(self.net, "standardize", None)
        if std is None or std.adapted:
            return
        from mpi4py import MPI

        X = np.asarray(X, dtype=np.float64)
        n = comm.allreduce(X.shape[0], op=MPI.SUM)
        total = np.empty(X.shape[1])
        comm.Allreduce(X.sum(axis=0), total, op=MPI.SUM)
        mean = total / max(n, 1)
        comm.Allreduce(((X - mean) ** 2).sum(axis=0), total, op=MPI.SUM)
        dev = np.sqrt(total / max(n, 1))
        std.set(mean, np.where(dev > 0, dev, 1.0))
        self._take_standardization()

    def _forward(self, X, acts=None, pres=None, threads=None):
        """The last layer's output of ``X`` (without its bias where the loss adds it).

        Each layer's input is appended to ``acts`` (16-bit under mixed
        precision: the GEMMs' and the activations' operand in the backward
        pass), each GELU's input to ``pres`` (None for the others). A
        leading Standardize's ``(X - mean) / std`` comes first.
        """
        if self._shift is not None:
            X = (X - self._shift) / self._std
        mixed = self.compute_dtype is not None
        weights = self._p16 if mixed else self._p
        a, L = (X.astype(self.compute_dtype) if mixed else X), self.n_layers
        for i in range(L):
            if threads is not None:
                threads(f"fc{i}.forward")
            if acts is not None:
                acts.append(a)
            z = self._mm(a, weights[f"fc{i}.weight"])
            if self.plan[i]["kind"] == "row":  # partial products of the split input features: sum them
                self._tp_reduce(z)
            last = i == L - 1
            if not (last and self._bias_in_loss):
                pre = self._bias_act(z, i, keep=acts is not None)
                if pres is not None:
                    pres.append(pre)
            if acts is not None and self.dropouts[i]:
                z = self._dropout(z, i)
            a = z.astype(self.compute_dtype) if mixed and not last else z
        return z

    def _dropout(self, z, i: int):
        """Layer ``i``'s output ``z`` after its dropout (a new array); the mask and ``z`` kept for the backward pass."""
        xp, (step, first) = self.xp, self._where
        lo, hi = self.plan[i]["cols"] if self.plan[i]["kind"] == "col" else (0, z.shape[1])
        rows = xp.arange(first, first + z.shape[0], dtype=np.int64)
        keep = dropout_keep(xp, (self.seed, step, i), rows, (lo, hi, self.sizes[i + 1]), self.dropouts[i],
                            self.dtype)
        self._dropped[i] = (keep, z)
        return z * keep

    def _mm(self, a, b):
        """``a @ b``, a new array of the model's dtype.

        On a GPU, or from 16-bit operands, through :func:`hpcgpu._gemm.gemm`
        (capturable in a CUDA graph; float32 accumulation).
        """
        if self.xp is np and self.compute_dtype is None:
            return a @ b
        c = self.xp.empty((a.shape[0], b.shape[1]), dtype=self.dtype)
        _gemm.gemm(a, b, c)
        return c

    def step_buffers(self, n: int) -> tuple:
        """The arrays a step of ``n`` samples uses besides its inputs and the flat buffers (CUDA graphs' key).

        Not collective. Allocates nothing: empty before the first step of
        ``n`` samples (the CUDA graph of a step holds them: ``hpcgpu/train/cuda_graphs.py``).

        Parameters
        ----------
        n : int
            Local batch size.

        Returns
        -------
        tuple of xp.ndarray
        """
        scratch = getattr(self.loss, "scratch", None)
        lh = scratch(n) if scratch is not None else None
        return () if lh is None else (lh,)

    def _bias_act(self, z, i: int, keep: bool):
        """``z += b_i``, then layer ``i``'s activation, in place: one kernel for ReLU on a GPU.

        Returns a copy of the activation's input when ``keep`` and it is
        GELU (its backward pass reads it), else None.
        """
        act, b = self.activations[i], self._p[f"fc{i}.bias"]
        if act == "relu" and self._fused is not None:
            self._fused.bias_relu(b, z)
            return None
        z += b
        return activation_forward(act, z, keep_input=keep)

    def loss_and_grad(self, X, y, accumulate: bool = False, loss_scale: float = 1.0, on_layer=None) -> None:
        """Forward and backward pass over a local batch. Not collective.

        Parameters
        ----------
        X : xp.ndarray, shape (n, D), dtype of the model
        y : xp.ndarray, shape (n,) or (n, k)
            int64 labels in ``0..C-1`` (classification) or targets of the
            model's dtype (regression).
        accumulate : bool
            Add to :attr:`grad` and :attr:`stats` instead of overwriting
            them: a micro-batch of gradient accumulation (the weight
            gradients by the GEMM's ``beta = 1``, no gradient-sized
            temporary).
        loss_scale : float
            Multiplies the gradient (not :attr:`stats`): the dynamic loss
            scale of float16 mixed precision, applied to the loss gradient
            before the backward pass.
        on_layer : callable, optional
            Called as ``on_layer(i)`` as soon as layer ``i``'s gradient is
            complete, last layer first (a bucketed reduction posts its
            buckets from it: :meth:`hpcgpu.train.reducer.GradientReducer.ready`).

        Notes
        -----
        Fills :attr:`grad` with the gradient of the SUM over the ``n``
        samples of the loss (so that summing over ranks and dividing by the
        global batch gives the mean), and :attr:`stats` with the loss sum
        and the metric sum. With :attr:`gemm_threads`, each GEMM runs on its
        planned number of host BLAS threads, and the rank's number is
        restored on return.
        """
        if self.gemm_threads and self.xp is np:
            before = self._now = _blas.threads()
            try:
                self._loss_and_grad(X, y, self._threads, accumulate, loss_scale, on_layer)
            finally:
                if self._now != before:
                    _blas.set_threads(before)
        else:
            self._loss_and_grad(X, y, lambda key: None, accumulate, loss_scale, on_layer)

    def _loss_and_grad(self, X, y, threads, accumulate: bool, loss_scale: float, on_layer) -> None:
        xp, L = self.xp, self.n_layers
        if accumulate:
            if self._part is None:
                self._part = xp.zeros(2, dtype=self.dtype)
            part = self._part
        else:
            part = self.stats
            if self.compute_dtype is not None:
                self._refresh16()
        acts, pres = [], []
        z = self._forward(X, acts, pres, threads)
        last_act = self.activations[-1]
        out = z.copy() if last_act in ("relu", "tanh") else None  # the loss overwrites z with its gradient
        dz = self.loss.terms(z, y, part, bias=self._p[f"fc{L - 1}.bias"] if self._bias_in_loss else None)
        activation_backward(last_act, out, pres[-1] if last_act else None, dz)
        if accumulate:
            self.stats += part
        if loss_scale != 1:
            dz *= self.dtype.type(loss_scale)
        self._backward(acts, pres, dz, threads, accumulate, on_layer)

    def _backward(self, acts, pres, dz, threads, accumulate: bool, on_layer=None) -> None:
        """The gradient from the loss gradient ``dz`` (n, k), every layer's input ``acts`` and GELU inputs ``pres``."""
        xp, fused = self.xp, self._fused
        mixed = self.compute_dtype is not None
        weights = self._p16 if mixed else self._p
        for i in reversed(range(self.n_layers)):
            a_in = acts[i]
            threads(f"fc{i}.wgrad")
            gw, gb = self._g[f"fc{i}.weight"], self._g[f"fc{i}.bias"]
            d = dz.astype(self.compute_dtype) if mixed else dz  # the GEMMs' operand; the bias gradient from dz
            if accumulate or mixed or xp is not np:
                _gemm.gemm(a_in.T, d, gw, beta=1.0 if accumulate else 0.0)
            else:
                xp.matmul(a_in.T, d, out=gw)
            if accumulate:
                gb += dz.sum(axis=0)
            else:
                dz.sum(axis=0, out=gb)
            if on_layer is not None:
                on_layer(i)
            if i == 0:
                break
            threads(f"fc{i}.dgrad")
            da = self._mm(d, weights[f"fc{i}.weight"].T)
            if self.plan[i]["kind"] == "col":  # each rank's part of the input gradient: sum them
                self._tp_reduce(da)
            act = self.activations[i - 1]  # of the layer whose output a_in is
            if self.dropouts[i - 1]:  # a_in is the output after dropout: its mask, then the output before it
                keep, a_in = self._dropped.pop(i - 1)
                da *= keep
            if act == "relu" and fused is not None and not mixed:  # a_in = max(z, 0): z > 0 <=> a_in > 0
                fused.relu_backward(a_in, da)
            else:
                out = a_in.astype(self.dtype) if mixed and act == "tanh" else a_in
                activation_backward(act, out, pres[i - 1], da)
            dz = da

    def _refresh16(self) -> None:
        """The 16-bit copy of the parameters, from the float32 master (one pass)."""
        self._params16[...] = self.params.astype(self.compute_dtype)

    def evaluate_sums(self, X, y, chunk: int = 8192):
        """Loss sum and metric sum over ``X`` (n, D), ``y``, in chunks.

        Not collective. Leaves :attr:`params` and :attr:`grad` unchanged.

        Parameters
        ----------
        X : xp.ndarray, shape (n, D)
            Features, of the model's dtype.
        y : xp.ndarray, shape (n,) or (n, k)
            Targets, as for :meth:`loss_and_grad`.
        chunk : int
            Rows per forward pass: bounds the temporary activations to
            ``chunk`` rows.

        Returns
        -------
        xp.ndarray, shape (2,), float64
            ``[loss_sum, metric_sum]`` over the ``n`` samples (the metric:
            correct predictions, or squared errors), ready for an Allreduce.
        """
        xp, L = self.xp, self.n_layers
        tot = xp.zeros(2, dtype=np.float64)
        slots = xp.zeros(2, dtype=self.dtype)
        if self.compute_dtype is not None:
            self._refresh16()
        bias = self._p[f"fc{L - 1}.bias"] if self._bias_in_loss else None
        for s in range(0, X.shape[0], chunk):
            self.loss.terms(self._forward(X[s : s + chunk]), y[s : s + chunk], slots, bias=bias)
            tot += slots
        return tot


class MLP(Network):
    """The command line's model: Dense layers with ReLU between them and softmax cross-entropy.

    ``MLP(sizes)`` is ``Network(Sequential(Dense(D, h_1, "relu"), ..., Dense(h_k, C)),
    SoftmaxCrossEntropy())``; the other parameters are :class:`Network`'s.

    Parameters
    ----------
    sizes : sequence of int
        ``[D, h_1, ..., h_k, C]``: input features, hidden widths, classes.
    xp, dtype, seed, grad, stats, compute_dtype, tensor, tensor_allreduce, params
        As for :class:`Network`.

    Raises
    ------
    ValueError
        Fewer than two sizes, or a size below 1; and :class:`Network`'s errors.
    """

    def __init__(self, sizes, xp: ModuleType = np, dtype="float32", seed: int = 0, grad=None, stats=None,
                 compute_dtype=None, tensor: tuple = (1, 0), tensor_allreduce=None, params=None):
        super().__init__(relu_stack(sizes), SoftmaxCrossEntropy(), xp, dtype, seed, grad, stats, compute_dtype,
                         tensor, tensor_allreduce, params)


def relu_stack(sizes) -> Sequential:
    """``Sequential(Dense(sizes[0], sizes[1], "relu"), ..., Dense(sizes[-2], sizes[-1]))``. Not collective.

    Parameters
    ----------
    sizes : sequence of int
        ``[D, h_1, ..., k]``, at least two, all positive.

    Returns
    -------
    hpcgpu.nn.Sequential

    Raises
    ------
    TypeError
        ``sizes`` is not a sequence of integers (every rank alike: an agreed error).
    ValueError
        Fewer than two sizes, or a size below 1 (likewise).
    """
    if isinstance(sizes, (str, bytes)) or not hasattr(sizes, "__iter__") or not all(map(_whole, sizes)):
        raise agreed(TypeError(f"layer sizes must be a sequence of integers [D, h_1, ..., C], got {sizes!r}"))
    sizes = [int(s) for s in sizes]
    if len(sizes) < 2 or min(sizes) < 1:
        raise agreed(ValueError(f"layer sizes must be at least [D, C], all positive, got {sizes}"))
    L = len(sizes) - 1
    return Sequential([Dense(a, b, "relu" if i < L - 1 else None)
                       for i, (a, b) in enumerate(itertools.pairwise(sizes))])
