"""Training checkpoints in HDF5: written atomically, the last K kept, read back with fallback.

A checkpoint holds everything a run needs to continue exactly where it
stopped: the flat parameters and momentum buffers, the epoch, the global step
and the step within the epoch, the partial sums of the current epoch, the
metrics of the finished epochs, and the options that must not change. The
sample order needs no saved generator state: it is a pure function of
``(seed, epoch)`` (see :class:`hpcgpu.train.data.GlobalBatchSampler`).

Files: ``PATH`` is the newest, ``PATH.1`` the one before, up to
``PATH.{K-1}``. A new checkpoint is written to a temporary name, flushed to
disk, the older ones are shifted, and the temporary is renamed to ``PATH``;
a process killed at any moment leaves at least one complete checkpoint.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
from dataclasses import dataclass, field

import numpy as np

from ..io import atomic_path, write_attrs

__all__ = ["MUST_MATCH", "CheckpointState", "write_checkpoint", "read_checkpoint", "read_config", "candidates"]

FORMAT = 1

# Options a resumed run must share with the run that wrote the checkpoint:
# they decide the model's shape, the sample order or the update rule.
MUST_MATCH = ("hidden", "batch_size", "seed", "dtype", "lr", "momentum", "weight_decay", "schedule",
              "warmup_epochs", "lr_step_epochs", "lr_gamma", "epochs")


@dataclass
class CheckpointState:
    """What a checkpoint holds (host arrays).

    Attributes
    ----------
    params, velocity : numpy.ndarray, shape (n_params,)
    epoch : int
        Finished epochs.
    step : int
        Global steps done since the start of training.
    step_in_epoch : int
        Steps done in the unfinished epoch ``epoch``.
    epoch_totals : numpy.ndarray, shape (2,)
        Loss sum and correct count of the unfinished epoch's steps.
    epoch_seconds : float
        Training time already spent in the unfinished epoch (s).
    history : dict of list
        Metrics of the finished epochs.
    config : dict
        The options of the run that wrote it.
    world_size : int
    gemm_threads : str
        The run's GEMM thread plan as JSON (:class:`hpcgpu.train.threads.GemmPlan`);
        empty when it had none.
    skipped_steps : int
        Steps of the unfinished epoch skipped for a gradient overflow (16-mixed).
    loss_scale : float
        The dynamic loss scale (16-mixed; 1 otherwise).
    clean_steps : int
        Clean steps since the loss scale last changed.
    phase_seconds : dict
        Seconds per phase of the unfinished epoch so far (writing rank's), see :mod:`hpcgpu.timing`.
    """

    params: np.ndarray
    velocity: np.ndarray
    epoch: int
    step: int
    step_in_epoch: int
    epoch_totals: np.ndarray
    epoch_seconds: float
    history: dict = field(default_factory=dict)
    config: dict = field(default_factory=dict)
    world_size: int = 1
    gemm_threads: str = ""
    skipped_steps: int = 0
    loss_scale: float = 1.0
    clean_steps: int = 0
    phase_seconds: dict = field(default_factory=dict)


def candidates(path: str) -> list[str]:
    """``path``, ``path.1``, ``path.2``, ... that exist, newest first.

    Not collective.

    Parameters
    ----------
    path : str
        The newest checkpoint's name, as given to :func:`write_checkpoint`.

    Returns
    -------
    list of str
        The existing files: ``path`` first, then ``path.{i}`` by increasing
        ``i``; empty when there is none.
    """
    out = [path] if os.path.exists(path) else []
    i = 1
    d = os.path.dirname(os.path.abspath(path))
    base = os.path.basename(path)
    numbered = []
    if os.path.isdir(d):
        for name in os.listdir(d):
            if name.startswith(base + ".") and name[len(base) + 1 :].isdigit():
                numbered.append(int(name[len(base) + 1 :]))
    for i in sorted(numbered):
        out.append(f"{path}.{i}")
    return out


def _rotate(path: str, keep: int) -> None:
    """Shift ``path.{i}`` to ``path.{i+1}``, keeping ``keep`` files with the new one."""
    for i in sorted((int(p.rsplit(".", 1)[1]) for p in candidates(path)[1:] if p != path), reverse=True):
        if i >= keep - 1:
            os.unlink(f"{path}.{i}")
        else:
            os.replace(f"{path}.{i}", f"{path}.{i + 1}")
    if keep > 1 and os.path.exists(path):
        os.replace(path, f"{path}.1")


def write_checkpoint(path: str, state: CheckpointState, keep: int = 2, attrs: dict | None = None) -> str:
    """Write ``state`` to ``path`` atomically, keeping the ``keep`` newest files.

    Not collective: one rank (rank 0) calls it. Temporary files that killed
    writers left beside ``path`` are removed first.

    Parameters
    ----------
    path : str
        The new checkpoint's name; its directory is created if missing.
        The previous files move to ``path.1``, ``path.2``, ...
    state : CheckpointState
        What to write (host arrays).
    keep : int
        How many checkpoint files to keep, the new one included; below 1 counts as 1.
    attrs : dict, optional
        More root attributes of the file (values h5py can store).

    Returns
    -------
    str
        ``path``.

    Raises
    ------
    OSError
        The file cannot be written; the older checkpoints are untouched.
    """
    import h5py

    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    # Temporaries of writers that were killed (SIGKILL leaves them): one rank of
    # one job writes these checkpoints, so any found now are stale.
    for stale in glob.glob(os.path.join(glob.escape(d), f".{glob.escape(os.path.basename(path))}.*.tmp")):
        with contextlib.suppress(OSError):
            os.unlink(stale)
    with atomic_path(path) as tmp:
        with h5py.File(tmp, "w") as f:
            f.create_dataset("params", data=state.params)
            f.create_dataset("velocity", data=state.velocity)
            f.create_dataset("epoch_totals", data=np.asarray(state.epoch_totals, dtype=np.float64))
            h = f.create_group("history")
            for k, v in state.history.items():
                h.create_dataset(k, data=np.asarray(v, dtype=np.float64))
            f.attrs.update(dict(format=FORMAT, epoch=state.epoch, step=state.step,
                                step_in_epoch=state.step_in_epoch, epoch_seconds=state.epoch_seconds,
                                config=json.dumps(state.config, sort_keys=True), world_size=state.world_size,
                                gemm_threads=state.gemm_threads, skipped_steps=state.skipped_steps,
                                loss_scale=state.loss_scale, clean_steps=state.clean_steps,
                                phase_seconds=json.dumps(state.phase_seconds)))
            write_attrs(f, attrs or {})
        with open(tmp, "rb") as fh:  # on disk before it can replace the previous checkpoint
            os.fsync(fh.fileno())
        _rotate(path, max(1, keep))
    return path


def read_config(path: str) -> dict | None:
    """The options a checkpoint was written with (its ``config`` attribute), or None. Not collective.

    Reads nothing else, so a checkpoint of another model still says which
    options it had.

    Parameters
    ----------
    path : str

    Returns
    -------
    dict or None
        None when the file or the attribute cannot be read.
    """
    import h5py

    try:
        with h5py.File(path, "r") as f:
            config = json.loads(f.attrs["config"])
    except Exception:  # unreadable in any way: the caller's own reading says how
        return None
    return config if isinstance(config, dict) else None


def read_checkpoint(path: str, n_params: int) -> CheckpointState:
    """Read and check one checkpoint file. Not collective.

    Parameters
    ----------
    path : str
        The checkpoint file (one of :func:`candidates`).
    n_params : int
        The model's number of parameters, which must be the length of
        ``params`` and ``velocity`` in the file.

    Returns
    -------
    CheckpointState
        What the file holds; ``config`` as written, not yet compared with
        the current run's.

    Raises
    ------
    ValueError
        The file is truncated, not HDF5, not a checkpoint, or for a model of
        another size; the message names the file and the reason.
    """
    import h5py

    try:
        with h5py.File(path, "r") as f:
            if f.attrs.get("format") != FORMAT:
                raise ValueError("not an hpcgpu checkpoint (no format attribute)")
            params, velocity = f["params"][()], f["velocity"][()]
            if params.shape != (n_params,) or velocity.shape != (n_params,):
                raise ValueError(f"holds {params.shape[0]} parameters, the model has {n_params}")
            a = f.attrs
            return CheckpointState(
                params=params, velocity=velocity, epoch=int(a["epoch"]), step=int(a["step"]),
                step_in_epoch=int(a["step_in_epoch"]), epoch_totals=f["epoch_totals"][()],
                epoch_seconds=float(a["epoch_seconds"]),
                history={k: f["history"][k][()].tolist() for k in f["history"]},
                config=json.loads(a["config"]), world_size=int(a["world_size"]),
                gemm_threads=str(a.get("gemm_threads", "")), skipped_steps=int(a.get("skipped_steps", 0)),
                loss_scale=float(a.get("loss_scale", 1.0)), clean_steps=int(a.get("clean_steps", 0)),
                phase_seconds=json.loads(a.get("phase_seconds", "{}")),
            )
    except ValueError as e:
        raise ValueError(f"checkpoint {path}: {e}") from None
    except (OSError, KeyError, TypeError) as e:
        raise ValueError(f"checkpoint {path}: unreadable ({e})") from None
