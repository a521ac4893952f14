"""The Keras-style program of docs/examples/keras_style.py written as a plain NumPy loop, one process.

    python benchmarks/peers/numpy_keras_digits.py [--epochs 10]

What a user writes without hpcgpu: scikit-learn's digits (X / 16, an 80/20 split with random_state 0), Dense
64-128 ReLU then Dense 128-10, softmax cross-entropy from logits, Adam (lr 1e-3, Keras's and PyTorch's
defaults), batch 32, float64, one shuffle an epoch, the validation accuracy after each epoch, then predictions
for the test rows. It prints the last epoch's validation accuracy. The end-to-end time (start to exit, imports
included) is what benchmarks/library.py measures.
"""

import argparse

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=10)
    a = ap.parse_args()
    X, y = load_digits(return_X_y=True)
    X_train, X_test, y_train, y_test = train_test_split(X / 16.0, y, test_size=0.2, random_state=0)
    rng = np.random.default_rng(0)
    sizes = [(64, 128), (128, 10)]
    params = []
    for n_in, n_out in sizes:
        bound = np.sqrt(6.0 / n_in)
        params += [rng.uniform(-bound, bound, (n_in, n_out)), np.zeros(n_out)]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    lr, b1, b2, eps, t = 1e-3, 0.9, 0.999, 1e-7, 0
    for _ in range(a.epochs):
        order = rng.permutation(len(X_train))
        for s in range(0, len(order), 32):
            idx = order[s:s + 32]
            x, yy = X_train[idx], y_train[idx]
            W1, b1_, W2, b2_ = params
            h = np.maximum(x @ W1 + b1_, 0)
            z = h @ W2 + b2_
            z -= z.max(1, keepdims=True)
            p = np.exp(z)
            p /= p.sum(1, keepdims=True)
            dz = p
            dz[np.arange(len(idx)), yy] -= 1
            dz /= len(idx)
            dh = (dz @ W2.T) * (h > 0)
            grads = [x.T @ dh, dh.sum(0), h.T @ dz, dz.sum(0)]
            t += 1
            for i, g in enumerate(grads):
                m[i] = b1 * m[i] + (1 - b1) * g
                v[i] = b2 * v[i] + (1 - b2) * g * g
                params[i] -= lr * (m[i] / (1 - b1**t)) / (np.sqrt(v[i] / (1 - b2**t)) + eps)
        W1, b1_, W2, b2_ = params
        val = ((np.maximum(X_test @ W1 + b1_, 0) @ W2 + b2_).argmax(1) == y_test).mean()
    logits = np.maximum(X_test @ W1 + b1_, 0) @ W2 + b2_
    print(f"RESULT val_accuracy={val:.4f} predictions={logits.shape}")


if __name__ == "__main__":
    main()
