"""A multilayer perceptron whose parameters live in one flat buffer.

Every weight and bias is a view into ``params``; every gradient a view into
``grad``. A data-parallel step therefore reduces all gradients with one
Allreduce of one buffer, and the optimizer updates all parameters with a few
vector operations. Written in ``xp``: the same code runs on NumPy and CuPy.
"""

from __future__ import annotations

import itertools
import math
from types import ModuleType

import numpy as np

from .. import _blas, _gemm
from ._kernels import kernels as _fused

__all__ = ["MLP", "layer_plan", "local_layout"]


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


def uniform_block(seed: int, stream: int, shape, rows, cols, bound: float) -> np.ndarray:
    """Block ``[rows, cols]`` of a ``shape`` matrix of U(-bound, bound) draws, made alone. Not collective.

    Element ``(r, c)`` is draw ``r * shape[1] + c`` of a Philox stream keyed
    by ``(seed, stream)`` (counter-based: a draw is a function of its index),
    so a rank that holds a slice of a layer draws only that slice, and any
    split gives the unsplit matrix's values.

    Parameters
    ----------
    seed, stream : int
    shape : (int, int)
    rows, cols : (int, int)
        ``[lo, hi)`` of the block.
    bound : float

    Returns
    -------
    numpy.ndarray, shape (rows[1] - rows[0], cols[1] - cols[0]), float64
    """
    def draws(first: int, count: int) -> np.ndarray:
        bg = np.random.Philox(key=((int(seed) % 2**64) << 64) | int(stream), counter=first // 4)
        if first % 4:
            bg.random_raw(first % 4)  # one 64-bit draw a double: skip to the first
        return np.random.Generator(bg).uniform(-bound, bound, count)

    (r0, r1), (c0, c1), n = rows, cols, shape[1]
    if c0 == 0 and c1 == n:
        return draws(r0 * n, (r1 - r0) * n).reshape(r1 - r0, n)
    out = np.empty((r1 - r0, c1 - c0))
    for k, r in enumerate(range(r0, r1)):
        out[k] = draws(r * n + c0, c1 - c0)
    return out


class MLP:
    """ReLU multilayer perceptron with a softmax cross-entropy loss.

    Parameters
    ----------
    sizes : sequence of int
        ``[D, h_1, ..., h_k, C]``: input features, hidden widths, classes.
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
        Where :meth:`loss_and_grad` writes the loss sum and the number of
        correct predictions; allocated when omitted.
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
    compute_dtype : numpy.dtype, optional
        float16 or bfloat16 for mixed precision (``hpcgpu.train.precision``):
        the GEMMs multiply 16-bit copies of the weights (refreshed from
        :attr:`params` at each :meth:`loss_and_grad` that does not
        accumulate, and each :meth:`evaluate`) with 16-bit activations,
        accumulating in float32; bias, ReLU and the loss stay in ``dtype``
        (float32). ``None``: everything in ``dtype``.

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
        The loss sum and the number of correct predictions of the last
        :meth:`loss_and_grad`, of the model's dtype.
    gemm_threads : dict of str to int, or None
        Host BLAS threads for each GEMM of :meth:`loss_and_grad`, by the keys
        of :meth:`gemm_shapes` (see ``hpcgpu.train.threads.plan_gemm_threads``);
        ``None`` (the default): every GEMM on the rank's BLAS threads.
        Ignored on a GPU.

    References
    ----------
    K. He et al., "Delving Deep into Rectifiers", ICCV 2015 (initialization).
    """

    def __init__(self, sizes, xp: ModuleType = np, dtype="float32", seed: int = 0, grad=None, stats=None,
                 compute_dtype=None, tensor: tuple = (1, 0), tensor_allreduce=None, params=None):
        sizes = [int(s) for s in sizes]
        if len(sizes) < 2 or min(sizes) < 1:
            raise ValueError(f"layer sizes must be at least [D, C], all positive, got {sizes}")
        self.sizes, self.xp, self.dtype = sizes, xp, np.dtype(dtype)
        self.tensor = (int(tensor[0]), int(tensor[1]))
        if self.tensor[0] > 1 and tensor_allreduce is None:
            raise ValueError("a tensor-parallel model needs tensor_allreduce")
        self._tp_reduce = tensor_allreduce
        self.plan = layer_plan(sizes, *self.tensor)
        self.shapes, self.n_params = local_layout(sizes, *self.tensor)  # padded with zeros at T > 1
        self.n_global = sum(a * b + b for a, b in itertools.pairwise(sizes))
        for name, view, n in (("grad", grad, self.n_params), ("stats", stats, 2), ("params", params, self.n_params)):
            if view is not None and (view.shape != (n,) or view.dtype != self.dtype):
                raise ValueError(f"{name} must be of shape ({n},) and dtype {self.dtype}, "
                                 f"got {view.shape} {view.dtype}")
        self.params = xp.zeros(self.n_params, dtype=self.dtype) if params is None else params
        self.grad = xp.zeros(self.n_params, dtype=self.dtype) if grad is None else grad
        self.stats = xp.zeros(2, dtype=self.dtype) if stats is None else stats
        self._p = self._views(self.params)
        self._g = self._views(self.grad)
        self.gemm_threads: dict[str, int] | None = None
        self.compute_dtype = None if compute_dtype is None else np.dtype(compute_dtype)
        if self.compute_dtype is not None:
            if self.dtype != np.float32 or self.compute_dtype not in _gemm.HALF:
                raise ValueError(f"mixed precision is float32 weights with float16 or bfloat16 GEMMs, "
                                 f"not {self.dtype} with {self.compute_dtype}")
            self._params16 = xp.zeros(self.n_params, dtype=self.compute_dtype)
            self._p16 = self._views(self._params16)
        self._part = None  # a micro-batch's loss sum and correct count, before they are added
        self._scratch: dict = {}  # per batch size: the loss kernel's (n, 2) per-row loss and hit
        self._fused = _fused(xp)  # one kernel where CuPy's form takes several; None on NumPy
        self.reset(seed)

    def _views(self, flat):
        out, off = {}, 0
        for name, shape in self.shapes:
            n = math.prod(shape)
            out[name] = flat[off : off + n].reshape(shape)
            off += n
        return out

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
        mine = self._views(out)
        for i, lay in enumerate(self.plan):
            a, b = lay["shape"]
            w = full[lay["start"] : lay["start"] + a * b].reshape(a, b)
            bias = full[lay["start"] + a * b : lay["start"] + a * b + b]
            mine[f"fc{i}.weight"][...] = w[slice(*lay["rows"]), slice(*lay["cols"])]
            mine[f"fc{i}.bias"][...] = bias[slice(*lay["bias"])]
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
        for t, piece in enumerate(pieces):
            views, off = {}, 0
            for name, shape in local_layout(self.sizes, T, t)[0]:
                views[name] = piece[off : off + math.prod(shape)].reshape(shape)
                off += math.prod(shape)
            for i, lay in enumerate(layer_plan(self.sizes, T, t)):
                a, b = lay["shape"]
                (r0, r1), (c0, c1), (b0, b1) = lay["rows"], lay["cols"], lay["bias"]
                w = full[lay["start"] : lay["start"] + a * b].reshape(a, b)
                w[r0:r1, c0:c1] = views[f"fc{i}.weight"]
                full[lay["start"] + a * b + b0 : lay["start"] + a * b + b1] = views[f"fc{i}.bias"]
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
        out, off = [], 0
        for a, b in itertools.pairwise(int(x) for x in sizes):
            out.append((off, off + a * b + b))
            off += a * b + b
        return out

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

    def named_parameters(self):
        """``[(name, view)]`` in a stable order; views into :attr:`params`."""
        return [(name, self._p[name]) for name, _ in self.shapes]

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
        """Logits of a batch. ``X``: (n, D) -> (n, C). Not collective.

        Parameters
        ----------
        X : xp.ndarray, shape (n, D)
            Features, of the model's dtype.

        Returns
        -------
        xp.ndarray, shape (n, C)
            Logits (before the softmax), a new array.
        """
        if self.compute_dtype is not None:
            self._refresh16()
        z = self._last_mixed(X, None) if self.compute_dtype is not None else self._last(X)
        if self._fused is not None:
            z += self._p[f"fc{self.n_layers - 1}.bias"]
        return z

    def _last(self, X, acts=None, threads=None):
        """The last layer's output of ``X``: without its bias on a GPU (the loss kernel adds it).

        The hidden activations are appended to ``acts`` when given.
        """
        a, L = X, self.n_layers
        for i in range(L):
            if threads is not None:
                threads(f"fc{i}.forward")
            z = self._mm(a, self._p[f"fc{i}.weight"])
            if self.plan[i]["kind"] == "row":  # partial products of the split input features: sum them
                self._tp_reduce(z)
            if i < L - 1 or self._fused is None:
                self._bias_relu(z, i, i < L - 1)
            if acts is not None and i < L - 1:
                acts.append(z)
            a = z
        return a

    def _mm(self, a, b):
        """``a @ b``, a new array; on a GPU through :func:`hpcgpu._gemm.gemm` (capturable in a CUDA graph)."""
        if self.xp is np:
            return a @ b
        c = self.xp.empty((a.shape[0], b.shape[1]), dtype=self.dtype)
        _gemm.gemm(a, b, c)
        return c

    def step_buffers(self, n: int) -> tuple:
        """The arrays a step of ``n`` samples uses besides its inputs and the flat buffers (CUDA graphs' key).

        Not collective. Allocates nothing: empty before the first step of
        ``n`` samples (the CUDA graph of a step holds them: ``hpcgpu/train/graphs.py``).

        Parameters
        ----------
        n : int
            Local batch size.

        Returns
        -------
        tuple of xp.ndarray
        """
        lh = self._scratch.get(n)
        return () if lh is None else (lh,)

    def _bias_relu(self, z, i: int, relu: bool) -> None:
        """``z += b_i``, then ``z = max(z, 0)`` for a hidden layer: one kernel on a GPU."""
        if relu and self._fused is not None:
            self._fused.bias_relu(self._p[f"fc{i}.bias"], z)
            return
        z += self._p[f"fc{i}.bias"]
        if relu:
            self.xp.maximum(z, 0, out=z)

    def _loss_terms(self, z, y, slots):
        """Softmax cross-entropy of the last layer's output ``z`` (n, C); returns its gradient, in ``z``.

        The loss sum and correct count go to ``slots`` (2,). On a GPU ``z`` is
        before the last bias, which the fused kernel adds: one launch and one
        sum for the whole of it.
        """
        xp, fused = self.xp, self._fused
        n = z.shape[0]
        tiny = self.dtype.type(xp.finfo(self.dtype).tiny)
        if fused is not None:
            lh = self._scratch.get(n)
            if lh is None:
                if len(self._scratch) > 8:  # evaluation's last chunks: keep a few sizes only
                    self._scratch.clear()
                lh = self._scratch[n] = xp.empty((n, 2), dtype=self.dtype)
            fused.softmax_xent(self._p[f"fc{self.n_layers - 1}.bias"], y, z.shape[1], tiny, z, lh[:, 0], lh[:, 1])
            lh.sum(axis=0, out=slots)
            return z
        rows = xp.arange(n)
        slots[1] = (z.argmax(axis=1) == y).sum()
        z -= z.max(axis=1, keepdims=True)
        xp.exp(z, out=z)
        z /= z.sum(axis=1, keepdims=True)
        # loss_i = log(sum_j exp(z_j)) - z_y, with z shifted; p_y = exp(z_y) / s
        slots[0] = -xp.log(xp.maximum(z[rows, y], tiny)).sum()
        z[rows, y] -= 1
        return z

    def loss_and_grad(self, X, y, accumulate: bool = False, loss_scale: float = 1.0, on_layer=None) -> None:
        """Forward and backward pass over a local batch. Not collective.

        Parameters
        ----------
        X : xp.ndarray, shape (n, D), dtype of the model
        y : xp.ndarray, shape (n,), int64 labels in ``0..C-1``
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
        samples of the cross-entropy loss (so that summing over ranks and
        dividing by the global batch gives the mean), and :attr:`stats` with
        the loss sum and the number of correct predictions.
        With :attr:`gemm_threads`, each GEMM runs on its planned number of
        host BLAS threads, and the rank's number is restored on return.
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
        xp = self.xp
        mixed = self.compute_dtype is not None
        acts = []
        if accumulate:
            if self._part is None:
                self._part = xp.zeros(2, dtype=self.dtype)
            part = self._part
        else:
            part = self.stats
            if mixed:
                self._refresh16()
        if mixed:
            dz = self._loss_terms(self._last_mixed(X, acts, threads), y, part)
        else:
            acts.append(X)
            dz = self._loss_terms(self._last(X, acts, threads), y, part)
        if accumulate:
            self.stats += part
        if loss_scale != 1:
            dz *= self.dtype.type(loss_scale)
        self._backward(acts, dz, threads, accumulate, on_layer)

    def _backward(self, acts, dz, threads, accumulate: bool, on_layer=None) -> None:
        """The gradient from the loss gradient ``dz`` (n, C) and every layer's input ``acts``."""
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
            if i > 0:
                threads(f"fc{i}.dgrad")
                w = weights[f"fc{i}.weight"]
                if mixed:
                    da = xp.empty((d.shape[0], w.shape[0]), dtype=self.dtype)
                    _gemm.gemm(d, w.T, da)
                else:
                    da = self._mm(d, w.T)
                if self.plan[i]["kind"] == "col":  # each rank's part of the input gradient: sum them
                    self._tp_reduce(da)
                if fused is not None and not mixed:  # ReLU: a_in = max(z, 0), so z > 0 <=> a_in > 0
                    fused.relu_backward(a_in, da)
                else:
                    da *= a_in > 0
                dz = da

    def _refresh16(self) -> None:
        """The 16-bit copy of the parameters, from the float32 master (one pass)."""
        self._params16[...] = self.params.astype(self.compute_dtype)

    def _last_mixed(self, X, acts, threads=None):
        """:meth:`_last` in mixed precision: 16-bit GEMM operands, float32 accumulation and outputs.

        ``acts`` receives the 16-bit input of every layer (the GEMMs' and
        the ReLU masks' operand in the backward pass).
        """
        xp, c16, L = self.xp, self.compute_dtype, self.n_layers
        a = X.astype(c16)
        for i in range(L):
            if threads is not None:
                threads(f"fc{i}.forward")
            if acts is not None:
                acts.append(a)
            w = self._p16[f"fc{i}.weight"]
            z = xp.empty((a.shape[0], w.shape[1]), dtype=self.dtype)
            _gemm.gemm(a, w, z)
            if self.plan[i]["kind"] == "row":
                self._tp_reduce(z)
            if i < L - 1 or self._fused is None:
                self._bias_relu(z, i, i < L - 1)
            if i == L - 1:
                return z
            a = z.astype(c16)

    def evaluate(self, X, y, chunk: int = 8192):
        """Loss sum and correct count over ``X`` (n, D), ``y`` (n,), in chunks.

        Not collective. Leaves :attr:`params` and :attr:`grad` unchanged.

        Parameters
        ----------
        X : xp.ndarray, shape (n, D)
            Features, of the model's dtype.
        y : xp.ndarray, shape (n,)
            Integer labels in ``0..C-1``.
        chunk : int
            Rows per forward pass: bounds the temporary activations to
            ``chunk`` rows.

        Returns
        -------
        xp.ndarray, shape (2,), float64
            ``[loss_sum, correct]`` (the cross-entropy loss summed over the
            ``n`` samples, and the number of correct predictions), ready for an
            Allreduce.
        """
        xp = self.xp
        tot = xp.zeros(2, dtype=np.float64)
        slots = xp.zeros(2, dtype=self.dtype)
        mixed = self.compute_dtype is not None
        if mixed:
            self._refresh16()
        for s in range(0, X.shape[0], chunk):
            z = self._last_mixed(X[s : s + chunk], None) if mixed else self._last(X[s : s + chunk])
            self._loss_terms(z, y[s : s + chunk], slots)
            tot += slots
        return tot
