"""The layers of the built-in models: Dense, ReLU, Tanh, GELU, Dropout, Standardize and a sequential container.

A layer is a description: its parameters' names and shapes, its initializer and its spec (what a results
file records). It holds no arrays and runs nothing: the one engine that computes a :class:`Sequential` of
:class:`Dense` layers is :class:`hpcgpu.nn.Network` (the trainer's, on NumPy or CuPy, fused, split for tensor
parallelism, in 16 bits under mixed precision, captured in a CUDA graph), and :func:`hpcgpu.nn.check_grad`
checks that engine itself. This module also holds the activations' and dropout's kernels the engine applies.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from .. import _device
from ..errors import agreed

__all__ = ["uniform_block", "Layer", "Activation", "Dense", "ReLU", "Tanh", "GELU", "Dropout", "Sequential",
           "Standardize", "Flatten", "ACTIVATIONS", "activation_forward", "activation_backward", "dropout_keep"]

ACTIVATIONS = ("relu", "tanh", "gelu")
"""The activations a :class:`Dense` layer can apply to its output (``None``: linear)."""

_GELU_C = math.sqrt(2.0 / math.pi)


def _xp(a):
    """The array module of ``a`` (NumPy, or CuPy for its arrays) without importing CuPy."""
    return np if isinstance(a, np.ndarray) else _device.cupy_or_none()


def activation_forward(name: str | None, z, keep_input: bool = False):
    """Apply activation ``name`` to ``z`` in place. Not collective.

    Parameters
    ----------
    name : {"relu", "tanh", "gelu"} or None
        ``relu``: ``max(z, 0)`` (NaN kept); ``tanh``; ``gelu``: the tanh
        approximation ``0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3)))``
        (Hendrycks & Gimpel, arXiv:1606.08415, section 2); ``None``: nothing.
    z : xp.ndarray
        Pre-activations, overwritten with the activations.
    keep_input : bool
        Return a copy of ``z`` as it came (GELU's backward pass needs it).

    Returns
    -------
    xp.ndarray or None
        The copy of the input when ``keep_input`` and ``name`` is ``"gelu"``, else None.
    """
    if name is None:
        return None
    xp = _xp(z)
    if name == "relu":
        xp.maximum(z, 0, out=z)
        return None
    if name == "tanh":
        xp.tanh(z, out=z)
        return None
    if name != "gelu":
        raise agreed(ValueError(f"activation must be one of {', '.join(ACTIVATIONS)} or None, got {name!r}"))
    pre = z.copy() if keep_input else None
    t = z * z
    t *= 0.044715
    t += 1
    t *= z
    t *= _GELU_C
    xp.tanh(t, out=t)
    t += 1
    z *= t
    z *= 0.5
    return pre


def activation_backward(name: str | None, out, pre, d) -> None:
    """Multiply the gradient ``d`` by the activation's derivative, in place. Not collective.

    Parameters
    ----------
    name : {"relu", "tanh", "gelu"} or None
    out : xp.ndarray
        The activation's output (ReLU, tanh read it: ``out > 0``, ``1 - out**2``).
    pre : xp.ndarray or None
        The activation's input (GELU reads it).
    d : xp.ndarray
        The gradient with respect to the output; becomes the gradient with
        respect to the input.
    """
    if name is None:
        return
    if name == "relu":
        d *= out > 0
    elif name == "tanh":
        t = out * out
        t -= 1
        d *= t
        d *= -1
    else:  # d/dz 0.5 z (1 + tanh u) = 0.5 (1 + tanh u) + 0.5 z (1 - tanh^2 u) u', u = c (z + 0.044715 z^3)
        xp = _xp(d)
        u = pre * pre
        du = u * (3 * 0.044715 * _GELU_C)
        du += _GELU_C
        u *= 0.044715
        u += 1
        u *= pre
        u *= _GELU_C
        th = xp.tanh(u)
        g = 1 - th * th
        g *= du
        g *= pre
        g += 1 + th
        g *= 0.5
        d *= g


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


_M64 = 2**64 - 1


def _fmix64(x: int) -> int:
    """SplitMix64's finalizer on a Python int (a bijection of 64-bit words)."""
    x &= _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def _fmix64_xp(xp, x):
    """SplitMix64's finalizer on an xp array of uint64, in place (integer operations: NumPy and CuPy alike)."""
    x ^= x >> xp.uint64(30)
    x *= xp.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> xp.uint64(27)
    x *= xp.uint64(0x94D049BB133111EB)
    x ^= x >> xp.uint64(31)
    return x


def dropout_keep(xp, key: tuple, rows, units: tuple, rate: float, dtype):
    """Inverted dropout's multiplier for rows ``rows`` and units ``units``: 0 or ``1 / (1 - rate)``. Not collective.

    Each element is a hash of ``(key, row, unit)`` (SplitMix64's finalizer over the counter
    ``row * width + unit``, keyed twice): a function of where the element is, never of what was drawn
    before, so a sample keeps its mask whichever rank, device or tensor-parallel slice computes it, and a
    resumed run draws what the uninterrupted one did. Integer operations in ``xp``: one vectorized pass.

    Parameters
    ----------
    xp : module
        NumPy or CuPy.
    key : tuple of int
        What the masks depend on besides the element: ``(seed, step, layer)``.
    rows : xp.ndarray, shape (n,), integer
        Each row's global index (its position in the step's global batch).
    units : (int, int, int)
        ``(lo, hi, width)``: the columns ``[lo, hi)`` of a layer of ``width`` outputs.
    rate : float
        The probability that an element is dropped, ``0 <= rate < 1``.
    dtype : numpy.dtype
        The multiplier's dtype.

    Returns
    -------
    xp.ndarray, shape (n, hi - lo)
    """
    k1 = 0
    for part in key:
        k1 = _fmix64(k1 ^ (int(part) & _M64) ^ 0x9E3779B97F4A7C15)
    k2 = _fmix64(k1 + 0x632BE59BD9B4E019)
    lo, hi, width = units
    x = xp.asarray(rows, dtype=xp.uint64)[:, None] * xp.uint64(width) + xp.arange(lo, hi, dtype=xp.uint64)
    x += xp.uint64(k1)
    x = _fmix64_xp(xp, x)
    x ^= xp.uint64(k2)
    x = _fmix64_xp(xp, x)
    # The top 53 bits are a uniform draw in [0, 2**53): kept when not below rate * 2**53.
    kept = (x >> xp.uint64(11)) >= xp.uint64(int(rate * 2**53))
    return kept.astype(dtype) * dtype.type(1.0 / (1.0 - rate))


class Layer:
    """What a layer says of itself: its parameters' names and shapes, its output width, its initializer, its spec.

    A layer holds no arrays and computes nothing: :class:`hpcgpu.nn.Network` runs a :class:`Sequential` of
    :class:`Dense` layers. For another computation, write a model of one's own (:class:`hpcgpu.nn.Model`) or
    wrap a PyTorch module or JAX function (:class:`hpcgpu.nn.Torch`, :class:`hpcgpu.nn.Jax`).
    """

    def shapes(self) -> list:
        """``[(name, shape)]`` of the layer's parameters, in buffer order (none by default)."""
        return []

    def n_out(self, n_in: int) -> int:
        """The number of output features for ``n_in`` input features (the same by default)."""
        return n_in

    def init(self, seed: int, stream: int) -> dict:
        """Initial values of the parameters as host arrays (none by default).

        Parameters
        ----------
        seed : int
        stream : int
            The layer's index: a separate random stream per layer.
        """
        return {}

    def spec(self) -> dict:
        """The layer as a JSON-able dict (results files record the model; :func:`from_spec` rebuilds it)."""
        return {"type": type(self).__name__}


class Activation(Layer):
    """An elementwise activation layer (its ``name`` says which); no parameters."""

    name: str | None = None

    def __repr__(self):
        return f"{type(self).__name__}()"


class ReLU(Activation):
    """``max(x, 0)``, elementwise. Folded into the :class:`Dense` layer before it by :class:`Sequential`."""

    name = "relu"


class Tanh(Activation):
    """``tanh(x)``, elementwise. Folded into the :class:`Dense` layer before it by :class:`Sequential`."""

    name = "tanh"


class GELU(Activation):
    """GELU, tanh approximation (Hendrycks & Gimpel, arXiv:1606.08415). Folded into the Dense before it."""

    name = "gelu"


class Dense(Layer):
    """A fully connected layer ``y = act(x @ W + b)``.

    Parameters
    ----------
    n_in, n_out : int
        Input and output features: ``W`` is ``(n_in, n_out)`` (input-major,
        as the trainer's results files store it), ``b`` is ``(n_out,)``.
        One number alone is the output features, Keras's ``Dense(units)``:
        the input features are the previous Dense layer's outputs in a
        :class:`Sequential`, and for the first, the data's features, taken
        by the trainer at the first ``fit``.
    activation : {"relu", "tanh", "gelu"} or None
        Applied to the output (Keras's ``Dense(units, activation=...)``, also
        as the second argument after ``units``, ``Dense(64, "relu")``);
        ``Sequential([Dense(a, b), ReLU()])`` is the same layer.

    Notes
    -----
    Initial weights are He-uniform, U(-sqrt(6 / n_in), sqrt(6 / n_in))
    (He et al., ICCV 2015), biases 0, drawn from a counter-based stream per
    layer (:func:`hpcgpu.nn.uniform_block`): the same values on every rank,
    device and tensor-parallel split.
    """

    def __init__(self, n_in: int | None, n_out: int | str | None = None, activation: str | None = None):
        if isinstance(n_out, str) and activation is None:  # Keras's Dense(units, activation)
            n_out, activation = None, n_out
        if n_out is None:  # Dense(units): the input width comes from the layer before, or the data
            n_in, n_out = None, n_in
        if not (_whole(n_out) and (n_in is None or _whole(n_in))):
            raise agreed(TypeError(f"Dense takes integer sizes, got Dense({n_in!r}, {n_out!r})"))
        if (n_in is not None and int(n_in) < 1) or int(n_out) < 1:
            raise agreed(ValueError(f"Dense needs positive sizes, got Dense({n_in}, {n_out})"))
        if activation is not None and activation not in ACTIVATIONS:
            raise agreed(ValueError(f"activation must be one of {', '.join(ACTIVATIONS)} or None, got {activation!r}"))
        self.n_in = None if n_in is None else int(n_in)
        self.n_out_, self.activation = int(n_out), activation

    def shapes(self) -> list:
        """``[("weight", (n_in, n_out)), ("bias", (n_out,))]``."""
        return [("weight", (self.n_in, self.n_out_)), ("bias", (self.n_out_,))]

    def n_out(self, n_in: int) -> int:
        """``n_out``; ``n_in`` must be the layer's.

        Raises
        ------
        ValueError
            ``n_in`` differs from the layer's input size.
        """
        if n_in != self.n_in and self.n_in is not None and n_in is not None:
            raise agreed(ValueError(f"Dense({self.n_in}, {self.n_out_}) follows a layer of {n_in} outputs"))
        return self.n_out_

    def init(self, seed: int, stream: int) -> dict:
        """He-uniform weights of stream ``(seed, stream)``, zero biases (host, float64)."""
        shape = (self.n_in, self.n_out_)
        w = uniform_block(seed, stream, shape, (0, self.n_in), (0, self.n_out_), math.sqrt(6.0 / self.n_in))
        return {"weight": w, "bias": np.zeros(self.n_out_)}

    def spec(self) -> dict:
        """``{"type": "Dense", "n_in", "n_out", "activation"}``."""
        return {"type": "Dense", "n_in": self.n_in, "n_out": self.n_out_, "activation": self.activation}

    def __repr__(self):
        act = f", activation={self.activation!r}" if self.activation else ""
        return f"Dense({self.n_out_}{act})" if self.n_in is None else f"Dense({self.n_in}, {self.n_out_}{act})"


class Dropout(Layer):
    """Inverted dropout of the Dense layer before it, in training only (Keras's and PyTorch's ``Dropout``).

    Each output is zeroed with probability ``rate`` and the others scaled by ``1 / (1 - rate)``; evaluation
    and prediction pass everything.

    Parameters
    ----------
    rate : float
        The probability of dropping an element, ``0 <= rate < 1``.

    Raises
    ------
    TypeError
        ``rate`` is not a number.
    ValueError
        ``rate`` is not in ``[0, 1)``.

    Notes
    -----
    The mask of a sample is drawn from its position in the step's global batch, the step, the seed, the
    layer and the unit (:func:`dropout_keep`), never from a per-rank generator: the trainer draws the same
    masks at any number of data-parallel ranks, so the same seed and global batch give the same model at
    any rank count (to summation order), and in any tensor-parallel split. A Dropout follows a Dense layer
    (after its activation) that is not the last.
    """

    def __init__(self, rate: float):
        if not isinstance(rate, numbers.Real) or isinstance(rate, bool):
            raise agreed(TypeError(f"Dropout takes a rate, a number in [0, 1), got {rate!r}"))
        if not 0 <= float(rate) < 1:
            raise agreed(ValueError(f"Dropout's rate must be in [0, 1), got {rate!r}"))
        self.rate = float(rate)

    def spec(self) -> dict:
        """``{"type": "Dropout", "rate"}``."""
        return {"type": "Dropout", "rate": self.rate}

    def __repr__(self):
        return f"Dropout({self.rate})"


class Flatten(Layer):
    """Samples of any shape as rows of features: ``(n, d1, d2, ...)`` to ``(n, d1 * d2 * ...)`` (Keras's ``Flatten``).

    The first layer of a :class:`Sequential`, for features given as arrays of more than two axes (images, say):
    the trainer takes them as rows (a view, C order), so the Dense layer after it has ``d1 * d2 * ...`` inputs.
    Without it, such features are one line naming the shape. Nothing is trained; in-memory arrays only (an
    HDF5 data set is rows: ``N x D``).
    """

    def spec(self) -> dict:
        """``{"type": "Flatten"}``."""
        return {"type": "Flatten"}

    def __repr__(self):
        return "Flatten()"


class Standardize(Layer):
    """The inputs' standardization ``(x - mean) / std`` per feature, part of the model (Keras's ``Normalization``).

    The first layer of a :class:`Sequential`. Without statistics, the trainer computes them from the
    training rows at the first ``fit`` (Keras's ``adapt``): the global mean and standard deviation of each
    feature over every rank's rows (float64, two passes, summed over the data-parallel ranks); a feature of
    zero deviation is only shifted. The statistics are saved with the model (its description in the results
    file), so ``load_model`` and ``predict`` standardize as training did: the preprocessing travels with the
    model.

    Parameters
    ----------
    mean, std : array_like of shape (D,), optional
        The statistics, both or neither; ``std`` positive.

    Raises
    ------
    ValueError
        One of the two given, lengths that differ, a ``std`` not positive or not finite values.
    """

    def __init__(self, mean=None, std=None):
        if (mean is None) != (std is None):
            raise agreed(ValueError("Standardize takes both mean and std, or neither (the trainer computes them)"))
        self.mean = self.std = None
        if mean is not None:
            self.set(mean, std)

    def set(self, mean, std) -> None:
        """Take the statistics (float64 copies).

        Parameters
        ----------
        mean, std : array_like of shape (D,)

        Raises
        ------
        ValueError
            Lengths that differ, a ``std`` not positive, or values not finite.
        """
        if not all(np.asarray(a).dtype.kind in "biuf" for a in (mean, std)):
            raise agreed(TypeError(f"Standardize: mean and std must be arrays of numbers, got "
                                   f"{np.asarray(mean).dtype} and {np.asarray(std).dtype}"))
        m, s = np.asarray(mean, dtype=np.float64).ravel(), np.asarray(std, dtype=np.float64).ravel()
        if m.shape != s.shape or not m.size:
            raise agreed(ValueError(f"Standardize: mean and std must have one value a feature, got {m.size} and "
                                    f"{s.size}"))
        if not (np.isfinite(m).all() and np.isfinite(s).all() and (s > 0).all()):
            raise agreed(ValueError("Standardize: mean must be finite and std finite and positive"))
        self.mean, self.std = m, s

    @property
    def adapted(self) -> bool:
        """Whether the statistics are known."""
        return self.mean is not None

    def n_out(self, n_in: int) -> int:
        """``n_in``: one output a feature (the statistics' length must be ``n_in`` when known).

        Raises
        ------
        ValueError
            Statistics of another length.
        """
        if self.adapted and n_in is not None and self.mean.size != n_in:
            raise agreed(ValueError(f"Standardize of {self.mean.size} features before a layer of {n_in} inputs"))
        return n_in

    def spec(self) -> dict:
        """``{"type": "Standardize", "mean": [...], "std": [...]}`` (None before the statistics are known)."""
        return {"type": "Standardize", "mean": None if self.mean is None else self.mean.tolist(),
                "std": None if self.std is None else self.std.tolist()}

    def __repr__(self):
        return f"Standardize({'' if self.adapted else 'not adapted'}{self.mean.size if self.adapted else ''})"


def _check_order(layers) -> None:
    """Flatten first, Standardize first or right after it: the layers that act on the samples as given."""
    lead = 1 if isinstance(layers[0], Flatten) else 0
    for i, lay in enumerate(layers):
        if isinstance(lay, Flatten) and i != 0:
            raise agreed(ValueError("Flatten must be the first layer of a Sequential (the samples' own)"))
        if isinstance(lay, Standardize) and i != lead:
            raise agreed(ValueError("Standardize must be the first layer of a Sequential (the inputs' own), "
                                    "or the second after Flatten"))
    dense = [i for i, lay in enumerate(layers) if isinstance(lay, Dense)]
    for i, lay in enumerate(layers):
        after = i > 0 and isinstance(layers[i - 1], (Dense, Activation))
        if isinstance(lay, Dropout) and not (after and i < dense[-1]):
            raise agreed(ValueError("Dropout must follow a Dense layer (or its activation) that is not the last"))


def _fold(layers) -> list:
    """The layers with each activation folded into the Dense layer before it.

    A ``Dense(units)`` after a Dense layer takes the latter's outputs as its inputs.
    """
    folded: list[Layer] = []
    for lay in layers:
        prev = folded[-1] if folded else None
        if isinstance(lay, Activation) and isinstance(prev, Dense) and prev.activation is None:
            folded[-1] = Dense(prev.n_in, prev.n_out_, lay.name)
        else:
            folded.append(lay)
    width = None
    for i, lay in enumerate(folded):
        if isinstance(lay, Dense):
            if lay.n_in is None and width is not None:
                folded[i] = lay = Dense(width, lay.n_out_, lay.activation)
            width = lay.n_out_
    return folded


class Sequential(Layer):
    """Layers applied one after the other; an activation layer is folded into the :class:`Dense` before it.

    Parameters
    ----------
    *layers : Layer
        ``Sequential(Dense(64, 128), ReLU(), Dense(128, 10))`` or a list of
        layers. Parameter names are ``fc{i}.weight`` and ``fc{i}.bias`` for
        the ``i``-th Dense layer (the names of the trainer's results files).

    Attributes
    ----------
    layers : list of Layer
        After folding: ``Dense(64, 128, activation="relu"), Dense(128, 10)``.
    sizes : list of int or None
        ``[n_in, n_out of each layer]`` when every layer is Dense (what
        :class:`hpcgpu.nn.Network` runs) and the input features are known,
        else None.
    built : bool
        The input features are known: the first Dense layer was given them,
        or :meth:`build` was called (the trainer's first ``fit``).
    dense : bool
        Every layer after Flatten and Standardize is Dense (or Dropout).
    flatten : bool
        The first layer is :class:`Flatten`: the model takes samples of any shape.
    activations : list
        Each Dense layer's activation (``None``: linear).
    dropouts : list of float
        The rate of the :class:`Dropout` after each Dense layer (0: none).

    Raises
    ------
    ValueError
        No layers; consecutive layers whose sizes do not fit.
    """

    def __init__(self, *layers):
        if len(layers) == 1 and isinstance(layers[0], (list, tuple)):
            layers = tuple(layers[0])
        if not layers:
            raise agreed(ValueError("Sequential needs at least one layer"))
        for lay in layers:
            if not isinstance(lay, Layer):
                raise agreed(TypeError(f"Sequential takes hpcgpu.nn layers, got {type(lay).__name__}"))
        _check_order(layers)
        self.layers = folded = _fold(layers)
        first = next((lay for lay in folded if isinstance(lay, Dense)), None)
        if first is None:
            raise agreed(ValueError("Sequential needs at least one Dense layer"))
        self.built = first.n_in is not None  # else the data's features decide it (build)
        n = first.n_in
        for lay in folded:
            n = lay.n_out(n)
        self.n_in_, self.n_out_ = first.n_in, n
        self.flatten = isinstance(folded[0], Flatten)
        rest = folded[1:] if self.flatten else folded
        self.standardize = rest[0] if rest and isinstance(rest[0], Standardize) else None
        body = rest[1:] if self.standardize is not None else rest
        if self.standardize is not None:
            self.standardize.n_out(first.n_in)
        self.dense = all(isinstance(lay, (Dense, Dropout)) for lay in body)
        dense = [lay for lay in body if isinstance(lay, Dense)]
        self.sizes = [dense[0].n_in] + [lay.n_out_ for lay in dense] if self.dense and self.built else None
        self.activations = [lay.activation for lay in folded if isinstance(lay, Dense)]
        self.dropouts = [0.0] * len(self.activations)
        i = -1
        for lay in folded:
            i += isinstance(lay, Dense)
            if isinstance(lay, Dropout):
                self.dropouts[i] = lay.rate

    def build(self, n_in: int) -> Sequential:
        """Give the first Dense layer, made as ``Dense(units)``, its input features. Not collective.

        What the trainer does at the first ``fit``, with the data's features (Keras's ``build``).

        Parameters
        ----------
        n_in : int
            The input features (after :class:`Flatten`, the product of a sample's axes).

        Returns
        -------
        Sequential
            This one, built.
        """
        if not self.built:
            layers = list(self.layers)
            i = next(i for i, lay in enumerate(layers) if isinstance(lay, Dense))
            layers[i] = Dense(int(n_in), layers[i].n_out_, layers[i].activation)
            self.__init__(*layers)
        return self

    def named(self) -> list:
        """``[(prefix, layer)]``: ``("fc{i}", Dense)`` by Dense index, ``("act{j}", layer)`` for the others."""
        out, i = [], 0
        for j, lay in enumerate(self.layers):
            if isinstance(lay, Dense):
                out.append((f"fc{i}", lay))
                i += 1
            else:
                out.append((f"act{j}", lay))
        return out

    def shapes(self) -> list:
        """``[(name, shape)]`` of every parameter, layer by layer (``fc0.weight``, ``fc0.bias``, ...)."""
        return [(f"{p}.{n}", s) for p, lay in self.named() for n, s in lay.shapes()]

    def n_out(self, n_in: int) -> int:
        """The last layer's output features (``n_in`` must be the first layer's input).

        Raises
        ------
        ValueError
            ``n_in`` differs from the first layer's input size.
        """
        if n_in != self.n_in_:
            raise agreed(ValueError(f"a Sequential of input {self.n_in_} follows a layer of {n_in} outputs"))
        return self.n_out_

    def init(self, seed: int, stream: int = 0) -> dict:
        """Every parameter's initial value (host), by name; Dense layer ``i`` draws from stream ``i``."""
        out = {}
        for i, (p, lay) in enumerate((p, lay) for p, lay in self.named() if lay.shapes()):
            out.update({f"{p}.{n}": v for n, v in lay.init(seed, i).items()})
        return out

    def spec(self) -> dict:
        """``{"type": "Sequential", "layers": [each layer's spec]}``."""
        return {"type": "Sequential", "layers": [lay.spec() for lay in self.layers]}

    def __repr__(self):
        return "Sequential(" + ", ".join(map(repr, self.layers)) + ")"


def _whole(value) -> bool:
    """Whether ``value`` is an integer (Python's or NumPy's; not a bool, a float or a string): a size."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def from_spec(spec: dict) -> Layer:
    """The layer a :meth:`Layer.spec` describes (what a results file records). Not collective.

    Parameters
    ----------
    spec : dict

    Returns
    -------
    Layer

    Raises
    ------
    ValueError
        Not a dict, an unknown layer type, or a part of the description missing (every rank alike).
    """
    if not isinstance(spec, dict):
        raise agreed(ValueError(f"a layer's description must be a JSON object, got {type(spec).__name__}"))
    kind = spec.get("type")
    try:
        if kind == "Sequential":
            return Sequential([from_spec(s) for s in spec["layers"]])
        if kind == "Dense":
            return Dense(spec["n_in"], spec["n_out"], spec.get("activation"))
    except KeyError as e:
        raise agreed(ValueError(f"the description of a {kind} layer has no {e.args[0]!r}")) from None
    if kind == "Standardize":
        return Standardize(spec.get("mean"), spec.get("std"))
    if kind == "Dropout":
        return Dropout(spec.get("rate", 0.0))
    known = {"ReLU": ReLU, "Tanh": Tanh, "GELU": GELU, "Flatten": Flatten}
    if kind in known:
        return known[kind]()
    raise agreed(ValueError(f"unknown layer type {kind!r} in a model description"))
