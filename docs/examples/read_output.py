# run: python
"""Read a training run's HDF5 output with h5py.

    python docs/examples/read_output.py results/train.h5     # the file `make train` wrote

Without an argument it first trains a small run of its own (1 rank, 3 epochs, in a temporary directory).
"""
import json
import os
import shutil
import sys
import tempfile

import h5py
import numpy as np


def show(path, timings=True):
    with h5py.File(path, "r") as f:
        config = json.loads(f.attrs["config"])  # every option of the run, as JSON
        print(f"{f.attrs['world_size']} rank(s) on {f.attrs['device']}, {f.attrs['epochs_done']} epochs, "
              f"{f.attrs['steps_done']} steps, batch {config['batch_size']}, hidden {config['hidden']}")
        m = f["metrics"]
        print("metrics:", ", ".join(sorted(m)))
        for e, loss, acc in zip(m["epoch"][...], m["train_loss"][...], m["test_accuracy"][...], strict=True):
            print(f"  epoch {e}: train_loss {loss:.3f}, test_accuracy {acc:.3f}")
        print("  units:", ", ".join(f"{k} {m[k].attrs['units']}" for k in ("seconds", "samples_per_second",
                                                                           "energy_joules")))
        # energy_joules is NaN where no counter could be read; its why_nan attribute says why
        for phase in f["timing"]:  # epochs x (min, mean, max) over the ranks, seconds
            t = f["timing"][phase]
            line = f"  /timing/{phase}: {t.shape}, columns {list(t.attrs['columns'])}"
            if timings:
                line += f", slowest rank in the last epoch {t[-1, 2]:.4f} s"
            print(line)
        for name, w in f["model"].items():  # the unsplit model: fc{i}.weight is in x out
            print(f"  /model/{name}: {w.shape} {w.dtype}")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        show(sys.argv[1])
    else:
        import hpcgpu

        tmp = tempfile.mkdtemp()
        data = os.path.join(tmp, "data.h5")
        rng = np.random.default_rng(0)
        X = rng.normal(size=(600, 16))
        y = (X[:, :4].sum(axis=1) > 0).astype(np.int64)  # two classes
        with h5py.File(data, "w") as f:
            f["train/X"], f["train/y"], f["test/X"], f["test/y"] = X[:500], y[:500], X[500:], y[500:]
        run = hpcgpu.Trainer(hpcgpu.TrainConfig(data=data, out=os.path.join(tmp, "train.h5"), epochs=3,
                                                hidden=(16,), dtype="float64", device="cpu", progress="none"))
        run.fit()
        show(run.save_results(), timings=False)  # timings differ from run to run: left out of the expected output
        run.close()
        shutil.rmtree(tmp)
