# run: mpiexec -n 2
"""The trainer from Python: an HDF5 data set in the trainer's layout, TrainConfig, Trainer.fit, Trainer.save_results."""
import os
import shutil
import tempfile

import h5py
import numpy as np

import hpcgpu

rt = hpcgpu.init(device="cpu")
tmp = rt.comm.bcast(tempfile.mkdtemp() if rt.rank == 0 else None, root=0)
data = os.path.join(tmp, "blobs.h5")
if rt.rank == 0:  # 3 Gaussian blobs in 8 dimensions: /train/X (N x D), /train/y (N labels 0..C-1), /test/...
    rng = np.random.default_rng(0)
    centers = rng.normal(0, 3, (3, 8))
    y = rng.integers(0, 3, 1200)
    X = centers[y] + rng.normal(0, 3.0, (1200, 8))
    with h5py.File(data, "w") as f:
        f["train/X"], f["train/y"] = X[:1000], y[:1000]
        f["test/X"], f["test/y"] = X[1000:], y[1000:]
        f.attrs["num_classes"] = 3
rt.comm.Barrier()

config = hpcgpu.TrainConfig(data=data, out=os.path.join(tmp, "run.h5"), epochs=5, batch_size=50, hidden=(32,),
                            lr=0.01, dtype="float64", device="cpu", progress="none", seed=1)
trainer = hpcgpu.Trainer(config)  # collective: every rank builds it with the same config
history = trainer.fit()           # per epoch: losses, accuracies, lr, seconds, samples/s, time per phase
path = trainer.save_results()     # rank 0 writes /metrics, /timing, /model, /comm and the provenance
trainer.close()

if rt.rank == 0:
    print(f"{rt.size} ranks, global batch {config.batch_size}: {trainer.step} steps in {trainer.epoch} epochs")
    for e, loss, acc, lr in zip(history["epoch"], history["train_loss"], history["test_accuracy"], history["lr"],
                                 strict=True):
        print(f"epoch {e}: train_loss {loss:.3f}  test_accuracy {acc:.3f}  lr {lr:.4f}")
    with h5py.File(path) as f:
        print("model:", ", ".join(f"{k} {f['model'][k].shape}" for k in f["model"]))
    shutil.rmtree(tmp)
