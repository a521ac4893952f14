"""One data-parallel training step: forward and backward, the gradient's reduction, the optimizer's update.

Goyal et al., "Accurate, Large Minibatch SGD" (2017), section 2: every rank
runs forward and backward on its local batch (as K micro-batches with
gradient accumulation), which gives the SUM of its per-sample gradients in
the reducer's flat buffer; one ``Allreduce(SUM)`` of that buffer (the loss
and metric sums and a stop request riding in named slots after the
gradient) gives the global sum; the update divides it by the global batch
B once, so every rank applies the same update and the parameters stay
identical without being broadcast again. The model knows nothing of
communication: the reducer posts its buckets from the backward pass's
``on_layer`` hook, and tensor-parallel sums come in through the model's
``tensor_allreduce``.
"""

from __future__ import annotations

import contextlib
import functools
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
from mpi4py import MPI

from .._partition import block_range
from ..errors import abort, agree, agreed
from ..nn._model import ContractError

if TYPE_CHECKING:  # the parts' types, for the reader and type checkers; nothing is imported at run time
    from ..nn import TrainModel
    from ..optim import LRSchedule, Optimizer
    from ..timing import PhaseTimer
    from .cuda_graphs import StepGraph
    from .groups import ProcessGroups
    from .metrics import EpochMetrics
    from .precision import Precision
    from .reducer import GradientReducer

__all__ = ["Step"]


@dataclass
class Step:
    """The parts a step wires together, and the step itself (:meth:`__call__`).

    Not collective to construct; a call is collective over the run's ranks.

    Attributes
    ----------
    model : hpcgpu.nn.TrainModel
        Writes the gradient into ``reducer.grad`` and its statistics into
        the reducer's first two slots.
    reducer : hpcgpu.train.reducer.GradientReducer
    optimizer : hpcgpu.optim.Optimizer
    state : dict
        The optimizer's state arrays (this rank's ZeRO block with ZeRO-1).
    params : xp.ndarray
        What the optimizer updates: the parameters, or this rank's ZeRO block of them.
    precision : hpcgpu.train.precision.Precision
    groups : hpcgpu.train.groups.ProcessGroups
    micro_batches, micro_batch : int
        K, and this rank's rows of one micro-batch.
    batch : int
        The global batch B.
    schedule : callable
        The learning rate of a global step (0-based).
    graph : hpcgpu.train.cuda_graphs.StepGraph or None
        Replays the forward and backward passes (K == 1 only).
    overlap : bool
        Post the buckets' reductions from the backward pass.
    padded_params : xp.ndarray or None
        ZeRO-1: the parameters padded to D blocks, gathered after the update.
    updates : int
        Updates applied so far (Adam's bias correction counts them; a step
        skipped for an overflow is not one).
    timer : hpcgpu.timing.PhaseTimer or None
        Marks the ``comm`` and ``compute`` phases.
    skipped_last : bool
        The last step's update was skipped (16-mixed: the gradient overflowed).
    clip_norm, clip_value : float or None
        Clip the reduced, averaged gradient to this global L2 norm, or each
        element to this magnitude (:meth:`clip`); None: not clipped.
    metrics : hpcgpu.train.metrics.EpochMetrics or None
        Given each update's pre-clip norm (with ``clip_norm``).
    """

    model: TrainModel
    reducer: GradientReducer
    optimizer: Optimizer
    state: dict
    params: object  # xp.ndarray
    precision: Precision
    groups: ProcessGroups
    micro_batches: int
    micro_batch: int
    batch: int
    schedule: LRSchedule
    graph: StepGraph | None = None
    overlap: bool = False
    padded_params: object = None  # xp.ndarray or None
    updates: int = 0
    timer: PhaseTimer | None = field(default=None, repr=False)
    skipped_last: bool = False
    clip_norm: float | None = None
    clip_value: float | None = None
    metrics: EpochMetrics | None = field(default=None, repr=False)

    def __post_init__(self):
        self._batch_now = self.batch  # this step's global batch (the partial last step's is smaller)
        # A skip is decided alike on every rank: over all of them where the ranks hold different slices.
        differ = self.groups.tensor_comm is not None or self.reducer.shard is not None
        comm = self.groups.comm
        self._any = (lambda flag: self.groups.any(flag, comm)) if differ else (lambda flag: flag)
        # the model's first loss_and_grad agreed on (_first): only a model of one's own has a contract to check
        self._agreed = not getattr(self.model, "first_call_agreed", False)

    def __call__(self, X, y, step: int, stop: bool, reduce: bool = True, read: bool = True, partial=None):
        """Run global step ``step`` (0-based) on this rank's local batch ``X``, ``y``. Collective.

        Parameters
        ----------
        X, y : xp.ndarray
            The local batch (micro-batch ``k``: rows ``k * micro_batch``...).
        step : int
        stop : bool
            This rank was asked to stop: the request rides in the reduction.
        reduce : bool
            False at one rank with the statistics kept on the device (the
            caller reads them later): nothing is reduced or read here.
        read : bool
            False: the reduced statistics stay on the device (over NCCL,
            where reading them would make the host wait for the GPU every
            step); nothing is read here.
        partial : (int, list of (int, int, int)) or None
            An epoch's partial last step (``drop_last=False``): its global
            batch, and this rank's micro-batches as ``(start, stop, first)``
            (:meth:`hpcgpu.train.data.GlobalBatchSampler.micro_batch_rows`;
            a range may be empty). Run eagerly (no CUDA graph: its shapes
            are not the captured ones); the update divides by its batch.

        Returns
        -------
        dict or None
            The reduced slots (``loss_sum`` and the metric's, ``stop``) as
            host floats; None when ``reduce`` or ``read`` is False.
        """
        model, red, K, lm = self.model, self.reducer, self.micro_batches, self.micro_batch
        scale = self.precision.loss_scale
        if reduce:
            red.set("stop", 1.0 if stop else 0.0)  # before the backward pass posts the bucket that holds it
        hook = red.ready if self.overlap else None
        self.groups.share_buffers(model)  # data rank 0's running statistics (DDP's broadcast_buffers)
        broken = None
        self._batch_now = self.batch if partial is None else partial[0]
        try:
            if partial is not None:
                self._partial(X, y, step, partial[1], scale, hook)
            elif self.graph is not None:  # K == 1, no hook: see graphs_plan
                self.graph.step(X, y, scale)
            elif K == 1:
                model.randomness(step, 0, self.groups.data_rank, first=self._first_row(0))
                lg = model.loss_and_grad if self._agreed else functools.partial(self._first, step=step)
                lg(X, y, loss_scale=scale, on_layer=hook)
            else:  # gradient accumulation: one reduction per step, not per micro-batch
                for k in range(K):
                    model.randomness(step, k, self.groups.data_rank, first=self._first_row(k))
                    lg = model.loss_and_grad if self._agreed else functools.partial(self._first, step=step)
                    lg(X[k * lm : (k + 1) * lm], y[k * lm : (k + 1) * lm], accumulate=k > 0, loss_scale=scale,
                       on_layer=hook if k == K - 1 else None)
        except ContractError as e:  # a later step of a model of one's own (the first one's is agreed in _first)
            broken = self._broken(e, step, reduce, read)
        slots = None
        if reduce:
            self._mark("comm", step)
            red.finish(f"step {step + 1}")
            slots = red.read() if read else None
            self._mark("compute", step)
            # The first slot is the loss sum: a broken rank made it NaN, so every rank of the reduction sees it
            if slots is not None and (broken is not None or math.isnan(next(iter(slots.values())))):
                self._agree_broken(broken, step)
        self.update(step, scale)
        stepped = getattr(self.schedule, "stepped", None)  # a PyTorch scheduler (hpcgpu.optim.TorchSchedule)
        if stepped is not None:
            stepped(step)
        return slots

    def _partial(self, X, y, step: int, micro: list, scale: float, hook) -> None:
        """The forward and backward passes of a partial last step: its micro-batches, the empty ones skipped.

        A rank with no row of the step writes a zero gradient and zero sums; the reduction's buckets are posted
        after the passes (never from a hook: the last micro-batch may be empty here).
        """
        model, done, err = self.model, False, None
        try:
            for k, (lo, hi, first) in enumerate(micro):
                if hi == lo:
                    continue
                model.randomness(step, k, self.groups.data_rank, first=first)
                model.loss_and_grad(X[lo:hi], y[lo:hi], accumulate=done, loss_scale=scale)
                done = True
        except ContractError as e:  # as _first says it (the run's first step: a resume's at the epoch's end), or
            # as _broken does a later step's: agreed here, where a rank with no row never calls the model
            err = TypeError(str(e) if not self._agreed else f"{e} (at step {step + 1}, rank {self.groups.comm.rank})")
        except Exception as e:  # noqa: BLE001 - the model's own refusal of a small batch: every rank hears it
            # (PyTorch's BatchNorm refuses a training batch of one row; the last step may give a rank one)
            try:
                err = type(e)(f"the epoch's last, partial step ({self._batch_now} samples, drop_last=False), on "
                              f"rank {self.groups.comm.rank} ({X.shape[0]} rows): {e}")
            except Exception:  # noqa: BLE001 - a constructor with other arguments: raised as it is
                err = e
        # One small agreement a partial step (once an epoch): a rank whose model failed never leaves the others
        # waiting in the reduction; the first step's contract check rides on it
        dog = self.reducer.watchdog
        with dog.watch("the partial step's check", f"step {step + 1}") if dog else contextlib.nullcontext():
            agree(err, comm=self.groups.comm)
        self._agreed = True
        if not done:
            model.grad[...] = 0
            model.stats[...] = 0
        if hook is not None:
            self.reducer.post_rest()

    def _first_row(self, k: int) -> int:
        """The position in the step's global batch of this rank's first row of micro-batch ``k``.

        The sampler's split: global micro-batch ``k`` is positions ``k B/K .. (k + 1) B/K``, and this rank's
        rows of it the data-parallel block ``block_range(B/K, D, data_rank)``.
        """
        b = self.batch // self.micro_batches
        return k * b + block_range(b, self.groups.data_parallel_size, self.groups.data_rank)[0]

    def _broken(self, e: ContractError, step: int, reduce: bool, read: bool) -> TypeError:
        """A later step's contract error on this rank: the error the ranks agree on after the reduction.

        The check costs the step nothing: the model's gradient write fails by itself (:class:`ContractError`),
        and the news rides in the reduction the step makes anyway, as a NaN loss sum (a flag piggybacked on the
        loss slot). Where nothing is reduced (one rank) it is raised at once; where the reduced slots stay on
        the device (NCCL: reading them would make the host wait for the GPU every step), no rank can learn it
        without a new collective per step, and the job is aborted with one line naming the rank.
        """
        err = TypeError(f"{e} (at step {step + 1}, rank {self.groups.comm.rank})")
        if not reduce:  # one rank: nobody else to tell
            raise agreed(err) from e
        if not read:
            abort(f"[rank {self.groups.comm.rank}] error: {err}", 2)
        self.model.stats[0] = math.nan  # the loss sum's slot, reduced with the gradient
        if self.overlap:  # the buckets the broken pass did not post, so the others' reduction completes
            self.reducer.post_rest()
        return err

    def _agree_broken(self, err: TypeError | None, step: int) -> None:
        """After a reduction whose loss sum is NaN: every rank raises the lowest broken rank's error. Collective.

        Over the reducer's ranks (all of them saw the NaN); nothing is raised when no rank broke the contract
        (a loss that diverged: the trainer names it).
        """
        dog = self.reducer.watchdog
        with dog.watch("the step's contract check", f"step {step + 1}") if dog else contextlib.nullcontext():
            agree(err, comm=self.reducer.comm)

    def _first(self, *args, step: int, **kwargs) -> None:
        """The model's first ``loss_and_grad(*args, **kwargs)``, agreed over the ranks. Collective.

        A model of one's own checks its contract on that call (:class:`hpcgpu.nn._model.ContractError`): every
        rank then raises the same one line (an :class:`hpcgpu.AgreedError`) instead of each its own traceback.
        Later steps call the model directly (``_agreed``, set here; at once for the built-in layers).
        """
        err = None
        try:
            self.model.loss_and_grad(*args, **kwargs)
        except ContractError as e:
            err = TypeError(str(e))  # a TypeError to the user: the class is the adapter's own
        dog = self.reducer.watchdog  # a rank that failed otherwise (its device's memory) never arrives: aborted
        with dog.watch("the first step's contract check", f"step {step + 1}") if dog else contextlib.nullcontext():
            agree(err, comm=self.groups.comm)
        self._agreed = True

    def update(self, step: int, scale: float) -> None:
        """The optimizer's update of this rank's parameters (its ZeRO block), and ZeRO's Allgather. Collective.

        Parameters
        ----------
        step : int
            The global step (0-based): its learning rate.
        scale : float
            The loss scale the gradient carries (divided out with the global batch).
        """
        red = self.reducer
        grad = red.grad if red.shard is None else red.shard
        skip = self.skipped_last = self.precision.skip_update(grad, self._any)
        if skip:
            return
        self.updates += 1
        # the reduced sum to the mean gradient (over this step's samples), the loss scale divided out
        mean = 1.0 / (self._batch_now * scale)
        mean *= self.clip(grad, mean)
        self.optimizer.update(grad, self.state, self.params, lr=self.schedule(step), scale=mean,
                              count=self.updates)
        if red.shard is not None:
            self._mark("comm", step)
            red.allgather(self.padded_params)

    def clip(self, grad, mean: float) -> float:
        """Clip the gradient ``mean * grad`` (the reduced, averaged one); the factor left for the update. Collective.

        ``clip_value``: each element of ``mean * grad`` clamped to ``[-clip_value, clip_value]``, in place
        (PyTorch's ``clip_grad_value_``). ``clip_norm``: the factor ``min(1, clip_norm / (norm + 1e-6))`` of
        PyTorch's ``clip_grad_norm_`` (after DDP's all-reduce), ``norm`` the global L2 norm of ``mean * grad``
        over all parameters: one dot product of the buffer, and with ZeRO-1 one small ``Allreduce`` of the
        shards' squared norms over the data-parallel ranks, so the norm and the factor are the same on every
        rank. The factor multiplies the update's scale: no pass over the buffer to scale it. The pre-clip
        norm goes to :attr:`metrics`.

        Parameters
        ----------
        grad : xp.ndarray, shape (n,)
            The reduced gradient sum (this rank's ZeRO block with ZeRO-1), float32 or float64.
        mean : float
            What turns ``grad`` into the averaged gradient: 1 / (global batch x loss scale).

        Returns
        -------
        float
            1.0 unless the norm is clipped.
        """
        red = self.reducer
        if self.clip_value is not None:
            bound = self.clip_value / mean
            red.xp.clip(grad, -bound, bound, out=grad)
        if self.clip_norm is None:
            return 1.0
        squared = np.array([float(red.xp.dot(grad, grad))])
        if red.shard is not None and red.comm.size > 1:  # the ranks' blocks: one number each
            red.comm.Allreduce(MPI.IN_PLACE, squared, op=MPI.SUM)
        norm = math.sqrt(squared[0]) * mean
        if self.metrics is not None:
            self.metrics.add_norm(norm)
        return min(1.0, self.clip_norm / (norm + 1e-6))

    def _mark(self, phase: str, step: int) -> None:
        if self.timer is not None:
            self.timer.mark(phase, f"step {step + 1}")
