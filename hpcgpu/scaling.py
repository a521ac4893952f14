"""``python -m hpcgpu.scaling --ranks 1,2,4,8``: a performance model of the trainer, fitted here, checked here.

The model (the seeds' ``T(P) = T_comp / P + T_comm(P)``, per step):

    T(P) = T_comp / min(P, U) + T_comm(P, n),   T_comm(P, n) = alpha_P + beta_P * n

- ``T_comp``: one rank's step without communication (data, forward,
  backward, update), from a 1-rank training run's ``/timing``; at P > 1
  measured with P ranks computing at once, each alone on its local batch
  B / P (``T_comp / min(P, U)`` would assume perfect sharing of the node);
- ``U``: the compute units the ranks share (the cores of this machine, or
  its GPUs): more ranks than units do not compute faster;
- ``alpha_P + beta_P * n``: the ``Allreduce`` of ``n`` bytes at ``P`` ranks,
  a straight line fitted to a microbenchmark over message sizes (Hockney's
  model), ``n`` the gradient's bytes.

The trainer then runs at every P asked for, and each measured step time is
compared with the prediction: the model was fitted on the 1-rank run and the
microbenchmarks only, never on the trainer's runs at P > 1. More ranks than
compute units (oversubscribed, P > U) is outside the model: time-sliced ranks
reach each reduction a scheduler quantum apart, which no microbenchmark of
the parts shows; those rows are marked. For P beyond this machine
the plot extends the model to ``--extend`` ranks (1024) with one compute
unit a rank (a cluster: one GPU each) and the Allreduce of Rabenseifner's
and the ring algorithms, ``2 log2(P) alpha + 2 (P - 1) / P * n * beta``
(Thakur, Rabenseifner and Gropp, IJHPCA 19(1), 2005), alpha and beta fitted
to all the microbenchmark points: labelled as a model, not a measurement.

Writes ``DIR/scaling-model.png``, ``DIR/scaling-model.json`` and the runs'
outputs ``DIR/train-P<P>.h5``; prints the table.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np
from . import _options
from ._outputs import Output, mark_text, save_figure, write_text

__all__ = ["fit_line", "fit_collective_model", "predict_step", "main"]


# ---- the fits (pure functions: tested on synthetic timings) ----------------------------------------

def fit_line(nbytes, seconds) -> tuple[float, float]:
    """Least-squares ``seconds = alpha + beta * nbytes`` (Hockney's model), in relative error.

    Parameters
    ----------
    nbytes, seconds : array_like
        Message sizes (bytes) and their times (s), at one number of ranks.

    Returns
    -------
    (float, float)
        ``alpha`` (s) and ``beta`` (s per byte).
    """
    A = np.column_stack([np.ones(len(nbytes)), np.asarray(nbytes, float)])
    return _relative_lstsq(A, seconds)


def _relative_lstsq(A, seconds) -> tuple[float, float]:
    """Least squares of the relative error.

    Each point is weighted by 1 / its time, so that the small messages (the
    latency) count as much as the large ones (the bandwidth).
    """
    t = np.asarray(seconds, float)
    w = 1.0 / np.maximum(t, 1e-12)
    (x0, x1), *_ = np.linalg.lstsq(A * w[:, None], t * w, rcond=None)
    return float(x0), float(x1)


def _allreduce_features(P, nbytes):
    P, n = np.asarray(P, float), np.asarray(nbytes, float)
    return np.column_stack([2 * np.log2(P), 2 * (P - 1) / P * n])


def fit_collective_model(P, nbytes, seconds) -> tuple[float, float]:
    """Least-squares ``alpha, beta`` of ``T = 2 log2(P) alpha + 2 (P - 1) / P * n * beta``, in relative error.

    Parameters
    ----------
    P, nbytes, seconds : array_like
        Ranks, message size (bytes) and measured ``Allreduce`` time (s) of each point.

    Returns
    -------
    (float, float)
        ``alpha`` (s, latency a message) and ``beta`` (s per byte).
    """
    return _relative_lstsq(_allreduce_features(P, nbytes), seconds)


def collective_model(P, nbytes, alpha: float, beta: float):
    """``2 log2(P) alpha + 2 (P - 1) / P * n * beta`` (0 at one rank)."""
    return _allreduce_features(np.atleast_1d(P), np.broadcast_to(nbytes, np.shape(np.atleast_1d(P)))) \
        @ np.array([alpha, beta])


def predict_step(t_comp: float, P: int, units: int, alpha_p: float, beta_p: float, grad_bytes: float) -> float:
    """The model's step time at ``P`` ranks (s).

    Parameters
    ----------
    t_comp : float
        One rank's step without communication (s).
    P : int
        Ranks.
    units : int
        Compute units the ranks share (cores or GPUs).
    alpha_p, beta_p : float
        The ``Allreduce`` line at ``P`` ranks (s, s per byte); ignored at one rank.
    grad_bytes : float
        Bytes of the gradient reduced each step.

    Returns
    -------
    float
    """
    comm = 0.0 if P == 1 else alpha_p + beta_p * grad_bytes
    return t_comp / min(P, max(1, units)) + comm


# ---- measuring -----------------------------------------------------------------------------------

def _launcher(n: int) -> tuple[list[str], dict]:
    """``mpiexec -n N`` of the MPI that mpi4py loads here, and the environment it needs.

    Open MPI needs to be told to oversubscribe (and, as root, to start at all).
    """
    exe = _options.text("HPCGPU_MPIEXEC") or shutil.which("mpiexec", path=os.path.dirname(sys.executable)) \
        or shutil.which("mpiexec") or "mpiexec"
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    import mpi4py

    mpi4py.rc.initialize = False
    from mpi4py import MPI

    if "open mpi" in MPI.Get_library_version().lower():
        env.update(PRTE_MCA_rmaps_default_mapping_policy=":oversubscribe", OMPI_MCA_rmaps_base_oversubscribe="1")
        if os.geteuid() == 0:
            env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return [exe, "-n", str(n)], env


def _child_allreduce(sizes: list[int], repeat: int) -> None:
    """Under mpiexec: the median over repeats of the slowest rank's Allreduce time, per size (JSON on rank 0)."""
    from mpi4py import MPI

    from .comm import Allreduce
    from .runtime import init

    rt = init("cpu")
    comm = rt.comm
    out = []
    for n in sizes:
        buf = np.ones(max(1, n // 4), np.float32)
        Allreduce(buf, comm=comm)  # warm-up
        times = []
        for _ in range(repeat):
            comm.Barrier()
            t0 = MPI.Wtime()
            Allreduce(buf, comm=comm)
            times.append(comm.allreduce(MPI.Wtime() - t0, op=MPI.MAX))
        out.append((buf.nbytes, float(np.median(times))))
    if comm.rank == 0:
        print(json.dumps(out), flush=True)


def _child_compute(args) -> None:
    """Under mpiexec: the compute step of P ranks computing at once, without communication.

    Every rank trains alone (its own ``COMM_SELF`` runtime, local batch
    B / P) at the same time; rank 0 prints the median over ranks of the
    seconds per step of the epochs after the first (JSON).
    """
    from mpi4py import MPI

    from .runtime import init
    from .train import TrainConfig, Trainer

    world = MPI.COMM_WORLD
    rt = init("cpu" if args.device == "auto" else args.device, comm=MPI.COMM_SELF)
    cfg = TrainConfig(data=args.data, out=None, hidden=tuple(int(h) for h in args.hidden.split(",")),
                      batch_size=max(1, args.batch_size // world.size), epochs=args.epochs, progress="none",
                      schedule="constant", warmup_epochs=0, timing=False)
    tr = Trainer(cfg, rt)
    tr.fit(epochs=1)  # binds the model to its data; the first epoch pays for first touches and is not timed
    times = []
    for _ in range(1, args.epochs):
        world.Barrier()
        t0 = MPI.Wtime()
        tr.train_epoch()
        times.append((MPI.Wtime() - t0) / tr.sampler.steps)
        tr._finish_epoch(0.0)
    tr.close()
    got = world.gather(float(np.median(times)), root=0)
    if world.rank == 0:
        print(json.dumps(float(np.median(got))), flush=True)


def _run(cmd, env, what):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or ["(nothing on stderr)"])[-1]
        raise RuntimeError(f"{what} failed (exit {p.returncode}): {last}")
    return p.stdout


def _measure(args, out_dir: str) -> dict:
    import h5py

    ranks = sorted({int(r) for r in args.ranks.split(",")} | {1})
    runs = {}
    for P in ranks:
        out = os.path.join(out_dir, f"train-P{P}.h5")
        cmd, env = _launcher(P)
        train = [sys.executable, "-m", "hpcgpu.train", "--out", out, "--epochs", str(args.epochs),
                 "--batch-size", str(args.batch_size), "--hidden", args.hidden, "--device", args.device,
                 "--progress", "none", "--schedule", "constant", "--warmup-epochs", "0"]
        if args.data:
            train += ["--data", args.data]
        if getattr(args, "overwrite", False):
            train += ["--overwrite"]
        _run(cmd + train, env, f"the training run at {P} ranks")
        with h5py.File(out) as f:
            steps = int(f.attrs["steps_done"]) // int(f.attrs["epochs_done"])
            t = {k: f["timing"][k][()][1:, 1] for k in f["timing"]}  # epochs 2..: mean over ranks
            sec = f["metrics/seconds"][()][1:]
            nparams = sum(f["model"][k].size for k in f["model"])
            itemsize = f["model"][next(iter(f["model"]))].dtype.itemsize
            device = str(f.attrs["device"])
        runs[P] = {"step_seconds": float(np.median(sec)) / steps, "steps_per_epoch": steps,
                   "phases_per_step": {k: float(np.median(v)) / steps for k, v in t.items()}}
    grad_bytes = nparams * itemsize
    sizes = sorted({int(x) for x in np.geomspace(256, max(512, 2 * grad_bytes), args.sizes)})
    micro, compute = {}, {}
    for P in ranks:
        if P == 1:
            continue
        cmd, env = _launcher(P)
        got = json.loads(_run(cmd + [sys.executable, "-m", "hpcgpu.scaling", "--child-allreduce",
                                     ",".join(map(str, sizes)), "--repeat", str(args.repeat)],
                              env, f"the Allreduce microbenchmark at {P} ranks").strip().splitlines()[-1])
        micro[P] = got
        child = [sys.executable, "-m", "hpcgpu.scaling", "--child-compute", "--epochs", str(args.epochs),
                 "--batch-size", str(args.batch_size), "--hidden", args.hidden, "--device", args.device]
        if args.data:
            child += ["--data", args.data]
        compute[P] = json.loads(_run(cmd + child, env, f"the compute microbenchmark at {P} ranks")
                                .strip().splitlines()[-1])
    return {"runs": runs, "micro": micro, "compute": compute, "grad_bytes": grad_bytes, "device": device}


def _units(device: str) -> int:
    if device == "gpu":
        from . import _device

        return max(1, _device.device_count())
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def model_table(data: dict, units: int) -> dict:
    """The fits and the predictions from the measurements :func:`_measure` returns.

    Parameters
    ----------
    data : dict
        ``runs`` (per P: ``step_seconds``, ``phases_per_step``), ``micro``
        (per P > 1: ``[(bytes, seconds), ...]``), optionally ``compute``
        (per P > 1: seconds of the compute step with P ranks computing at
        once, local batch B / P) and ``grad_bytes``.
    units : int
        Compute units the ranks share.

    Returns
    -------
    dict
        ``t_comp`` (s), ``lines`` (per P: alpha, beta), ``alpha``, ``beta``
        (the global collective model), ``rows`` (per P: measured,
        predicted, error = predicted / measured - 1, fitted on it or not,
        oversubscribed: more ranks than compute units, outside the model).
    """
    one = data["runs"][1]["phases_per_step"]
    t_comp = sum(one.values())  # at one rank every phase is computation (no reduction runs)
    lines = {int(P): fit_line(*zip(*pts, strict=True)) for P, pts in data["micro"].items()}
    pts = [(int(P), n, s) for P, v in data["micro"].items() for n, s in v]
    alpha, beta = fit_collective_model(*zip(*pts, strict=True)) if pts else (math.nan, math.nan)
    rows = []
    compute = {int(k): v for k, v in data.get("compute", {}).items()}
    for P, r in sorted(data["runs"].items(), key=lambda kv: int(kv[0])):
        P = int(P)
        a, b = lines.get(P, (0.0, 0.0))
        # the compute step as P ranks computing at once run it (shared cores, memory bandwidth), when measured
        t_p = compute.get(P, t_comp / min(P, max(1, units)))
        pred = predict_step(t_p, 1, 1, 0.0, 0.0, 0.0) + (0.0 if P == 1 else a + b * data["grad_bytes"])
        rows.append({"P": P, "measured_s": r["step_seconds"], "predicted_s": pred, "t_comp_s": t_p,
                     "error": pred / r["step_seconds"] - 1, "fitted": P == 1, "oversubscribed": P > units})
    return {"t_comp": t_comp, "units": units, "lines": lines, "alpha": alpha, "beta": beta, "rows": rows,
            "grad_bytes": data["grad_bytes"]}


def plot(model: dict, path: str, extend: int) -> None:
    """Measured against predicted step time, and the model extended to ``extend`` ranks."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = model["rows"]
    ps = [r["P"] for r in rows]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4), constrained_layout=True)
    a.plot(ps, [r["measured_s"] * 1e3 for r in rows], "o-", label="measured")
    a.plot(ps, [r["predicted_s"] * 1e3 for r in rows], "s--", label="model")
    for r in rows:
        text = "fitted" if r["fitted"] else f"{100 * r['error']:+.0f}%" + (" (P > U)" if r["oversubscribed"] else "")
        a.annotate(text, (r["P"], r["predicted_s"] * 1e3),
                   textcoords="offset points", xytext=(4, 6), fontsize=8)
    a.set(xscale="log", xlabel="ranks P", ylabel="ms per step",
          title=f"trainer step on this machine ({model['units']} compute units)")
    a.set_xticks(ps, [str(p) for p in ps])
    from matplotlib.ticker import NullFormatter

    a.xaxis.set_minor_formatter(NullFormatter())
    a.legend()
    big = np.unique(np.geomspace(1, extend, 40).astype(int))
    comm = collective_model(big, model["grad_bytes"], model["alpha"], model["beta"])
    comm[big == 1] = 0.0
    t = model["t_comp"] / big + comm
    b.plot(big, t * 1e3, "-", label=(f"model: T_comp/P + 2 log2(P) alpha + 2 (P-1)/P n beta\n"
                                      f"alpha = {model['alpha'] * 1e6:.1f} us, 1/beta = "
                                      f"{1 / model['beta'] / 1e9 if model['beta'] > 0 else math.inf:.2f} GB/s"))
    b.plot(big, model["t_comp"] / big * 1e3, ":", label="compute alone (ideal)")
    b.plot(ps, [r["measured_s"] * 1e3 for r in rows], "o", label="measured here")
    b.set(xscale="log", yscale="log", xlabel="ranks P (one compute unit each)", ylabel="ms per step",
          title=f"the model to {extend} ranks (a model, not a measurement)")
    b.legend(fontsize=7, loc="lower left")
    save_figure(fig, path)
    plt.close(fig)


def main(argv=None) -> int:
    """The command line; see the module's docstring.

    Parameters
    ----------
    argv : list of str, optional

    Returns
    -------
    int
        The exit status (0; 2 with one line for bad input).
    """
    from ._cli import ArgumentParser

    p = ArgumentParser(prog="python -m hpcgpu.scaling", description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", default="1,2,4,8", help="numbers of ranks to run the trainer at (1 is always run)")
    p.add_argument("--data", default=None, help="HDF5 data set (default: the bundled digits)")
    p.add_argument("--hidden", default="256,256", help="hidden widths of the trainer's MLP")
    p.add_argument("--batch-size", type=int, default=64, help="the GLOBAL batch of every run")
    p.add_argument("--epochs", type=int, default=4, help="epochs a run (the first is left out of the figures)")
    p.add_argument("--device", choices=("auto", "cpu", "gpu"), default="cpu", help="the runs' --device")
    p.add_argument("--sizes", type=int, default=8, help="message sizes of the Allreduce microbenchmark")
    p.add_argument("--repeat", type=int, default=20, help="repetitions of each message size")
    p.add_argument("--extend", type=int, default=1024, help="extend the model's plot to this many ranks")
    p.add_argument("-o", "--out", default="results/scaling", help="directory for the plot, JSON and runs")
    p.add_argument("--overwrite", action="store_true", help="replace files in OUT that hpcgpu did not write")
    p.add_argument("--child-allreduce", default=None, help=argparse.SUPPRESS)
    p.add_argument("--child-compute", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child_compute:
        _child_compute(a)
        return 0
    if a.child_allreduce is not None:
        _child_allreduce([int(s) for s in a.child_allreduce.split(",")], a.repeat)
        return 0
    try:
        ranks = [int(r) for r in a.ranks.split(",")]
        if any(r < 1 for r in ranks) or a.epochs < 2 or a.sizes < 2 or a.repeat < 1 or a.extend < 1:
            raise ValueError
    except ValueError:
        print("hpcgpu.scaling: error: --ranks must be positive integers like 1,2,4; --epochs, --sizes >= 2; "
              "--repeat, --extend >= 1", file=sys.stderr)
        return 2
    try:
        import matplotlib  # noqa: F401 - checked before the runs it would plot
    except ImportError:
        print("hpcgpu.scaling: error: needs matplotlib for its plot (pip install matplotlib)", file=sys.stderr)
        return 2
    from mpi4py import MPI

    from ._outputs import Input, claim

    png, js = os.path.join(a.out, "scaling-model.png"), os.path.join(a.out, "scaling-model.json")
    try:
        claim([Output(png, "-o", kind="png"), Output(js, "-o", kind="json")], [Input(a.data, "--data")],
              comm=MPI.COMM_SELF, overwrite=a.overwrite, prog="hpcgpu.scaling")
        os.makedirs(a.out, exist_ok=True)
        data = _measure(a, a.out)
    except (OSError, RuntimeError, ValueError) as e:
        from .io import one_line

        print(f"hpcgpu.scaling: error: {one_line(e)}", file=sys.stderr)
        return 2
    model = model_table(data, _units(data["device"]))
    plot(model, png, a.extend)
    write_text(js, json.dumps({"writer": mark_text(), **model, "lines": {str(k): v for k, v in model["lines"].items()},
                               "measured": data}, indent=1))
    print(f"T_comp {model['t_comp'] * 1e3:.3f} ms/step on one rank ({model['units']} compute units); "
          f"gradient {model['grad_bytes']} bytes; Allreduce model alpha {model['alpha'] * 1e6:.1f} us, "
          f"beta {model['beta'] * 1e9:.3f} ns/byte")
    print(f"{'P':>5} {'measured ms':>12} {'model ms':>9} {'error':>7}")
    for r in model["rows"]:
        err = "fitted" if r["fitted"] else f"{100 * r['error']:+.1f}%" + (" (P > U: outside the model)"
                                                                          if r["oversubscribed"] else "")
        print(f"{r['P']:>5} {r['measured_s'] * 1e3:>12.3f} {r['predicted_s'] * 1e3:>9.3f} {err:>7}")
    print(f"wrote {a.out}/scaling-model.png, scaling-model.json")
    return 0


if __name__ == "__main__":
    from ._cli import run

    run(main, prog="hpcgpu.scaling")
