"""The table of tasks: one row a task, one column a keyword argument of the task function."""

from __future__ import annotations

import csv
import hashlib
import json
import os
from collections.abc import Mapping, Sequence

import numpy as np

__all__ = ["Params", "read_params"]

FORMATS = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl",
           ".h5": "hdf5", ".hdf5": "hdf5", ".he5": "hdf5"}


class Params:
    """The parameters of a sweep: ``n`` tasks, each a row of named values.

    Not collective. Column ``name`` is an array whose first axis is the
    task id (``0 .. n-1``): int64, float64, bool, a fixed-shape numeric
    array per task, or str.

    Parameters
    ----------
    columns : dict of str to numpy.ndarray
        Each of length ``n`` along its first axis; the names are the task
        function's keyword arguments.
    source : str
        Where they came from (a file name, or ``"params"``), for messages.

    Attributes
    ----------
    names : tuple of str
        The column names, in file order.
    n : int
        Number of tasks.
    """

    def __init__(self, columns: Mapping[str, np.ndarray], source: str = "params"):
        self.columns = {k: np.asarray(v) for k, v in columns.items()}
        self.names = tuple(self.columns)
        self.source = source
        lens = {len(v) for v in self.columns.values()}
        self.n = lens.pop() if len(lens) == 1 else -1

    def __len__(self) -> int:
        return self.n

    def row(self, i: int) -> dict:
        """The keyword arguments of task ``i``: Python scalars, or NumPy arrays for array columns.

        Parameters
        ----------
        i : int
            The task id.

        Returns
        -------
        dict
        """
        out = {}
        for k, col in self.columns.items():
            v = col[i]
            out[k] = v.copy() if col.ndim > 1 else v.item() if hasattr(v, "item") else v
        return out

    def digest(self) -> str:
        """A SHA-256 of the names, dtypes, shapes and values: a resumed sweep checks it is the same table.

        Returns
        -------
        str
            64 hex digits.
        """
        h = hashlib.sha256()
        for k, col in sorted(self.columns.items()):  # the order of the columns does not matter
            h.update(f"{k}|{_kind(col)}|{col.shape}|".encode())
            if col.dtype.kind in "OUS":
                for s in col.ravel():
                    h.update(str(s).encode("utf-8", "surrogatepass") + b"\0")
            else:
                h.update(np.ascontiguousarray(col).tobytes())
        return h.hexdigest()


def _kind(col: np.ndarray) -> str:
    return "str" if col.dtype.kind in "OUS" else col.dtype.str


def read_params(params, what: str = "params") -> Params:
    """Read the task table from a file or build it from Python objects.

    Not collective: rank 0 reads it (the others get their rows from it).

    Parameters
    ----------
    params : str, os.PathLike, Params, mapping or sequence of mappings
        A CSV file with a header row (each column's values all integers ->
        int64, else all numbers -> float64, else str); a JSON-lines file
        (one object a line, the same keys on every line; numbers, booleans,
        strings, or lists of numbers of one shape); an HDF5 file with one
        dataset per parameter (in ``/params`` if that group exists, else at
        the root), the task along the first axis; a :class:`Params`; a
        mapping of column name to values; or a sequence of one mapping per
        task.
    what : str
        How messages name ``params`` (``--params`` on the command line).

    Returns
    -------
    Params

    Raises
    ------
    FileNotFoundError
        No such file.
    ValueError
        An unknown file type, an empty table, a malformed row (naming the
        line), columns of different lengths, or a column name that is not a
        Python identifier (names are passed as keyword arguments).
    """
    if isinstance(params, Params):
        table = params
    elif isinstance(params, (str, os.PathLike)):
        table = _read_file(os.fspath(params), what)
    elif isinstance(params, Mapping):
        table = Params({str(k): _column(list(v) if not isinstance(v, np.ndarray) else v, k, what)
                        for k, v in params.items()}, what)
    elif isinstance(params, Sequence):
        table = _from_rows(list(params), what, lambda i: f"{what}[{i}]")
    else:
        raise ValueError(f"{what}: expected a file name, a mapping of columns or a list of dicts, "
                         f"got {type(params).__name__}")
    _check_table(table, what)
    return table


def _check_table(t: Params, what: str) -> None:
    label = t.source if t.source.startswith(what) else f"{what} {t.source}"
    if not t.names:
        raise ValueError(f"{label}: no parameters (no columns)")
    for k in t.names:
        if not k.isidentifier():
            raise ValueError(f"{label}: column {k!r} is not a Python identifier "
                             "(each column is passed to the function as a keyword argument)")
    lens = {k: len(v) for k, v in t.columns.items()}
    if len(set(lens.values())) != 1:
        raise ValueError(f"{label}: columns of different lengths {lens}")
    if t.n == 0:
        raise ValueError(f"{label}: no tasks (no rows)")


def _read_file(path: str, what: str) -> Params:
    label = f"{what} {path}"
    if not os.path.exists(path):
        raise FileNotFoundError(f"{label}: no such file")
    if os.path.isdir(path):
        raise ValueError(f"{label}: is a directory")
    fmt = FORMATS.get(os.path.splitext(path)[1].lower())
    if fmt is None:
        raise ValueError(f"{label}: unknown format (expected .csv, .jsonl or .h5)")
    if fmt == "hdf5":
        t = _read_hdf5(path, label)
    else:
        try:
            with open(path, newline="", encoding="utf-8-sig") as f:  # a BOM (spreadsheets write one) is not data
                t = _read_csv(f, label) if fmt == "csv" else _read_jsonl(f, label)
        except UnicodeDecodeError as e:
            raise ValueError(f"{label}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    t.source = label
    return t


def _read_csv(f, label: str) -> Params:
    rows = [r for r in csv.reader(f)]
    numbered = [(i + 1, r) for i, r in enumerate(rows) if any(c.strip() for c in r)]  # blank lines skipped
    if not numbered:
        raise ValueError(f"{label}: empty file (expected a header row, then one row a task)")
    (_, header), body = numbered[0], numbered[1:]
    header = [h.strip() for h in header]
    if len(set(header)) != len(header) or "" in header:
        raise ValueError(f"{label} line 1: the header has an empty or repeated column name: {header}")
    if not body:
        raise ValueError(f"{label}: no tasks (only a header)")
    cols: dict[str, list] = {h: [] for h in header}
    for line, r in body:
        if len(r) != len(header):
            raise ValueError(f"{label} line {line}: {len(r)} fields, the header has {len(header)}")
        for h, v in zip(header, r, strict=True):
            v = v.strip()
            if v == "":
                raise ValueError(f"{label} line {line}: column {h!r} is empty")
            cols[h].append(v)
    return Params({h: _csv_column(v) for h, v in cols.items()})


def _csv_column(values: list[str]) -> np.ndarray:
    for convert, dtype in ((int, np.int64), (float, np.float64)):
        try:
            return np.array([convert(v) for v in values], dtype=dtype)
        except (ValueError, OverflowError):
            continue
    return np.array(values, dtype=object)


def _read_jsonl(f, label: str) -> Params:
    rows, lines = [], []
    for i, text in enumerate(f):
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"{label} line {i + 1}: not JSON ({e.msg})") from None
        if not isinstance(obj, dict):
            raise ValueError(f"{label} line {i + 1}: expected an object {{\"name\": value, ...}}, "
                             f"got {type(obj).__name__}")
        rows.append(obj)
        lines.append(i + 1)
    if not rows:
        raise ValueError(f"{label}: empty file (expected one JSON object a line)")
    return _from_rows(rows, label, lambda i: f"line {lines[i]}", sep=" ")


def _from_rows(rows: list, label: str, where, sep: str = "") -> Params:
    if not rows:
        raise ValueError(f"{label}: no tasks")
    if not all(isinstance(r, Mapping) for r in rows):
        raise ValueError(f"{label}: expected one mapping (dict) per task")
    keys = list(rows[0])
    for i, r in enumerate(rows):
        if set(r) != set(keys):
            raise ValueError(f"{label}{sep}{where(i)}: keys {sorted(r)} differ from the first row's {sorted(keys)}")
    return Params({str(k): _column([r[k] for r in rows], k, label) for k in keys})


def _column(values, name, label: str) -> np.ndarray:
    """One column from Python values: numbers, booleans, strings, or equal-shape numeric arrays."""
    if isinstance(values, np.ndarray) and values.dtype.kind in "biuf":
        return values
    if all(isinstance(v, str) for v in values):
        return np.array(values, dtype=object)
    if all(isinstance(v, (bool, np.bool_)) for v in values):
        return np.array(values, dtype=bool)
    if any(isinstance(v, (str, bytes, dict)) or v is None for v in values):
        raise ValueError(f"{label}: column {name!r} mixes types or holds null/objects "
                         "(expected numbers, booleans, strings, or lists of numbers of one shape)")
    try:
        a = np.array(values)
    except ValueError:
        raise ValueError(f"{label}: column {name!r} holds lists of different shapes") from None
    if a.dtype.kind not in "biuf":
        raise ValueError(f"{label}: column {name!r} is not numeric (dtype {a.dtype})")
    return a.astype(np.int64) if a.dtype.kind in "iu" else a.astype(np.float64) if a.dtype.kind == "f" else a


def _read_hdf5(path: str, label: str) -> Params:
    import h5py

    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise ValueError(f"{label}: not a readable HDF5 file ({e})") from None
    with f:
        group = f["params"] if isinstance(f.get("params"), h5py.Group) else f
        cols = {}
        for k, d in group.items():
            if not isinstance(d, h5py.Dataset):
                continue
            if d.ndim == 0:
                raise ValueError(f"{label}: dataset {d.name} is a scalar (the first axis must be the task)")
            if h5py.check_string_dtype(d.dtype) is not None:
                cols[k] = np.array([s.decode() if isinstance(s, bytes) else s for s in d[()]], dtype=object)
            elif d.dtype.kind in "biuf":
                cols[k] = d[()]
            else:
                raise ValueError(f"{label}: dataset {d.name} has dtype {d.dtype} (expected numbers or strings)")
    if not cols:
        raise ValueError(f"{label}: no datasets (one dataset per parameter, in /params or at the root)")
    return Params(cols)
