"""Training checkpoints in HDF5: written atomically, checksummed, the last K kept, read back with fallback.

A checkpoint holds everything a run needs to continue exactly where it
stopped: the flat parameters and the optimizer's state arrays of the unsplit
model (by name: ``velocity`` for SGD, ``m`` and ``v`` for Adam); the state of
each of the trainer's parts it restores (:data:`PARTS`), as that part's own
``state_dict`` gives it (the run's place, its epoch's partial sums and the
finished epochs' metrics; the loss scale; the model's buffers; the GEMM
thread plan); and what the run was: the options that must not change, the
optimizer's and the model's descriptions, a fingerprint of the training data.
The sample order needs no saved generator state: it is a pure function of
``(seed, epoch)`` (see :class:`hpcgpu.train.data.GlobalBatchSampler`).

Layout (format 3): datasets ``params``, ``optimizer/NAME`` and
``state/PART/NAME`` (a part's arrays); root attributes ``state`` (every part's
other values, one JSON object by part), ``config``, ``world_size``,
``optimizer``, ``optimizer_config``, ``model``, ``data_fingerprint`` (JSON
where not a number or a name), and ``epoch`` and ``step`` for a reader's eye
(``h5ls``; the trainer reads ``state``).

Every dataset carries the SHA-256 of its type, shape and bytes (attribute
``sha256``), and the root the SHA-256 of its other attributes
(``attrs_sha256``): a reader recomputes them, so a damaged or altered file
is refused (and the trainer falls back to an older one) instead of resumed.

Files: ``PATH`` is the newest, ``PATH.1`` the one before, up to
``PATH.{K-1}``. A new checkpoint is written to a temporary name and flushed
to disk; the older ones are shifted, the current ``PATH`` is hard-linked to
``PATH.1`` (copied where the file system has no hard links), and the
temporary is renamed over ``PATH``. ``PATH`` therefore always names a complete
checkpoint once the first one is written, whenever the process is killed.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import shutil
from dataclasses import dataclass, field

import numpy as np

from ..io import atomic_path, new_hdf5, publish, temp_beside, write_attrs

__all__ = ["FORMAT", "PARTS", "MUST_MATCH", "CheckpointState", "write_checkpoint", "read_checkpoint", "read_config",
           "read_header", "candidates", "digest", "Resumer"]

FORMAT = 3
"""Format 3: each part's ``state_dict`` under ``state``, the unsplit arrays, checksums, the data's fingerprint.
The only format read."""

PARTS = ("progress", "precision", "buffers", "gemm_threads")
"""The parts of :meth:`hpcgpu.Trainer.state_dict` a checkpoint holds besides the unsplit arrays (the model's
parameters and the optimizer's state, split for each rank on resume). The schedule and the sample order are
functions of the options and the step, at any number of ranks."""

# Options a resumed run must share with the run that wrote the checkpoint:
# they decide the model's shape, the sample order or the update rule.
MUST_MATCH = ("optimizer", "hidden", "batch_size", "seed", "dtype", "lr", "momentum", "weight_decay",
              "schedule", "warmup_epochs", "lr_step_epochs", "lr_gamma", "task", "loss", "drop_last")
"""``epochs`` is not among them: a resumed run of a constant or step schedule may train on to more epochs than
the run that wrote the checkpoint, never fewer than it has done; a cosine schedule spans the run's epochs, so
there they must match."""
_BEFORE = {"drop_last": True}
"""What a checkpoint written before an option existed ran with."""


@dataclass
class CheckpointState:
    """What a checkpoint holds (host arrays).

    Attributes
    ----------
    params : numpy.ndarray, shape (n_params,)
        The parameters, in the unsplit model's layout.
    optimizer : dict of str to numpy.ndarray
        The optimizer's state arrays by name, each of shape (n_params),
        laid out like ``params`` (SGD: ``velocity``).
    parts : dict
        The trainer's parts of :data:`PARTS`, each as its ``state_dict``
        gives it (:meth:`hpcgpu.Trainer.state_dict`: ``progress`` holds the
        epoch, the step, the unfinished epoch's sums and seconds, the
        finished epochs' metrics; ``precision`` the loss scale; ``buffers``
        the model's state that is not trained, rank 0's, by name;
        ``gemm_threads`` the GEMM thread plan as JSON, empty without one).
    config : dict
        The options of the run that wrote it.
    world_size : int
    optimizer_name : str
        The optimizer that wrote ``optimizer`` (``"sgd"``).
    optimizer_config : dict
        The optimizer's name and hyperparameters (:meth:`hpcgpu.optim.Optimizer.config`).
    data : dict
        The training data's fingerprint (:func:`hpcgpu.train.data.fingerprint`); empty when unknown.
    model : dict
        The model's description (its layers and loss, or its class and parameter shapes).
    """

    params: np.ndarray
    optimizer: dict
    parts: dict
    config: dict = field(default_factory=dict)
    world_size: int = 1
    optimizer_name: str = "sgd"
    optimizer_config: dict = field(default_factory=dict)
    data: dict = field(default_factory=dict)
    model: dict = field(default_factory=dict)

    @property
    def epoch(self) -> int:
        """Finished epochs."""
        return int(self.parts["progress"]["epoch"])

    @property
    def step(self) -> int:
        """Global steps done since the start of training."""
        return int(self.parts["progress"]["step"])

    @property
    def gemm_threads(self) -> str:
        """The run's GEMM thread plan as JSON (:class:`hpcgpu.train.gemm_threads.GemmPlan`); "" without one."""
        return str(self.parts.get("gemm_threads") or "")


def _plain(v):
    """A part's value as JSON holds it (NumPy scalars as Python numbers)."""
    if isinstance(v, np.generic):
        return v.item()
    raise TypeError(f"{type(v).__name__} in a part's state: not an array, a number, a string, a list or a dict")


def _split(parts: dict) -> tuple[dict, dict]:
    """Each part's arrays (``{part: {name: array}}``) and its other values (``{part: JSON-able}``)."""
    arrays, rest = {}, {}
    for part, value in parts.items():
        if isinstance(value, dict):
            arrays[part] = {k: np.asarray(v) for k, v in value.items() if hasattr(v, "__array__")}
            rest[part] = {k: v for k, v in value.items() if k not in arrays[part]}
        else:
            rest[part] = value
    return {k: v for k, v in arrays.items() if v}, rest


def digest(a: np.ndarray) -> str:
    """SHA-256 of an array's type, shape and bytes, as hex. Not collective.

    Parameters
    ----------
    a : numpy.ndarray

    Returns
    -------
    str
        64 hex digits; arrays equal in dtype, shape and every byte (NaN
        payloads included) have the same digest.
    """
    a = np.ascontiguousarray(a)
    h = hashlib.sha256(f"{a.dtype.str}{a.shape}".encode())
    h.update(memoryview(a).cast("B") if a.size else b"")
    return h.hexdigest()


def _attrs_digest(attrs) -> str:
    """SHA-256 of the root attributes but ``attrs_sha256`` (names sorted, values as JSON)."""
    def plain(v):
        if isinstance(v, bytes):
            return v.decode("utf-8", "replace")
        if isinstance(v, np.ndarray):
            return v.tolist()
        return v.item() if isinstance(v, np.generic) else v

    items = {k: plain(attrs[k]) for k in sorted(attrs) if k != "attrs_sha256"}
    return hashlib.sha256(json.dumps(items, sort_keys=True, default=str).encode()).hexdigest()


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
    """Make room for a new ``path``: shift ``path.{i}`` to ``path.{i+1}`` and link ``path`` to ``path.1``.

    ``path`` itself is left in place (the caller renames the new file over
    it), so it names a complete checkpoint at every moment.
    """
    for i in sorted((int(p.rsplit(".", 1)[1]) for p in candidates(path)[1:] if p != path), reverse=True):
        if i >= keep - 1:
            os.unlink(f"{path}.{i}")
        else:
            os.replace(f"{path}.{i}", f"{path}.{i + 1}")
    if keep > 1 and os.path.exists(path):
        try:
            os.link(path, f"{path}.1")
        except OSError:  # no hard links on this file system: a copy, published whole
            tmp = temp_beside(f"{path}.1")
            try:
                shutil.copyfile(path, tmp)
                publish(tmp, f"{path}.1")
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise


def _dataset(f, name: str, data) -> None:
    ds = f.create_dataset(name, data=data)
    ds.attrs["sha256"] = digest(ds[()])


def write_checkpoint(path: str, state: CheckpointState, keep: int = 2, attrs: dict | None = None) -> str:
    """Write ``state`` to ``path`` atomically, with checksums, keeping the ``keep`` newest files.

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
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    # Temporaries of writers that were killed (SIGKILL leaves them): one rank of
    # one job writes these checkpoints, so any found now are stale.
    for stale in glob.glob(os.path.join(glob.escape(d), f".{glob.escape(os.path.basename(path))}.*.tmp")):
        with contextlib.suppress(OSError):  # (the copies of _rotate's fallback match too)
            os.unlink(stale)
    arrays, rest = _split(state.parts)
    with atomic_path(path) as tmp:
        with new_hdf5(tmp) as f:
            _dataset(f, "params", state.params)
            for name, value in state.optimizer.items():
                _dataset(f, f"optimizer/{name}", value)
            for part, named in arrays.items():
                for name, value in named.items():
                    _dataset(f, f"state/{part}/{name}", value)
            f.attrs.update(dict(format=FORMAT, state=json.dumps(rest, sort_keys=True, default=_plain),
                                epoch=state.epoch, step=state.step, config=json.dumps(state.config, sort_keys=True),
                                world_size=state.world_size, optimizer=state.optimizer_name,
                                optimizer_config=json.dumps(state.optimizer_config, sort_keys=True),
                                data_fingerprint=json.dumps(state.data, sort_keys=True),
                                model=json.dumps(state.model, sort_keys=True)))
            write_attrs(f, attrs or {})
            f.attrs["attrs_sha256"] = _attrs_digest(f.attrs)
        with open(tmp, "rb") as fh:  # on disk before it can replace the previous checkpoint
            os.fsync(fh.fileno())
        _rotate(path, max(1, keep))
    return path


def read_header(path: str) -> dict | None:
    """A checkpoint's options, data fingerprint and optimizer, without reading (or checking) its arrays.

    Not collective. So a checkpoint of another model or other data still
    says what it was written for.

    Parameters
    ----------
    path : str

    Returns
    -------
    dict or None
        ``config`` (dict), ``data`` (dict, the fingerprint), ``optimizer`` (its config: ``name`` and
        hyperparameters), ``model`` (its description; empty when not
        recorded); None when the file or its
        ``config`` attribute cannot be read.
    """
    import h5py

    try:
        with h5py.File(path, "r") as f:
            a = f.attrs
            if a.get("format") == FORMAT and a.get("attrs_sha256") != _attrs_digest(a):
                return None  # not to be trusted: read_checkpoint says why
            config = json.loads(a["config"])
            data = json.loads(a.get("data_fingerprint", "{}"))
            optimizer = json.loads(a.get("optimizer_config", "{}")) or {"name": str(a.get("optimizer", ""))}
            model = json.loads(a.get("model", "{}"))
    except Exception:  # unreadable in any way: the caller's own reading says how
        return None
    if not all(isinstance(d, dict) for d in (config, data, optimizer, model)):
        return None
    return dict(config=config, data=data, optimizer=optimizer, model=model)


def read_config(path: str) -> dict | None:
    """The options a checkpoint was written with (its ``config`` attribute), or None. Not collective.

    Parameters
    ----------
    path : str

    Returns
    -------
    dict or None
        None when the file or the attribute cannot be read.
    """
    header = read_header(path)
    return None if header is None else header["config"]


def _verified(f, path: str) -> None:
    """Recompute every checksum of an open checkpoint; raise ValueError naming what differs."""
    import h5py

    if f.attrs.get("attrs_sha256") != _attrs_digest(f.attrs):
        raise ValueError("its attributes fail their checksum (changed or damaged since it was written)")
    bad = []

    def check(name, obj):
        if isinstance(obj, h5py.Dataset) and obj.attrs.get("sha256") != digest(obj[()]):
            bad.append(name)

    f.visititems(check)
    if bad:
        raise ValueError(f"{', '.join(bad[:3])} fail{'s' if len(bad) == 1 else ''} its checksum "
                         "(changed or damaged since it was written)")


def read_checkpoint(path: str, n_params: int) -> CheckpointState:
    """Read one checkpoint file and check it: checksums, sizes, finite values. Not collective.

    Parameters
    ----------
    path : str
        The checkpoint file (one of :func:`candidates`).
    n_params : int
        The model's number of parameters, which must be the length of
        ``params`` and of every optimizer state array in the file.

    Returns
    -------
    CheckpointState
        What the file holds; ``config`` and ``data`` as written, not yet
        compared with the current run's.

    Raises
    ------
    ValueError
        The file is truncated, not HDF5, not a checkpoint, fails a
        checksum, holds a NaN or infinity in its arrays (never written: the
        trainer refuses to checkpoint a diverged model), or is for a model of
        another size; the message names the file and the reason.
    """
    import h5py

    try:
        with h5py.File(path, "r") as f:
            fmt = f.attrs.get("format")
            if fmt is None:
                raise ValueError("not an hpcgpu checkpoint (no format attribute)")
            if fmt != FORMAT:
                raise ValueError(f"checkpoint format {fmt}; this hpcgpu reads format {FORMAT} only")
            _verified(f, path)
            params = f["params"][()]
            optimizer = {k: f["optimizer"][k][()] for k in f["optimizer"]} if "optimizer" in f else {}
            for name, arr in [("params", params), *optimizer.items()]:
                if arr.shape != (n_params,):
                    raise ValueError(f"holds {arr.shape[0] if arr.ndim else 0} parameters, the model has {n_params}")
                if not np.isfinite(arr).all():
                    raise ValueError(f"{name} holds NaN or infinity (damaged: a checkpoint is never written so)")
            a = f.attrs
            parts = json.loads(a["state"])
            for part, group in (f["state"].items() if "state" in f else ()):
                parts.setdefault(part, {}).update({k: group[k][()] for k in group})
            if not all(isinstance(parts.get(k), dict) for k in ("progress", "precision")):
                raise ValueError("its state has no progress or precision part")
            return CheckpointState(
                params=params, optimizer=optimizer, parts=parts, config=json.loads(a["config"]),
                world_size=int(a["world_size"]), optimizer_name=str(a["optimizer"]),
                optimizer_config=json.loads(a["optimizer_config"]), data=json.loads(a["data_fingerprint"]),
                model=json.loads(a["model"]))
    except ValueError as e:
        raise ValueError(f"checkpoint {path}: {e}") from None
    except (OSError, KeyError, TypeError) as e:
        from ..io import one_line

        raise ValueError(f"checkpoint {path}: unreadable ({one_line(e)})") from None


class Resumer:
    """Finds the newest checkpoint a run can continue from, and says why others were passed over.

    Not collective: rank 0 uses it (the trainer broadcasts what it found).
    A damaged file (truncated, not HDF5, failing a checksum) is skipped,
    with a note; a good one written with other options, another optimizer,
    another model or for other data is an error, not skipped: an older one
    would be the same.

    Parameters
    ----------
    path : str
        The newest checkpoint's name (``--checkpoint``).
    config : hpcgpu.train.TrainConfig
        This run's options.
    precision : str
        This run's precision's name.
    optimizer : dict
        This run's optimizer's config (:meth:`hpcgpu.optim.Optimizer.config`).
    model : dict
        This run's model's description.
    data : dict
        This run's data fingerprint (:meth:`hpcgpu.train.Trainer.data_fingerprint`).
    data_name : str
        How messages name the data.

    Attributes
    ----------
    notes : list of str
        Why files were skipped, newest first.
    found : str or None
        The file :meth:`newest` returned.
    """

    def __init__(self, path: str, config, precision: str, optimizer: dict, model: dict, data: dict, data_name: str):
        self.path, self.config, self.precision = path, config, precision
        self.optimizer, self.model, self.data, self.data_name = optimizer, model, data, data_name
        self.notes: list[str] = []
        self.found: str | None = None

    def newest(self, n_global: int) -> CheckpointState | None:
        """The newest good checkpoint's state, or None when there is none.

        Parameters
        ----------
        n_global : int
            The model's parameter count.

        Returns
        -------
        CheckpointState or None

        Raises
        ------
        ValueError
            Every checkpoint is damaged; or the newest readable one was
            written with options that must not change, another optimizer or
            model, or for other data.
        """
        found = candidates(self.path)
        for p in found:
            header = read_header(p)
            if header is not None:  # what it was written for, before its size is compared with the model's
                why = self._changed(p, header)
                if why:
                    raise why
            try:
                state = read_checkpoint(p, n_global)
                break
            except ValueError as e:
                self.notes.append(str(e))
        else:
            if found:
                raise ValueError(f"--resume: no readable checkpoint: {'; '.join(self.notes)}")
            return None
        self.found = p
        return state

    def warn(self) -> None:
        """Print the notes of skipped files on stderr, one line each (rank 0)."""
        import sys

        for note in self.notes:
            print(f"hpcgpu.train: warning: {note}; falling back to an older checkpoint", file=sys.stderr, flush=True)

    def _changed(self, p: str, header: dict) -> ValueError | None:
        """The first thing a resume must keep that this run changed, as the error to raise."""
        from .config import TrainConfig

        config = header["config"]
        mine = json.loads(self.config.to_json())
        theirs = TrainConfig(**{k: v for k, v in config.items() if k in mine})
        try:
            their_precision = theirs.resolved_precision()[0]
        except ValueError:
            their_precision = None
        if their_precision != self.precision:
            return ValueError(f"--resume: {p} was written with --precision {their_precision}, this run has "
                              f"{self.precision}")
        if config.get("epochs") != mine["epochs"] and mine["schedule"] == "cosine":
            return ValueError(f"--resume: {p} was written for --epochs {config.get('epochs')} of a cosine schedule, "
                              f"which spans the run's epochs: this run has {mine['epochs']}; only a constant or "
                              f"step schedule can be extended")
        for k in MUST_MATCH:
            theirs, flag = config.get(k, _BEFORE.get(k)), "--" + k.replace("_", "-")
            if theirs != mine[k]:
                if isinstance(mine[k], bool):  # a switch: --drop-last or --no-drop-last
                    said = [flag if on else "--no-" + flag[2:] for on in (theirs, mine[k])]
                    return ValueError(f"--resume: {p} was written with {said[0]}, this run has {said[1]}")
                return ValueError(f"--resume: {p} was written with --{k.replace('_', '-')} {theirs}, this run has "
                                  f"{mine[k]}")
        opt = header["optimizer"]
        if len(opt) > 1 and opt != self.optimizer:
            return ValueError(f"--resume: {p} was written with the optimizer {_described(opt)}, this run has "
                              f"{_described(self.optimizer)}")
        why = self._data_changed(p, header["data"])  # first: the data decides the command line's model
        if why is None and header["model"] and header["model"] != self.model:
            why = ValueError(f"--resume: {p} was written for another model ({_model_text(header['model'])}), this "
                             f"run has {_model_text(self.model)}")
        return why

    def _data_changed(self, p: str, theirs: dict) -> ValueError | None:
        """How the checkpoint's data fingerprint ``theirs`` differs from this run's data (None: it does not)."""
        for split in ("train", "test"):
            a, b = theirs.get(split), self.data.get(split)
            if a is None or a == b:
                continue
            where = f"--resume: {p} was trained on"
            if b is None:
                return ValueError(f"{where} data with a /test split, --data {self.data_name} has none")
            for key, what in (("dim", "features"), ("n", f"/{split} samples")):
                if a.get(key) != b.get(key):
                    return ValueError(f"{where} data with {a.get(key)} {what}, --data {self.data_name} has "
                                      f"{b.get(key)}: resume with the data it was trained on, or start afresh")
            return ValueError(f"{where} other data (/{split} fingerprint {a.get('digest')}, --data "
                              f"{self.data_name} has {b.get('digest')}: the same shape, other values): resume with "
                              "the data it was trained on, or start afresh without --resume")
        return None


def _model_text(spec: dict) -> str:
    """A model's description on one line: ``Dense 6-16-3 (relu, -), cross-entropy`` or the class and its shapes."""
    net = spec.get("net")
    if net and all(lay.get("type") == "Dense" for lay in net.get("layers", [])):
        layers = net["layers"]
        sizes = "-".join(str(x) for x in [layers[0]["n_in"]] + [lay["n_out"] for lay in layers])
        acts = ", ".join(lay.get("activation") or "-" for lay in layers)
        return f"Dense {sizes} ({acts}), {spec.get('loss', {}).get('type', '?')}"
    return _described(spec)


def _described(d: dict) -> str:
    """A config dict as ``name(key=value, ...)`` on one line."""
    name = d.get("name") or d.get("model") or ""
    rest = ", ".join(f"{k}={json.dumps(v, sort_keys=True)}" for k, v in sorted(d.items()) if k not in ("name", "model"))
    return f"{name}({rest})" if name else rest
