"""Small HDF5 inputs the tests write."""

import h5py
import numpy as np


def write_h5(path, **datasets):
    """Write ``{"train/X": array, ...}`` (keys with '/' or '__') and attrs ``attr_*``."""
    with h5py.File(path, "w") as f:
        for key, value in datasets.items():
            if key.startswith("attr_"):
                f.attrs[key[5:]] = value
            else:
                f.create_dataset(key.replace("__", "/"), data=value)
    return str(path)


def blobs(n=240, d=6, c=3, seed=0, dtype=np.float32):
    """A small separable classification problem (same classes for every seed)."""
    centers = np.random.default_rng(12345).normal(0, 3, (c, d))
    rng = np.random.default_rng(seed)
    y = rng.integers(0, c, n)
    X = (centers[y] + rng.normal(0, 1, (n, d))).astype(dtype)
    return X, y.astype(np.int64)
