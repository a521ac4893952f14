"""A training step's forward and backward passes replayed from a CUDA graph.

On a GPU a small step is bound by kernel launches: CuPy launches each kernel
from Python (about 19 us each on an H100 with CuPy 14), and a step of an
L-layer MLP is 3 + 6 L of them. :class:`StepGraph` captures the step's
forward and backward passes once (every GEMM, the fused bias/ReLU kernels,
the loss kernel and the sums: :meth:`hpcgpu.nn.Network.loss_and_grad`)
and replays them as one launch. The batch gather before it and the update
after it stay eager (the update's learning rate changes from step to step,
and it runs after the gradient's reduction).

The GEMMs. CuPy refuses every cuBLAS call during a capture (each of its
wrappers sets the handle's stream first, and ``cublasSetStream`` on a
capturing stream raises ``NotImplementedError``), so under a capture
:func:`hpcgpu._device.gemm` calls ``cublasGemmEx`` through nvmath-python's
binding (``nvmath.bindings.cublas``, which has no such guard) on hpcgpu's
own cuBLAS handle, whose stream and workspace
:func:`hpcgpu._device.capture` set before the capture began (cuBLAS's
"CUDA Graphs Support": its calls may be captured; host ``alpha``, ``beta``
are read at the capture). Without nvmath-python the steps run eagerly and
the run's first line says why (:func:`hpcgpu._device.graphs_available`).

Soundness. A graph names raw addresses, so it replays only while every
array it touches is the one it was captured with: the step's inputs (the
sampler's batch buffers), the parameters, the gradient and its statistics
(the key of a capture, compared by identity; another key captures again),
and the arrays allocated during the capture, which :func:`hpcgpu._device.capture`
holds for the graph's life. The first step of a capture also runs eagerly
(compiling kernels, creating cuBLAS's workspace, filling the pool before the
capture, as CUDA's and PyTorch's guides advise) and the replay's gradient
and loss are compared with the eager ones once; a capture that fails or
disagrees turns graphs off for the run with a warning, and the step's
eager result stands. Where the work cannot be captured the step is eager:
MPI inside the backward pass (the bucketed overlap, tensor parallelism),
gradient accumulation, mixed precision, NumPy.

Reference: CUDA C++ Programming Guide, "CUDA Graphs" (stream capture);
PyTorch, ``torch.cuda.graphs`` ("whole-network capture": static inputs,
a private memory pool, warm-up before capture).
"""

from __future__ import annotations

import sys

import numpy as np

from .. import _device

__all__ = ["StepGraph", "graphs_plan"]


def graphs_plan(config, xp, compute_dtype, overlap: bool, capturable: bool = True) -> tuple[bool, str]:
    """Whether a run's steps are replayed from a CUDA graph, and why not. Not collective.

    Parameters
    ----------
    config : hpcgpu.train.TrainConfig
        Reads ``cuda_graphs`` ("auto" or "off"), ``grad_accum_steps`` and
        ``tensor_parallel``.
    xp : module
        The array module (graphs only with CuPy).
    compute_dtype : numpy.dtype or None
        The GEMMs' 16-bit type under mixed precision.
    overlap : bool
        The gradient's reduction is posted from inside the backward pass.
    capturable : bool
        The model declares its step capturable (``Capabilities.cuda_graphs``); a model of one's own does not
        (its kernels are not known to be).

    Returns
    -------
    (bool, str)
        True and ``""``, or False and the reason in a few words (empty for
        NumPy, where there is nothing to say).
    """
    if xp is np:
        return False, ""
    if config.cuda_graphs == "off":
        return False, "--cuda-graphs off"
    if not capturable:
        return False, "a model of one's own"
    ok, why = _device.graphs_available()
    if not ok:
        return False, why
    if config.tensor_parallel > 1:
        return False, "tensor parallel: MPI inside the step"
    if overlap:
        return False, "bucketed reduction: MPI inside the backward pass"
    if config.grad_accum_steps > 1:
        return False, "gradient accumulation"
    if compute_dtype is not None:
        return False, "mixed precision"
    return True, ""


class StepGraph:
    """Runs :meth:`hpcgpu.nn.Network.loss_and_grad` of one batch, replayed from a CUDA graph.

    Not collective. One graph at a time: a step whose key (the batch
    arrays, the model's flat buffers, the loss scale) differs from the
    captured one captures again.

    Parameters
    ----------
    model : hpcgpu.nn.Network
        On a GPU (CuPy arrays).
    warn : callable
        ``warn(message)`` when graphs are turned off for the run (this
        rank's stderr, naming it, in the trainer).

    Attributes
    ----------
    on : bool
        False once a capture failed or disagreed: every later step is eager.
    captures : int
        Graphs captured so far.
    replays : int
        Steps run from a graph (the capturing step's replay included).
    """

    RTOL = 1e-2
    """Replay against eager, layer by layer: elementwise ``rtol``, and ``atol`` ``RTOL / 10`` of the layer's largest.

    Loose on purpose: cuBLAS may pick another algorithm under capture
    (another rounding, TF32 included); a missing or stale kernel is off by
    the gradient itself.
    """

    def __init__(self, model, warn=None):
        self.model = model
        self.warn = warn or (lambda msg: print(msg, file=sys.stderr, flush=True))
        self.on = True
        self.captures = self.replays = 0
        self._graph = None
        self._key: tuple | None = None
        self._held: list = []
        self._stream = None

    def _key_of(self, X, y, loss_scale: float) -> tuple:
        m = self.model
        return (X, y, m.params, m.grad, m.stats, *m.step_buffers(X.shape[0]), float(loss_scale))

    def _same(self, key: tuple) -> bool:
        old = self._key
        return old is not None and len(old) == len(key) and all(
            a is b for a, b in zip(old[:-1], key[:-1], strict=True)) and old[-1] == key[-1]

    def step(self, X, y, loss_scale: float = 1.0) -> None:
        """Forward and backward pass of batch ``(X, y)``: the gradient and statistics in the model's buffers.

        Parameters
        ----------
        X : cupy.ndarray, shape (n, D)
            The batch, in a buffer that the next steps reuse (a new buffer
            captures again).
        y : cupy.ndarray, shape (n,), int64
        loss_scale : float
            As :meth:`hpcgpu.nn.Network.loss_and_grad`.
        """
        model = self.model
        if not self.on:
            model.loss_and_grad(X, y, loss_scale=loss_scale)
            return
        key = self._key_of(X, y, loss_scale)
        if self._same(key):
            self._graph.launch()
            self.replays += 1
            return
        self._capture(X, y, loss_scale)

    def _capture(self, X, y, loss_scale: float) -> None:
        model = self.model
        self._graph, self._held, self._key = None, [], None
        model.loss_and_grad(X, y, loss_scale=loss_scale)  # warm-up, and the reference the replay must match
        key = self._key_of(X, y, loss_scale)  # the step's buffers exist now
        want_g, want_s = model.grad.copy(), model.stats.copy()
        try:
            if self._stream is None:  # one capture stream: a new capture reuses the pool's blocks of the last
                self._stream = model.xp.cuda.Stream(non_blocking=True)
            graph, held = _device.capture(lambda: model.loss_and_grad(X, y, loss_scale=loss_scale), self._stream)
            graph.launch()
        except Exception as e:  # CuPy or CUDA refused something in the step: eager from now on
            self._off(f"the step could not be captured ({type(e).__name__}: {' '.join(str(e).split())})")
            model.grad[...] = want_g  # what the failed capture left in the buffers is not the step's
            model.stats[...] = want_s
            return
        # once a capture: the replay's result against the eager one, on the host (a synchronization)
        got_g, got_s = _device.asnumpy(model.grad), _device.asnumpy(model.stats)
        ref_g, ref_s = _device.asnumpy(want_g), _device.asnumpy(want_s)
        close = all(self._close(got_g[lo:hi], ref_g[lo:hi]) for lo, hi in model.layer_ranges()) and \
            np.allclose(got_s, ref_s, rtol=self.RTOL, atol=1.0, equal_nan=True)  # a count may flip at a tie
        if not close:
            self._off("the replayed step disagreed with the same step run eagerly")
            model.grad[...] = want_g
            model.stats[...] = want_s
            return
        self._graph, self._held, self._key = graph, held, key
        self.captures += 1
        self.replays += 1

    @classmethod
    def _close(cls, got, ref) -> bool:
        """One layer's gradient: elementwise within ``RTOL``, or ``RTOL / 10`` of the layer's largest."""
        big = float(np.nanmax(np.abs(ref), initial=0.0)) if ref.size else 0.0
        return bool(np.allclose(got, ref, rtol=cls.RTOL, atol=cls.RTOL * 0.1 * big, equal_nan=True))

    def _off(self, why: str) -> None:
        self.on = False
        self.warn(f"hpcgpu.train: warning: CUDA graphs off for this run: {why}; the steps run eagerly")
