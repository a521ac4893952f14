"""Models with autograd: a PyTorch ``nn.Module``, a JAX function or a Keras 3 model, as models of one's own.

Each adapter implements the model contract (:class:`hpcgpu.nn.Model`: ``init``, ``loss_and_grad``,
``predict``) with the framework's own automatic differentiation, so the trainer, the reducer, the
optimizers, checkpoints, ``predict``, ``load_weights`` and the HDF5 results work unchanged, and the same
seed gives the same model at any number of ranks: the gradient is the framework's gradient of the SUM of
per-sample losses, which the trainer divides by the global batch once.

What moves per step (host, NumPy):

- :class:`Torch`: the parameters are the trainer's flat buffer itself (``torch.from_numpy`` of its views, no
  copy), the micro-batch likewise, and each parameter's ``.grad`` a view of the trainer's flat gradient buffer,
  into which autograd adds in place (DDP's ``gradient_as_bucket_view``): no copy. Each parameter's gradient,
  when final, lets the reducer post its bucket's Allreduce during the backward pass (the
  ``register_post_accumulate_grad_hook`` of each parameter). On a GPU the arrays cross by DLPack, no copy
  either.
- :class:`Jax`: on the host, ``jax.jit`` runs on JAX's CPU device (whatever GPU JAX may see: a rank on the
  host computes on the host); the parameters (its non-trainable leaves too) and the micro-batch are copied to it
  at the call (one copy each), and the gradient is read back without a copy, then copied into the flat buffer.
  On a GPU the parameters, the micro-batch, the gradient and the outputs cross by DLPack (no copy through the
  host, on the rank's own GPU; the non-trainable leaves, held on the host, are copied there), after one wait
  for the trainer's stream (JAX's DLPack import is not ordered with it); a JAX without that GPU gets host
  copies instead. JAX is started without preallocating the GPU's memory
  (``XLA_PYTHON_CLIENT_PREALLOCATE=false`` unless the user set it), which it shares with CuPy and other ranks.
- :class:`Keras`: a Keras 3 model on the JAX backend, run as :class:`Jax` runs a function, through the model's
  ``stateless_call`` (its variables as arguments): what moves is :class:`Jax`'s.

Neither splits over ranks (tensor parallelism) or runs in a CUDA graph: those are the built-in layers' (the
trainer refuses them for these models with one line). :class:`Torch` runs ``bf16-mixed`` (``torch.autocast``);
:class:`Jax` computes in its parameters' type.
"""

from __future__ import annotations

import contextlib
import hashlib
import os

import numpy as np

from ..errors import agreed
from ._model import ContractError, Model

__all__ = ["Torch", "Jax", "Keras"]

_RANK_THREADS: int | None = None
"""The rank's thread count (what :func:`hpcgpu.init` gave NumPy's BLAS), taken by the first adapter of the process
for PyTorch; 0 when unknown."""


def _import(name: str, extra: str):
    if name in ("jax", "keras"):
        # JAX's GPU backend takes 75% of the GPU's memory at its start unless told not to: the rank's CuPy pool
        # (the trainer's buffers), and every other rank sharing the GPU, then fail to allocate. A user's own
        # setting is kept; it is read when JAX's backend starts (its first computation), not at import.
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    try:
        return __import__(name)
    except ImportError:
        raise ImportError(f"hpcgpu.nn.{extra.capitalize()} needs {name}: pip install {name} (or hpcgpu's "
                          f"{extra} extra)") from None


def _aligned(a):
    """``a``, or a copy of it where its address is not a multiple of 16 bytes.

    XLA refuses such buffers (a view of one parameter in the flat buffer starts where the one before it ends; an
    H200 run failed on it).
    """
    return a if a.data.ptr % 16 == 0 else a.copy()


class _Forked:
    """PyTorch's generators ``gens`` seeded with ``seed`` inside the context, their states put back after it.

    A class, not a ``contextlib.contextmanager`` generator: made at every micro-batch, where the generator's
    decoration and frames cost more than the generators' own calls.
    """

    __slots__ = ("gens", "seed", "states")

    def __init__(self, gens, seed: int):
        self.gens, self.seed = gens, seed

    def __enter__(self):
        self.states = [g.get_state() for g in self.gens]
        for g in self.gens:
            g.manual_seed(self.seed)

    def __exit__(self, *exc):
        for g, state in zip(self.gens, self.states, strict=True):
            g.set_state(state)
        return False


def _host(a):
    """``a`` as a NumPy array (a CuPy array is copied to the host)."""
    from .. import _device

    return _device.asnumpy(a)


class Torch(Model):
    """A PyTorch module trained by hpcgpu: the module's parameters live in the trainer's flat buffer.

    Not collective. The module runs statelessly (``torch.func.functional_call``) on the parameters the
    trainer hands it, so the module object itself is never changed by training; :meth:`state_dict`
    gives a trained model back to plain PyTorch from a results file.

    Parameters
    ----------
    module : torch.nn.Module
        Any module (``x -> outputs``, outputs of shape (n, k) or (n,)). Its trainable parameters
        (``requires_grad``; a tied weight once, under its first name) are the trainer's. Its buffers
        (BatchNorm's running statistics) and frozen parameters (``requires_grad=False``) stay in the module,
        the buffers updated there in training; the trainer makes every data-parallel rank's those of data rank
        0, the frozen parameters once, the buffers before each step (DDP's ``broadcast_buffers``), and keeps
        them in checkpoints and the results file (``/buffers``).
    loss : callable
        ``loss(outputs, y)``, the SUM over the samples: ``torch.nn.CrossEntropyLoss(reduction="sum")`` for
        integer labels, ``torch.nn.MSELoss(reduction="sum")`` for targets. A loss module with another
        ``reduction`` is refused (the mean would make the gradient depend on the number of ranks); a loss
        function that averages (``F.cross_entropy``'s default) at the first step, where the trainer compares
        the loss of a micro-batch with the sum of its halves' once (:meth:`forward_loss`).

    Raises
    ------
    ImportError
        PyTorch is not installed.
    TypeError
        ``module`` is not a ``torch.nn.Module`` or has no trainable parameter; ``loss`` is not callable or
        does not sum. At the first step (the contract's agreed line): a parameter with a post-accumulate-grad
        hook.

    Notes
    -----
    A hook registered on a trainable parameter (``p.register_hook(fn)``, before ``fit`` or between steps) runs
    on each micro-batch's gradient of this rank's loss SUM as autograd computes it, before the gradient is added
    into the buffer the reducer reduces (as in PyTorch, before ``.grad``): what it returns is what is reduced.
    ``register_post_accumulate_grad_hook`` is the reducer's own place: refused.

    PyTorch runs the module on the rank's threads (those :func:`hpcgpu.init` gave NumPy's BLAS: the Slurm CPU
    set, ``OMP_NUM_THREADS``), and NumPy's BLAS then runs one thread in this process: two thread pools
    spinning on the same cores made a step 30 times slower (2 cores, measured).

    A training step puts the module in training mode when it is in eval mode; ``predict``, ``evaluate`` and
    ``fit``'s validation run it in eval mode under ``torch.no_grad()``, forward only (:meth:`forward_loss`),
    and put each submodule's mode back, so evaluating never changes the model (BatchNorm's statistics
    included); a submodule you set to eval mode yourself (a frozen BatchNorm) stays so, as under DDP, which
    never calls ``train()``.

    Integer features reach the module as int64 (an ``nn.Embedding``'s indices), floating ones in the trainer's
    type; the module's floating buffers are cast to that type at its first step (``64-true`` for a module made
    in float32). Its outputs come back in their own shape ((n,) stays (n,)), bfloat16 ones as float32.

    Dropout and other randomness in a training step draw from PyTorch's generator seeded for that step,
    micro-batch and data-parallel rank (:meth:`set_rng_key`, called by the trainer), the process's own
    generator forked around the step and left as it was: each rank draws its own masks, the same run after
    run, and a resumed run draws what the uninterrupted one did (bitwise). On a GPU the device's generator
    is forked and seeded alike.
    """

    READY_OPTIONAL = True
    """:meth:`loss_and_grad_into` takes ``ready=None`` where nothing waits for single gradients. Read from the
    class that defines the method: a subclass that overrides it gets a ``ready`` to call."""

    def __init__(self, module, loss):
        torch = self._torch = _import("torch", "torch")
        if not isinstance(module, torch.nn.Module):
            raise agreed(TypeError(f"Torch: module must be a torch.nn.Module, got {type(module).__name__}"))
        if not callable(loss):
            raise agreed(TypeError(f"Torch: loss must be callable (loss(outputs, y), the sum), got "
                                   f"{type(loss).__name__}"))
        if getattr(loss, "reduction", "sum") != "sum":
            raise agreed(TypeError(f"Torch: the loss must sum over the samples ({type(loss).__name__}(reduction="
                                   f"\"sum\")), got reduction={loss.reduction!r}: hpcgpu divides by the global "
                                   "batch once"))
        params = dict(module.named_parameters())  # a tied weight once, under its first name (functional_call's)
        self.names = [n for n, p in params.items() if p.requires_grad]
        if not self.names:
            raise agreed(TypeError(f"Torch: {type(module).__name__} has no trainable parameter"))
        self.frozen = [n for n, p in params.items() if not p.requires_grad]
        self._params = [params[n] for n in self.names]  # whose hooks the leaf tensors take (_hooks_of)
        self.module, self.loss = module, loss
        self._threads_set = False
        self._key = None
        self._autocast = None  # torch's 16-bit type of the forward pass under mixed precision
        self._device = None  # where the module's buffers are moved to: the trainer's arrays' (device, dtype)
        self._torch_streams = {}  # CuPy's views of torch's streams, by handle (made once each)

    def __repr__(self) -> str:
        return f"Torch({type(self.module).__name__})"

    def _take_threads(self) -> None:
        """PyTorch computes on the rank's threads; NumPy's BLAS, idle meanwhile, on one (first call only).

        The rank's count is what :func:`hpcgpu.init` gave NumPy's BLAS (the Slurm CPU set, OMP_NUM_THREADS),
        not PyTorch's default of every core of the node. Two pools spinning on the same cores (PyTorch's
        OpenMP threads and OpenBLAS's after the optimizer's axpy) made a step 30 times slower on 2 cores.
        """
        global _RANK_THREADS
        if self._threads_set:
            return
        from .. import _blas

        if _RANK_THREADS is None:  # once a process: after it NumPy's BLAS runs one thread, which is not the rank's
            _RANK_THREADS = _blas.threads() or 0
            if _RANK_THREADS:
                _blas.set_threads(1)
        if _RANK_THREADS:  # every adapter alike: another thread count would sum in another order
            self._torch.set_num_threads(_RANK_THREADS)
        self._threads_set = True

    def buffers(self) -> dict:
        """The module's state that is not trained, by name, as live arrays.

        NumPy views of its tensors (CuPy's on a GPU): its buffers (BatchNorm's running statistics) and its frozen
        parameters (``requires_grad=False``).

        Not collective. The trainer writes into them (data rank 0's, on every rank: the frozen parameters once,
        the buffers before each step, :meth:`hpcgpu.train.groups.ProcessGroups.share_buffers`) and keeps them in
        checkpoints and the results file (``/buffers``).

        Returns
        -------
        dict of str to array
            A tied buffer or frozen parameter once, under its first name.
        """
        out = {}
        params = dict(self.module.named_parameters())
        for n, b in [*self.module.named_buffers(), *((n, params[n]) for n in self.frozen)]:
            if b.device.type == "cpu":
                out[n] = b.detach().numpy()
            else:
                import cupy

                out[n] = cupy.from_dlpack(b.detach())
        return out

    def constant_buffers(self) -> frozenset:
        """The names in :meth:`buffers` that training never changes: the frozen parameters. Not collective.

        The trainer makes them data rank 0's once, where the buffers are shared before every step (a frozen
        backbone is not sent again each step).

        Returns
        -------
        frozenset of str
        """
        return frozenset(self.frozen)

    precisions = ("bf16-mixed",)
    """The mixed precision it takes: ``bf16-mixed`` (``torch.autocast`` to bfloat16 on float32 master weights).
    ``16-mixed`` would need its loss scale inside autograd (``torch.amp.GradScaler``'s part): not built."""

    def set_compute_dtype(self, name: str) -> None:
        """Run the forward pass (and the loss) under ``torch.autocast`` to ``name``. Not collective.

        Called by the trainer under ``precision="bf16-mixed"``: the parameters stay float32 (the trainer's
        master weights, the optimizer's and the gradient's type), PyTorch's autocast computes the matrix
        products in bfloat16, and the backward pass gives float32 gradients.

        Parameters
        ----------
        name : {"bfloat16"}
            The compute type.

        Raises
        ------
        ValueError
            Another type.
        """
        if name != "bfloat16":
            raise ValueError(f"Torch: mixed precision computes in bfloat16, not {name}")
        self._autocast = self._torch.bfloat16

    def _autocasting(self, device):
        """``torch.autocast`` to the compute type on ``device``'s kind, or no context without mixed precision."""
        import contextlib

        if self._autocast is None:
            return contextlib.nullcontext()
        return self._torch.autocast(device_type=device.type, dtype=self._autocast)

    def set_rng_key(self, key) -> None:
        """Seed the next micro-batch's random draws (dropout) from ``key``. Not collective.

        Parameters
        ----------
        key : tuple of int
            ``(seed, step, micro_batch, data-parallel rank)``, from the trainer before each micro-batch.
        """
        self._key = tuple(int(k) for k in key)

    def _seeded(self, device):
        """A context in which PyTorch's generators draw from the current key, put back as they were after it.

        The host's generator, and ``device``'s when it is a GPU; no context without a key (``check_grad``, a
        step outside the trainer). The generators are seeded directly: ``torch.manual_seed`` also queues a
        seed for every CUDA device with a formatted stack trace each call (0.2 ms a step, measured).
        """
        if self._key is None:
            return contextlib.nullcontext()
        torch = self._torch
        # a 63-bit hash of the key: BLAKE2b of its text (1 us; NumPy's SeedSequence costs 50 us a micro-batch)
        seed = int.from_bytes(hashlib.blake2b(repr(self._key).encode(), digest_size=8).digest(), "little") >> 1
        gens = [torch.default_generator]
        if device.type == "cuda":
            gens.append(torch.cuda.default_generators[device.index if device.index is not None
                                                      else torch.cuda.current_device()])
        return _Forked(gens, seed)

    def init(self, rng):
        """The module's parameters as it holds them (its own initialization), by name."""
        params = dict(self.module.named_parameters())
        return {n: params[n].detach().cpu().numpy().copy() for n in self.names}

    def _tensor(self, a):
        t = self._torch
        return t.from_numpy(a) if isinstance(a, np.ndarray) else t.from_dlpack(a)

    def _array(self, tensor, like):
        """``tensor`` as ``like``'s kind of array (NumPy or CuPy): bfloat16 (autocast's outputs) as float32.

        NumPy has no bfloat16 of its own (ml_dtypes' is not PyTorch's to give), so a bfloat16 tensor is widened to
        float32 first, which holds each of its values exactly.
        """
        tensor = tensor.detach()
        if tensor.dtype == self._torch.bfloat16:
            tensor = tensor.float()
        if isinstance(like, np.ndarray):
            return tensor.numpy()
        import cupy  # a device array: CuPy is there

        return cupy.from_dlpack(tensor)

    def _place(self, device, dtype) -> None:
        """Move the module (its buffers: BatchNorm's running statistics) to ``device`` and floating ``dtype``, once.

        ``device`` and ``dtype`` are the trainer's arrays' (its parameters' type: float64 under ``64-true`` for a
        module made in float32). Its parameters take no part (the trainer's buffers stand in for them); its
        buffers must be where the micro-batch is, in the parameters' type. Their values move with them (written
        before the first step, a resume's included).
        """
        if (device, dtype) != self._device:
            self.module.to(device=device, dtype=dtype)
            self._device = (device, dtype)

    @staticmethod
    def _stream(x):
        """The trainer's stream (CuPy's current stream in this thread) when ``x`` is a device array, else None."""
        if isinstance(x, np.ndarray):
            return None
        import cupy

        return cupy.cuda.get_current_stream()

    def _after_torch(self, ours) -> None:
        """Order ``ours`` after the work queued so far on torch's current stream: an event, no host wait.

        Called for every parameter of every micro-batch: CuPy's view of torch's stream is made once a stream.
        """
        handle = self._torch.cuda.current_stream().cuda_stream
        theirs = self._torch_streams.get(handle)
        if theirs is None:
            import cupy

            theirs = self._torch_streams[handle] = cupy.cuda.ExternalStream(handle)
        ours.wait_event(theirs.record())

    def _ready_on(self, ours, ready, name) -> None:
        """``ready(name)`` from a post-accumulate-grad hook on a GPU, with the streams ordered.

        Autograd runs a CUDA backward pass in a thread of its own, whose current torch stream is the one that
        wrote this gradient and whose CuPy stream (CuPy's is per thread) is the default: the trainer's stream
        ``ours`` first waits for torch's (an event), then is CuPy's current stream while the reducer posts the
        bucket, so NCCL's stream, or the staged path's wait, is ordered after the gradient.
        """
        import cupy

        self._after_torch(ours)
        before = cupy.cuda.get_current_stream()
        ours.use()
        try:
            ready(name)
        finally:
            before.use()

    def _outputs(self, out):
        """``out``, the module's outputs, when they are one tensor (:class:`ContractError` otherwise)."""
        if not isinstance(out, self._torch.Tensor):
            raise ContractError(f"Torch: {type(self.module).__name__} returned a {type(out).__name__}, not a tensor: "
                                "its forward must return the outputs as one tensor, (n, k) or (n,)")
        return out

    def _loss_sum(self, loss):
        """``loss``, what the loss returned, when it is one number in a tensor (:class:`ContractError` otherwise)."""
        if not isinstance(loss, self._torch.Tensor):
            raise ContractError(f"Torch: the loss returned a {type(loss).__name__}, not a tensor: loss(outputs, y) "
                                "must return the sum over the samples as a 0-d tensor")
        if loss.numel() != 1:
            raise ContractError(f"Torch: the loss returned a tensor of shape {tuple(loss.shape)}, not one number: "
                                "loss(outputs, y) must return the sum over the samples (reduction=\"sum\")")
        return loss

    def _target(self, y, outputs):
        t = self._tensor(np.ascontiguousarray(y) if isinstance(y, np.ndarray) else y).to(outputs.device)
        if not t.is_floating_point():
            return t.long()
        return t.reshape(outputs.shape) if t.numel() == outputs.numel() else t

    def loss_and_grad(self, params, x, y):
        """The loss sum, its gradient by name (autograd), and the outputs. Not collective."""
        torch = self._torch
        self._take_threads()
        ps = {n: self._tensor(params[n]).requires_grad_(True) for n in self.names}
        self._take_hooks(ps)
        if not self.module.training:  # as loss_and_grad_into
            self.module.train()
        xt = self._tensor(x)
        self._place(xt.device, ps[self.names[0]].dtype)
        with torch.enable_grad(), self._seeded(xt.device):
            with self._autocasting(xt.device):
                out = self._outputs(torch.func.functional_call(self.module, ps, (xt,)))
                loss = self._loss_sum(self.loss(out, self._target(y, out)))
            grads = torch.autograd.grad(loss, [ps[n] for n in self.names])
        return (float(loss.detach()), {n: self._array(g, x) for n, g in zip(self.names, grads, strict=True)},
                self._array(out, x))

    def loss_and_grad_into(self, params, grads, x, y, forward_done, ready):
        """The loss sum's gradient added into ``grads``, the trainer's flat gradient buffer. Not collective.

        Calls ``forward_done(loss_sum, outputs)`` after the forward pass, then ``ready(name)`` as autograd
        finishes each parameter. Each
        parameter's ``.grad`` is a view of the buffer (``torch.from_numpy``; DLPack on a GPU), so autograd
        accumulates into it in place, as DDP's ``gradient_as_bucket_view``: no copy of the gradient. A
        post-accumulate-grad hook on each parameter tells the trainer its gradient is final, so the reducer posts
        a bucket's Allreduce while the backward pass goes on (:class:`hpcgpu.nn.Model`).

        Parameters
        ----------
        params, grads : dict of str to array
            Views of the trainer's flat parameter and gradient buffers, by name.
        x, y : array
            The micro-batch's rows on this rank.
        forward_done : callable
            ``forward_done(loss_sum, outputs)``: the forward pass's loss sum (a float) and outputs.
        ready : callable or None
            ``ready(name)``: the gradient of parameter ``name`` is final. None when nothing waits for single
            gradients (one rank, no reduction to overlap): no hook is then registered
            (:attr:`READY_OPTIONAL`), which saves autograd's call into Python for every parameter of every
            micro-batch.

        Raises
        ------
        RuntimeError
            Autograd put a new gradient tensor in place of a view (it did not add into the buffer).
        """
        torch = self._torch
        self._take_threads()
        ours = self._stream(x)  # the trainer's stream on a GPU (CuPy's current here), None on the host
        self._ready, self._ours = ready, ours  # what this call's hooks signal, on which stream
        ps = self._leaves(params, grads, signals=ready is not None)
        if not self.module.training:  # (a submodule the user put in eval mode stays so, as under DDP)
            self.module.train()
        xt = self._tensor(x)
        self._place(xt.device, ps[self.names[0]].dtype)
        with torch.enable_grad(), self._seeded(xt.device):
            with self._autocasting(xt.device):  # the backward pass outside it, as PyTorch's AMP recipe has it
                out = self._outputs(self._call_on(ps, xt))
                loss = self._loss_sum(self.loss(out, self._target(y, out)))
            # On a GPU the loss sum stays there (a 0-d array by DLPack: no host wait each micro-batch)
            forward_done(float(loss.detach()) if ours is None else self._array(loss.detach(), x),
                         self._array(out.float() if self._autocast is not None else out, x))
            loss.backward()
        if ours is not None:  # the optimizer, on the trainer's stream, reads what autograd wrote on torch's
            self._after_torch(ours)
        for n, ptr in self._leaf_cache[4]:  # autograd kept adding into the buffer's views: the same memory
            if ps[n].grad.data_ptr() != ptr:
                raise RuntimeError(f"Torch: autograd replaced the gradient view of {n} instead of adding into it")

    def _call_on(self, ps: dict, xt):
        """The module's outputs for ``xt`` with its trainable parameters ``ps`` (leaf tensors), put back after.

        What ``torch.func.functional_call`` does for these names, without its per-call walk of the module
        (its tied names, its checks: 0.16 ms a step, as much as a small MLP's forward pass on one thread): the
        slots of every name of each parameter (a tied weight's too) are found once, in :meth:`_leaves`.
        """
        slots = self._leaf_cache[5]
        saved = [d[a] for d, a, _ in slots]
        try:
            for d, a, n in slots:
                d[a] = ps[n]
            return self.module(xt)
        finally:
            for (d, a, _), t in zip(slots, saved, strict=True):
                d[a] = t

    def _leaves(self, params, grads, signals: bool = True) -> dict:
        """The parameters as leaf tensors on the trainer's buffers, each ``.grad`` a view of its gradient.

        Made once for the same buffers (the trainer passes the same views every step), with (``signals``) a
        post-accumulate-grad hook each that signals :meth:`loss_and_grad_into`'s current ``ready``: the views, the
        hooks and their registration are not remade at every micro-batch (0.1 ms of a 0.85 ms step here). The
        set of the other kind is kept too: with accumulation over several ranks, a step's micro-batches before its
        last signal nothing, its last does.
        """
        key = (tuple((id(params[n]), id(grads[n])) for n in self.names), self._hook_ids())
        sets = getattr(self, "_leaf_sets", None) or {}  # signals -> the set made with or without hooks
        cached = sets.get(signals)
        if cached is not None and cached[0] == key:
            self._leaf_cache = cached
            return cached[1]
        import weakref

        me = weakref.ref(self)  # a hook holding the adapter would make a cycle through torch's C++ hook storage

        def hook(n):
            def signal(_):
                adapter = me()
                if adapter is None:
                    return
                if adapter._ours is None:
                    adapter._ready(n)
                else:
                    adapter._ready_on(adapter._ours, adapter._ready, n)
            return signal

        ps = {}
        for n in self.names:
            p = self._tensor(params[n]).requires_grad_(True)
            p.grad = self._tensor(grads[n])
            if signals:
                p.register_post_accumulate_grad_hook(hook(n))
            ps[n] = p
        self._take_hooks(ps)
        ptrs = [(n, ps[n].grad.data_ptr()) for n in self.names]
        first = {id(p): n for n, p in self.module.named_parameters()}  # a tied weight under its first name
        slots = []  # (a submodule's _parameters, its attribute, the trainable name) of every name of a parameter
        for full, p in self.module.named_parameters(remove_duplicate=False):
            if p.requires_grad:
                owner, _, attr = full.rpartition(".")
                slots.append((self.module.get_submodule(owner)._parameters, attr, first[id(p)]))
        self._leaf_cache = (key, ps, params, grads, ptrs, slots)  # the arrays kept: their ids stay theirs
        # a set on other buffers (an earlier trainer's) or with other hooks is dropped
        self._leaf_sets = {s: c for s, c in sets.items() if c[0] == key} | {signals: self._leaf_cache}
        return ps

    def _hook_ids(self) -> tuple:
        """The ids of the hooks on the module's trainable parameters: the leaf tensors are remade when they change."""
        return tuple((tuple(p._backward_hooks or ()), tuple(p._post_accumulate_grad_hooks or ()))
                     for p in self._params)

    def _take_hooks(self, ps: dict) -> None:
        """Register the hooks of the module's parameters (``p.register_hook``) on their leaf tensors ``ps``.

        The module runs on leaf tensors of the trainer's buffers, not on its own parameters, whose hooks autograd
        would never reach: each hook runs on its leaf's gradient of the micro-batch's loss sum as autograd
        computes it, before it is added into the gradient buffer that the reducer reduces (as in PyTorch, where it
        runs before the gradient is added into ``.grad``). A post-accumulate-grad hook is the reducer's place:
        refused (:class:`ContractError`).
        """
        for n, p in zip(self.names, self._params, strict=True):
            if p._post_accumulate_grad_hooks:
                raise ContractError(f"Torch: parameter {n} has a post-accumulate-grad hook "
                                    "(register_post_accumulate_grad_hook), which hpcgpu does not run: its reducer "
                                    "takes each gradient there; p.register_hook(fn) runs on each micro-batch's "
                                    "gradient")
            for fn in (p._backward_hooks or {}).values():
                ps[n].register_hook(fn)

    def release(self) -> None:
        """Drop the leaf tensors on the trainer's buffers (:meth:`hpcgpu.Trainer.close` calls it). Not collective.

        They hold the trainer's flat parameter and gradient buffers (device
        memory on a GPU): a module kept after its trainer is closed no
        longer keeps them alive. A later step makes them again.
        """
        self._leaf_cache, self._leaf_sets = None, {}
        self._ready = self._ours = None

    def _evaluated(self, params, x, y=None):
        """The module's outputs for ``x`` (and the loss sum against ``y``), in eval mode under ``torch.no_grad()``.

        No autograd graph, no backward pass: BatchNorm uses (and never updates) its running statistics, Dropout
        passes everything, and each submodule's mode is put back after (a submodule the user froze stays so).
        """
        torch = self._torch
        self._take_threads()
        ps = {n: self._tensor(params[n]) for n in self.names}
        modes = [(m, m.training) for m in self.module.modules()]
        self.module.eval()
        try:
            xt = self._tensor(x)
            self._place(xt.device, ps[self.names[0]].dtype)
            with torch.no_grad(), self._autocasting(xt.device):
                out = self._outputs(torch.func.functional_call(self.module, ps, (xt,)))
                loss = None if y is None else self._loss_sum(self.loss(out, self._target(y, out)))
        finally:
            for m, training in modes:
                m.training = training
        return out, loss

    def predict(self, params, x):
        """The module's outputs for ``x``, in eval mode, without autograd. Not collective.

        Parameters
        ----------
        params : dict of str to array
            The trainer's parameters by name.
        x : array, shape (n, ...)
            Integer features as int64 (an ``nn.Embedding``'s indices), floating ones in the trainer's dtype.

        Returns
        -------
        array
            The module's outputs in their own shape ((n,) stays (n,)); bfloat16 ones as float32.
        """
        return self._array(self._evaluated(params, x)[0], x)

    def forward_loss(self, params, x, y):
        """The loss sum and the outputs of ``x`` against ``y``, forward only, in eval mode. Not collective.

        What evaluation uses (``Trainer.evaluate``, ``fit``'s validation): the module in eval mode under
        ``torch.no_grad()``, no backward pass, so evaluating changes nothing of the model (BatchNorm's running
        statistics included).

        Parameters
        ----------
        params : dict of str to array
        x, y : array
            Rows of the features and their targets.

        Returns
        -------
        (float, array)
            The loss sum and the outputs, as :meth:`predict` gives them.
        """
        out, loss = self._evaluated(params, x, y)
        return float(loss), self._array(out, x)  # a float64 loss in full (not through float32), bfloat16's exactly

    def state_dict(self, path: str) -> dict:
        """The module's ``state_dict`` from a results file's ``/model`` (and ``/buffers``) group, by name.

        Not collective.

        Parameters
        ----------
        path : str
            A results file (``Trainer.save_results``).

        Returns
        -------
        dict of str to torch.Tensor
            Every key of ``module.state_dict()``, for ``module.load_state_dict(..., strict=True)``: the trained
            parameters (``/model``), the frozen ones and the buffers (``/buffers``), a tied weight under each of
            its names (one tensor); a module's extra state (``get_extra_state``) as the module holds it.

        Raises
        ------
        ValueError
            Not a results file, or one of another model's parameters.
        """
        from ..io import read_weights

        into = {n: np.zeros_like(v) for n, v in self.init(None).items()}
        buffers = {n: np.zeros_like(_host(v)) for n, v in self.buffers().items()}
        read_weights(path, into, "Torch.state_dict", buffers=buffers)
        values = {n: self._torch.from_numpy(v) for n, v in {**into, **buffers}.items()}
        # each tensor's first name (the one it is saved under), for each of its names in the module's state_dict
        first = {id(t): n for n, t in [*self.module.named_parameters(), *self.module.named_buffers()]}
        return {k: values[first[id(t)]] if id(t) in first else t
                for k, t in self.module.state_dict(keep_vars=True).items()}


class Jax(Model):
    """A pure JAX function trained by hpcgpu: ``apply(params, x)`` and a parameter pytree.

    Not collective. The gradient is ``jax.value_and_grad`` of the loss sum under ``jax.jit``; the pytree's
    leaves are the trainer's parameters, named by their paths (``"dense.w"``), so the results file holds
    them by name and :meth:`tree` gives the pytree back.

    Parameters
    ----------
    apply : callable
        ``apply(params, x) -> outputs`` of shape (n, k) or (n,), pure (jittable).
    params : pytree
        The initial parameters (dicts, lists, tuples of arrays): the whole state of the model, trained
        leaves (floating point) and those ``trainable`` marks as not trained (of any type: a frozen
        embedding, an index table, fixed statistics).
    loss : {"cross-entropy", "mse"} or callable
        ``"cross-entropy"``: softmax cross-entropy of logits against integer labels, summed;
        ``"mse"``: the sum of squared errors; or ``loss(outputs, y)`` returning the SUM over the samples.
    trainable : bool, pytree of bool, or callable, keyword-only
        Which leaves of ``params`` are trained: True (every leaf), or a pytree of True/False whose
        structure is ``params``' or a prefix of it (``{"params": True, "batch_stats": False}`` marks a
        whole subtree), or a function of ``params`` that returns one. This is the mask JAX users already
        write for ``optax.masked`` and Equinox's ``eqx.partition(model, filter_spec)``; it keeps ``apply``'s
        signature, so a Flax model's variables, ``{"params": ..., "batch_stats": ...}``, go in as they are.
    mutable : bool, str or sequence of str, keyword-only
        The non-trainable leaves a training step updates, as flax's ``apply(..., mutable=["batch_stats"])``
        does (BatchNorm's running statistics): False (none, the default), True (every non-trainable leaf), or
        the path names of subtrees (``"batch_stats"``, ``"bn1.mean"``). ``apply`` is then called as
        ``apply(params, x, train=True)`` in training, where it returns ``(outputs, updates)`` (``updates`` a
        pytree of those leaves at their paths, as flax returns it: the leaves it holds replace the state's),
        and as ``apply(params, x, train=False)`` returning the outputs in evaluation and prediction.

    Raises
    ------
    ImportError
        JAX is not installed.
    TypeError
        ``apply`` or ``loss`` not callable, an unknown loss name, a pytree without leaves, a ``trainable``
        that is no mask of ``params`` or that marks no leaf trained, a trained leaf that is not floating point
        (an integer table would be trained as floats: mark it non-trainable), a ``mutable`` that is not a bool,
        a str or a sequence of str, or that names no non-trainable leaf.

    Notes
    -----
    JAX computes in float32 unless ``jax_enable_x64`` is set: a trainer of ``dtype="float64"`` then holds its
    parameters in float64 and the gradient comes in float32.

    The non-trainable leaves are model state, as a PyTorch module's buffers and frozen parameters are for
    :class:`Torch`: ``apply`` gets them in their place in the pytree, in their own dtype, and no gradient is
    taken of them; the optimizer never sees them (they are no parameters of the trainer's). Every
    data-parallel rank takes data rank 0's at the first step (DDP's broadcast of the module's state), and
    they are kept in checkpoints and in the results file (``/buffers``), put back by a resume and
    ``load_weights`` (:meth:`buffers`). They stay constant in training unless ``mutable`` names them: then
    each micro-batch's training call updates them (each rank from its own rows), and every data-parallel rank
    takes data rank 0's before each step, evaluation and prediction (PyTorch DDP's ``broadcast_buffers``, as
    for a :class:`Torch` module's BatchNorm); evaluation and prediction never change them (``train=False``).
    """

    def __init__(self, apply, params, loss="cross-entropy", *, trainable=True, mutable=False):
        jax = self._jax = _import("jax", "jax")
        if not callable(apply):
            raise agreed(TypeError(f"Jax: apply must be callable (apply(params, x)), got {type(apply).__name__}"))
        if isinstance(loss, str):
            if loss not in ("cross-entropy", "mse"):
                raise agreed(TypeError(f"Jax: loss must be 'cross-entropy', 'mse' or a callable, got {loss!r}"))
            loss = _cross_entropy if loss == "cross-entropy" else _squared_errors
        elif not callable(loss):
            raise agreed(TypeError(f"Jax: loss must be 'cross-entropy', 'mse' or a callable, got "
                                   f"{type(loss).__name__}"))
        leaves, self._treedef = jax.tree_util.tree_flatten_with_path(params)
        if not leaves:
            raise agreed(TypeError("Jax: params has no leaves (arrays)"))
        self._trained = _mask(jax, params, trainable, len(leaves))
        names = [_path_name(path) for path, _ in leaves]
        values = {n: np.array(leaf) for n, (_, leaf) in zip(names, leaves, strict=True)}
        self.names = [n for n, t in zip(names, self._trained, strict=True) if t]
        self.state_names = [n for n, t in zip(names, self._trained, strict=True) if not t]
        if not self.names:
            raise agreed(TypeError("Jax: trainable marks no leaf of params as trained: nothing to train"))
        self._init = {n: values[n] for n in self.names}
        for n, v in self._init.items():  # trained as floats otherwise: an index table or a counter would move
            if v.dtype.kind != "f" and v.dtype.name != "bfloat16":
                raise agreed(TypeError(f"Jax: params leaf {n} is {v.dtype}, not floating point, and is trained: "
                                       "mark it non-trainable (trainable=, a mask of params) or keep it in apply's "
                                       "closure"))
        self._state = {n: np.array(values[n], order="C") for n in self.state_names}  # buffers(): live, host, 0-d kept
        self.mutable_names = _mutable(mutable, self.state_names, self.names)
        self.apply, self._loss = apply, loss
        self._dlpack = None  # on a GPU: whether JAX takes the trainer's device arrays by DLPack (known at first)
        self._compile(None)

    def buffers(self) -> dict:
        """The non-trainable leaves of ``params``, by path name, as live host arrays. Not collective.

        The trainer writes into them (data rank 0's on every rank at the first step, a checkpoint's on resume,
        a results file's in ``load_weights``) and keeps them in checkpoints and the results file (``/buffers``);
        each call of the function reads them as they are then.

        Returns
        -------
        dict of str to numpy.ndarray
            Empty when every leaf is trained.
        """
        return self._state

    def constant_buffers(self) -> frozenset:
        """The names of :meth:`buffers` no step changes (all but ``mutable``'s): made data rank 0's once.

        Not collective.

        Returns
        -------
        frozenset of str
        """
        return frozenset(self.state_names) - frozenset(self.mutable_names)

    def _leaves(self, flat, state) -> list:
        """The pytree's leaves in its order, from the trained ones ``flat`` and the others ``state``."""
        trained, fixed = iter(flat), iter(state)
        return [next(trained) if t else next(fixed) for t in self._trained]

    def _args(self, params, *rest) -> list:
        """The arrays of a call: the trained leaves (by name from ``params``), the non-trainable ones, ``rest``."""
        return [params[n] for n in self.names] + [self._state[n] for n in self.state_names] + list(rest)

    def _compile(self, compute) -> None:
        """The jitted value-and-gradient and prediction; with ``compute`` (a 16-bit type), under its policy."""
        jax, treedef, apply, loss, leaves = self._jax, self._treedef, self.apply, self._loss, self._leaves
        mutable, state_names = self.mutable_names, self.state_names
        name = getattr(apply, "__name__", "apply")

        def call(flat, state, x, train):
            # apply's outputs and, in a training call with mutable, the updated leaves in mutable_names' order
            # (those the updates do not hold as they were)
            # the gradient is taken of the trained leaves ``flat`` only: ``state`` (the others) is an argument too,
            # so the values the trainer writes into buffers() reach the function without a recompilation
            if compute is not None:
                # jmp's mixed policy: the float32 parameters (and floating state) and the inputs cast to the
                # compute type for the function, its outputs back to float32 for the loss; the gradient flows back
                # through the casts.
                floating = [v.astype(compute) if jax.numpy.issubdtype(v.dtype, jax.numpy.floating) else v
                            for v in state]
                params = jax.tree_util.tree_unflatten(treedef, leaves([p.astype(compute) for p in flat], floating))
                x = x.astype(compute) if x.dtype.kind == "f" else x
            else:
                params = jax.tree_util.tree_unflatten(treedef, leaves(flat, state))
            if not mutable:
                out, new = apply(params, x), []
            elif not train:
                out, new = apply(params, x, train=False), []
            else:
                got = apply(params, x, train=True)
                if not (isinstance(got, tuple) and len(got) == 2):
                    kind = "an array" if hasattr(got, "shape") else f"a {type(got).__name__}"
                    raise ContractError(f"Jax: {name}(params, x, train=True) returned {kind}, not "
                                        "(outputs, updates): with mutable=, a training call returns the outputs "
                                        "and the updated leaves, as flax's apply(..., mutable=[...]) does")
                out, new = got[0], _updated(jax, got[1], mutable, dict(zip(state_names, state, strict=True)))
            if compute is not None and hasattr(out, "astype"):
                out = out.astype(flat[0].dtype)
            return out, new

        def objective(flat, state, x, y, train):
            # Checked while JAX traces the function (once a compilation), not at every step
            out, new = call(flat, state, x, train)
            if isinstance(out, (tuple, list, dict)) or not hasattr(out, "shape"):
                raise ContractError(f"Jax: {name} returned a {type(out).__name__}, not an array: apply must return "
                                    "the outputs as one array, (n, k) or (n,)")
            value = loss(out, y)
            if getattr(value, "shape", None) != ():
                got = f"an array of shape {value.shape}" if hasattr(value, "shape") else \
                    f"a {type(value).__name__}"
                raise ContractError(f"Jax: the loss returned {got}, not one number: loss(outputs, y) must return the "
                                    "sum over the samples")
            return value, (out, new)

        self._value_and_grad = jax.jit(jax.value_and_grad(lambda f, s, x, y: objective(f, s, x, y, True),
                                                          has_aux=True))
        self._predict = jax.jit(lambda f, s, x: call(f, s, x, False)[0])
        # evaluation: the same loss and outputs, no gradient, nothing updated
        self._forward_loss = jax.jit(lambda f, s, x, y: objective(f, s, x, y, False))

    precisions = ("bf16-mixed",)
    """The mixed precision it takes: ``bf16-mixed`` (the function in bfloat16 on float32 master weights, as
    jmp's mixed policy: parameters and inputs cast at the call, outputs back to float32 for the loss)."""

    def set_compute_dtype(self, name: str) -> None:
        """Compute the function in ``name`` on the float32 parameters (jmp's mixed policy). Not collective.

        Called by the trainer under ``precision="bf16-mixed"``: the parameters stay float32 (the trainer's
        master weights), ``apply`` gets them and the inputs cast to bfloat16, its outputs are cast back to
        float32 for the loss, and the gradient (through the casts) is float32.

        Parameters
        ----------
        name : {"bfloat16"}
            The compute type.

        Raises
        ------
        ValueError
            Another type.
        """
        if name != "bfloat16":
            raise ValueError(f"Jax: mixed precision computes in bfloat16, not {name}")
        self._compile(self._jax.numpy.bfloat16)

    def __repr__(self) -> str:
        return f"Jax({getattr(self.apply, '__name__', 'apply')})"

    def init(self, rng):
        """The pytree's leaves as given, by path."""
        return {n: v.copy() for n, v in self._init.items()}

    def _to_jax(self, arrays, like):
        """``arrays`` as JAX arrays where the call computes, and how results go back: a function or None.

        On the host (``like`` a NumPy array): copies on JAX's CPU device. On a GPU: DLPack views on the
        array's own GPU once the trainer's stream is done (a JAX without that GPU: host copies, results back
        as CuPy arrays).
        """
        jax = self._jax
        if isinstance(like, np.ndarray):
            cpu = jax.devices("cpu")[0]
            return [jax.device_put(np.asarray(a), cpu) for a in arrays], None
        import cupy

        if self._dlpack is not False:
            # the non-trainable leaves' copies to the device and the aligned copies are queued on the trainer's
            # stream too, so the one wait covers them: JAX's from_dlpack takes no stream of ours
            arrays = [_aligned(cupy.asarray(a)) for a in arrays]
            cupy.cuda.get_current_stream().synchronize()
            try:
                got = [jax.dlpack.from_dlpack(a) for a in arrays]
                self._dlpack = True
                return got, cupy.from_dlpack
            except Exception:
                if self._dlpack:  # it worked before: not a JAX without the GPU
                    raise
                self._dlpack = False  # a JAX without this GPU (CPU-only jaxlib): host copies from now on
        cpu = jax.devices("cpu")[0]
        return [jax.device_put(_host(a), cpu) for a in arrays], lambda r: cupy.asarray(np.asarray(r))

    def loss_and_grad(self, params, x, y):
        """The loss sum, its gradient by name (``jax.value_and_grad`` under ``jax.jit``), the outputs."""
        (*arrays, xj, yj), back = self._to_jax(self._args(params, x, y), x)
        k = len(self.names)
        (loss, (out, new)), grads = self._value_and_grad(arrays[:k], arrays[k:], xj, yj)
        back = back or np.asarray
        loss = float(loss)  # the whole call is done: its results may be handed over
        for n, v in zip(self.mutable_names, new, strict=True):  # the state the next call reads (host arrays)
            self._state[n][...] = np.asarray(v)
        return loss, {n: back(g) for n, g in zip(self.names, grads, strict=True)}, back(out)

    def forward_loss(self, params, x, y):
        """The loss sum and the outputs of ``x`` against ``y``, under ``jax.jit`` without a gradient. Not collective.

        What evaluation uses (``Trainer.evaluate``, ``fit``'s validation).

        Parameters
        ----------
        params : dict of str to array
        x, y : array
            Rows of the features and their targets.

        Returns
        -------
        (float, array)
            The loss sum and the outputs, as :meth:`predict` gives them.
        """
        (*arrays, xj, yj), back = self._to_jax(self._args(params, x, y), x)
        k = len(self.names)
        loss, (out, _) = self._forward_loss(arrays[:k], arrays[k:], xj, yj)
        loss = float(loss)  # the whole call is done: its outputs may be handed over
        return loss, (back or np.asarray)(out)

    def predict(self, params, x):
        """``apply(params, x)`` under ``jax.jit``: a NumPy array, or a CuPy array for a device ``x``."""
        (*arrays, xj), back = self._to_jax(self._args(params, x), x)
        k = len(self.names)
        out = self._predict(arrays[:k], arrays[k:], xj)
        if back is None:
            return np.asarray(out)
        out.block_until_ready()
        return back(out)

    def tree(self, params: dict, buffers: dict | None = None):
        """The pytree of ``params`` (by name, as ``Trainer.params`` or a results file's ``/model`` hold them).

        Not collective. Its leaves are NumPy arrays (host copies of a GPU's).

        Parameters
        ----------
        params : dict of str to array
            The trained leaves: NumPy or CuPy arrays by the pytree's path names (``"hidden.w"``).
        buffers : dict of str to array, optional
            The non-trainable leaves by name (a results file's ``/buffers``); by default :meth:`buffers`, those
            the trainer holds.

        Returns
        -------
        pytree
            Of the structure given to the constructor.
        """
        state = self._state if buffers is None else buffers
        return self._jax.tree_util.tree_unflatten(self._treedef, self._leaves(
            [_host(params[n]) for n in self.names], [_host(state[n]) for n in self.state_names]))


class Keras(Jax):
    """A Keras 3 model trained by hpcgpu, on Keras's JAX backend (``KERAS_BACKEND=jax``).

    Not collective. The model runs as a pure JAX function of its variables (``model.stateless_call``), so
    everything :class:`Jax` does holds: ``jax.value_and_grad`` of the loss sum under ``jax.jit``, parameters
    named by the variables' paths (``"sequential.dense.kernel"``); not ``bf16-mixed``, which is refused with one
    line (Keras casts what ``stateless_call`` is given back to the variables' type). Keras's ``compile`` and
    ``fit`` are not used: the trainer, its optimizer and its reducer take their place; :meth:`assign` writes
    trained parameters back into the model's variables (then ``model.save`` or ``model.predict`` as usual).

    Parameters
    ----------
    model : keras.Model
        Built (its input shape known: ``keras.Input(shape)`` first, or ``model.build``), with trainable
        variables only, and outputs before any softmax (logits) under ``"cross-entropy"``.
    loss : {"cross-entropy", "mse"} or callable
        As :class:`Jax`'s.

    Raises
    ------
    ImportError
        Keras or JAX is not installed.
    TypeError
        Keras on another backend; a model not built; non-trainable variables (BatchNorm's statistics, a
        Dropout's seed state: not carried across steps here); a last softmax under ``"cross-entropy"``.
    """

    def __init__(self, model, loss="cross-entropy"):
        keras = _import("keras", "keras")
        if keras.backend.backend() != "jax":
            raise agreed(TypeError(f"Keras: the model runs on Keras's {keras.backend.backend()} backend; hpcgpu "
                                   "takes the JAX backend (KERAS_BACKEND=jax before keras is imported)"))
        if not getattr(model, "built", False) or not model.trainable_variables:
            raise agreed(TypeError("Keras: the model is not built: give its input shape, keras.Input(shape) as its "
                                   "first layer, or call model.build(input_shape)"))
        if model.non_trainable_variables:
            names = ", ".join(v.path for v in model.non_trainable_variables[:3])
            raise agreed(TypeError(f"Keras: the model has non-trainable variables ({names}): BatchNorm's statistics "
                                   "and a Dropout's seed state are not carried across steps; use nn.Torch for such a "
                                   "model"))
        last = model.layers[-1] if model.layers else None
        if loss == "cross-entropy" and (isinstance(last, keras.layers.Softmax)
                                         or getattr(last, "activation", None) is keras.activations.softmax):
            raise agreed(TypeError("Keras: the last layer applies a softmax; \"cross-entropy\" takes logits "
                                   "(Keras's from_logits=True): leave the softmax out"))
        self.keras_model = model
        variables = list(model.trainable_variables)
        self._paths = [v.path.replace("/", ".") for v in variables]
        order = self._paths

        def apply(params, x):
            out, _ = model.stateless_call([params[k] for k in order], [], x)
            return out

        apply.__name__ = model.name
        super().__init__(apply, {k: np.asarray(v.value) for k, v in zip(order, variables, strict=True)}, loss)

    precisions = ()
    """None: Keras converts what ``stateless_call`` is given back to each variable's type (float32), so the cast
    of :class:`Jax`'s ``bf16-mixed`` would not reach the products; mixed precision is refused with one line."""

    def __repr__(self) -> str:
        return f"Keras({self.keras_model.name})"

    def assign(self, params: dict) -> None:
        """Write ``params`` (by name: ``Trainer.params``, or a results file's ``/model``) into the model's variables.

        Not collective.

        Parameters
        ----------
        params : dict of str to array
            NumPy or CuPy arrays (the trainer's, on its device: copied to the host first).
        """
        for v, k in zip(self.keras_model.trainable_variables, self._paths, strict=True):
            v.assign(_host(params[k]).astype(v.dtype))  # the trainer's device arrays: copied to the host, explicitly


def _mask(jax, params, trainable, n: int) -> list:
    """One bool a leaf of ``params``, in its flattening order, from :class:`Jax`'s ``trainable``.

    ``trainable``: True, a pytree of bools whose structure is a prefix of ``params``' (each bool over the subtree at
    its place, as optax.masked reads a mask), or a function of ``params`` giving one; an agreed TypeError otherwise.
    """
    tree = jax.tree_util
    mask = trainable(params) if callable(trainable) else trainable
    marks = tree.tree_leaves(mask)
    flags = None
    if marks and all(isinstance(m, (bool, np.bool_)) for m in marks):
        try:  # each mark over the subtree of params at its place (optax.masked's prefix rule)
            flags = [bool(f) for f in tree.tree_leaves(tree.tree_map(
                lambda m, sub: tree.tree_map(lambda _: m, sub), mask, params))]
        except (ValueError, TypeError):
            flags = None
    if flags is None or len(flags) != n:
        got = "a mask of another structure" if marks and all(isinstance(m, (bool, np.bool_)) for m in marks) \
            else f"a {type(mask).__name__}"
        raise agreed(TypeError(f"Jax: trainable must be True or a pytree of True/False with the structure of params "
                               f"or a prefix of it (optax.masked's mask), got {got}"))
    return flags


def _mutable(mutable, state_names: list, trained: list) -> list:
    """The names of :class:`Jax`'s ``mutable`` leaves, in ``state_names``' order.

    An agreed TypeError for a bad ``mutable``.
    """
    if mutable is False or mutable is None:
        return []
    if mutable is True:
        if not state_names:
            raise agreed(TypeError("Jax: mutable=True but no leaf of params is non-trainable (trainable=): nothing "
                                   "for a step to update"))
        return list(state_names)
    prefixes = [mutable] if isinstance(mutable, str) else mutable
    try:
        prefixes = list(prefixes)
    except TypeError:
        prefixes = None
    if not prefixes or not all(isinstance(p, str) and p for p in prefixes):
        raise agreed(TypeError(f"Jax: mutable must be False, True, or the path names of non-trainable subtrees "
                               f"(\"batch_stats\", [\"bn1.mean\", \"bn1.var\"]), got {mutable!r}"))

    def under(name, p):
        return name == p or name.startswith(p + ".")

    for p in prefixes:
        if not any(under(n, p) for n in state_names):
            also = " (it is trained: mark it non-trainable with trainable=)" if any(under(n, p) for n in trained) \
                else ""
            raise agreed(TypeError(f"Jax: mutable names {p!r}, which is no non-trainable leaf or subtree of "
                                   f"params{also}"))
    return [n for n in state_names if any(under(n, p) for p in prefixes)]


def _updated(jax, updates, mutable: list, state: dict) -> list:
    """The leaves of ``mutable`` after a training call, those ``updates`` does not hold as in ``state``.

    ``updates``: a pytree at the paths of params. Checked while JAX traces: a leaf outside ``mutable``, or of
    another shape, is a :class:`ContractError`.
    """
    new = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(updates)[0]:
        n = _path_name(path)
        if n not in state or n not in mutable:
            raise ContractError(f"Jax: apply's updates hold {n}, which is no leaf mutable= names "
                                f"({', '.join(mutable)})")
        if tuple(getattr(leaf, "shape", ())) != tuple(state[n].shape):
            raise ContractError(f"Jax: apply's updates give {n} the shape {tuple(getattr(leaf, 'shape', ()))}, not "
                                f"{tuple(state[n].shape)}")
        new[n] = leaf
    return [new.get(n, state[n]).astype(state[n].dtype) for n in mutable]


def _path_name(path) -> str:
    parts = []
    for k in path:
        for attr in ("key", "idx", "name"):
            if hasattr(k, attr):
                parts.append(str(getattr(k, attr)))
                break
        else:
            parts.append(str(k))
    return ".".join(parts) or "params"


def _cross_entropy(out, y):
    import jax
    import jax.numpy as jnp

    logp = jax.nn.log_softmax(out.reshape(out.shape[0], -1), axis=1)
    return -jnp.take_along_axis(logp, y.astype(jnp.int32).reshape(-1, 1), axis=1).sum()


def _squared_errors(out, y):
    r = out.reshape(out.shape[0], -1) - y.reshape(y.shape[0], -1)
    return (r * r).sum()
