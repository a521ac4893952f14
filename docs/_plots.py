"""The figures of docs/performance.rst, drawn at build time from the measurements in docs/_data/*.csv.

``make_plots(outdir)`` writes one PNG per figure into ``outdir`` (conf.py passes ``docs/_plots``);
performance.rst shows them as ``_plots/NAME.png``. The page's tables show the same numbers: a new
measurement goes into both the CSV and the table.
"""

import csv
import os

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "_data")

PLOTS = ("splits", "summa_splits", "peer", "tensor_parallel", "overlap", "tasks", "scaling", "mpis", "ci")


def _rows(name):
    with open(os.path.join(DATA, f"{name}.csv"), newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _bars(ax, labels, series, ylabel, ref=None):
    """Grouped bars: one group per label, one bar per (name, values) of ``series``."""
    n = len(series)
    width = 0.8 / n
    for i, (name, values) in enumerate(series):
        xs = [x + (i - (n - 1) / 2) * width for x in range(len(labels))]
        ax.bar(xs, [float("nan") if v in ("", None) else float(v) for v in values], width, label=name)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel(ylabel)
    if ref is not None:
        ax.axhline(ref, color="gray", lw=0.8, ls="--")
    ax.legend(fontsize=8)


def plot_splits(plt):
    rows = _rows("splits")
    fig, ax = plt.subplots(figsize=(8, 3.6))
    labels = [r["workload"].replace("trainer ", "").replace(", ", "\n") for r in rows]
    _bars(ax, labels, [("1 x 2", [r["r_1x2"] for r in rows]), ("1 x 2, --gemm-threads all",
                                                                [r["r_1x2_all"] for r in rows]),
                       ("2 x 1", [r["r_2x1"] for r in rows]), ("default, 1 rank", [r["r_default"] for r in rows])],
          "samples/s, ratio to 1 x 1 (median of 3)", ref=1.0)
    ax.set_title("Trainer: ranks x threads on 2 cores (CPU)")
    return fig


def plot_summa_splits(plt):
    rows = _rows("summa_splits")
    fig, ax = plt.subplots(figsize=(5, 3))
    ax.bar([r["split"] for r in rows], [float(r["gflops"]) for r in rows], color="C2")
    ax.set_ylabel("GFLOP/s (best of 3)")
    ax.set_title("SUMMA N=4096 float64, ranks x threads on 2 cores")
    return fig


def plot_peer(plt):
    rows = _rows("peer")
    fig, ax = plt.subplots(figsize=(5, 3))
    _bars(ax, [f"{r['ranks']} rank(s)" for r in rows],
          [("median", [r["median"] for r in rows]), ("best", [r["best"] for r in rows])],
          "samples/s, ratio to the plain loop", ref=1.0)
    ax.set_ylim(0.8, 1.15)
    ax.set_title("Trainer / NumPy + mpi4py loop, 784-256-256-10")
    return fig


def plot_tensor_parallel(plt):
    rows = _rows("tensor_parallel")
    fig, ax = plt.subplots(figsize=(5.5, 3))
    _bars(ax, ["1 x 2 vs 2 x 1", "2 x 2 vs 4 x 1", "1 x 4 vs 4 x 1"],
          [(r["model"], [r["tp_1x2_ratio"], r["tp_2x2_ratio"], r["tp_1x4_ratio"]]) for r in rows],
          "samples/s, ratio to data parallel", ref=1.0)
    ax.set_title("Tensor parallelism (D x T), batch 256, 2 cores")
    return fig


def plot_overlap(plt):
    rows = _rows("overlap")
    fig, ax = plt.subplots(figsize=(5, 3))
    ranks = sorted({r["ranks"] for r in rows}, key=int)
    _bars(ax, [f"{p} ranks" for p in ranks],
          [(f"{b} bucket{'s' * (b != '1')}", [r["exposed_wait_ms"] for p in ranks for r in rows
                                             if r["ranks"] == p and r["buckets"] == b]) for b in ("1", "2")],
          "exposed wait after backward (ms)")
    ax.set_title("Gradient buckets, 784-1024-1024-10, batch 256")
    return fig


def plot_tasks(plt):
    rows = _rows("tasks")
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(8, 3))
    labels = [f"P={r['P']}" for r in rows]
    _bars(a1, labels, [("ours", [r["makespan_ratio_ours"] for r in rows]),
                       ("submit", [r["makespan_ratio_submit"] for r in rows]),
                       ("map", [r["makespan_ratio_map"] for r in rows])],
          "makespan / lower bound", ref=1.0)
    a1.set_ylim(0.95, 1.2)
    a1.set_title("balance (400 lognormal tasks)", fontsize=9)
    _bars(a2, labels, [("ours", [r["overhead_us_ours"] for r in rows]),
                       ("submit", [r["overhead_us_submit"] for r in rows]),
                       ("map", [r["overhead_us_map"] for r in rows])],
          "overhead per task (us)")
    a2.set_yscale("log")
    a2.set_title("overhead (4,000 no-op tasks)", fontsize=9)
    return fig


def plot_scaling(plt):
    rows = _rows("scaling")
    fig, ax = plt.subplots(figsize=(5, 3.2))
    P = [int(r["P"]) for r in rows]
    ax.plot(P, [float(r["measured_ms"]) for r in rows], "o-", label="measured")
    ax.plot(P, [float(r["model_ms"]) for r in rows], "s--", label="model")
    ax.axvspan(2.5, 8.5, color="gray", alpha=0.15, label="P > U (outside the model)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(P)
    ax.set_xticklabels([str(p) for p in P])
    ax.set_xlabel("ranks P")
    ax.set_ylabel("ms per step")
    ax.set_title("Trainer step, digits 64-256-256-10, batch 64, 2 cores")
    ax.legend(fontsize=8)
    return fig


def plot_mpis(plt):
    rows = _rows("mpis")
    base = rows[0]
    fig, ax = plt.subplots(figsize=(8, 3.4))
    # ratio to MPICH, above 1 is better (launch and Allreduce are times: inverted)
    labels = ["launch", "Allreduce 1.08 MB", "trainer samples/s", "SUMMA N=1024"]
    series = []
    for r in rows:
        series.append((r["stack"], [float(base["launch_s"]) / float(r["launch_s"]),
                                    float(base["allreduce_us"]) / float(r["allreduce_us"]),
                                    float(r["trainer_samples_per_s"]) / float(base["trainer_samples_per_s"]),
                                    float(r["summa_gflops"]) / float(base["summa_gflops"])]))
    _bars(ax, labels, series, "ratio to MPICH (above 1 is better)", ref=1.0)
    ax.set_title("MPI stacks on 2 cores (medians of 5 rounds)")
    return fig


def plot_ci(plt):
    rows = _rows("ci")
    fig, ax = plt.subplots(figsize=(6, 2.6))
    ax.barh([r["stage"] for r in rows][::-1], [float(r["minutes"]) for r in rows][::-1], color="C4")
    ax.set_xlabel("minutes")
    ax.set_title(f"CI (.ci/run) on 2 cores: {sum(float(r['minutes']) for r in rows):.0f} min in all")
    ax.tick_params(axis="y", labelsize=8)
    return fig


def make_plots(outdir):
    """Draw every figure of performance.rst as ``outdir/NAME.png`` (matplotlib, Agg backend).

    Parameters
    ----------
    outdir : str
        Created if missing.

    Returns
    -------
    list of str
        The files written.
    """
    os.makedirs(outdir, exist_ok=True)
    plt = _plt()
    for name in PLOTS:
        fig = globals()[f"plot_{name}"](plt)
        fig.tight_layout()
        fig.savefig(os.path.join(outdir, f"{name}.png"), dpi=110)
        plt.close(fig)
    return [os.path.join(outdir, f"{name}.png") for name in PLOTS]


if __name__ == "__main__":
    import sys

    print("\n".join(make_plots(sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "_plots"))))
