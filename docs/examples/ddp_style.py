# run: mpiexec -n 3
"""PyTorch DDP's first program: two linear layers (100 -> 50 -> 10, ReLU), SGD(lr=0.01), cross-entropy."""
import numpy as np
from sklearn.datasets import make_classification

import hpcgpu
from hpcgpu import nn, optim

rt = hpcgpu.init(device="cpu")
X, y = make_classification(n_samples=3000, n_features=100, n_informative=30, n_classes=10, class_sep=2.0,
                           random_state=0)
mine = np.array_split(np.arange(2400), rt.size)[rt.rank]  # each rank loads only its own training rows
X_test, y_test = X[2400:], y[2400:]

model = nn.Sequential(nn.Dense(100, 50), nn.ReLU(), nn.Dense(50, 10))
trainer = hpcgpu.Trainer(model, nn.SoftmaxCrossEntropy(), optim.SGD(lr=0.01), batch_size=20, epochs=10,
                         seed=0, dtype="float64", runtime=rt, progress="none")
history = trainer.fit((X[mine], y[mine]), sharded=True)  # the set is the ranks' rows in rank order
logits = trainer.predict(X_test)  # gathered from every rank on rank 0, in input order, no padding
metrics = trainer.evaluate((X_test, y_test))  # exact global means, on every rank
trainer.close()

if rt.rank == 0:
    print(f"{rt.size} ranks, {trainer.step} steps: train_loss {history['train_loss'][0]:.3f} -> "
          f"{history['train_loss'][-1]:.3f}")
    print(f"test: {logits.shape[0]} predictions, accuracy {np.mean(logits.argmax(axis=1) == y_test):.3f} "
          f"(evaluate: {metrics['accuracy']:.3f}, loss {metrics['loss']:.3f})")
