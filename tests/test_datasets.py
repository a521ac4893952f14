import gzip
import os
import struct
import subprocess
import sys

import h5py
import numpy as np
import pytest

from hpcgpu import datasets


def _idx(path, arr, code=0x08):
    head = bytes([0, 0, code, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape)
    data = head + arr.astype({0x08: ">u1", 0x0D: ">f4"}[code]).tobytes()
    with (gzip.open if str(path).endswith(".gz") else open)(path, "wb") as f:
        f.write(data)


def test_read_idx_round_trip(tmp_path):
    a = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    _idx(tmp_path / "a-idx3-ubyte.gz", a)
    np.testing.assert_array_equal(datasets.read_idx(str(tmp_path / "a-idx3-ubyte.gz")), a)
    f = np.linspace(0, 1, 5, dtype=np.float32)
    _idx(tmp_path / "f", f, 0x0D)
    np.testing.assert_array_equal(datasets.read_idx(str(tmp_path / "f")), f)
    (tmp_path / "bad").write_bytes(b"\x01\x02\x03\x04")
    with pytest.raises(ValueError, match="not an IDX file"):
        datasets.read_idx(str(tmp_path / "bad"))
    (tmp_path / "short").write_bytes(bytes([0, 0, 8, 1]) + struct.pack(">I", 10) + b"abc")
    with pytest.raises(ValueError, match="truncated"):
        datasets.read_idx(str(tmp_path / "short"))


def _fake_fashion(d, n=12, m=5):
    rng = np.random.default_rng(0)
    os.makedirs(d, exist_ok=True)
    imgs, labels = rng.integers(0, 256, (n, 28, 28)), rng.integers(0, 10, n)
    _idx(os.path.join(d, "train-images-idx3-ubyte.gz"), imgs)
    _idx(os.path.join(d, "train-labels-idx1-ubyte.gz"), labels)
    _idx(os.path.join(d, "t10k-images-idx3-ubyte.gz"), imgs[:m])
    _idx(os.path.join(d, "t10k-labels-idx1-ubyte.gz"), labels[:m])
    return imgs, labels


def test_fashion_mnist_layout_from_idx_files(tmp_path):
    imgs, labels = _fake_fashion(tmp_path / "src")
    out = datasets.write_fashion_mnist(str(tmp_path / "f.h5"), str(tmp_path / "src"))
    with h5py.File(out) as f:
        assert f["train/X"].shape == (12, 784) and f["train/X"].dtype == np.float32
        assert f["test/X"].shape == (5, 784) and f["test/y"].dtype == np.int64
        np.testing.assert_allclose(f["train/X"][3], imgs[3].ravel() / 255, rtol=1e-6)
        np.testing.assert_array_equal(f["train/y"][()], labels)
        assert f.attrs["num_classes"] == 10 and f.attrs["name"] == "fashion-mnist"


def test_digits_layout(tmp_path):
    out = datasets.write_digits(str(tmp_path / "d.h5"))
    with h5py.File(out) as f:
        n_train, n_test = len(f["train/y"]), len(f["test/y"])
        assert n_train + n_test == 1797 and abs(n_test - 0.2 * 1797) < 10
        assert f["train/X"].shape == (n_train, 64)
        X = f["train/X"][()]
        assert X.min() >= 0 and X.max() <= 1
        # stratified: every class in both splits
        assert set(f["train/y"][()]) == set(range(10)) == set(f["test/y"][()])


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "hpcgpu.datasets", *args], capture_output=True, text=True,
                          timeout=120)


def test_cli_writes_and_reports_bad_source(tmp_path):
    _fake_fashion(tmp_path / "src")
    p = _cli("fashion-mnist", "--source", str(tmp_path / "src"), "--out", str(tmp_path / "o" / "f.h5"))
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "o" / "f.h5").exists()
    p = _cli("fashion-mnist", "--source", str(tmp_path / "empty"), "--out", str(tmp_path / "g.h5"))
    assert p.returncode == 2 and "no train-images-idx3-ubyte" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "g.h5").exists()


@pytest.mark.skipif(not os.path.isdir(datasets.FASHION_MNIST_DIR),
                    reason="Debian's dataset-fashion-mnist not installed")
def test_real_fashion_mnist(tmp_path):
    out = datasets.write_fashion_mnist(str(tmp_path / "f.h5"))
    with h5py.File(out) as f:
        assert f["train/X"].shape == (60000, 784) and f["test/X"].shape == (10000, 784)
        assert np.bincount(f["test/y"][()]).tolist() == [1000] * 10
