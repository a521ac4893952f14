"""A library user's program end to end: the Keras-style script against the same program as a plain NumPy loop.

    python benchmarks/library.py [--epochs 10] [--rounds 5] [--ranks 1] [--json results/bench-library.json]

The first program of a Keras user (docs/examples/keras_style.py: the digits, Dense 64-128-10, Adam, batch 32,
float64, ``fit`` with validation, then ``predict``) through ``hpcgpu.Trainer`` at ``--ranks`` ranks, and the same
program written as a plain NumPy loop (benchmarks/peers/numpy_keras_digits.py), one process. Each is timed from
process start to exit (imports, MPI's start and the data's loading included: what the user waits for), the two
taking turns for ``--rounds`` rounds after one that fills the bytecode cache (as a user's second run finds it); it
prints the medians and their ratio (hpcgpu's over the loop's: below 1.0 is faster) and writes them as JSON.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

SCRIPT = '''
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import hpcgpu
from hpcgpu import nn, optim

rt = hpcgpu.init(device="cpu")
X, y = load_digits(return_X_y=True)
X_train, X_test, y_train, y_test = train_test_split(X / 16.0, y, test_size=0.2, random_state=0)
model = nn.Sequential(nn.Dense(64, 128, activation="relu"), nn.Dense(128, 10))
trainer = hpcgpu.Trainer(model, nn.SoftmaxCrossEntropy(), optim.Adam(lr=1e-3), batch_size=32, epochs={epochs},
                         seed=0, dtype="float64", runtime=rt, progress="none")
history = trainer.fit((X_train, y_train), validation=(X_test, y_test))
logits = trainer.predict(X_test)
trainer.close()
if rt.rank == 0:
    print(f"RESULT val_accuracy={{history['val_accuracy'][-1]:.4f}} predictions={{logits.shape}}")
'''


def _timed(cmd, env):
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    took = time.perf_counter() - t0
    if p.returncode != 0 or "RESULT" not in p.stdout:
        sys.exit(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
    return took, p.stdout.split("RESULT", 1)[1].split()[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument("--json", default=os.path.join(ROOT, "results", "bench-library.json"))
    a = ap.parse_args()
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    with tempfile.TemporaryDirectory() as d:
        # Both programs import from compiled bytecode, as on a user's machine from the second run on (a
        # PYTHONDONTWRITEBYTECODE=1 here compiled every module's source at every start: sklearn's hundreds and
        # hpcgpu's sixty); the cache is kept in the temporary folder, and a first round, not counted, fills it.
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env.update(PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
                   PYTHONPYCACHEPREFIX=os.path.join(d, "pycache"))
        script = os.path.join(d, "keras_style.py")
        with open(script, "w") as f:
            f.write(SCRIPT.format(epochs=a.epochs))
        ours = ([mpiexec, "-n", str(a.ranks)] if a.ranks > 1 else []) + [sys.executable, script]
        loop = [sys.executable, os.path.join(HERE, "peers", "numpy_keras_digits.py"), "--epochs", str(a.epochs)]
        times = {"hpcgpu": [], "numpy": []}
        for round_ in range(a.rounds + 1):
            for name, cmd in (("hpcgpu", ours), ("numpy", loop)):
                took, acc = _timed(cmd, env)
                if round_:
                    times[name].append(took)
                print(f"{name:7s} {took:6.2f} s  {acc}{'' if round_ else '  (filling the bytecode cache)'}",
                      flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    ratio = med["hpcgpu"] / med["numpy"]
    print(f"median end to end: hpcgpu {med['hpcgpu']:.2f} s ({a.ranks} rank(s)), plain NumPy loop "
          f"{med['numpy']:.2f} s: ratio {ratio:.2f} (below 1.0: hpcgpu faster)")
    os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
    with open(a.json, "w") as f:
        json.dump(dict(epochs=a.epochs, rounds=a.rounds, ranks=a.ranks, seconds=times, median=med, ratio=ratio), f,
                  indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
