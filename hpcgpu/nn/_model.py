"""A model of the user's own: the contract and its binding to the trainer's flat buffers (gradient check: _protocol).

The contract (what DDP's ``MyModel`` is, without autograd), duck-typed::

    class Decay:
        def init(self, rng):                 # the parameters by name: arrays (NumPy or xp)
            return {"a": np.ones(1), "k": np.full(1, 0.1), "c": np.zeros(1)}
        def loss_and_grad(self, params, x, y):   # SUM of per-sample losses, and its gradient by name
            ...
            return loss_sum, {"a": ..., "k": ..., "c": ...}
        def predict(self, params, x):        # the model's outputs, (n, k) or (n,)
            ...

The trainer lays the parameters out in one flat buffer (in ``init``'s
order), hands ``params`` as views into it, copies the returned gradient
into its own flat gradient buffer and divides by the global batch once:
the user's loss never has to know the number of ranks.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from ..errors import agreed
from ._flat import FlatParams
from ._capabilities import OWN

__all__ = ["Model", "FlatModel"]


class Model:
    """The model contract, as a base class to document it (subclassing it is optional).

    Methods
    -------
    init(rng)
        ``{name: array}``: the initial parameters (NumPy or ``xp`` arrays of
        any shape). ``rng`` is a ``numpy.random.Generator`` seeded alike on
        every rank.
    loss_and_grad(params, x, y)
        ``(loss_sum, {name: gradient})``: the SUM over the micro-batch's
        samples of their losses (a float, or a 0-d array), and its gradient
        with respect to each parameter (arrays of the parameters' shapes).
        It may return the forward pass's outputs third, ``(loss_sum, grads,
        outputs)`` of n rows, as :meth:`predict` would give them: the
        training metric (``train_accuracy`` or ``train_rmse``) is then
        computed from them at no extra pass; without them it is NaN.
        ``params`` holds views into the trainer's flat buffer: read them,
        never write them. ``x`` and ``y`` are this rank's rows of the
        micro-batch, in the array module: ``x`` in the trainer's floating
        type, or int64 where the data's features are integers.
    predict(params, x)
        The model's outputs for ``x`` (n rows): an array of n rows, (n,) or
        (n, k) or more axes; ``Trainer.predict`` keeps that shape.
    forward_loss(params, x, y), optional
        ``(loss_sum, outputs)`` of a forward pass only, in evaluation mode
        (no dropout, BatchNorm's running statistics used and left as they
        are): what ``evaluate`` and ``fit``'s validation use, so evaluating
        never changes the model (:class:`hpcgpu.nn.Torch`, :class:`hpcgpu.nn.Jax`).
        Without it evaluation takes ``loss_and_grad``'s loss and drops its
        gradient. With it the first step also checks, once, that the loss
        sums over the samples: the micro-batch's loss against the sum of its
        halves' (a mean is one agreed line).
    buffers(), optional
        ``{name: array}``: the model's state that is not trained
        (BatchNorm's running statistics), live arrays the model updates in
        place; the trainer keeps them alike on every data-parallel rank
        (data rank 0's before each step), in checkpoints and in the
        results file.
    set_rng_key(key), optional
        Called before each micro-batch with ``key = (seed, step,
        micro_batch, data-parallel rank)``: seed the model's own random
        draws (dropout) from it, and a resumed run draws what the
        uninterrupted one did.
    loss_and_grad_into(params, grads, x, y, forward_done, ready), optional
        What an adapter of a framework with autograd defines instead of
        computing the gradient itself (:class:`hpcgpu.nn.Torch`): after the
        forward pass call ``forward_done(loss_sum, outputs)`` (before any
        gradient is final: the loss rides in the first bucket reduced; the
        loss sum a float, or a 0-d device array, which needs no host wait), then
        ADD the gradient of the loss sum into ``grads``, views of the
        trainer's flat gradient buffer by name (zeroed before a step's first
        micro-batch), calling ``ready(name)`` as each parameter's gradient
        is final. The gradient then needs no copy, and the reducer posts each
        bucket's Allreduce while the backward pass goes on (DDP's overlap).
        On a GPU, ``ready`` is called with CuPy's current stream that of the
        call (the trainer's), and only once that stream is ordered after the
        work that wrote the gradient; ``forward_done``'s arrays likewise.
        ``loss_and_grad`` is still the contract's (the gradient check calls
        it).
    """

    def init(self, rng):
        """The initial parameters by name."""
        raise NotImplementedError(f"{type(self).__name__} does not define init(rng)")

    def loss_and_grad(self, params, x, y):
        """The loss sum over the micro-batch and its gradient by name."""
        raise NotImplementedError(f"{type(self).__name__} does not define loss_and_grad(params, x, y)")

    def predict(self, params, x):
        """The model's outputs for ``x``."""
        raise NotImplementedError(f"{type(self).__name__} does not define predict(params, x)")


class ContractError(TypeError):
    """A model of one's own that breaks the contract in what its first ``loss_and_grad`` returns.

    Raised by :class:`FlatModel`: on the first call from a check of what it returned, on later calls where
    the gradient's write into the flat buffer fails (a name missing, a size that does not reshape); the
    trainer's step agrees on it over the ranks (:class:`hpcgpu.train.step.Step`), so that every rank says the
    same one line.
    """


def _write_error(model, e: BaseException) -> TypeError:
    """A returned value that passed the contract's check but could not be written (a loss that is no number)."""
    return TypeError(f"model {type(model).__name__}: loss_and_grad's result could not be taken "
                     f"({type(e).__name__}: {e})")


def gradient_error(name: str, grads, shapes) -> TypeError | None:
    """What a returned gradient lacks: a dict with one array of each parameter's shape; None when it has it.

    Not collective.

    Parameters
    ----------
    name : str
        The model's class name, for the message.
    grads : object
        What ``loss_and_grad`` returned second.
    shapes : sequence of (str, tuple of int)
        The parameters' names and shapes, in ``init``'s order.

    Returns
    -------
    TypeError or None
    """
    if not isinstance(grads, dict):
        return TypeError(f"model {name}: loss_and_grad must return (loss_sum, dict of gradients), got a "
                         f"{type(grads).__name__} as the gradient")
    names = [k for k, _ in shapes]
    missing = [k for k in names if k not in grads]
    extra = [k for k in grads if k not in names]
    if missing or extra:
        return TypeError(f"model {name}: loss_and_grad's gradient has "
                         + (f"no {', '.join(missing)}" if missing else f"unknown {', '.join(map(str, extra))}")
                         + f" (the parameters are {', '.join(names)})")
    for k, shape in shapes:
        got = tuple(grads[k].shape) if hasattr(grads[k], "shape") else np.shape(grads[k])
        if got != tuple(shape) and not (math.prod(got) == math.prod(shape) == 1):
            return TypeError(f"model {name}: the gradient of {k} has shape {got}, the parameter {tuple(shape)}")
    return None


def contract_error(model) -> TypeError | None:
    """What ``model`` lacks of the contract (a one-line error naming it), or None. Not collective.

    Parameters
    ----------
    model : object

    Returns
    -------
    TypeError or None
    """
    missing = [m for m in ("init", "loss_and_grad", "predict") if not callable(getattr(model, m, None))]
    if missing:
        return TypeError(f"model {type(model).__name__}: needs the method(s) {', '.join(missing)} "
                         "(init(rng), loss_and_grad(params, x, y), predict(params, x); see hpcgpu.nn.Model)")
    return None


class FlatModel(FlatParams):
    """A model of the user's own, bound to flat parameter and gradient buffers (the trainer's engine for it).

    Not collective. Offers what :class:`hpcgpu.nn.Network` offers the
    trainer, for any object that keeps the :class:`Model` contract: one
    buffer for the parameters (views by name are what the model sees), the
    gradient copied into the trainer's buffer (added, under gradient
    accumulation; times the loss scale), the loss sum in ``stats[0]``. The
    metric slot ``stats[1]``: the task's metric sum of the outputs
    ``loss_and_grad`` returns third, or NaN when it returns the loss and
    gradient only; evaluation computes the metric from :meth:`predict`.

    Parameters
    ----------
    model : object
        Keeps the :class:`Model` contract.
    xp : module
    dtype : numpy.dtype
        Of the flat buffers (the parameters ``init`` returns are converted).
    seed : int
        Seeds the ``rng`` given to ``model.init``.
    grad, stats, params : xp.ndarray, optional
        Buffers the caller owns, as for :class:`hpcgpu.nn.Network`.
    task : {"classification", "regression"}
        How evaluation scores :meth:`predict`: the argmax against integer
        labels, or squared errors against float targets.
    init : dict of str to array, optional
        ``model.init(numpy.random.default_rng(seed))``'s values when the
        caller has drawn them already (the trainer sized the buffers with
        them): ``init`` is then not called again.

    Raises
    ------
    TypeError
        ``model`` lacks a method of the contract, or ``init`` does not
        return a dict of arrays.
    """

    compute_dtype = None
    tensor = (1, 0)
    activations: list = []
    capabilities = OWN
    """None of the optional capabilities (:class:`hpcgpu.nn.Capabilities`): the code is the user's;
    the task comes from the data's labels unless given."""
    n_inputs = n_outputs = num_classes = None
    """Not fixed by the model's code (None: any); the trainer sets ``n_inputs`` to the width of the data it is
    first fit on, so that a later ``fit``, ``evaluate`` or ``predict`` of another width is one line."""
    loss_name = ""
    """The model computes its own loss."""
    hidden: tuple = ()

    def __init__(self, model, xp=np, dtype="float64", seed: int = 0, grad=None, stats=None, params=None,
                 task: str = "regression", init: dict | None = None):
        err = contract_error(model)
        if err is not None:
            raise agreed(err)
        try:
            dtype = np.dtype(dtype)
        except TypeError:
            raise agreed(TypeError(f"model {type(model).__name__}: dtype {dtype!r} is not a NumPy type")) from None
        if not isinstance(seed, numbers.Integral) or isinstance(seed, bool):
            raise agreed(TypeError(f"model {type(model).__name__}: seed must be an integer, got {seed!r}"))
        self.model, self.xp, self.dtype, self.task, self.seed = model, xp, dtype, task, int(seed)
        if init is None:  # else ``model.init(numpy.random.default_rng(seed))``'s values, already drawn
            init = model.init(np.random.default_rng(seed))
        if not isinstance(init, dict) or not init:
            raise TypeError(f"model {type(model).__name__}: init(rng) must return a non-empty dict of arrays, got "
                            f"{type(init).__name__}")
        from .. import _device

        host = {str(k): np.asarray(_device.asnumpy(v), dtype=self.dtype) for k, v in init.items()}
        self.shapes = [(k, v.shape) for k, v in host.items()]
        self.global_shapes = self.shapes
        self.n_params = self.n_global = sum(math.prod(s) for _, s in self.shapes)
        self._bind(grad, stats, params)
        for k, v in host.items():
            self._p[k][...] = xp.asarray(v)
        self.gemm_threads = None
        self.sizes = None
        self._checked = False
        self.into = callable(getattr(model, "loss_and_grad_into", None))
        self._ready_optional = self.into and _ready_optional(model)
        self.sample_shape: tuple | None = None  # the samples' shape where they have more than one axis
        self.integer_features: bool | None = None  # whether the features reach the model as int64 (first data's)
        self._loss_checked = False  # the first call's check that the loss sums over the samples
        self._index = {k: i for i, (k, _) in enumerate(self.shapes)}  # a parameter's place, by name

    def release(self) -> None:
        """The model's own ``release()``, where it has one (:meth:`hpcgpu.nn.Torch.release`). Not collective."""
        release = getattr(self.model, "release", None)
        if callable(release):
            release()

    def spec(self) -> dict:
        """``{"model": the class's qualified name, "parameters": {name: shape}}``. Not collective."""
        kind = type(self.model)
        return {"model": f"{kind.__module__}.{kind.__qualname__}",
                "parameters": {k: list(s) for k, s in self.shapes}}

    def describe(self) -> str:
        """``"model Decay (3 parameters)"``: the class's name and the parameter count."""
        return f"model {type(self.model).__name__} ({self.n_global} parameters)"

    def flops_per_sample(self) -> float:
        """0.0: the model's own code is not known to hpcgpu (the GFLOP/s figures leave it out)."""
        return 0.0

    def local_of(self, full):
        """``full`` itself: a model of one's own is never split over ranks."""
        return np.asarray(full)

    def global_of(self, pieces):
        """``pieces[0]``: a model of one's own is never split over ranks."""
        return pieces[0]

    def step_buffers(self, n: int) -> tuple:
        """Nothing: a model of one's own is never captured in a CUDA graph."""
        return ()

    first_call_agreed = True
    """The step agrees on the first ``loss_and_grad``'s :class:`ContractError` over the ranks."""

    def _first_call_error(self, got, X, y) -> TypeError | None:
        """What the first ``loss_and_grad`` returned, checked against the contract, or None.

        The pair (or triple), the gradient by name and shape, the outputs' rows (and, for classification, a
        column for each label seen).
        """
        name = type(self.model).__name__
        if not (isinstance(got, (tuple, list)) and len(got) in (2, 3)):
            return TypeError(f"model {name}: loss_and_grad must return (loss_sum, gradients) or (loss_sum, "
                             f"gradients, outputs), got {type(got).__name__}"
                             + (f" of {len(got)}" if isinstance(got, (tuple, list)) else ""))
        err = gradient_error(name, got[1], self.shapes)
        if err is not None or len(got) < 3 or got[2] is None:
            return err
        shape = tuple(got[2].shape) if hasattr(got[2], "shape") else np.shape(got[2])  # CuPy's: not np.shape
        rows = X.shape[0]
        if not shape or shape[0] != rows:
            return TypeError(f"model {name}: loss_and_grad's outputs have shape {shape}, not one row for each of "
                             f"the batch's {rows} samples")
        if self.task == "classification" and rows:
            from .. import _device

            classes = int(_device.asnumpy(y).max()) + 1
            width = math.prod(shape[1:]) if len(shape) > 1 else 1
            if width < classes:
                return TypeError(f"model {name}: loss_and_grad's outputs have {width} column(s) a sample, but the "
                                 f"labels include class {classes - 1}: a classifier's outputs are one score a class "
                                 "(integer targets of a regression: give task=\"regression\")")
        return None

    def loss_and_grad(self, X, y, accumulate: bool = False, loss_scale: float = 1.0, on_layer=None) -> None:
        """The model's loss sum and gradient of a micro-batch, into :attr:`stats` and :attr:`grad`. Not collective.

        Parameters
        ----------
        X, y : xp.ndarray
            The micro-batch's rows.
        accumulate : bool
            Add to :attr:`grad` and the loss slot instead of overwriting them.
        loss_scale : float
            Multiplies the gradient (not the loss).
        on_layer : callable, optional
            Ignored: the gradient arrives whole.

        Raises
        ------
        ContractError
            A ``TypeError``: the model's gradient is not a dict with one array
            of the right shape per parameter (checked on the first call; on a
            later call where its write into :attr:`grad` fails).
        """
        if not self._loss_checked:
            err = self._mean_loss_error(X, y)
            if err is not None:
                raise ContractError(str(err))
            self._loss_checked = True
        if self.into:
            self._loss_and_grad_into(X, y, accumulate, loss_scale, on_layer)
            return
        got = self.model.loss_and_grad(self._p, self._samples(X), y)
        if not self._checked:
            err = self._first_call_error(got, X, y)
            if err is not None:
                raise ContractError(str(err))
            self._checked = True
        try:
            loss, grads = got[0], got[1]
            outputs = got[2] if len(got) > 2 else None
            xp = self.xp
            for k, view in self._g.items():
                g = xp.asarray(grads[k], dtype=self.dtype).reshape(view.shape)
                if loss_scale != 1:
                    g = g * self.dtype.type(loss_scale)
                if accumulate:
                    view += g
                else:
                    view[...] = g
            self._record(loss, outputs, y, accumulate)
        except (KeyError, IndexError, TypeError, ValueError) as e:
            # A later call that breaks the contract fails here (a missing name, a size that does not reshape):
            # no check is added to the step, the failure itself is turned into the contract's line.
            raise ContractError(str(self._first_call_error(got, X, y) or _write_error(self.model, e))) from e

    def _mean_loss_error(self, X, y) -> TypeError | None:
        """Whether the model's loss averages over the samples instead of summing them (the first call's check).

        Where the model has a forward-only loss (``forward_loss``: :class:`hpcgpu.nn.Torch`, :class:`~hpcgpu.nn.Jax`),
        the loss of the micro-batch is compared, once, with the sum of its two halves' losses, in eval mode
        (BatchNorm's running statistics, no dropout: each sample's loss its own). A mean (PyTorch's loss functions
        by default) is half that sum: the gradient would then depend on the number of ranks.
        """
        forward = getattr(self.model, "forward_loss", None)
        n = X.shape[0]
        if not callable(forward) or n < 2:
            return None
        xs, h = self._samples(X), n // 2
        whole = float(forward(self._p, xs, y)[0])
        halves = [float(forward(self._p, xs[a:b], y[a:b])[0]) for a, b in ((0, h), (h, n))]
        if not math.isfinite(whole) or abs(whole - sum(halves)) <= 1e-2 * sum(abs(v) for v in halves):
            return None
        return TypeError(f"model {type(self.model).__name__}: the loss does not sum over the samples (a micro-batch's "
                         "loss is not the sum of its halves'): give a loss with reduction=\"sum\" (torch.nn.functional"
                         ".cross_entropy(outputs, y, reduction=\"sum\")); hpcgpu divides by the global batch once")

    def _record(self, loss, outputs, y, accumulate: bool) -> None:
        """The micro-batch's loss sum and metric sum into :attr:`stats` (added with ``accumulate``)."""
        metric = self._metric(self.xp.asarray(outputs), y) if outputs is not None else np.nan
        if accumulate:
            self.stats[0] += loss
            self.stats[1] += metric
        else:
            self.stats[0] = loss
            self.stats[1] = metric

    def buffers(self) -> dict:
        """The model's buffers by name: live arrays (views) of state that is not trained. Not collective.

        A model that defines ``buffers()`` (:class:`hpcgpu.nn.Torch`: BatchNorm's running statistics) gives
        them; the trainer makes every data-parallel rank's those of data rank 0 before each step (as DDP's
        ``broadcast_buffers``), keeps rank 0's in checkpoints and the results file, and puts them back on
        resume and ``load_weights``.

        Returns
        -------
        dict of str to xp.ndarray
            Empty for a model without buffers.
        """
        get = getattr(self.model, "buffers", None)
        return dict(get()) if callable(get) else {}

    def constant_buffers(self) -> frozenset:
        """The names in :meth:`buffers` that no step changes (:class:`hpcgpu.nn.Torch`'s frozen parameters).

        Not collective. The trainer makes them data rank 0's once, not before every step.

        Returns
        -------
        frozenset of str
            Empty for a model that does not say (each buffer is then shared before every step).
        """
        get = getattr(self.model, "constant_buffers", None)
        return frozenset(get()) if callable(get) else frozenset()

    def set_sample_shape(self, shape: tuple) -> None:
        """Take the shape of one sample: the trainer's rows reach the model as ``(n, *shape)``. Not collective.

        The trainer holds features as rows (``(n, D)``); a model of one's own (a convolutional
        :class:`~hpcgpu.nn.Torch` module, say) gets each batch back in the samples' shape. Set once, by the first
        data with more than one axis a sample; rows of the same width are taken as such samples from then on.

        Parameters
        ----------
        shape : tuple of int
            One sample's shape (``X.shape[1:]``).

        Raises
        ------
        ValueError
            Another shape than the one taken before.
        """
        shape = tuple(int(s) for s in shape)
        if self.sample_shape is not None and shape != self.sample_shape:
            raise ValueError(f"model {type(self.model).__name__} takes samples of shape {self.sample_shape}, "
                             f"got {shape}")
        self.sample_shape = shape

    def set_integer_features(self, integer: bool) -> None:
        """Take the kind of the features: integers (an ``nn.Embedding``'s indices) reach the model as int64.

        Not collective. Set by the first data the trainer is given (``fit``'s, ``evaluate``'s or ``predict``'s
        arrays); the trainer holds the rows in its floating type, and integer ones go back to int64 on their way
        to the model (exactly: whole numbers up to 2**24 in float32, 2**53 in float64).

        Parameters
        ----------
        integer : bool
            The features are integers.

        Raises
        ------
        ValueError
            Another kind than the one taken before.
        """
        integer = bool(integer)
        if self.integer_features is not None and integer != self.integer_features:
            took, got = ("integer", "floating") if self.integer_features else ("floating", "integer")
            raise ValueError(f"model {type(self.model).__name__} takes {took} features (those it was first given), "
                             f"got {got} ones")
        self.integer_features = integer

    def _samples(self, X):
        """``X``'s rows in the samples' shape (a view), where the samples have one; int64 for integer features."""
        if self.integer_features:
            X = X.astype(np.int64)
        return X if self.sample_shape is None else X.reshape(X.shape[0], *self.sample_shape)

    def adapt_inputs(self, X, comm) -> None:
        """Nothing: a model of one's own standardizes its inputs itself, if it does. Not collective.

        Parameters
        ----------
        X : array, shape (n_local, D)
        comm : mpi4py.MPI.Intracomm
        """

    def randomness(self, step: int, micro_batch: int, rank: int, first: int = 0) -> None:
        """Seed the model's randomness (dropout) for one micro-batch of one step on one rank. Not collective.

        A model that defines ``set_rng_key(key)`` (:class:`hpcgpu.nn.Torch`) gets ``key = (seed, step,
        micro_batch, rank)``: its draws depend on where the run is, never on what ran before in the process,
        so a resumed run draws what the uninterrupted one did, and each rank its own masks.

        Parameters
        ----------
        step, micro_batch, rank : int
            The global step, the micro-batch in it and the data-parallel rank about to compute.
        first : int
            The position in the step's global batch of the micro-batch's first local row (not used here).
        """
        set_key = getattr(self.model, "set_rng_key", None)
        if callable(set_key):
            set_key((self.seed, int(step), int(micro_batch), int(rank)))

    def _loss_and_grad_into(self, X, y, accumulate: bool, loss_scale: float, on_layer) -> None:
        """:meth:`loss_and_grad` through the model's ``loss_and_grad_into``: no copy of the gradient.

        Autograd adds into the flat buffer's views, and ``on_layer(i)`` follows each parameter's ``ready`` in
        reverse order (the reducer's rule: a layer's call means every later layer's gradient is final), whatever
        order the backward pass takes.
        """
        if loss_scale != 1:  # mixed precision is refused for a model of one's own (capabilities)
            raise ValueError(f"model {type(self.model).__name__}: a loss scale needs the built-in layers")
        if not accumulate:
            self.grad.fill(0)  # (``[...] = 0`` takes 1.7 times as long on the host)
        if on_layer is None and self._ready_optional:
            # nothing waits for single gradients (one rank): no ready signal, no hook in autograd's pass
            self.model.loss_and_grad_into(self._p, self._g, self._samples(X), y,
                                          lambda loss, outputs: self._record(loss, outputs, y, accumulate), None)
            return
        index = self._index
        done = [False] * len(self.shapes)
        nxt = [len(self.shapes) - 1]
        forward = []

        def forward_done(loss, outputs):
            self._record(loss, outputs, y, accumulate)
            forward.append(True)

        def ready(name):
            if not forward:
                raise RuntimeError(f"model {type(self.model).__name__}: ready({name!r}) before forward_done")
            done[index[name]] = True
            while nxt[0] >= 0 and done[nxt[0]]:
                if on_layer is not None:
                    on_layer(nxt[0])
                nxt[0] -= 1

        self.model.loss_and_grad_into(self._p, self._g, self._samples(X), y, forward_done, ready)
        if not forward:
            raise RuntimeError(f"model {type(self.model).__name__}: loss_and_grad_into never called forward_done")
        for k, _ in self.shapes[: nxt[0] + 1][::-1]:  # parameters the loss does not reach: zero, final now
            ready(k)

    def layer_ranges(self):
        """Each parameter's ``[lo, hi)`` in the flat buffers, or None (one bucket). Not collective.

        Per parameter when the model adds its gradient into them (``loss_and_grad_into``: buckets of
        parameters overlap the backward pass); None when the gradient arrives whole, as ``loss_and_grad``
        returns.
        """
        if not self.into:
            return None
        ranges, lo = [], 0
        for _, shape in self.shapes:
            ranges.append((lo, lo + math.prod(shape)))
            lo += math.prod(shape)
        return ranges

    def _metric(self, outputs, y):
        """The task's metric sum of ``outputs`` against ``y``: labels at the largest output, or squared errors."""
        if self.task == "classification":
            return (outputs.reshape(outputs.shape[0], -1).argmax(axis=1) == y).sum()
        r = outputs.reshape(y.shape[0], -1) - y.reshape(y.shape[0], -1)
        return (r * r).sum()

    def predict(self, X, chunk: int = 8192):
        """The model's ``predict(params, X)``, in the shape the model gives its outputs. Not collective.

        Parameters
        ----------
        X : xp.ndarray, shape (n, D)
        chunk : int
            Rows per call.

        Returns
        -------
        xp.ndarray, shape (n, ...)
            The model's outputs: (n,) for a model of one output a sample that returns (n,), (n, k) for (n, k);
            (0, 1) without rows.
        """
        xp = self.xp
        parts = []
        for s in range(0, X.shape[0], chunk):
            out = xp.asarray(self.model.predict(self._p, self._samples(X[s : s + chunk])))
            parts.append(out.reshape(out.shape[0], 1) if out.ndim == 0 else out)
        if not parts:
            return xp.zeros((0, 1), dtype=self.dtype)
        return parts[0] if len(parts) == 1 else xp.concatenate(parts)

    def evaluate_sums(self, X, y, chunk: int = 8192):
        """Loss sum (the model's own) and metric sum of its outputs over ``X``, ``y``. Not collective.

        Forward only where the model has ``forward_loss`` (an autograd adapter: eval mode, no gradient), so
        evaluating changes nothing of the model; otherwise ``loss_and_grad``'s loss (its gradient dropped) and
        :meth:`predict`'s outputs.

        Parameters
        ----------
        X, y : xp.ndarray
        chunk : int

        Returns
        -------
        xp.ndarray, shape (2,), float64
            ``[loss_sum, metric_sum]``: the metric is the number of rows
            whose largest output is at the label (classification), or the
            sum of squared errors (regression).
        """
        xp = self.xp
        tot = xp.zeros(2, dtype=np.float64)
        forward = getattr(self.model, "forward_loss", None)
        for s in range(0, X.shape[0], chunk):
            xs, ys = X[s : s + chunk], y[s : s + chunk]
            if callable(forward):  # forward only, in eval mode: evaluating changes nothing of the model
                loss, out = forward(self._p, self._samples(xs), ys)
                out = xp.asarray(out)
            else:  # the contract's only loss is loss_and_grad's: its gradient is dropped
                loss = self.model.loss_and_grad(self._p, self._samples(xs), ys)[0]
                out = self.predict(xs, chunk)
            tot += xp.asarray([float(loss), float(self._metric(out, ys))])
        return tot


def _ready_optional(model) -> bool:
    """Whether ``model.loss_and_grad_into`` takes ``ready=None``.

    The class that defines the method says so itself (``READY_OPTIONAL = True`` beside it:
    :class:`hpcgpu.nn.Torch`); a subclass that overrides the method does not inherit it.
    """
    for cls in type(model).__mro__:
        if "loss_and_grad_into" in cls.__dict__:
            return cls.__dict__.get("READY_OPTIONAL") is True
    return False
