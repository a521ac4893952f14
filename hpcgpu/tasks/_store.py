"""Where a sweep's results live: the ledger in rank 0's memory, its journal on disk, the HDF5 file.

The ledger holds every task's status and result. Between two writes of the
HDF5 file, the records it receives are appended to a journal beside the
output (``OUT.journal``) and forced to disk every few seconds: one append of
the new records (O(new), not O(all) as rewriting the HDF5 file would be), so
a killed job loses at most those seconds. Each append is one frame (magic,
length, CRC-32, pickled records); a frame cut short by a kill is detected and
ignored. The HDF5 file is always written whole, to a temporary name, then
renamed: it is the previous good file or the new complete one, never half of
one. After each HDF5 write the journal starts again; after the final write
it is removed. ``--resume`` reads the HDF5 file, then the journal.
"""

from __future__ import annotations

import os
import pickle
import struct
import zlib
from dataclasses import dataclass

import numpy as np

from .._gemm import as_dtype
from ..io import atomic_path, new_hdf5, write_attrs
from ._params import Params

PENDING, DONE, FAILED = 0, 1, 2
STATUS_NAMES = {"pending": PENDING, "done": DONE, "failed": FAILED}


class SchemaError(ValueError):
    """A task's results differ in names or dtypes from the first result (or the kept ones): they cannot be stored."""


@dataclass
class Record:
    """What a worker reports about one attempt at one task (pickled to rank 0)."""

    task: int
    ok: bool
    attempt: int
    seconds: float
    rank: int
    error: str = ""
    values: dict | None = None


def result_schema(values: dict, task: int) -> dict:
    """``{name: (dtype str, shape)}`` of one task's results, checking each can be stored.

    Raises
    ------
    SchemaError
        Not a dict of str to numbers, booleans, strings or numeric arrays.
    """
    if not isinstance(values, dict):
        raise SchemaError(f"task {task} returned {type(values).__name__}, not a dict of numbers and arrays")
    if not values:
        raise SchemaError(f"task {task} returned an empty dict")
    schema = {}
    for k, v in values.items():
        if not isinstance(k, str) or not k or "/" in k or k == ".":
            raise SchemaError(f"task {task}: result name {k!r} is not usable as an HDF5 dataset name")
        if isinstance(v, str):
            schema[k] = ("str", ())
            continue
        a = np.asarray(v)
        if a.dtype.kind not in "biufc":
            raise SchemaError(f"task {task}: result {k!r} is {type(v).__name__} (dtype {a.dtype}): "
                              "expected a number, a boolean, a string or a numeric array")
        schema[k] = (a.dtype.str, a.shape)
    return schema


def _describe(entry) -> str:
    dtype, shape = entry
    return f"{'str' if dtype == 'str' else as_dtype(dtype).name} of shape {shape}"


RAGGED = None
"""The shape in a ledger's schema of a result whose shape varies from task to task (stored ragged)."""


class Ledger:
    """Every task's status, attempts, timing and results, on the rank that writes the file.

    Parameters
    ----------
    params : Params
        The task table.
    function : str
        The task function's name (``MODULE:FUNCTION``), recorded in the file.
    """

    def __init__(self, params: Params, function: str):
        n = params.n
        self.params, self.function = params, function
        self.status = np.zeros(n, np.int8)
        self.error = [""] * n
        self.seconds = np.full(n, np.nan)
        self.rank = np.full(n, -1, np.int32)
        self.attempts = np.zeros(n, np.int32)
        self.schema: dict | None = None
        self.schema_from: str | None = None  # the earlier run's file the schema was read from (a resume), or None
        self.afresh = "--overwrite"  # how messages name starting afresh (overwrite=True in library mode)
        self.results: dict[str, np.ndarray] = {}

    def apply(self, rec: Record) -> None:
        """Record a finished attempt (done or, after its last retry, failed).

        A result whose shape differs from the first result's is stored
        ragged from then on (:meth:`_make_ragged`): each task's array as it
        is, not refused.

        Raises
        ------
        SchemaError
            ``rec``'s results differ from the first result's names or dtypes.
        """
        if rec.ok:
            schema = result_schema(rec.values, rec.task)
            if self.schema is None:
                self._allocate(schema)
            elif schema != self.schema:
                if set(schema) != set(self.schema) or any(schema[k][0] != self.schema[k][0] for k in schema):
                    raise SchemaError(self._mismatch(schema, rec.task))
                for k in schema:
                    if self.schema[k][1] is not RAGGED and schema[k][1] != self.schema[k][1]:
                        self._make_ragged(k)
            for k, v in rec.values.items():
                if self.schema[k][1] is RAGGED:
                    self.results[k][rec.task] = np.array(v)
                else:
                    self.results[k][rec.task] = v
            self.status[rec.task], self.error[rec.task] = DONE, ""
        else:
            self.status[rec.task], self.error[rec.task] = FAILED, rec.error
        self.seconds[rec.task], self.rank[rec.task], self.attempts[rec.task] = rec.seconds, rec.rank, rec.attempt + 1

    def _mismatch(self, schema: dict, task: int) -> str:
        first = self.schema
        if self.schema_from is not None:  # a resume: the function changed since the kept results were made
            if set(schema) != set(first):
                return (f"task {task} returned results {sorted(schema)}, the results kept from {self.schema_from} "
                        f"are {sorted(first)}: the function changed since; rerun with {self.afresh} to start afresh")
            k = next(k for k in first if schema[k][0] != first[k][0])
            return (f"task {task}: result {k!r} is {_kind_name(schema[k][0])}, the results kept from "
                    f"{self.schema_from} are {_kind_name(first[k][0])}: the function changed since; rerun with "
                    f"{self.afresh} to start afresh")
        if set(schema) != set(first):
            return (f"task {task} returned results {sorted(schema)}, the first result had {sorted(first)}: "
                    "the function must return the same names for every task")
        k = next(k for k in first if schema[k][0] != first[k][0])
        return (f"task {task}: result {k!r} is {_kind_name(schema[k][0])}, the first result's was "
                f"{_kind_name(first[k][0])}: the function must return the same dtypes for every task (shapes may "
                "vary: they are stored ragged)")

    def _make_ragged(self, name: str) -> None:
        """Result ``name`` from one array of every task's (task id first) to an object array of each task's own."""
        regular = self.results[name]
        ragged = np.full(self.params.n, None, dtype=object)
        for i in np.flatnonzero(self.status == DONE):
            ragged[i] = regular[i].copy()
        self.results[name] = ragged
        self.schema[name] = (self.schema[name][0], RAGGED)

    def ragged(self) -> list[str]:
        """The names of the results stored ragged (their shape varies from task to task)."""
        return [k for k, (_, shape) in (self.schema or {}).items() if shape is RAGGED]

    def _allocate(self, schema: dict) -> None:
        self.schema = schema
        n = self.params.n
        for k, (dtype, shape) in schema.items():
            if dtype == "str":
                self.results[k] = np.full(n, "", dtype=object)
            elif shape is RAGGED:
                self.results[k] = np.full(n, None, dtype=object)
            else:
                dt = as_dtype(dtype)  # a task's bfloat16 results: ml_dtypes' type, by its name
                fill = np.nan if dt.kind in "fc" else 0
                self.results[k] = np.full((n, *shape), fill, dtype=dt)

    def counts(self) -> dict:
        """``{"done": ..., "failed": ..., "pending": ...}``."""
        return {name: int((self.status == code).sum()) for name, code in STATUS_NAMES.items()}

    def todo(self, retry_failed: bool = False) -> list[int]:
        """The tasks a run or a resume runs, in id order: the pending ones, and the failed ones if asked.

        Parameters
        ----------
        retry_failed : bool
            Also the failed tasks (an earlier run's, kept by ``--resume``): without it they stay
            failed, so a task that crashes its process does not stop every resume.

        Returns
        -------
        list of int
        """
        keep = (self.status == PENDING) | ((self.status == FAILED) if retry_failed else False)
        return [int(i) for i in np.flatnonzero(keep)]

    # ---- the HDF5 file -----------------------------------------------------------------------

    def write(self, path: str, attrs: dict) -> None:
        """Write the whole file to a temporary name beside ``path``, then rename it to ``path``.

        Raises
        ------
        OSError
            The file could not be written (``path`` is left as it was).
        """
        import h5py

        with atomic_path(path) as tmp, new_hdf5(tmp) as f:
            write_attrs(f, {"function": self.function, "params_digest": self.params.digest(),
                            "tasks": self.params.n, **self.counts(), **attrs})
            g = f.create_group("params")
            for k, col in self.params.columns.items():
                _dataset(g, k, col)
            r = f.create_group("results")
            for k, col in self.results.items():
                if self.schema[k][1] is RAGGED:
                    _ragged_dataset(f, k, col, as_dtype(self.schema[k][0]))
                else:
                    _dataset(r, k, col)
            t = f.create_group("tasks")
            status = h5py.enum_dtype(STATUS_NAMES, basetype="i1")
            t.create_dataset("status", data=self.status, dtype=status)
            t.create_dataset("error", data=np.array(self.error, dtype=object), dtype=h5py.string_dtype())
            t.create_dataset("seconds", data=self.seconds).attrs["units"] = "s"
            t.create_dataset("rank", data=self.rank)
            t.create_dataset("attempts", data=self.attempts)
            t["seconds"].attrs["description"] = "wall-clock seconds of the task's last attempt (NaN: not run)"
            t["rank"].attrs["description"] = "rank that ran the last attempt (-1: not run)"

    def load(self, path: str, label: str) -> None:
        """Take the done and the failed tasks (with their errors) from an earlier file of the same sweep.

        Raises
        ------
        ValueError
            The file is not a results file of this function and parameter table.
        """
        import h5py

        try:
            f = h5py.File(path, "r")
        except OSError as e:
            raise ValueError(f"{label}: not a readable HDF5 file ({e})") from None
        with f:
            self._check_same_sweep(dict(f.attrs), label)
            status = f["tasks/status"][()]
            done = np.flatnonzero(status == DONE)
            if len(done) and len(f["results"]):
                schema = {}
                for k, d in f["results"].items():
                    if h5py.check_string_dtype(d.dtype) is not None:
                        schema[k] = ("str", ())
                    elif h5py.check_vlen_dtype(d.dtype) is not None:
                        schema[k] = (h5py.check_vlen_dtype(d.dtype).str, RAGGED)
                    else:
                        schema[k] = (d.dtype.str, d.shape[1:])
                self._allocate(schema)
                for k, d in f["results"].items():
                    v = d[()]
                    if schema[k][0] == "str":
                        v = np.array([s.decode() if isinstance(s, bytes) else s for s in v], dtype=object)
                    elif schema[k][1] is RAGGED:
                        shapes = f["shapes"][k][()]
                        for i in done:
                            self.results[k][i] = v[i].reshape(tuple(int(x) for x in shapes[i]))
                        continue
                    self.results[k][done] = v[done]
            failed = np.flatnonzero(status == FAILED)
            self.status[done], self.status[failed] = DONE, FAILED
            errors = f["tasks/error"][()]
            for i in failed:
                e = errors[i]
                self.error[i] = e.decode() if isinstance(e, bytes) else str(e)
            kept = np.union1d(done, failed)
            for name in ("seconds", "rank", "attempts"):
                getattr(self, name)[kept] = f["tasks"][name][()][kept]

    def _check_same_sweep(self, attrs: dict, label: str) -> None:
        fn, digest = str(attrs.get("function", "")), str(attrs.get("params_digest", ""))
        if digest != self.params.digest() or attrs.get("tasks") != self.params.n:
            raise ValueError(f"{label}: written by a sweep over other parameters than {self.params.source} "
                             f"({self.afresh} instead of resume starts afresh)")
        if fn != self.function:
            raise ValueError(f"{label}: written by a sweep of {fn}, not {self.function} "
                             f"({self.afresh} instead of resume starts afresh)")


def _kind_name(dtype: str) -> str:
    return "a str" if dtype == "str" else f"of dtype {as_dtype(dtype).name}"


def _ragged_dataset(f, name: str, col: np.ndarray, dtype: np.dtype) -> None:
    """A result whose shape varies, written ragged: its values and its shapes, a row a task.

    ``/results/NAME`` holds each task's values flattened (variable length, C order), ``/shapes/NAME`` each
    task's shape; both are empty where the task is not done.
    """
    import h5py

    empty, no_shape = np.zeros(0, dtype), np.zeros(0, np.int64)
    values = np.empty(len(col), dtype=object)
    shapes = np.empty(len(col), dtype=object)
    for i, v in enumerate(col):
        values[i] = empty if v is None else np.ravel(v).astype(dtype, copy=False)
        shapes[i] = no_shape if v is None else np.array(np.shape(v), np.int64)
    # data= at creation: assigning an object array of arrays of one length would be read as a 2-D array
    d = f["results"].create_dataset(name, data=values, dtype=h5py.vlen_dtype(dtype))
    d.attrs["ragged"] = True
    d.attrs["description"] = f"each task's values flattened in C order; reshape to /shapes/{name}"
    s = f.require_group("shapes").create_dataset(name, data=shapes, dtype=h5py.vlen_dtype(np.int64))
    s.attrs["description"] = f"each task's shape of /results/{name} (empty where not done)"


def _dataset(group, name: str, col: np.ndarray) -> None:
    import h5py

    if col.dtype.kind in "OUS":
        group.create_dataset(name, data=np.array([str(s) for s in col], dtype=object), dtype=h5py.string_dtype())
    else:
        group.create_dataset(name, data=col)


# ---- the journal --------------------------------------------------------------------------------

_MAGIC = b"HPJ1"
_FRAME = struct.Struct("<4sQI")  # magic, payload length, CRC-32 of the payload


class Journal:
    """Append-only record of finished attempts since the HDF5 file was last written.

    Parameters
    ----------
    path : str
        The journal file (``OUT.journal``).
    header : dict
        The sweep's identity (function, params digest, tasks), first frame.
    """

    def __init__(self, path: str, header: dict):
        self.path, self.header = path, header
        self.buffer: list[Record] = []

    def restart(self, carry: list | None = None) -> None:
        """Start a journal of the header (and ``carry``, an old journal's records), atomically replacing the old one.

        Parameters
        ----------
        carry : list of Record, optional
            Records a resume read from the old journal: kept in the new one,
            so that the HDF5 file need not be written before the first task.
        """
        with atomic_path(self.path) as tmp, open(tmp, "wb") as f:
            f.write(_frame(self.header))
            if carry:
                f.write(_frame(list(carry)))
            f.flush()
            os.fsync(f.fileno())
        self.buffer.clear()

    def flush(self) -> None:
        """Append the buffered records as one frame and force it to disk."""
        if not self.buffer:
            return
        with open(self.path, "ab") as f:
            f.write(_frame(self.buffer))
            f.flush()
            os.fsync(f.fileno())
        self.buffer.clear()

    def remove(self) -> None:
        """Delete the journal (the HDF5 file holds everything)."""
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    @staticmethod
    def read(path: str) -> tuple[dict | None, list[Record]]:
        """The header and the records of every complete frame (a frame cut short by a kill ends the list)."""
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return None, []
        frames, pos = [], 0
        while pos + _FRAME.size <= len(data):
            magic, size, crc = _FRAME.unpack_from(data, pos)
            payload = data[pos + _FRAME.size: pos + _FRAME.size + size]
            if magic != _MAGIC or len(payload) != size or zlib.crc32(payload) != crc:
                break
            frames.append(pickle.loads(payload))
            pos += _FRAME.size + size
        if not frames or not isinstance(frames[0], dict):
            return None, []
        return frames[0], [r for fr in frames[1:] for r in fr]


def _frame(obj) -> bytes:
    payload = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return _FRAME.pack(_MAGIC, len(payload), zlib.crc32(payload)) + payload
