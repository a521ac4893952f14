"""Real data sets written in the trainer's HDF5 layout.

Layout: ``/train/X`` (N x D float32), ``/train/y`` (N int64 labels
0..C-1), ``/test/X``, ``/test/y``; root attributes ``num_classes``,
``name``, ``source``.

Command line (one process)::

    python -m hpcgpu.datasets digits --out digits.h5
    python -m hpcgpu.datasets fashion-mnist --out fmnist.h5 [--source DIR]
"""

from __future__ import annotations

import gzip
import os
import struct
import sys

import numpy as np

from .io import WRITE_ERRORS, atomic_path, new_hdf5, one_line
from . import _options

__all__ = ["write_digits", "write_fashion_mnist", "default_data_path", "read_idx", "DATASETS"]

FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"

DATASETS = ("digits", "fashion-mnist")


def _write(path, name, source, X_train, y_train, X_test, y_test, num_classes) -> str:
    try:
        return _write_file(path, name, source, X_train, y_train, X_test, y_test, num_classes)
    except WRITE_ERRORS as e:  # a full disk or quota: name the file (nothing is left at path)
        raise OSError(f"--out {os.fspath(path)}: cannot write ({one_line(e)})") from None


def _write_file(path, name, source, X_train, y_train, X_test, y_test, num_classes) -> str:
    with atomic_path(path) as tmp:
        with new_hdf5(tmp) as f:
            for split, X, y in (("train", X_train, y_train), ("test", X_test, y_test)):
                g = f.create_group(split)
                g.create_dataset("X", data=np.ascontiguousarray(X, dtype=np.float32))
                g.create_dataset("y", data=np.ascontiguousarray(y, dtype=np.int64))
            f.attrs["num_classes"] = int(num_classes)
            f.attrs["name"] = name
            f.attrs["source"] = source
    return os.fspath(path)


def write_digits(path, test_fraction: float = 0.2, seed: int = 0) -> str:
    """Write scikit-learn's handwritten digits (1,797 images, 8 x 8) to ``path``.

    Pixels are scaled from 0..16 to [0, 1]; a stratified split by ``seed``
    puts ``test_fraction`` of each class in ``/test``. Not collective.

    Parameters
    ----------
    path : str or os.PathLike
        HDF5 file to write, atomically (its directory must exist).
    test_fraction : float
        Fraction of each class that goes to ``/test`` (rounded per class).
    seed : int
        Seeds the random split.

    Returns
    -------
    str
        ``path``.

    Raises
    ------
    ImportError
        scikit-learn is not installed (``pip install scikit-learn``, or the clone's ``data`` extra).

    References
    ----------
    E. Alpaydin and C. Kaynak, "Optical Recognition of Handwritten Digits",
    UCI Machine Learning Repository, 1998 (as bundled by scikit-learn).
    """
    try:
        from sklearn.datasets import load_digits
    except ImportError as e:
        raise ImportError(
            "the digits data set needs scikit-learn: pip install scikit-learn "
            "(or pass --data FILE)"
        ) from e
    d = load_digits()
    X = (d.data / 16.0).astype(np.float32)
    y = d.target.astype(np.int64)
    rng = np.random.default_rng(seed)
    test = np.zeros(len(y), dtype=bool)
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        test[idx[: int(round(test_fraction * len(idx)))]] = True
    return _write(path, "digits", "sklearn.datasets.load_digits", X[~test], y[~test], X[test], y[test], 10)


def read_idx(path: str) -> np.ndarray:
    """Read an IDX file (gzipped or not), as used by MNIST and Fashion-MNIST.

    Not collective. The whole file is read into memory.

    Parameters
    ----------
    path : str
        The IDX file; read through ``gzip`` when the name ends in ``.gz``.

    Returns
    -------
    numpy.ndarray
        A read-only array of the file's shape and (big-endian) element type:
        uint8, int8, int16, int32, float32 or float64.

    Raises
    ------
    OSError
        The file cannot be read (``FileNotFoundError`` when it does not exist).
    ValueError
        The file is not IDX: bad magic number, unknown type code, or truncated.
    """
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise ValueError(f"{path}: not an IDX file")
    dtypes = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
    code, ndim = data[2], data[3]
    if code not in dtypes:
        raise ValueError(f"{path}: unknown IDX type code {code:#x}")
    shape = struct.unpack(f">{ndim}I", data[4 : 4 + 4 * ndim])
    arr = np.frombuffer(data, dtype=dtypes[code], offset=4 + 4 * ndim)
    if arr.size != int(np.prod(shape)):
        raise ValueError(f"{path}: truncated IDX file")
    return arr.reshape(shape)


def _find(source: str, stem: str) -> str:
    for name in (stem, stem + ".gz", stem.replace("-idx", ".idx"), stem.replace("-idx", ".idx") + ".gz"):
        p = os.path.join(source, name)
        if os.path.exists(p):
            return p
    raise FileNotFoundError(f"{source}: no {stem}[.gz] (Fashion-MNIST IDX files)")


def write_fashion_mnist(path, source: str = FASHION_MNIST_DIR) -> str:
    """Write Fashion-MNIST (60,000 train / 10,000 test, 28 x 28) to ``path``.

    Reads the official IDX files from ``source`` (Debian's
    ``dataset-fashion-mnist`` installs them in ``/usr/share/datasets/fashion-mnist``).
    Pixels are scaled to [0, 1] and flattened to D = 784. Not collective.

    Parameters
    ----------
    path : str or os.PathLike
        HDF5 file to write, atomically (its directory must exist).
    source : str
        Directory of the four IDX files (``train-images-idx3-ubyte``,
        ``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte``,
        ``t10k-labels-idx1-ubyte``; each may be gzipped, and ``-idx`` may be
        spelt ``.idx``). Its absolute path is stored as the ``source`` attribute.

    Returns
    -------
    str
        ``path``.

    Raises
    ------
    FileNotFoundError
        ``source`` lacks one of the four IDX files.
    ValueError
        One of them is not a valid IDX file.

    References
    ----------
    H. Xiao, K. Rasul and R. Vollgraf, "Fashion-MNIST: a Novel Image Dataset
    for Benchmarking Machine Learning Algorithms", arXiv:1708.07747, 2017.
    """
    parts = {}
    for key, stem in (
        ("X_train", "train-images-idx3-ubyte"),
        ("y_train", "train-labels-idx1-ubyte"),
        ("X_test", "t10k-images-idx3-ubyte"),
        ("y_test", "t10k-labels-idx1-ubyte"),
    ):
        parts[key] = read_idx(_find(source, stem))
    flat = lambda a: (a.reshape(len(a), -1) / np.float32(255)).astype(np.float32)  # noqa: E731
    return _write(
        path, "fashion-mnist", os.path.abspath(source),
        flat(parts["X_train"]), parts["y_train"], flat(parts["X_test"]), parts["y_test"], 10,
    )


def default_data_path(name: str = "digits") -> str:
    """Where a bundled data set is cached: ``$HPCGPU_DATA_DIR`` or ``~/.cache/hpcgpu``.

    Not collective; creates nothing. Without ``$HPCGPU_DATA_DIR`` the
    directory is ``$XDG_CACHE_HOME/hpcgpu`` when that is set.

    Parameters
    ----------
    name : str
        The data set's name, normally one of :data:`DATASETS`.

    Returns
    -------
    str
        ``<directory>/<name>.h5``.
    """
    base = _options.text("HPCGPU_DATA_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "hpcgpu"
    )
    return os.path.join(base, f"{name}.h5")


def ensure_bundled(name: str, comm) -> str:
    """Path of the cached bundled data set ``name``; rank 0 writes it on first use.

    Collective over ``comm`` (the outcome is agreed).

    Raises
    ------
    OSError, ImportError
        The cache cannot be written, or scikit-learn is missing (every rank).
    """
    from .io import on_root

    path = default_data_path(name)

    def create():
        if not os.path.exists(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            write(name, path)

    on_root(create, comm=comm, catch=(OSError, ImportError),
            error=lambda e: type(e)(f"bundled data set: cannot write {path} ({e})"))
    return path


def write(name: str, path, source: str | None = None) -> str:
    """Write data set ``name`` (one of :data:`DATASETS`) to ``path``."""
    if name == "digits":
        return write_digits(path)
    if name == "fashion-mnist":
        return write_fashion_mnist(path, source or FASHION_MNIST_DIR)
    raise ValueError(f"unknown data set {name!r}; choose from {', '.join(DATASETS)}")


def main(argv=None) -> int:
    from ._cli import ArgumentParser

    p = ArgumentParser(prog="python -m hpcgpu.datasets", description=__doc__.split("\n\n")[0])
    p.add_argument("name", choices=DATASETS, help="which data set")
    p.add_argument("--out", required=True, help="HDF5 file to write (atomically)")
    p.add_argument("--overwrite", action="store_true", help="replace an --out that hpcgpu did not write")
    p.add_argument("--source", default=None,
                   help=f"directory of the IDX files for fashion-mnist (default {FASHION_MNIST_DIR})")
    a = p.parse_args(argv)
    from mpi4py import MPI

    from ._outputs import Input, Output, claim

    source = a.source or (FASHION_MNIST_DIR if a.name == "fashion-mnist" else None)
    claim([Output(a.out, "--out")], [Input(source, "--source")] if source else [], comm=MPI.COMM_SELF,
          overwrite=a.overwrite, prog="hpcgpu.datasets")  # one process writes: its own communicator
    try:
        write(a.name, a.out, a.source)
    except (OSError, ImportError, ValueError) as e:
        from .io import one_line

        print(f"hpcgpu.datasets: error: {one_line(e)}", file=sys.stderr)
        return 2
    print(f"wrote {a.name} to {a.out}")
    return 0


if __name__ == "__main__":
    from ._cli import run

    run(main, prog="hpcgpu.datasets")
