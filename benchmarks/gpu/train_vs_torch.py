"""hpcgpu's trainer against a plain PyTorch loop on the same GPU, same data and options, in one run.

    python benchmarks/gpu/train_vs_torch.py --data FMNIST.h5 [--peer benchmarks/peers/torch_mlp.py] [--rows ROWS]
                                            [--epochs 4] [--repeat 1] [--ranks 1] [--device gpu]

Both sides: float32, SGD with momentum 0.9, constant learning rate 0.05, no
weight decay, no warm-up, the whole data set on the device; throughput is
samples/s over epochs 2.. (epoch 1 pays for cuBLAS and allocator warm-up),
as the peer (``benchmarks/peers/torch_mlp.py``, eager PyTorch) times it.
Rows are ``HIDDEN@BATCH`` items separated by ``;`` (default: the four rows of
the first GPU node's measurements, and 784-1024-1024-10 at batch 256). The two sides take turns row by
row, ``--repeat`` rounds, medians kept. Prints, per row, each side's
samples/s and final test accuracy and hpcgpu / PyTorch; writes the figures
as JSON (``--json``). ``--ranks R`` runs hpcgpu on R ranks sharing the GPU
(the peer stays on one process). hpcgpu runs with its default CUDA graphs
and again with ``--cuda-graphs off`` (with and without, in one run;
``--graphs auto`` or ``off`` runs one of them). The peer runs on the
device hpcgpu is given: with ``--device gpu`` or ``auto`` only where
PyTorch sees CUDA, with ``--device cpu`` on the CPU wherever PyTorch
imports (a check of the pair on a machine without a GPU; CPU figures, not
the GPU comparison). Without PyTorch (or with ``--peer none``) only
hpcgpu's side runs: a dry run of the script itself.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
ROWS = "256,256@256;256,128,64@256;1024,1024@1024;1024,1024@4096;1024,1024@256"
COMMON = dict(lr=0.05, epochs=4)


def hpcgpu_run(a, hidden: str, batch: int, out: str, graphs: str = "auto") -> dict:
    """One trainer run; samples/s over epochs 2.. (time-weighted, as the peer) and the final test accuracy."""
    cmd = [sys.executable, "-m", "hpcgpu.train", "--data", a.data, "--out", out, "--hidden", hidden,
           "--batch-size", str(batch), "--lr", str(COMMON["lr"]), "--momentum", "0.9", "--weight-decay", "0",
           "--schedule", "constant", "--warmup-epochs", "0", "--epochs", str(a.epochs), "--dtype", "float32",
           "--device", a.device, "--progress", "none", "--cuda-graphs", graphs]
    if a.ranks > 1 or shutil.which("mpiexec"):
        cmd = [a.mpiexec or shutil.which("mpiexec") or "mpiexec", "-n", str(a.ranks), *cmd]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout, env=dict(os.environ, PYTHONPATH=ROOT))
    if p.returncode != 0:
        return {"error": (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1]}
    with h5py.File(out, "r") as f:
        sps, secs = f["metrics/samples_per_second"][()], f["metrics/seconds"][()]
        acc = float(f["metrics/test_accuracy"][-1])
    timed = slice(1, None) if len(sps) > 1 else slice(None)
    n, t = float((sps[timed] * secs[timed]).sum()), float(secs[timed].sum())
    first = p.stdout.splitlines()[0] if p.stdout else ""
    return {"samples_per_s": n / t, "test_accuracy": acc,
            "cuda_graphs": "on" if "CUDA graphs on" in first else "off" if "CUDA graphs off" in first else "-"}


PEER = re.compile(r"samples_per_s=([0-9.]+)")
ACC = re.compile(r"test_accuracy ([0-9.]+)")


def peer_run(a, hidden: str, batch: int) -> dict:
    """One run of the PyTorch loop; its RESULT line and last epoch's test accuracy."""
    cmd = [sys.executable, a.peer, "--data", a.data, "--hidden", hidden, "--batch-size", str(batch),
           "--lr", str(COMMON["lr"]), "--momentum", "0.9", "--epochs", str(a.epochs),
           "--device", {"gpu": "cuda"}.get(a.device, a.device)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
    hits, accs = PEER.findall(p.stdout), ACC.findall(p.stdout)
    if p.returncode != 0 or not hits:
        return {"error": (p.stderr.strip().splitlines() or ["no RESULT line"])[-1]}
    return {"samples_per_s": float(hits[-1]), "test_accuracy": float(accs[-1]) if accs else None}


def torch_for(device: str, python: str = sys.executable) -> bool:
    """Whether PyTorch runs on ``device`` here: CUDA for gpu and auto, an import for cpu."""
    check = "" if device == "cpu" else "sys.exit(0 if torch.cuda.is_available() else 1)"
    p = subprocess.run([python, "-c", f"import sys, torch; {check}"], capture_output=True)
    return p.returncode == 0


def median(runs: list[dict], key: str):
    vals = [r[key] for r in runs if r.get(key) is not None]
    return float(np.median(vals)) if vals else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="Fashion-MNIST in hpcgpu's HDF5 layout (python -m hpcgpu.datasets)")
    ap.add_argument("--peer", default=os.path.join(ROOT, "benchmarks", "peers", "torch_mlp.py"),
                    help="the PyTorch loop (default benchmarks/peers/torch_mlp.py), or 'none'")
    ap.add_argument("--rows", default=ROWS, help="HIDDEN@BATCH items, ';'-separated")
    ap.add_argument("--epochs", type=int, default=COMMON["epochs"])
    ap.add_argument("--repeat", type=int, default=1, help="rounds; medians are kept")
    ap.add_argument("--ranks", type=int, default=1, help="hpcgpu's ranks (sharing the GPU)")
    ap.add_argument("--device", choices=("gpu", "cpu", "auto"), default="gpu")
    ap.add_argument("--graphs", choices=("both", "auto", "off"), default="both",
                    help="hpcgpu's --cuda-graphs: both runs it with (auto) and without (off)")
    ap.add_argument("--mpiexec", default=None, help="launcher (default: mpiexec on PATH, none at one rank)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per run")
    ap.add_argument("--json", default=os.path.join(ROOT, "results", "bench-train-vs-torch.json"))
    a = ap.parse_args()
    rows = [(r.split("@")[0], int(r.split("@")[1])) for r in a.rows.split(";") if r.strip()]
    with_peer = a.peer != "none" and os.path.exists(a.peer) and torch_for(a.device)
    if not with_peer:
        need = "PyTorch" if a.device == "cpu" else "PyTorch with CUDA"
        print(f"peer: not run ({'--peer none' if a.peer == 'none' else f'no {need} or no ' + a.peer})",
              file=sys.stderr)
    runs: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(a.repeat):
            for hidden, batch in rows:
                r = runs.setdefault((hidden, batch), {"hpcgpu": [], "eager": [], "torch": []})
                if a.graphs != "off":
                    r["hpcgpu"].append(hpcgpu_run(a, hidden, batch, os.path.join(tmp, "o.h5")))
                if a.graphs != "auto":
                    r["eager"].append(hpcgpu_run(a, hidden, batch, os.path.join(tmp, "o.h5"), "off"))
                if with_peer:
                    r["torch"].append(peer_run(a, hidden, batch))
                print(f"round {rnd + 1}: {hidden}@{batch}: {r}", file=sys.stderr, flush=True)
    where = "the CPU" if a.device == "cpu" else "one GPU"
    print(f"hpcgpu ({a.ranks} rank(s), --device {a.device}) against eager PyTorch, {where}; samples/s over "
          f"epochs 2..{a.epochs}, median of {a.repeat} round(s)")
    print(f"{'model':>22} {'batch':>6} {'hpcgpu/s':>10} {'graphs':>6} {'eager/s':>10} {'torch/s':>10} "
          f"{'ratio':>6} {'eager':>6} {'acc hpcgpu':>10} {'acc torch':>9}")
    res = []
    for (hidden, batch), r in runs.items():
        ours, theirs = median(r["hpcgpu"], "samples_per_s"), median(r["torch"], "samples_per_s")
        eager = median(r["eager"], "samples_per_s")
        graphs = "/".join(sorted({x.get("cuda_graphs", "-") for x in r["hpcgpu"]})) or "-"
        row = dict(hidden=hidden, batch=batch, hpcgpu_samples_per_s=ours, torch_samples_per_s=theirs,
                   eager_samples_per_s=eager, cuda_graphs=graphs,
                   ratio=ours / theirs if ours and theirs else None,
                   eager_ratio=eager / theirs if eager and theirs else None,
                   hpcgpu_test_accuracy=median(r["hpcgpu"], "test_accuracy"),
                   torch_test_accuracy=median(r["torch"], "test_accuracy"), runs=r)
        res.append(row)

        def f(x, fmt):
            return "-" if x is None else format(x, fmt)

        errors = [x["error"] for side in r.values() for x in side if "error" in x]
        print(f"{'784-' + hidden.replace(',', '-') + '-10':>22} {batch:>6} {f(ours, '.0f'):>10} {graphs:>6} "
              f"{f(eager, '.0f'):>10} {f(theirs, '.0f'):>10} {f(row['ratio'], '.2f'):>6} "
              f"{f(row['eager_ratio'], '.2f'):>6} {f(row['hpcgpu_test_accuracy'], '.4f'):>10} "
              f"{f(row['torch_test_accuracy'], '.4f'):>9}" + (f"  errors: {errors}" if errors else ""))
    os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
    with open(a.json, "w") as fh:
        json.dump({"data": a.data, "ranks": a.ranks, "device": a.device, "epochs": a.epochs, "rows": res}, fh,
                  indent=1)
    return 0 if all(r["hpcgpu_samples_per_s"] or r["eager_samples_per_s"] for r in res) else 1


if __name__ == "__main__":
    sys.exit(main())
