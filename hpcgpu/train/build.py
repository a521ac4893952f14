"""A trainer's set-up: its named parts, each built by one function from the config and the parts below it.

:class:`hpcgpu.Trainer` keeps ``fit``, the epoch loop, ``evaluate`` and ``predict``; what it trains with is
assembled here, in the order a run needs it:

- the data it takes in (:func:`file_splits`, :func:`as_split`, :func:`sample_rows`, :func:`bundled_or`): a file's
  ``/train`` and ``/test`` or arrays in memory, as this data-parallel rank's :class:`~hpcgpu.train.data.Split`,
  their errors agreed over the ranks;
- the model and optimizer on the reducer's flat buffer (:func:`bind_model`, :class:`ModelParts`): the stall
  watchdog, the gradient reducer, the model bound to its buffers, the optimizer's state (ZeRO-1: this rank's
  block);
- what the first data adds (:func:`bind_data`, :class:`DataParts`): the sampler (and whether every rank holds
  the whole set, :func:`replicated`), the learning-rate schedule, the held-out set, the epoch metrics, the step
  and the console;
- the GEMM thread plan (:func:`gemm_plan`): a checkpoint's, or timed.

The process groups (:class:`hpcgpu.train.groups.ProcessGroups`) and the precision policy
(:func:`hpcgpu.train.precision.policy`) are parts of their own, built directly by the trainer; checkpoints'
state is each part's ``state_dict`` (:mod:`hpcgpu.train.checkpoint`). Every function here is collective over
the runtime's communicator unless it says otherwise, and raises on every rank alike.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

from .. import _blas
from ..comm import Bcast
from .._outputs import Output
from ..errors import AgreedError, agree, agree_call, agree_inputs
from ..nn import ModelPlan, TrainModel, loss_by_name, plan_model, relu_stack
from ..optim import LRSchedule, Optimizer, TorchOptimizer, TorchSchedule
from ..runtime import Runtime, host_memory
from ..watchdog import Watchdog
from .checks import data_error, memory_error, optimizer_error
from .config import TrainConfig
from .console import Console
from .cuda_graphs import StepGraph, graphs_plan
from .data import GlobalBatchSampler, Split, check_labels, from_arrays, load_split
from .gemm_threads import GemmPlan, plan_gemm_threads
from .groups import ProcessGroups
from .metrics import EpochMetrics, HeldOut
from .precision import Precision, ScaledMixedPrecision
from .reducer import GradientReducer
from .step import Step

__all__ = ["ModelParts", "DataParts", "bind_model", "bind_data", "file_splits", "as_split", "sample_rows",
           "bundled_or", "replicated", "gemm_plan", "input_width", "mlp_plan", "described", "run_outputs"]


# -- the data taken in ---------------------------------------------------------------------------

def bundled_or(data: str | None, comm: MPI.Intracomm) -> str:
    """``data``, or the bundled digits set's path (unpacked once, by rank 0) when it is None. Collective.

    Parameters
    ----------
    data : str or None
        An HDF5 file in the trainer's layout.
    comm : mpi4py.MPI.Intracomm

    Returns
    -------
    str
    """
    if data is not None:
        return data
    from ..datasets import ensure_bundled

    return ensure_bundled("digits", comm)


def file_splits(path: str, task: str | None, dtype, groups: ProcessGroups, comm: MPI.Intracomm) -> tuple:
    """This data group's shards of ``/train`` and ``/test`` of an HDF5 file, and its ``num_classes``. Collective.

    A tensor group's ranks see the same samples: the data is split among the
    data-parallel replicas. Errors are agreed within a data group, then over
    every rank of ``comm`` (an error may be one rank's: a read that failed).

    Parameters
    ----------
    path : str
    task : str or None
        ``"classification"``, ``"regression"``, or None: the labels' kind decides.
    dtype : numpy.dtype
        The features' type in memory (the master weights').
    groups : ProcessGroups
    comm : mpi4py.MPI.Intracomm
        Every rank of the run.

    Returns
    -------
    (Split, Split or None, int or None)
        ``/train``, ``/test`` (None without one) and the file's ``num_classes``.

    Raises
    ------
    ValueError, OSError, FileNotFoundError
        As :func:`hpcgpu.train.data.load_split` (every rank).
    """
    dcomm, err = groups.data_comm, None
    train = test = nc = None
    try:
        train, nc = load_split(path, "train", dcomm, dtype=dtype, min_rows=dcomm.size, task=task)
        test, _ = load_split(path, "test", dcomm, required=False, dtype=dtype, min_rows=0, task=task or train.task)
    except AgreedError as e:
        err = e
    agree(err, comm=comm)
    return train, test, nc


def sample_rows(X, model: TrainModel, comm: MPI.Intracomm):
    """Features of samples with more than one axis (images) as rows ``(n, prod(sample))``. Collective.

    The ranks agree on one sample shape (each its own rows under ``sharded``:
    a rank may pass rows, or none), and the model is told it
    (``set_sample_shape``); other features are returned as they are. A NumPy
    or CuPy array becomes a view; an h5py dataset is read whole (an HDF5 data
    set of rows is read by blocks).

    Parameters
    ----------
    X : array_like, shape (n, ...)
    model : hpcgpu.nn.TrainModel
    comm : mpi4py.MPI.Intracomm

    Returns
    -------
    array_like, shape (n, d)

    Raises
    ------
    ValueError
        The ranks' samples differ in shape, or the model refuses the shape (every rank).
    """
    shape = getattr(X, "shape", None)
    multi = shape is not None and len(shape) > 2
    # integer features on a rank with rows (one without rows may pass an empty array of any type)
    integer = shape is not None and shape[0] > 0 and np.dtype(getattr(X, "dtype", "f")).kind in "iu"
    mine = comm.allgather((tuple(int(d) for d in shape[1:]) if multi else None, integer))
    samples = {s for s, _ in mine if s}
    err = None
    if len(samples) > 1:
        err = ValueError(f"the ranks' features have samples of different shapes: {sorted(samples)}")
    elif samples:
        try:
            model.set_sample_shape(samples.pop())
        except ValueError as e:
            err = e
    agree(err or _feature_kind_error(model, any(i for _, i in mine)), comm=comm)
    if not multi:
        return X
    width = int(np.prod(shape[1:]))  # not -1: zero rows have no width to infer
    return X.reshape(shape[0], width) if hasattr(X, "reshape") else np.asarray(X).reshape(shape[0], width)


def _feature_kind_error(model: TrainModel, integer: bool) -> ValueError | None:
    """Tell ``model`` whether its features are integers; its refusal (another kind than its first data's) or None.

    Not collective. A model of one's own (``set_integer_features``: :class:`hpcgpu.nn.Torch`, :class:`hpcgpu.nn.Jax`)
    gets integer features as int64 (an ``nn.Embedding``'s indices); the built-in layers take every feature as a
    float of the trainer's type, and are not asked.
    """
    take_kind = getattr(model, "set_integer_features", None)
    if callable(take_kind):
        try:
            take_kind(integer)
        except ValueError as e:
            return e
    return None


def as_split(data, what: str, sharded: bool, required_rows: int, task: str | None, model: TrainModel, dtype,
             groups: ProcessGroups, comm: MPI.Intracomm) -> Split | None:
    """A Split of ``data``: an HDF5 path (its ``/train``, or ``/test`` for any other ``what``) or ``(X, y)``.

    Collective over ``comm``.

    Parameters
    ----------
    data : (X, y) or str or os.PathLike
    what : str
        How messages name the data (``"data"``, ``"validation"``, ``"evaluate"``, ``"predict"``).
    sharded : bool
        Each rank passes its own rows.
    required_rows : int
        The fewest rows the set may have in all.
    task : str or None
    model : hpcgpu.nn.TrainModel
        Told a sample's shape when samples have more than one axis.
    dtype : numpy.dtype
    groups : ProcessGroups
    comm : mpi4py.MPI.Intracomm

    Returns
    -------
    Split or None
        None for a file without ``/test`` when ``what`` is not ``"data"``.

    Raises
    ------
    TypeError, ValueError, OSError
        ``data`` is neither a path nor a pair; the data's own checks (every rank).
    """
    dcomm = groups.data_comm
    if isinstance(data, (str, os.PathLike)):
        split = "train" if what == "data" else "test"
        got = agree_call(lambda: load_split(os.fspath(data), split, dcomm, required=split == "train",
                                            dtype=dtype, min_rows=required_rows, task=task)[0],
                         catch=(AgreedError,), comm=comm)
        if got is not None:  # the file's integer features reach a model of one's own as int64, as arrays' do
            agree(_feature_kind_error(model, got.integer), comm=comm)
        return got
    agree(pair_error(data, what), comm=comm)
    X, y = data
    err = None
    try:  # array_like as NumPy reads it: a list (of rows, of labels) becomes an array; arrays stay as they are
        X = X if hasattr(X, "shape") else np.asarray(X)
        y = y if hasattr(y, "shape") else np.asarray(y)
    except (TypeError, ValueError) as e:
        why = "its rows are not all of one length" if "inhomogeneous" in str(e) else str(e)
        err = ValueError(f"{what}: {'X' if what == 'predict' else 'X and y'} cannot be read as arrays ({why})")
    agree(err, comm=comm)
    X = sample_rows(X, model, comm)
    return agree_call(lambda: from_arrays(X, y, dcomm, sharded=sharded, dtype=dtype, task=task,
                                          what=what, min_rows=required_rows),
                      catch=(AgreedError,), comm=comm)


def replicated(mode: str, train: Split, comm: MPI.Intracomm, xp) -> bool:
    """Whether every rank holds the whole training set. Collective.

    Parameters
    ----------
    mode : str
        ``data_placement``: ``"replicated"``, ``"sharded"``, or ``"auto"``: replicated when the set is at most
        2 GiB, an eighth of the node's memory for all its ranks' copies, and (on a GPU) an eighth of its free
        memory, on every rank.
    train : Split
    comm : mpi4py.MPI.Intracomm
    xp : module
        NumPy or CuPy.

    Returns
    -------
    bool
        The same on every rank.
    """
    if mode != "auto":
        return mode == "replicated"
    nbytes = train.n_global * (train.dim * train.X.dtype.itemsize + train.y.itemsize * train.outputs)
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    ranks_here = node.size
    node.Free()
    ok = nbytes <= 2**31 and nbytes * ranks_here <= host_memory() // 8
    if ok and xp is not np:  # the pool is on the GPU too
        try:
            ok = nbytes <= xp.cuda.Device().mem_info[0] // 8
        except Exception:  # noqa: BLE001 - unknown free memory: do not bet the run on it
            ok = False
    return bool(comm.allreduce(ok, op=MPI.LAND))  # every rank the same way


def array_shape(a) -> tuple:
    """``a``'s shape: its own (a NumPy or CuPy array, an h5py dataset), or NumPy's reading of it (a list)."""
    return tuple(a.shape) if hasattr(a, "shape") else np.shape(a)  # np.shape refuses a CuPy array


def pair_error(data, what: str) -> TypeError | None:
    """``data`` that is neither a path nor one pair ``(X, y)``, as a one-line error; None when it is. Not collective.

    Arrays given alone are named as Keras's ``fit(X, y)`` habit (its ``y`` arrives as ``validation``).
    """
    if isinstance(data, (str, os.PathLike)) or (isinstance(data, (tuple, list)) and len(data) == 2):
        return None
    habit = ": give fit((X, y)), the features and targets as one pair" if hasattr(data, "shape") else ""
    return TypeError(f"{what} must be (X, y) or an HDF5 path, got {type(data).__name__}{habit}")


def input_width(source, comm: MPI.Intracomm) -> int:
    """The features of a sample of ``source`` (its axes multiplied), the same on every rank; 0 when none. Collective.

    For a model whose first layer is ``Dense(units)``: its inputs are the first fit's data's.

    Parameters
    ----------
    source : (X, y) or str or os.PathLike or None
        Arrays (a rank without rows has the others' width under ``sharded``) or an HDF5 file (its
        ``/train/X``, read by rank 0; an unreadable file gives 0: the data's own checks name what is wrong).
    comm : mpi4py.MPI.Intracomm

    Returns
    -------
    int
    """
    width = 0
    if isinstance(source, (str, os.PathLike)):
        if comm.rank == 0:
            try:
                import h5py

                with h5py.File(os.fspath(source), "r") as f:
                    width = math.prod(f["train/X"].shape[1:])
            except Exception:  # noqa: BLE001 - the data's own checks name what is wrong, later
                width = 0
        width = comm.bcast(width, root=0)
    elif isinstance(source, (tuple, list)) and len(source) == 2:
        try:
            shape = array_shape(source[0])
        except (TypeError, ValueError):  # a ragged list on this rank: the data's own check names it, agreed
            shape = ()
        width = math.prod(shape[1:]) if len(shape) >= 2 else 0
    return int(comm.allreduce(width, op=MPI.MAX))


def mlp_plan(config: TrainConfig, train: Split, test: Split | None, num_classes: int | None, where: str,
             groups: ProcessGroups) -> tuple[ModelPlan, TrainConfig]:
    """The command line's MLP, sized by its data. Collective over the data-parallel ranks.

    The features, the task (the labels', unless the config names one), the loss (cross-entropy or mean squared
    error by the task, unless named) and the classes (``num_classes``, or the labels') come from the data.

    Parameters
    ----------
    config : TrainConfig
        ``hidden``, ``task``, ``loss``.
    train, test : Split, Split or None
    num_classes : int or None
        The file's attribute, if it has one.
    where : str
        How messages name the data.
    groups : ProcessGroups

    Returns
    -------
    (hpcgpu.nn.ModelPlan, TrainConfig)
        The plan, and the config with the task and the loss it took.

    Raises
    ------
    ValueError
        Labels out of range of ``num_classes`` (every rank).
    """
    task = config.task or train.task
    loss = loss_by_name(config.loss or ("cross-entropy" if task == "classification" else "mse"))
    width = check_labels(where, [train, test], num_classes, groups.data_comm) if task == "classification" \
        else train.outputs
    plan = plan_model(relu_stack([train.dim, *config.hidden, width]), loss)
    return plan, dataclasses.replace(config, task=task, loss=loss.name)


def described(config: TrainConfig, optimizer: Optimizer, model: TrainModel) -> TrainConfig:
    """The config as the run is: the optimizer's, the model's and the loss's settings in its fields. Not collective.

    Parameters
    ----------
    config : TrainConfig
    optimizer : hpcgpu.optim.Optimizer
    model : hpcgpu.nn.TrainModel

    Returns
    -------
    TrainConfig
    """
    o, m = optimizer, model
    return dataclasses.replace(
        config, lr=o.lr, optimizer=o.name, momentum=getattr(o, "momentum", 0.0), weight_decay=o.weight_decay,
        hidden=tuple(m.hidden), loss=m.loss_name,
        # a model whose task comes from the data has none yet (the user's, if given): fit's data decide it
        task=config.task if m.capabilities.task_from_data else m.task)


def run_outputs(config: TrainConfig) -> list:
    """Every file a run may write: results, checkpoints (the kept older ones too), the trace. Not collective.

    Parameters
    ----------
    config : TrainConfig

    Returns
    -------
    list of hpcgpu._outputs.Output
        For the output policy (claimed before any work).
    """
    c = config
    ckpt = c.checkpoint_path or c.default_checkpoint  # a stop writes one beside --out even when none was asked
    outs = [Output(c.out, "--out"), Output(c.trace, "--trace", kind="json")]
    if ckpt:
        outs += [Output(p, "--checkpoint", resumed=c.resume)
                 for p in [ckpt] + [f"{ckpt}.{i}" for i in range(1, c.keep_checkpoints)]]
    return [o for o in outs if o.path]


# -- the model and optimizer on the reducer's buffer ----------------------------------------------

@dataclass
class ModelParts:
    """What a step needs but data.

    Attributes
    ----------
    model : hpcgpu.nn.TrainModel
        Bound to the reducer's flat buffers (this rank's tensor slice).
    optimizer : hpcgpu.optim.Optimizer
    opt_state : dict of str to xp.ndarray
        The optimizer's state (ZeRO-1: this rank's block), each of the shape of ``update_params``.
    reducer : GradientReducer
    watchdog : hpcgpu.watchdog.Watchdog
    update_params : xp.ndarray
        What the optimizer updates: the model's parameters, or with ZeRO-1 this rank's block of ``params_pad``.
    params_pad : xp.ndarray or None
        ZeRO-1's parameters padded to a multiple of the data-parallel size (None without ZeRO).
    stat_names : tuple of str
        The reducer's slots of a step's sums: the loss sum's, then the metric's.
    """

    model: TrainModel
    optimizer: Optimizer
    opt_state: dict
    reducer: GradientReducer
    watchdog: Watchdog
    update_params: object
    params_pad: object
    stat_names: tuple


def bind_model(plan: ModelPlan, optimizer: Optimizer, config: TrainConfig, rt: Runtime, groups: ProcessGroups,
               precision: Precision, tensor_allreduce=None) -> ModelParts:
    """The model on the reducer's flat buffer and the optimizer's state. Collective.

    Parameters
    ----------
    plan : hpcgpu.nn.ModelPlan
        The model and loss, sized (:func:`hpcgpu.nn.plan_model`).
    optimizer : hpcgpu.optim.Optimizer
    config : TrainConfig
        ``seed``, ``task``, ``stall_timeout``, ``bucket_mb``, ``zero_stage``.
    rt : hpcgpu.Runtime
    groups : ProcessGroups
    precision : Precision
    tensor_allreduce : callable, optional
        Sums a buffer over the tensor group (tensor parallelism only).

    Returns
    -------
    ModelParts

    Raises
    ------
    TypeError
        ``optimizer`` is not an hpcgpu optimizer; a model of one's own whose initialization failed (every rank).
    MemoryError
        The parameters, gradients and optimizer state do not fit (every rank).
    """
    c, g, xp = config, groups, rt.xp
    master = precision.master
    agree(optimizer_error(optimizer), comm=rt.comm)
    watchdog = Watchdog(rt.comm, c.stall_timeout)
    err, n_local, layers = None, 0, None
    try:
        n_local, layers = plan.size(g.tensor_parallel_size, g.tensor_rank, c.seed)
    except TypeError as e:  # a model of one's own whose init failed: on every rank alike
        err = e
    # The ranks' parameter counts agreed in the same collective (a model of one's own sized by per-rank
    # arguments would reduce gradients of different lengths); a tensor slice's count is its rank's own.
    agree_inputs("Trainer", {f"{plan.name}'s parameter count": n_local if g.tensor_parallel_size == 1 else None},
                 comm=rt.comm, error=err)
    stats = plan.stats  # the loss sum's slot, then the metric's
    agree(memory_error(plan, n_local, len(optimizer.state_names), precision, xp, rt.local_size), comm=rt.comm)
    reducer = GradientReducer(n_local, xp, master, g.data_comm, slots=(*stats, "stop"), watchdog=watchdog,
                              layers=layers, bucket_bytes=c.bucket_mb * 1e6,
                              shards=g.data_parallel_size if c.zero_stage == 1 else 1)
    params_pad = xp.zeros(reducer.padded, dtype=master) if c.zero_stage == 1 else None
    buffers = dict(grad=reducer.grad, stats=reducer.view(stats[0], 2),
                   params=None if params_pad is None else params_pad[:n_local])
    T = g.tensor_parallel_size
    model = plan.bind(xp, master, c.seed, task=c.task or None, compute_dtype=precision.compute,
                      tensor=(T, g.tensor_rank), tensor_allreduce=tensor_allreduce if T > 1 else None, **buffers)
    # Same seed gives the same weights everywhere; the Bcast makes sure even with different NumPy builds on
    # different nodes (a tensor slice: over the replicas).
    Bcast(model.params, root=0, comm=g.data_comm)
    lo, hi = reducer.shard_range
    update_params = model.params if params_pad is None else params_pad[lo:hi]
    attach = getattr(optimizer, "attach", None)  # a torch.optim optimizer: the module's parameters on the buffers
    if attach is not None:
        agree(attach(model.model.module, model.shapes, model.params, model.grad), comm=rt.comm)
    opt_state = optimizer.init(update_params)  # ZeRO-1: this rank's block only
    return ModelParts(model, optimizer, opt_state, reducer, watchdog, update_params, params_pad, tuple(stats))


# -- what the first data adds ---------------------------------------------------------------------

@dataclass
class DataParts:
    """What the first fit's data adds to :class:`ModelParts`.

    Attributes
    ----------
    config : TrainConfig
        The config with the task the data decided.
    train : Split
        This rank's shard of the training set.
    sampler : GlobalBatchSampler
    schedule : hpcgpu.optim.LRSchedule
    held_out : HeldOut
        The held-out set on the device (empty without one).
    metrics : EpochMetrics
    stats_on_device : bool
        Whether each step's reduced sums stay on the device until the epoch ends (one rank on a GPU, or NCCL).
    stats : xp.ndarray of shape (steps, 2), or None
        Those sums, a row a step.
    step : Step
    console : Console
    graphs_why : str
        Why CUDA graphs are off ("" when on, or not asked for).
    """

    config: TrainConfig
    train: Split
    sampler: GlobalBatchSampler
    schedule: LRSchedule
    held_out: HeldOut
    metrics: EpochMetrics
    stats_on_device: bool
    stats: object
    step: Step
    console: Console
    graphs_why: str


def bind_data(parts: ModelParts, config: TrainConfig, rt: Runtime, groups: ProcessGroups, precision: Precision,
              train: Split, test: Split | None, where: str, validation_from_file: bool, timer, timing_keys=(),
              warn=print) -> DataParts:
    """The data's checks against the model and the batch; the sampler, schedule, metrics and step. Collective.

    Parameters
    ----------
    parts : ModelParts
    config : TrainConfig
    rt : hpcgpu.Runtime
    groups : ProcessGroups
    precision : Precision
    train, test : Split, Split or None
        This rank's shards of the training and held-out sets.
    where : str
        How messages name the data (``"--data PATH"``, ``"data"``).
    validation_from_file : bool
        The held-out set is a file's ``/test`` (its series ``test_*``), else given in Python (``val_*``).
    timer : hpcgpu.timing.PhaseTimer
    timing_keys : tuple of str
        The history's timing series (with ``timing``).
    warn : callable
        Prints a warning line about this rank.

    Returns
    -------
    DataParts

    Raises
    ------
    ValueError
        The data does not fit the model or the batch, or labels out of range (every rank).
    """
    c, g, m, xp = config, groups, parts.model, rt.xp
    agree(data_error(c, m, g.data_parallel_size, train, test, where, validation_from_file), comm=rt.comm)
    if m.num_classes is not None:
        check_labels(where, [train, test], m.num_classes, g.data_comm)
    if m.n_inputs is None:  # a model of one's own takes the width of the data it is first fit on
        m.n_inputs = train.dim
    if m.capabilities.task_from_data:
        m.task = c.task or train.task
        c = dataclasses.replace(c, task=m.task)
    m.adapt_inputs(train.X, g.data_comm)  # a leading Standardize's statistics, from every rank's rows
    sampler = GlobalBatchSampler(train, c.batch_size, c.seed, g.data_comm, xp, c.grad_accum_steps,
                                 replicate=replicated(c.data_placement, train, rt.comm, xp), drop_last=c.drop_last)
    steps = sampler.steps
    if isinstance(parts.optimizer, TorchOptimizer):  # the optimizer's own rate, stepped by its scheduler
        schedule = TorchSchedule(parts.optimizer, steps)
    else:
        schedule = LRSchedule(parts.optimizer.lr, c.epochs * steps, round(c.warmup_epochs * steps), c.schedule,
                              c.lr_step_epochs * steps, c.lr_gamma)
    # the held-out set's series: test_* for a data file's /test split, val_* for a validation set given in
    # Python (arrays, validation_split), as Keras names them; none without a held-out set (Keras's history too)
    held = None if test is None or test.n_global == 0 else "test" if validation_from_file else "val"
    metrics = EpochMetrics(m.task, train.outputs, precision.compute is not None, timing_keys, held_out=held,
                           norms=c.clip_grad_norm is not None)
    # One rank on a GPU, or several over NCCL: each step's loss and metric sums (reduced, over NCCL) stay on the
    # device (a row of stats) until the epoch ends, a checkpoint or a stop needs them, so no step waits for the
    # GPU; a stop request is agreed on the host. Otherwise the reduced slots are read every step: free on the
    # host, and MPI's reduction of device buffers has synchronized the stream already.
    on_device = xp is not np and (rt.size == 1 or rt.collectives == "nccl") and \
        not isinstance(precision, ScaledMixedPrecision)
    # the buckets' Iallreduces are posted from inside the backward pass
    overlap = len(parts.reducer.buckets) > 1 and rt.size > 1
    graphs, why = graphs_plan(c, xp, precision.compute, overlap, capturable=m.capabilities.cuda_graphs)
    step = Step(model=m, reducer=parts.reducer, optimizer=parts.optimizer, state=parts.opt_state,
                params=parts.update_params, precision=precision, groups=g, micro_batches=sampler.micro_batches,
                micro_batch=sampler.local_micro_batch, batch=sampler.global_batch, schedule=schedule,
                graph=StepGraph(m, warn=warn) if graphs else None, overlap=overlap,
                padded_params=parts.params_pad, timer=timer, clip_norm=c.clip_grad_norm,
                clip_value=c.clip_grad_value, metrics=metrics)
    return DataParts(config=c, train=train, sampler=sampler, schedule=schedule, held_out=HeldOut(test, xp, g.data_comm),
                     metrics=metrics, stats_on_device=on_device,
                     stats=xp.zeros((steps, 2), dtype=m.dtype) if on_device else None, step=step,
                     console=Console(rt.rank, c.progress, c.epochs, steps, m.task, metrics.held_out),
                     graphs_why=why)


# -- the GEMM thread plan -------------------------------------------------------------------------

def gemm_plan(config: TrainConfig, model: TrainModel, xp, local_micro_batch: int, stored: tuple | None,
              comm: MPI.Intracomm) -> GemmPlan | None:
    """Each GEMM's threads: the checkpoint's plan when it fits, else timed; None: all on the rank's. Collective.

    A checkpoint without a plan (a GPU run, ``gemm_threads="all"``, one
    thread per rank, or a run whose plan was not recorded) means every GEMM
    on the rank's threads, and nothing is timed: the resume stays exact
    where the thread count is the same.

    Parameters
    ----------
    config : TrainConfig
        ``gemm_threads``: ``"all"`` plans nothing.
    model : hpcgpu.nn.TrainModel
    xp : module
    local_micro_batch : int
        This rank's rows per GEMM.
    stored : (str, str, int) or None
        A checkpoint's plan as JSON (empty: it had none), its path and the world size that wrote it.
    comm : mpi4py.MPI.Intracomm

    Returns
    -------
    GemmPlan or None
    """
    if config.gemm_threads == "all" or xp is not np or not model.capabilities.gemm_plan:
        return None
    mine = _blas.threads() or 1
    root_threads = comm.bcast(mine, root=0)
    plan = None
    if stored is not None:
        text, path, world_size = stored
        if not text:  # the run that wrote it ran every GEMM on its threads: so does this one
            return None
        try:
            plan = GemmPlan.from_json(text)
        except ValueError:
            plan = None
        # the same bits need the same threads on the same shapes
        if plan is not None and (world_size != comm.size or plan.blas_threads != root_threads):
            plan = None
        if plan is not None:
            plan.source = f"checkpoint {path}"
    if plan is None:
        plan = plan_gemm_threads(model, local_micro_batch, comm)
    return plan
