"""``mpiexec -n P python -m hpcgpu.train [options]``: data-parallel training of an MLP.

Exit status: 0 done, 2 bad input (one line on stderr), 3 stopped by SIGINT
(Ctrl-C), SIGUSR1, SIGTERM or --stop-file after writing a checkpoint (rerun
with --resume), 130 a second Ctrl-C ended the job at once, 1 anything else
(the job is aborted).

Reads an HDF5 data set (``/train/X`` N x D, ``/train/y`` N labels or targets,
optional ``/test``), trains with a global batch split among the ranks, and
writes metrics and model to HDF5. Without ``--data`` it trains on
scikit-learn's handwritten digits.

``python -m hpcgpu.train predict --model RESULTS.h5 --data FILE[:DATASET] -o FILE[:DATASET]``
applies a trained model to the rows of a dataset, each rank its block, and
writes the predictions (logits for classification) beside them.
"""

from __future__ import annotations

if __name__ == "__main__":  # the program: stop signals are recorded from here on, before MPI_Init (hpcgpu._early)
    from .. import _early

    _early.catch("hpcgpu.train")


import sys
from argparse import BooleanOptionalAction

from .._cli import ArgumentParser, add_collectives, hidden_widths, run
from .precision import PRECISIONS
from .._stop import EXIT_STOPPED, StopRequest, remove_first
from .trainer import TrainConfig, Trainer


def parser() -> ArgumentParser:
    """The parser of ``python -m hpcgpu.train``; defaults are :class:`TrainConfig`'s."""
    d = TrainConfig()
    p = ArgumentParser(prog="python -m hpcgpu.train", description=__doc__.split("\n\n")[0],
                       epilog="Predictions from a results file: python -m hpcgpu.train predict --help. The other "
                              "programs: python -m hpcgpu --help (info, matmul), python -m hpcgpu.tasks --help, "
                              "python -m hpcgpu.datasets --help.")
    for add in (_data_options, _model_options, _optimizer_options, _parallel_options, _run_options,
                _checkpoint_options):
        add(p, d)
    return p


def _data_options(p: ArgumentParser, d: TrainConfig) -> None:
    g = p.add_argument_group("data and results")
    g.add_argument("--data", default=None,
                   help="HDF5 input (/train/X, /train/y, optional /test/X, /test/y); "
                        "default: the bundled digits set, cached under $HPCGPU_DATA_DIR or ~/.cache/hpcgpu")
    g.add_argument("--out", default=d.out,
                   help="HDF5 output: /metrics, /model, /timing, /comm and provenance attributes")
    g.add_argument("--overwrite", action="store_true",
                   help="replace output files (--out, --checkpoint, --trace) that hpcgpu did not write; without it "
                        "such a file is refused before any work")
    g.add_argument("--data-placement", choices=("auto", "sharded", "replicated"), default=d.data_placement,
                   help="sharded: 1/P of the training set a rank, rows exchanged every epoch (Alltoallv); "
                        "replicated: all of it on every rank; auto: replicated when it is small (<= 2 GiB, "
                        "<= 1/8 of the node's memory over its ranks)")


def _model_options(p: ArgumentParser, d: TrainConfig) -> None:
    g = p.add_argument_group("model")
    g.add_argument("--hidden", type=hidden_widths, default=d.hidden,
                   help="hidden layer widths, comma-separated ('none' for softmax regression)")
    g.add_argument("--task", choices=("classification", "regression"), default=None,
                   help="default: from /train/y, integer labels or float targets")
    g.add_argument("--loss", choices=("cross-entropy", "mse", "huber"), default=None,
                   help="default: cross-entropy for classification, mse for regression")
    g.add_argument("--dtype", choices=("float32", "float64"), default=d.dtype,
                   help="floating-point type (an alias of --precision 32-true / 64-true)")
    g.add_argument("--precision", choices=PRECISIONS, default=None,
                   help="64-true, 32-true (default: from --dtype), bf16-mixed or 16-mixed: float32 weights and "
                        "reduction, 16-bit GEMMs; 16-mixed with dynamic loss scaling")
    g.add_argument("--seed", type=int, default=d.seed, help="seed of initial weights and sample order")


def _optimizer_options(p: ArgumentParser, d: TrainConfig) -> None:
    g = p.add_argument_group("optimization")
    g.add_argument("--epochs", type=int, default=d.epochs, help="passes over the training set")
    g.add_argument("--batch-size", type=int, default=d.batch_size,
                   help="GLOBAL batch size in samples, split among the ranks (uneven splits are exact)")
    g.add_argument("--grad-accum-steps", type=int, default=d.grad_accum_steps, metavar="K",
                   help="gradient accumulation: each step is K micro-batches of BATCH_SIZE/K samples, reduced once")
    g.add_argument("--drop-last", action=BooleanOptionalAction, default=d.drop_last,
                   help="leave the last N mod BATCH_SIZE samples of each epoch's order out of it (--no-drop-last: "
                        "train them as a last, smaller step)")
    g.add_argument("--optimizer", choices=("sgd", "adam", "adamw"), default=d.optimizer,
                   help="sgd (with --momentum), adam or adamw (betas 0.9, 0.999)")
    g.add_argument("--lr", type=float, default=d.lr, help="peak learning rate (mean-loss gradient)")
    g.add_argument("--momentum", type=float, default=d.momentum, help="SGD momentum")
    g.add_argument("--weight-decay", type=float, default=d.weight_decay,
                   help="weight decay: L2 for sgd and adam, decoupled for adamw")
    g.add_argument("--schedule", choices=("cosine", "step", "constant"), default=d.schedule,
                   help="learning-rate decay after warm-up")
    g.add_argument("--warmup-epochs", type=float, default=d.warmup_epochs, help="linear warm-up, in epochs")
    g.add_argument("--lr-step-epochs", type=int, default=d.lr_step_epochs,
                   help="epochs between decays (--schedule step)")
    g.add_argument("--lr-gamma", type=float, default=d.lr_gamma, help="decay factor (--schedule step)")
    g.add_argument("--clip-grad-norm", type=float, default=None, metavar="MAX",
                   help="scale the averaged gradient to a global L2 norm of at most MAX (history: grad_norm)")
    g.add_argument("--clip-grad-value", type=float, default=None, metavar="MAX",
                   help="clamp each element of the averaged gradient to [-MAX, MAX]")


def _parallel_options(p: ArgumentParser, d: TrainConfig) -> None:
    g = p.add_argument_group("devices and parallelism")
    g.add_argument("--device", choices=("auto", "cpu", "gpu"), default=d.device,
                   help="gpu: CuPy, one GPU per rank; cpu: NumPy; auto: gpu when every rank has one")
    add_collectives(g, d.collectives)
    g.add_argument("--tensor-parallel", type=int, default=d.tensor_parallel, metavar="T",
                   help="split the layers over T ranks (Megatron-LM's column/row pattern): P/T data-parallel "
                        "replicas of T consecutive ranks")
    g.add_argument("--zero-stage", type=int, default=d.zero_stage, metavar="{0,1}",
                   help="1: shard the optimizer's momentum over the data-parallel ranks (ZeRO stage 1)")
    g.add_argument("--bucket-mb", type=float, default=d.bucket_mb, metavar="MB",
                   help="gradient bucket size (MB): several buckets are reduced by Iallreduce while the backward "
                        "pass goes on (PyTorch DDP's default 25); one bucket is one Allreduce after it")
    g.add_argument("--gemm-threads", choices=("auto", "all"), default=d.gemm_threads,
                   help="CPU, several BLAS threads per rank: auto times each GEMM of the step at 1 thread and at "
                        "the rank's threads and keeps the threads where they pay (a resume reuses the choice); "
                        "all: every GEMM on the rank's threads")
    g.add_argument("--cuda-graphs", choices=("auto", "off"), default=d.cuda_graphs,
                   help="GPU: auto replays each step's forward and backward passes from a CUDA graph (one launch) "
                        "where they can be captured; off launches every kernel from Python")


def _run_options(p: ArgumentParser, d: TrainConfig) -> None:
    g = p.add_argument_group("output and watchdog")
    g.add_argument("--progress", choices=("auto", "bar", "lines", "none"), default=d.progress,
                   help="rank 0's output: bar on a terminal, one line per epoch otherwise")
    g.add_argument("--trace", default=None, metavar="FILE.json",
                   help="write a Chrome trace (chrome://tracing, Perfetto) of every step's phases, a track per rank")
    g.add_argument("--stall-timeout", type=float, default=None, metavar="SECONDS",
                   help="abort the job, naming the ranks that have not arrived, when a collective waits this "
                        "long (default: $HPCGPU_STALL_TIMEOUT, else 600; 0: off)")


def _checkpoint_options(p: ArgumentParser, d: TrainConfig) -> None:
    g = p.add_argument_group("checkpoints (Ctrl-C, SIGUSR1 or SIGTERM: checkpoint after the current step, exit 3; "
                             "a second Ctrl-C ends the job at once)")
    g.add_argument("--checkpoint", default=d.checkpoint,
                   help="checkpoint file; default OUT with .ckpt.h5 when --checkpoint-every or --resume is given")
    g.add_argument("--checkpoint-every", type=int, default=d.checkpoint_every, metavar="STEPS",
                   help="write a checkpoint every STEPS global steps (0: only on a stop signal and at the end)")
    g.add_argument("--keep-checkpoints", type=int, default=d.keep_checkpoints, metavar="K",
                   help="keep the K newest checkpoint files (PATH, PATH.1, ...)")
    g.add_argument("--resume", action="store_true",
                   help="continue from the newest readable checkpoint; start from scratch if there is none")
    g.add_argument("--stop-file", default=None, metavar="PATH",
                   help="when PATH appears, checkpoint after the current step and exit 3 "
                        "(rank 0 looks once a second; job scripts touch it on Slurm's warning signal)")




def main(argv=None) -> int:
    """Train with the options in ``argv``. Collective over ``MPI.COMM_WORLD``.

    Returns
    -------
    int
        0 when done, :data:`EXIT_STOPPED` (3) after a stop request.
    """
    # First of all: a warning signal that comes while the data loads must not
    # kill the job, and one that comes after the last step is simply late.
    argv = sys.argv[1:] if argv is None else list(argv)
    stop = StopRequest(prog="hpcgpu.train").install()
    try:  # predict is one pass over the rows: a first stop signal lets it finish, a second Ctrl-C ends it
        return predict(argv[1:]) if argv[:1] == ["predict"] else _train(argv, stop)
    finally:
        stop.uninstall()


def _train(argv, stop) -> int:
    """:func:`main`'s training, under its stop request."""
    args = parser().parse_args(argv)
    args.precision, args.task, args.loss = args.precision or "", args.task or "", args.loss or ""
    trainer = Trainer(TrainConfig(**vars(args)))
    stop.stop_file, stop.check_file = args.stop_file, trainer.rt.rank == 0
    stop.reports_stop = True  # the line below, in the command line's words, not the library's
    trainer.stop_request = stop
    trainer.fit()
    trainer.write_trace()
    talk = trainer.rt.rank == 0 and trainer.config.progress != "none"
    if trainer.stopped_by:
        if trainer.rt.rank == 0:
            f = trainer.checkpoint_file
            first = remove_first(stop)  # a stop file still there would stop the rerun at once
            saved = ("nothing was saved" if not f else f"checkpoint {f}; {first}rerun with --resume to continue"
                     if f == trainer.config.checkpoint_path or f == trainer.config.default_checkpoint
                     else f"checkpoint {f}; {first}rerun with --checkpoint {f} --resume to continue")
            print(f"hpcgpu.train: stopped ({trainer.stopped_by}) after step {trainer.step} "
                  f"(epoch {trainer.epoch + 1}); {saved}", flush=True)
        trainer.close()
        return EXIT_STOPPED
    path = trainer.save_results()
    trainer.close()
    if talk:
        h = trainer.history
        p = trainer.metrics.held_out  # test: the data file's /test split (None: the file has none)
        final = (f"{p}_accuracy {h[p + '_accuracy'][-1]:.4f}" if trainer.model.task == "classification"
                 else f"{p}_rmse {h[p + '_rmse'][-1]:.4g} {p}_r2 {h[p + '_r2'][-1]:.4f}") \
            if h["epoch"] and p is not None else ""
        print(f"final {final}; wrote {path}" if final else f"wrote {path}", flush=True)
    return 0


def predict_parser() -> ArgumentParser:
    """The parser of ``python -m hpcgpu.train predict``."""
    p = ArgumentParser(prog="python -m hpcgpu.train predict",
                       description="Apply a trained model (a results file of python -m hpcgpu.train) to the rows of "
                                   "an HDF5 dataset; each rank predicts and writes its block of rows.")
    p.add_argument("--model", required=True, metavar="RESULTS.h5", help="the results file of a training run")
    p.add_argument("--data", required=True, metavar="FILE[:DATASET]",
                   help="the features, N x D (dataset default: /test/X)")
    p.add_argument("-o", "--out", required=True, metavar="FILE[:DATASET]",
                   help="where the predictions go, N x k (dataset default: y_hat; other objects of FILE are kept)")
    p.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto",
                   help="gpu: CuPy, one GPU per rank; cpu: NumPy; auto: gpu when every rank has one")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing dataset of -o that hpcgpu did not write")
    return p


def predict(argv) -> int:
    """``python -m hpcgpu.train predict``: a results file's model applied to a dataset's rows. Collective.

    Parameters
    ----------
    argv : list of str

    Returns
    -------
    int
        0.

    Raises
    ------
    hpcgpu.AgreedError
        A missing or unreadable model or data file, a model of one's own,
        features of another width than the model's, an unwritable output.
    """
    from .._outputs import Input, Output, claim
    from ..io import split_spec
    from ..runtime import init
    from .saved import load_model

    a = predict_parser().parse_args(argv)
    rt = init(a.device)
    data_path, data_name = split_spec(a.data, "/test/X")
    out_path, out_name = split_spec(a.out, "y_hat")
    claim([Output(out_path, "-o", dataset=out_name)],
          [Input(a.model, "--model"), Input(data_path, "--data", data_name)], comm=rt.comm,
          overwrite=a.overwrite, prog="hpcgpu.train predict")
    trainer = load_model(a.model, runtime=rt, overwrite=a.overwrite, what="--model")
    trainer.predict(a.data, out=a.out, what="-o")
    if rt.rank == 0:
        print(f"hpcgpu.train predict: {a.model} on {a.data} -> {a.out}", flush=True)
    trainer.close()
    return 0


def cli() -> None:
    """The console script ``hpcgpu-train``: :func:`main` under the guard that ``python -m`` runs it under."""
    run(main, prog="hpcgpu.train")


if __name__ == "__main__":
    cli()
