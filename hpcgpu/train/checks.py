"""What a training run's set-up refuses, as one-line errors: pure functions of the run's parts, no communication.

Each returns the error (``ValueError``, ``MemoryError``) or None, with the same inputs on every rank giving the same
answer; :class:`hpcgpu.train.Trainer` agrees it over the ranks (``hpcgpu.errors.agree``) before any collective
that depends on it. The messages speak the command line's flags; a Trainer of the library translates them to its
arguments (``Trainer._in_words``).
"""

from __future__ import annotations

import numpy as np

from ..nn import ModelPlan, Network, TrainModel
from ..optim import Optimizer
from .._memory import host_memory
from .config import TrainConfig
from .data import Split
from .precision import Precision

__all__ = ["layout_error", "compute_dtype_error", "memory_error", "data_error", "features_error", "optimizer_error"]


def layout_error(c: TrainConfig, plan: ModelPlan | None, world_size: int, precision: Precision) -> ValueError | None:
    """What is wrong with the tensor-parallel layout, or the model's capabilities with it (None: nothing).

    Parameters
    ----------
    c : TrainConfig
    plan : hpcgpu.nn.ModelPlan or None
        None: the command line's MLP, built from the data later.
    world_size : int
        The ranks of the run.
    precision : hpcgpu.train.precision.Precision
    """
    T, P = c.tensor_parallel, world_size
    can = plan.capabilities if plan is not None else Network.capabilities  # the command line's MLP
    name = type(plan.model).__name__ if plan is not None else ""
    if T > 1 and not can.tensor_parallel:
        return ValueError(f"--tensor-parallel {T}: a model of one's own ({name}) cannot be split "
                          "over ranks; tensor parallelism needs the built-in Dense layers (hpcgpu.nn.Sequential)")
    if precision.compute is not None and not can.mixed_precision:
        return ValueError(f"--precision {precision.name}: a model of one's own ({name}) "
                          "computes in its parameters' type; mixed precision needs the built-in layers")
    allowed = plan.precisions if plan is not None else None
    if precision.compute is not None and allowed is not None and precision.name not in allowed:
        return ValueError(f"--precision {precision.name}: {name} computes {', '.join(allowed)} only")
    if P % T:
        return ValueError(f"--tensor-parallel {T} does not divide the {P} ranks")
    hidden = list(c.hidden) if plan is None else list(plan.hidden)
    if T > 1 and not hidden:
        return ValueError(f"--tensor-parallel {T} needs hidden layers to split")
    split = [h for i, h in enumerate(hidden) if i % 2 == 0]  # the column-parallel layers' (layer_plan)
    if T > 1 and T > min(split):
        return ValueError(f"--tensor-parallel {T} is larger than the smallest hidden width it splits "
                          f"({min(split)})")
    return None


def compute_dtype_error(xp, precision: Precision) -> ValueError | None:
    """Why the array module ``xp`` cannot hold mixed precision's 16-bit type (None: it can, or no mixed precision).

    Tries what the mixed step does with it: compare (ReLU's masks) and widen.

    Parameters
    ----------
    xp : module
        NumPy or CuPy.
    precision : hpcgpu.train.precision.Precision
        The policy; its ``compute`` type (None: no mixed precision) is tried.
    """
    compute = precision.compute
    if compute is None:
        return None
    try:
        a = xp.zeros(2, dtype=compute)
        (a > 0).astype(np.float32)
    except Exception as e:  # noqa: BLE001 - CuPy < 14 (no bfloat16), NumPy too old for ml_dtypes, ...
        where = "CuPy (>= 14 has bfloat16)" if xp is not np else "NumPy"
        return ValueError(f"--precision {precision.name}: {where} cannot compute in {compute.name} here "
                          f"({type(e).__name__}: {e})")
    return None


def memory_error(plan: ModelPlan, n_local: int, states: int, precision: Precision, xp,
                 local_size: int) -> MemoryError | None:
    """Whether a node's ranks can hold the model: parameters, gradient, optimizer state, a 16-bit copy.

    Checked before anything is allocated, so a model far too large is one line, not an abort.

    Parameters
    ----------
    plan : hpcgpu.nn.ModelPlan
    n_local : int
        The parameters this rank holds (its tensor slice).
    states : int
        The optimizer's state arrays of that size (Adam: 2).
    precision : hpcgpu.train.precision.Precision
    xp : module
        NumPy (the node's memory, shared by its ``local_size`` ranks) or CuPy (the rank's GPU).
    local_size : int
        The ranks on this node.
    """
    itemsize = precision.master.itemsize
    per_rank = n_local * (itemsize * (2 + states) + (2 if precision.compute is not None else 0))
    memory = host_memory()
    if xp is not np:
        try:
            memory = int(xp.cuda.Device().mem_info[1])
        except Exception:  # noqa: BLE001 - unknown: do not refuse on a guess
            return None
    here = per_rank * (local_size if xp is np else 1)
    if not memory or here <= memory:
        return None
    gib = 2.0**30
    return MemoryError(f"{plan.name} needs {here / gib:.1f} GiB (parameters, gradient and optimizer state of "
                       f"{n_local} parameters on each of this node's ranks), more than "
                       f"{'its GPU' if xp is not np else 'this node'} has ({memory / gib:.1f} GiB)"
                       f"{plan.memory_hint()}")


def features_error(model: TrainModel, where: str, n_features: int) -> ValueError | None:
    """Data of ``n_features`` columns for a model that takes another number (None: it fits, or takes any).

    Parameters
    ----------
    model : hpcgpu.nn.TrainModel
        Bound; its ``n_inputs`` (None: any).
    where : str
        How the message names the data.
    n_features : int
        The data's columns.
    """
    n = model.n_inputs
    if n is not None and n_features != n:
        return ValueError(f"{where}: X has {n_features} features, the model takes {n}")
    return None


def data_error(c: TrainConfig, model: TrainModel, data_ranks: int, train: Split, test: Split | None, where: str,
               validation_from_file: bool) -> ValueError | None:
    """What is wrong with the data for this model and batch at its data-parallel ranks (None: nothing).

    Parameters
    ----------
    c : TrainConfig
    model : hpcgpu.nn.TrainModel
        Bound.
    data_ranks : int
        The data-parallel ranks.
    train, test : hpcgpu.train.data.Split
        The training data and the held-out set (None: none).
    where : str
        How messages name the data (``--data PATH``, ``data``).
    validation_from_file : bool
        The held-out set is the data file's ``/test`` (messages name its datasets).
    """
    ranks = (f"number of ranks ({data_ranks})" if c.tensor_parallel == 1
             else f"number of data-parallel ranks ({data_ranks})")
    if test is not None and test.dim != train.dim:
        if where.startswith("--data") and validation_from_file:
            return ValueError(f"{where}: /test/X has {test.dim} features, /train/X has {train.dim}")
        return ValueError(f"validation: X has {test.dim} features, the training data has {train.dim}")
    if test is not None and test.y.shape[1:] != train.y.shape[1:]:
        return ValueError(f"{where}: the validation targets have shape {test.y.shape[1:]} per sample, the "
                          f"training targets {train.y.shape[1:]}")
    err = features_error(model, where, train.dim)
    if err is not None:
        return err
    if model.task == "regression" and model.n_outputs is not None and train.outputs != model.n_outputs:
        return ValueError(f"{where}: y has {train.outputs} target(s) per sample, the model's last layer "
                          f"gives {model.n_outputs}")
    if c.batch_size > train.n_global:
        return ValueError(f"--batch-size {c.batch_size} is larger than the training set ({train.n_global} samples)")
    if c.batch_size < data_ranks:
        return ValueError(f"--batch-size {c.batch_size} is smaller than the {ranks}")
    if c.batch_size // c.grad_accum_steps < data_ranks:
        return ValueError(f"--grad-accum-steps {c.grad_accum_steps}: a micro-batch of "
                          f"{c.batch_size // c.grad_accum_steps} samples is smaller than the {ranks}")
    rest, K = train.n_global % c.batch_size, c.grad_accum_steps
    if not c.drop_last and c.sync_batchnorm and rest and rest // K < data_ranks:
        return ValueError(f"--no-drop-last with --sync-batchnorm: the last step's {rest} samples"
                          f"{f' in {K} micro-batches' if K > 1 else ''} leave a rank without a row, and "
                          f"SyncBatchNorm's statistics need every rank's: use --drop-last, or a --batch-size that "
                          f"leaves at least {K * data_ranks} samples (or none) for the last step")
    return None


def optimizer_error(optimizer) -> TypeError | None:
    """Why ``optimizer`` cannot train a Trainer's model (None: it can).

    Parameters
    ----------
    optimizer : object
        What the caller gave as ``optimizer=``.
    """
    if not isinstance(optimizer, Optimizer):
        return TypeError(f"optimizer must be an hpcgpu.optim optimizer (SGD, Adam, AdamW), or for an nn.Torch "
                         f"model torch.optim.SGD, Adam or AdamW, got "
                         f"{type(optimizer).__name__}")
    return None
