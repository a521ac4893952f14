"""The one model protocol: what the trainer asks of any model, and the only place that tells model kinds apart.

The trainer drives a model in two stages, each through one interface:

- before any buffer exists, a :class:`ModelPlan` (from :func:`plan_model`) says how large the model is, how its
  gradient falls into layers, what it can do (:class:`Capabilities`) and how to name it, and then binds it;
- once bound, a :class:`TrainModel` (what :meth:`ModelPlan.bind` returns) computes on the trainer's flat
  buffers: the loss sum and its gradient, predictions, evaluation sums, its layout and its description.

The built-in layers (a :class:`~hpcgpu.nn.Sequential` of Dense layers with a loss, bound as a
:class:`~hpcgpu.nn.Network`) and a model of one's own (the :class:`~hpcgpu.nn.Model` contract, bound as a
:class:`~hpcgpu.nn.FlatModel`) both implement it in full; an adapter for another framework's model is one more
implementation of the same two classes. Nothing else in hpcgpu asks which kind a model is.
"""

from __future__ import annotations

import numbers
import sys
import types
from abc import ABC, abstractmethod
from dataclasses import replace
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..errors import agreed
from ._capabilities import BUILT_IN, OWN, Capabilities
from ._layers import Layer, Sequential
from ._losses import Loss
from ._model import FlatModel, contract_error, gradient_error
from ._network import Network

__all__ = ["Capabilities", "ModelPlan", "TrainModel", "awaits_data", "check_grad", "host_reference", "plan_model",
           "plan_error"]


@runtime_checkable
class TrainModel(Protocol):
    """A model bound to the trainer's flat buffers: what the trainer, the step and the checkpoint use.

    Not collective, except a tensor-parallel model's passes (over its tensor group).

    Attributes
    ----------
    params, grad : xp.ndarray, shape (n_params,)
        The parameters (this rank's slice under tensor parallelism) and the gradient of the SUM of the last
        micro-batch's per-sample losses, laid out alike.
    stats : xp.ndarray, shape (2,)
        The loss sum and the metric sum of the last :meth:`loss_and_grad`.
    n_params, n_global : int
        This rank's parameter count, and the whole model's.
    shapes, global_shapes : list of (str, tuple)
        Each named parameter's shape here, and in the whole model.
    dtype : numpy.dtype
        Of the parameters.
    task : str
        ``"classification"`` or ``"regression"``.
    capabilities : Capabilities
    n_inputs, n_outputs : int or None
        The features it takes and the outputs it gives, where it fixes them (None: any).
    num_classes : int or None
        Classification: the number of classes its output scores (labels must be below it); None otherwise.
    loss_name : str
        Its loss's name, or ``""`` where the model computes its own.
    hidden : tuple of int
        Hidden widths, where it is a stack of layers (``()`` otherwise).
    """

    params: Any
    grad: Any
    stats: Any
    n_params: int
    n_global: int
    dtype: np.dtype
    task: str
    capabilities: Capabilities

    @property
    def n_inputs(self) -> int | None: ...

    @property
    def n_outputs(self) -> int | None: ...

    @property
    def num_classes(self) -> int | None: ...

    @property
    def loss_name(self) -> str: ...

    @property
    def hidden(self) -> tuple: ...

    def loss_and_grad(self, X, y, accumulate: bool = False, loss_scale: float = 1.0, on_layer=None) -> None: ...

    def randomness(self, step: int, micro_batch: int, rank: int, first: int = 0) -> None: ...

    def buffers(self) -> dict: ...

    def adapt_inputs(self, X, comm) -> None: ...

    def set_sample_shape(self, shape: tuple) -> None: ...

    def predict(self, X, chunk: int = 8192): ...

    def evaluate_sums(self, X, y, chunk: int = 8192): ...

    def layer_ranges(self): ...

    def local_of(self, full): ...

    def global_of(self, pieces): ...

    def step_buffers(self, n: int) -> tuple: ...

    def release(self) -> None: ...

    def spec(self) -> dict: ...

    def describe(self) -> str: ...

    def flops_per_sample(self) -> float: ...


class ModelPlan(ABC):
    """A model before it is bound: its size, layout, capabilities and name, and how to bind it. Not collective.

    Made by :func:`plan_model`; the trainer never builds one itself.

    Attributes
    ----------
    model : object
        What the user gave.
    capabilities : Capabilities
    name : str
        How a message names it (``"the model [64, 32, 10]"``, ``"model Decay"``).
    hidden : list of int
        Hidden widths where the model is a stack of layers (``[]`` otherwise).
    stats : tuple of str
        The names of its two reduced statistics (the loss sum first).
    precisions : tuple of str or None
        The mixed precisions it takes, where it names them (``nn.Torch``: ``("bf16-mixed",)``); None: every
        one its capabilities allow.
    """

    model: Any
    capabilities: Capabilities
    name: str
    hidden: list
    stats: tuple
    precisions: tuple | None = None

    @abstractmethod
    def size(self, tensor: int, rank: int, seed: int) -> tuple[int, list | None]:
        """``(n_params, layer ranges or None)`` of tensor rank ``rank``'s slice.

        Parameters
        ----------
        tensor, rank : int
            The tensor-parallel group's size and this rank's place in it.
        seed : int
            Seeds the initialization a model of one's own is sized by.

        Returns
        -------
        (int, list of (int, int) or None)
            None: the gradient arrives whole (one bucket).

        Raises
        ------
        TypeError
            A model of one's own whose ``init`` fails (the message names the model and what it raised).
        """

    def memory_hint(self) -> str:
        """A clause that may explain why the model is too large (``""``: none)."""
        return ""

    @abstractmethod
    def bind(self, xp, dtype, seed: int, *, task: str | None, compute_dtype=None, tensor: tuple = (1, 0),
             tensor_allreduce=None, grad=None, stats=None, params=None) -> TrainModel:
        """The model on flat buffers the caller owns (see :class:`~hpcgpu.nn.Network` for each argument).

        Parameters
        ----------
        xp : module
        dtype : numpy.dtype
            Of the parameters.
        seed : int
        task : str or None
            A model whose task comes from the data: the task, if known (None: regression until the data says).
        compute_dtype : numpy.dtype, optional
        tensor : (int, int)
        tensor_allreduce : callable, optional
        grad, stats, params : xp.ndarray, optional

        Returns
        -------
        TrainModel
        """


class _BuiltIn(ModelPlan):
    """A Sequential of Dense layers and a loss: bound as a Network."""

    capabilities = BUILT_IN

    def __init__(self, net, loss):
        self.model, self.loss = net, loss
        self.sizes = list(net.sizes)
        self.name = f"the model {self.sizes}"
        self.hidden = self.sizes[1:-1]
        self.stats = tuple(loss.stats)

    def size(self, tensor, rank, seed):
        return Network.layout(self.sizes, tensor, rank)

    def memory_hint(self):
        if self.sizes[-1] > 10 * max(self.sizes[:-1]):
            return (f"; its last layer has {self.sizes[-1]} outputs: with labels, the largest label + 1 (labels "
                    "must be 0..C-1: numpy.unique(y, return_inverse=True) relabels them)")
        return ""

    def bind(self, xp, dtype, seed, *, task, compute_dtype=None, tensor=(1, 0), tensor_allreduce=None, grad=None,
             stats=None, params=None):
        return Network(self.model, self.loss, xp, dtype, seed, compute_dtype=compute_dtype, tensor=tensor,
                       tensor_allreduce=tensor_allreduce, grad=grad, stats=stats, params=params)


class _Own(ModelPlan):
    """A model of the :class:`~hpcgpu.nn.Model` contract: bound as a FlatModel."""

    capabilities = OWN
    hidden: list = []
    stats = ("loss_sum", "metric")

    def __init__(self, model):
        self.model = model
        self.name = f"model {type(model).__name__}"
        self._init = None  # (seed, init(rng)'s values): sized once, bound from the same values
        self.precisions = tuple(getattr(model, "precisions", ()))
        if self.precisions:  # it computes in 16 bits itself (nn.Torch: torch.autocast)
            self.capabilities = replace(OWN, mixed_precision=True)

    def size(self, tensor, rank, seed):
        try:
            init = self.model.init(np.random.default_rng(seed))
            self._init = (seed, init)
            sizes = [int(np.size(v)) for v in init.values()]
            if not callable(getattr(self.model, "loss_and_grad_into", None)):
                return sum(sizes), None  # the gradient arrives whole: one bucket
            starts = np.concatenate([[0], np.cumsum(sizes)]).tolist()
            return starts[-1], list(zip(starts[:-1], starts[1:], strict=True))  # a bucket boundary per parameter
        except Exception as e:  # noqa: BLE001 - the user's code: say what it raised
            raise TypeError(f"model {type(self.model).__name__}: init(rng) failed ({type(e).__name__}: {e})") from None

    def bind(self, xp, dtype, seed, *, task, compute_dtype=None, tensor=(1, 0), tensor_allreduce=None, grad=None,
             stats=None, params=None):
        ready = self._init[1] if self._init is not None and self._init[0] == seed else None
        self._init = None  # the user's arrays are not kept past the binding
        model = FlatModel(self.model, xp, dtype, seed, task=task or "regression", grad=grad, stats=stats,
                          params=params, init=ready)
        if compute_dtype is not None:  # mixed precision: the model computes in 16 bits itself (its precisions)
            self.model.set_compute_dtype(np.dtype(compute_dtype).name)
        return model


def awaits_data(model) -> bool:
    """Whether ``model`` takes its input features from the data: a Sequential whose first layer is ``Dense(units)``.

    The trainer then builds it (``Sequential.build``) at the first ``fit``. Not collective.

    Parameters
    ----------
    model : object

    Returns
    -------
    bool
    """
    return isinstance(model, Sequential) and not model.built


def plan_error(model, loss, built: bool = True) -> Exception | None:
    """What keeps ``model`` (with ``loss``) from being trained, as a one-line error, or None. Not collective.

    Parameters
    ----------
    model : hpcgpu.nn.Sequential, or an object of the hpcgpu.nn.Model contract
    loss : hpcgpu.nn.Loss or None
        Required with a Sequential, refused with a model of one's own (it computes its own loss).
    built : bool
        A Sequential must know its input features (False: the trainer builds it from the data).

    Returns
    -------
    TypeError or ValueError or None
    """
    if isinstance(model, Layer) and not isinstance(model, Sequential):
        return TypeError(f"model {type(model).__name__} is a layer: give a Sequential of layers, "
                         f"Sequential({type(model).__name__}(...))")
    if loss is not None and not isinstance(loss, Loss):
        return TypeError(f"loss must be an hpcgpu.nn loss (SoftmaxCrossEntropy, MeanSquaredError, Huber), got "
                         f"{type(loss).__name__}")
    if isinstance(model, Sequential):
        if loss is None:
            return ValueError("a Sequential model needs a loss (loss=nn.SoftmaxCrossEntropy(), "
                              "nn.MeanSquaredError() or nn.Huber())")
        if not model.dense:
            return ValueError(f"the trainer runs Dense layers with their activations; {model} has other layers")
        if built and not model.built:
            return ValueError(f"{model}: the first Dense layer's input features are not known: give them, "
                              "Dense(n_in, n_out), or let Trainer.fit take them from the data")
        return None
    if loss is not None:
        return ValueError(f"model {type(model).__name__} computes its own loss in loss_and_grad: give loss= with "
                          "a Sequential only")
    return contract_error(model)


def plan_model(model, loss=None) -> ModelPlan:
    """The :class:`ModelPlan` of ``model``: the one place that tells model kinds apart. Not collective.

    Parameters
    ----------
    model : hpcgpu.nn.Sequential, or an object of the hpcgpu.nn.Model contract
    loss : hpcgpu.nn.Loss or None

    Returns
    -------
    ModelPlan

    Raises
    ------
    TypeError, ValueError
        What :func:`plan_error` finds.
    """
    err = plan_error(model, loss)
    if err is not None:
        raise agreed(err)  # the model and loss are each rank's alike: every rank raises it
    return _BuiltIn(model, loss) if isinstance(model, Sequential) else _Own(model)


def host_reference(model, loss, seed: int) -> tuple[dict, Any]:
    """A model's initial parameters and its loss and gradient, in float64 on the host, for a gradient check.

    Not collective. For the built-in layers the engine the trainer runs (:class:`~hpcgpu.nn.Network`,
    bound in float64 on NumPy), so :func:`hpcgpu.nn.check_grad` checks the code that trains against finite
    differences; for a model of one's own, its ``init`` and ``loss_and_grad``.

    Parameters
    ----------
    model : hpcgpu.nn.Sequential, or an object of the hpcgpu.nn.Model contract
    loss : hpcgpu.nn.Loss or None
        Required with a Sequential.
    seed : int

    Returns
    -------
    (dict of str to numpy.ndarray, callable)
        ``{name: float64 array}``, and ``loss_and_grad(params, x, y) -> (loss_sum, {name: gradient})``.

    Raises
    ------
    ValueError
        A Sequential without its loss, or with layers the trainer does not run.
    """
    if isinstance(model, Sequential):
        if loss is None:
            raise ValueError("check_grad of a Sequential needs its loss")
        if not model.built:
            raise ValueError(f"check_grad: {model}: the first Dense layer's input features are not known: "
                             "model.build(n_features) first")
        net = Network(model, loss, xp=np, dtype="float64", seed=seed)
        names = [name for name, _ in net.shapes]
        weights, grads = net._p, net._g  # the engine's own views of its flat buffers

        def loss_and_grad(p, xb, yb):
            for name in names:
                weights[name][...] = p[name]
            xb = np.array(xb, dtype=np.float64)
            net.loss_and_grad(xb.reshape(xb.shape[0], -1), np.asarray(yb))  # Flatten first: samples as rows
            return float(net.stats[0]), {name: grads[name].copy() for name in names}

        return {name: weights[name].copy() for name in names}, loss_and_grad
    return ({k: np.asarray(v, np.float64) for k, v in model.init(np.random.default_rng(seed)).items()},
            model.loss_and_grad)


def array_module(*arrays):
    """The array module of ``arrays``: CuPy where any is a CuPy array, else NumPy. Not collective.

    What a model of one's own should compute with: the trainer passes it the
    rank's device arrays (CuPy on a GPU), :func:`check_grad` host arrays in
    float64, so a model that takes its module from the runtime once
    (``self.xp = rt.xp``) fails in one of the two. CuPy's
    ``cupy.get_array_module``, without importing CuPy where it is not loaded.

    Parameters
    ----------
    *arrays : array_like

    Returns
    -------
    module
        ``numpy`` or ``cupy``.
    """
    cupy = sys.modules.get("cupy")
    if cupy is not None and hasattr(cupy, "get_array_module"):
        return cupy.get_array_module(*arrays)
    return np


def _device_module_held(model) -> str | None:
    """The name of an attribute of ``model`` that holds CuPy itself (``self.xp = rt.xp``), or None."""
    for name, value in vars(model).items() if hasattr(model, "__dict__") else ():
        if isinstance(value, types.ModuleType) and value.__name__.split(".")[0] == "cupy":
            return name
    return None


def check_grad(model, x, y, *, loss=None, params=None, eps: float = 1e-6, rtol: float = 1e-4,
               seed: int = 0) -> dict:
    """Check a model's gradient against central finite differences, in float64 on the host. Not collective.

    Parameters
    ----------
    model : object
        A model of the :class:`Model` contract, or a :class:`hpcgpu.nn.Sequential`
        (then ``loss`` is required).
    x, y : array_like
        A few samples (each parameter costs two passes over them).
    loss : hpcgpu.nn.Loss, optional
        The loss of a ``Sequential``.
    params : dict, optional
        The parameters to check at (default: ``model.init(numpy.random.default_rng(seed))``
        plus small noise, so zero biases do not hide terms).
    eps : float
        The finite-difference step.
    rtol : float
        Largest relative error accepted: ``|analytic - numeric| / max(|analytic|, |numeric|, floor)``
        over each parameter's elements, ``floor`` a thousandth of the parameter's largest analytic
        element (finite differences cannot resolve an element that is nearly zero).
    seed : int

    Returns
    -------
    dict of str to float
        Each parameter's largest relative error.

    Raises
    ------
    ValueError
        A parameter's error exceeds ``rtol`` (the message names the worst one);
        the model holds CuPy as an attribute (it would get NumPy arrays here
        and CuPy arrays in training: :func:`array_module` serves both).
    TypeError
        ``loss_and_grad`` returns no ``(loss_sum, gradients)``, or a gradient
        without one array of each parameter's shape (as training would refuse).

    Notes
    -----
    Its errors are this rank's own (a plain ``ValueError`` or ``TypeError``,
    not an :class:`hpcgpu.AgreedError`): under :func:`hpcgpu.run_guarded` a
    failed check ends the job with each calling rank's traceback, which is
    safe wherever it is called (on every rank, or on rank 0 alone).
    """
    held = _device_module_held(model)
    if held is not None:
        raise ValueError(f"check_grad: the model holds CuPy itself (its attribute {held}), but check_grad passes it "
                         f"NumPy arrays on the host: compute with the module of the arrays given, xp = "
                         f"hpcgpu.nn.array_module(x), and it runs in both")
    err = plan_error(model, loss, built=False)
    if err is None and not all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in (eps, rtol)):
        err = TypeError(f"check_grad: eps and rtol must be numbers, got {eps!r} and {rtol!r}")
    if err is None and not all(np.asarray(a).dtype.kind in "biuf" for a in (x, y)):
        err = TypeError(f"check_grad: x and y must be arrays of numbers, got {np.asarray(x).dtype} and "
                        f"{np.asarray(y).dtype}")
    if err is not None:
        raise err  # this rank's own, as every error of check_grad
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y)
    if np.issubdtype(y.dtype, np.floating):
        y = y.astype(np.float64)
    init, loss_and_grad = host_reference(model, loss, seed)
    rng = np.random.default_rng(seed + 1)
    if params is None:
        params = {k: v + rng.normal(0, 0.05, v.shape) for k, v in init.items()}
    params = {k: np.array(v, dtype=np.float64) for k, v in params.items()}
    got = loss_and_grad(params, x, y)  # a model may return its outputs third
    if not (isinstance(got, (tuple, list)) and len(got) in (2, 3)):
        raise TypeError(f"check_grad: model {type(model).__name__}'s loss_and_grad must return (loss_sum, "
                        f"gradients) or (loss_sum, gradients, outputs), got {type(got).__name__}")
    err = gradient_error(type(model).__name__, got[1], [(k, np.shape(v)) for k, v in params.items()])
    if err is not None:
        raise TypeError(f"check_grad: {err}")
    analytic = got[1]
    errors = {}
    for k, v in params.items():
        a = np.asarray(analytic[k], dtype=np.float64).reshape(v.shape)
        num = np.empty_like(v)
        flat, nflat = v.reshape(-1), num.reshape(-1)
        for i in range(flat.size):
            old = flat[i]
            flat[i] = old + eps
            up = float(loss_and_grad(params, x, y)[0])
            flat[i] = old - eps
            down = float(loss_and_grad(params, x, y)[0])
            flat[i] = old
            nflat[i] = (up - down) / (2 * eps)
        # relative to the element, or to a thousandth of the parameter's largest where the element is ~0
        floor = 1e-3 * float(np.abs(a).max(initial=0.0)) + 1e-12
        scale = np.maximum(np.maximum(np.abs(a), np.abs(num)), floor)
        errors[k] = float((np.abs(a - num) / scale).max()) if v.size else 0.0
    worst = max(errors, key=errors.get)
    if errors[worst] > rtol:
        raise ValueError(f"check_grad: the gradient of {worst} is off by {errors[worst]:.3g} (relative) from "
                         f"central differences (eps {eps}), more than rtol {rtol}")
    return errors
