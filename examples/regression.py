"""Regression through the library: a small network fitted by mean squared error to the diabetes data.

    mpiexec -n 4 python examples/regression.py [--epochs 60] [--seed 0]

scikit-learn's bundled diabetes data (442 patients, 10 features, a disease-progression score), split as its
tutorials do (train_test_split(test_size=0.2, random_state=42)), features and target standardized with the
training rows' mean and deviation (predictions are scaled back). Every rank holds the whole set here and
takes its block of rows; the same seed gives the same model at any number of ranks. Prints the test RMSE
(in the score's units) and R^2: ordinary least squares reaches R^2 0.45 on this split.
"""

import argparse

import numpy as np

import hpcgpu
from hpcgpu import nn, optim


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=60)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "gpu"))
    a = p.parse_args(argv)
    from sklearn.datasets import load_diabetes
    from sklearn.model_selection import train_test_split

    rt = hpcgpu.init(a.device)
    X, y = load_diabetes(return_X_y=True)  # every rank: the whole set (a small one)
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.2, random_state=42)
    mean, std = X_train.mean(axis=0), X_train.std(axis=0)
    X_train, X_test = (X_train - mean) / std, (X_test - mean) / std
    y_mean, y_std = y_train.mean(), y_train.std()

    model = nn.Sequential(nn.Dense(10, 16), nn.ReLU(), nn.Dense(16, 1))
    trainer = hpcgpu.Trainer(model, nn.MeanSquaredError(), optim.AdamW(lr=3e-3, weight_decay=0.01),
                             batch_size=32, epochs=a.epochs, seed=a.seed, dtype="float64", runtime=rt,
                             progress="none")
    trainer.fit((X_train, (y_train - y_mean) / y_std), validation=(X_test, (y_test - y_mean) / y_std))
    pred = trainer.predict(X_test)  # rank 0: (89, 1) in the order of X_test; others: None
    if rt.rank == 0:
        score = pred[:, 0] * y_std + y_mean
        rmse = float(np.sqrt(np.mean((score - y_test) ** 2)))
        r2 = 1.0 - float(np.sum((score - y_test) ** 2) / np.sum((y_test - y_test.mean()) ** 2))
        print(f"diabetes, {rt.size} rank(s), {a.epochs} epochs: test RMSE {rmse:.2f}, R^2 {r2:.4f}")
    trainer.close()
    return 0


if __name__ == "__main__":
    hpcgpu.run_guarded(main, prog="regression.py")
