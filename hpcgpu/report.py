"""``python -m hpcgpu.report RESULTS.h5 [MORE.h5 ...] -o DIR``: plots and a summary of training runs.

For each trainer output (``python -m hpcgpu.train --out``): loss and
accuracy per epoch, where each epoch's time went (``/timing``: data, compute,
communication, checkpoint I/O, the mean over ranks with the slowest rank
marked), energy per epoch when a counter could be read; and ``report.md``,
a table of the runs. Given runs at several numbers of ranks, the strong
scaling of the same problem: speed-up and parallel efficiency against P
with the ideal line. PNG files by matplotlib (Agg: no display needed).

Exit status: 0, or 2 with one line (no such file, not a trainer output,
matplotlib missing, an output directory that cannot be written).
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass

import numpy as np

from ._outputs import Output, mark_text, save_figure, write_text

__all__ = ["Run", "read_run", "write_report", "main"]

PHASE_COLORS = {"data": "#8da0cb", "compute": "#66c2a5", "comm": "#fc8d62", "io": "#e78ac3"}


@dataclass
class Run:
    """One trainer output, as the report reads it.

    Attributes
    ----------
    path : str
    ranks : int
        World size of the run.
    device : str
    metrics : dict of str to numpy.ndarray
        ``/metrics/<name>``, one value per epoch.
    timing : dict of str to numpy.ndarray
        ``/timing/<phase>``: epochs x (min, mean, max) seconds; empty without timing.
    energy_why : str
        Why the energy is NaN, when it is.
    """

    path: str
    ranks: int
    device: str
    metrics: dict
    timing: dict
    energy_why: str = ""

    @property
    def label(self) -> str:
        """``P=4 (cpu)``: how plots and tables name the run."""
        return f"P={self.ranks} ({self.device})"

    def steady_samples_per_second(self) -> float:
        """Median samples/s over the epochs after the first (all epochs when there is one)."""
        sps = self.metrics["samples_per_second"]
        return float(np.median(sps[1:] if len(sps) > 1 else sps))


def read_run(path: str) -> Run:
    """Read a trainer output file.

    Not collective.

    Parameters
    ----------
    path : str
        An HDF5 file written by ``python -m hpcgpu.train``.

    Returns
    -------
    Run

    Raises
    ------
    FileNotFoundError
        No such file.
    ValueError
        Not HDF5, or not a trainer output (no ``/metrics``).
    """
    import h5py

    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no such file")
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise ValueError(f"{path}: not a readable HDF5 file ({e})") from None
    with f:
        if "metrics" not in f or "epoch" not in f["metrics"]:
            raise ValueError(f"{path}: not an output of python -m hpcgpu.train (no /metrics)")
        metrics = {k: f["metrics"][k][()].astype(np.float64) for k in f["metrics"]}
        timing = {}
        if "timing" in f:  # in the trainer's order of the phases (the group lists them by name)
            order = str(f["timing"].attrs.get("phases", "")).split(",")
            names = [k for k in order if k in f["timing"]] + sorted(set(f["timing"]) - set(order))
            timing = {k: f["timing"][k][()] for k in names}
        why = ""
        if "energy_joules_cpu" in f["metrics"]:
            why = "; ".join(str(f["metrics"][k].attrs.get("why_nan", "")) for k in
                            ("energy_joules_cpu", "energy_joules_gpu") if k in f["metrics"]
                            and f["metrics"][k].attrs.get("why_nan", ""))
        return Run(path, int(f.attrs.get("world_size", 1)), str(f.attrs.get("device", "?")), metrics, timing, why)


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _stem(run: Run, taken: set) -> str:
    stem = os.path.splitext(os.path.basename(run.path))[0]
    base, i = stem, 1
    while stem in taken:
        i += 1
        stem = f"{base}-{i}"
    taken.add(stem)
    return stem


def _integer_epochs(ax) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _held_out(m) -> str | None:
    """The held-out set's prefix in a run's metrics: ``val``, ``test``, or None (a run without one)."""
    return "val" if "val_loss" in m else "test" if "test_loss" in m else None


def plot_learning(run: Run, path: str) -> None:
    """Loss (train, held-out) and held-out accuracy per epoch."""
    plt = _plt()
    m = run.metrics
    h = _held_out(m)
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.4), constrained_layout=True)
    a.plot(m["epoch"], m["train_loss"], "o-", label="train")
    if h is not None and not np.isnan(m[f"{h}_loss"]).all():
        a.plot(m["epoch"], m[f"{h}_loss"], "s-", label=h)
    a.set(xlabel="epoch", ylabel="mean loss", title=f"loss, {run.label}")
    a.legend()
    b.plot(m["epoch"], m["train_accuracy"], "o-", label="train")
    if h is not None and not np.isnan(m[f"{h}_accuracy"]).all():
        b.plot(m["epoch"], m[f"{h}_accuracy"], "s-", label=h)
    b.set(xlabel="epoch", ylabel="accuracy", title="accuracy")
    b.legend()
    _integer_epochs(a)
    _integer_epochs(b)
    save_figure(fig, path)
    plt.close(fig)


def plot_time(run: Run, path: str) -> None:
    """Each epoch's seconds split into phases (mean over ranks, stacked), the slowest rank's total marked."""
    plt = _plt()
    ep = run.metrics["epoch"]
    fig, ax = plt.subplots(figsize=(8.5, 3.6), constrained_layout=True)
    bottom = np.zeros(len(ep))
    for phase, v in run.timing.items():
        ax.bar(ep, v[:, 1], bottom=bottom, label=phase, color=PHASE_COLORS.get(phase))
        bottom += v[:, 1]
    slowest = sum(v[:, 2] for v in run.timing.values())
    ax.plot(ep, slowest, "k_", markersize=18, label="sum of the slowest rank's phases")
    ax.plot(ep, run.metrics["seconds"], "kx", label="epoch wall time")
    ax.set(xlabel="epoch", ylabel="seconds", title=f"where each epoch's time went, {run.label}")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    _integer_epochs(ax)
    save_figure(fig, path)
    plt.close(fig)


def plot_energy(run: Run, path: str) -> None:
    """Joules per epoch (CPU and GPU parts where they were read)."""
    plt = _plt()
    m = run.metrics
    fig, ax = plt.subplots(figsize=(6, 3.4), constrained_layout=True)
    for k, lab in (("energy_joules_cpu", "CPU packages + DRAM (RAPL)"), ("energy_joules_gpu", "GPUs (NVML)")):
        if k in m and not np.isnan(m[k]).all():
            ax.plot(m["epoch"], m[k], "o-", label=lab)
    ax.set(xlabel="epoch", ylabel="joules", title=f"energy per epoch, {run.label}")
    ax.legend()
    _integer_epochs(ax)
    save_figure(fig, path)
    plt.close(fig)


def plot_scaling(runs: list[Run], path: str) -> list[tuple]:
    """Strong scaling: speed-up and efficiency against P, relative to the run with the fewest ranks.

    Returns
    -------
    list of tuple
        ``(P, samples/s, speed-up, efficiency)`` per number of ranks (the best run of each P).
    """
    plt = _plt()
    best: dict[int, float] = {}
    for r in runs:
        best[r.ranks] = max(best.get(r.ranks, 0.0), r.steady_samples_per_second())
    ps = sorted(best)
    p0, s0 = ps[0], best[ps[0]]
    rows = [(p, best[p], best[p] / s0, (best[p] / s0) / (p / p0)) for p in ps]
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.4), constrained_layout=True)
    a.plot(ps, [r[2] for r in rows], "o-", label="measured")
    a.plot(ps, [p / p0 for p in ps], "k--", label="ideal")
    a.set(xlabel="ranks P", ylabel=f"speed-up over P={p0}", title="strong scaling", xscale="log", yscale="log")
    a.set_xticks(ps, [str(p) for p in ps])
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    a.yaxis.set_major_formatter(ScalarFormatter())
    a.yaxis.set_minor_formatter(NullFormatter())
    a.legend()
    b.plot(ps, [r[3] for r in rows], "o-")
    b.axhline(1.0, color="k", ls="--")
    b.set(xlabel="ranks P", ylabel="parallel efficiency", title="efficiency", xscale="log", ylim=(0, 1.2))
    b.set_xticks(ps, [str(p) for p in ps])
    save_figure(fig, path)
    plt.close(fig)
    return rows


def write_report(runs: list[Run], out_dir: str) -> list[str]:
    """Write the PNG plots and ``report.md`` of ``runs`` into ``out_dir``.

    Not collective (one process; no MPI).

    Parameters
    ----------
    runs : list of Run
    out_dir : str
        Created if missing.

    Returns
    -------
    list of str
        The files written.

    Raises
    ------
    OSError
        ``out_dir`` cannot be written.
    """
    os.makedirs(out_dir, exist_ok=True)
    written, taken = [], set()
    lines = ["# Training runs", "",
             "| run | P | device | epochs | final test accuracy | samples/s (median, epochs 2+) "
             "| phases: % of the time | joules per epoch | J/GFLOP |",
             "|---|---|---|---|---|---|---|---|---|"]
    for run in runs:
        stem = _stem(run, taken)
        m = run.metrics
        files = []
        p = os.path.join(out_dir, f"{stem}-learning.png")
        plot_learning(run, p)
        files.append(p)
        split = "-"
        if run.timing:
            p = os.path.join(out_dir, f"{stem}-time.png")
            plot_time(run, p)
            files.append(p)
            tot = {k: float(v[:, 1].sum()) for k, v in run.timing.items()}
            s = sum(tot.values()) or 1.0
            split = ", ".join(f"{k} {100 * tot[k] / s:.0f}" for k in tot)
        energy = m.get("energy_joules")
        joules, jpg = (f"n/a ({run.energy_why})" if run.energy_why else "n/a"), "n/a"
        if energy is not None and not np.isnan(energy).all():
            p = os.path.join(out_dir, f"{stem}-energy.png")
            plot_energy(run, p)
            files.append(p)
            joules = f"{np.nanmedian(energy):.1f}"
            jpg = f"{np.nanmedian(m['joules_per_gflop']):.3f}"
        h = _held_out(m)
        acc = m[f"{h}_accuracy"][-1] if h is not None else math.nan
        lines.append(f"| `{os.path.basename(run.path)}` | {run.ranks} | {run.device} | {int(m['epoch'][-1])} | "
                     f"{'n/a' if math.isnan(acc) else f'{acc:.4f}'} | {run.steady_samples_per_second():.0f} | "
                     f"{split} | {joules} | {jpg} |")
        written += files
    lines.append("")
    for f in written:
        lines.append(f"![{os.path.basename(f)}]({os.path.basename(f)})")
    if len({r.ranks for r in runs}) > 1:
        p = os.path.join(out_dir, "scaling.png")
        rows = plot_scaling(runs, p)
        written.append(p)
        lines += ["", "## Strong scaling", "", "| P | samples/s | speed-up | efficiency |", "|---|---|---|---|"]
        lines += [f"| {p_} | {s:.0f} | {sp:.2f} | {e:.2f} |" for p_, s, sp, e in rows]
        lines += ["", "![scaling.png](scaling.png)"]
    md = os.path.join(out_dir, "report.md")
    write_text(md, f"<!-- {mark_text()} -->\n" + "\n".join(lines) + "\n")
    return [*written, md]


def report_outputs(runs: list[Run], out_dir: str) -> list[Output]:
    """Every file :func:`write_report` may write for ``runs`` in ``out_dir``, for the output policy. Not collective.

    Parameters
    ----------
    runs : list of Run
    out_dir : str

    Returns
    -------
    list of hpcgpu._outputs.Output
    """
    taken: set = set()
    names = [f"{_stem(r, taken)}-{part}.png" for r in runs for part in ("learning", "time", "energy")]
    return [Output(os.path.join(out_dir, n), "-o", kind="png") for n in [*names, "scaling.png"]] + \
        [Output(os.path.join(out_dir, "report.md"), "-o", kind="text")]


def main(argv=None) -> int:
    """The command line; see the module's docstring.

    Parameters
    ----------
    argv : list of str, optional

    Returns
    -------
    int
        The exit status.
    """
    from ._cli import ArgumentParser

    p = ArgumentParser(prog="python -m hpcgpu.report", description=__doc__.split("\n\n")[0])
    p.add_argument("results", nargs="+", help="trainer outputs (HDF5)")
    p.add_argument("-o", "--out", default="report", help="directory for the PNG files and report.md")
    p.add_argument("--overwrite", action="store_true", help="replace files in OUT that hpcgpu did not write")
    a = p.parse_args(argv)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("hpcgpu.report: error: needs matplotlib (pip install matplotlib)", file=sys.stderr)
        return 2
    from mpi4py import MPI

    from ._outputs import Input, claim, release

    outputs = []
    try:
        runs = [read_run(r) for r in a.results]
        outputs = report_outputs(runs, a.out)
        claim(outputs, [Input(r, "RESULTS") for r in a.results], comm=MPI.COMM_SELF, overwrite=a.overwrite,
              prog="hpcgpu.report")
        files = write_report(runs, a.out)
    except (ValueError, OSError) as e:
        from .io import one_line

        print(f"hpcgpu.report: error: {one_line(e)}", file=sys.stderr)
        return 2
    finally:
        release(o.path for o in outputs)  # written: another job may write them now (main() may run in-process)
    print(f"hpcgpu.report: wrote {len(files)} files to {a.out}: " + ", ".join(os.path.basename(f) for f in files))
    return 0


if __name__ == "__main__":
    from ._cli import run

    run(main, prog="hpcgpu.report")
