"""``[mpiexec -n P] python -m hpcgpu COMMAND``: hpcgpu's command lines.

``info`` prints one line per rank: rank/size, host, node-local rank, device,
array module, MPI library and version, BLAS and its threads, and whether MPI
is CUDA-aware and why: the first thing to run when a job is off. With
``--hidden`` it also times the trainer's GEMMs for that model and batch and
prints which run on the rank's BLAS threads and which on one. ``matmul`` multiplies two
HDF5 matrices with SUMMA (``python -m hpcgpu matmul --help``); ``solve``, ``lstsq`` and ``cholesky`` solve
and factor them (``python -m hpcgpu solve --help``). The trainer
is ``python -m hpcgpu.train``.
"""

from __future__ import annotations

if __name__ == "__main__":  # the program: stop signals are recorded from here on, before MPI_Init (hpcgpu._early)
    from . import _early

    _early.catch("hpcgpu")

import argparse

import numpy as np

from .linalg import _matmul_cli, _solve_cli
from ._cli import ArgumentParser, add_collectives, hidden_widths, run


def parser() -> ArgumentParser:
    """The parser of ``python -m hpcgpu`` and its subcommands."""
    p = ArgumentParser(prog="python -m hpcgpu", description=__doc__.split("\n\n")[0],
                       epilog="Training and predicting: python -m hpcgpu.train --help (predict: python -m "
                              "hpcgpu.train predict --help); the task farm: python -m hpcgpu.tasks --help; data "
                              "sets: python -m hpcgpu.datasets --help.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    info = sub.add_parser("info", help="print what each rank sees", description="One line per rank: what it sees.")
    info.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto",
                      help="gpu: CuPy, one GPU per rank; cpu: NumPy; auto: gpu when every rank has one")
    add_collectives(info)
    g = info.add_argument_group("the trainer's GEMM threads (CPU): which GEMMs of its step run on the rank's "
                                "BLAS threads, timed here as python -m hpcgpu.train does at start")
    g.add_argument("--hidden", type=hidden_widths, default=None, help="hidden widths of the MLP, e.g. 256,256")
    g.add_argument("--batch-size", type=int, default=64, help="GLOBAL batch, split among the ranks")
    g.add_argument("--features", type=int, default=784, help="input features D")
    g.add_argument("--classes", type=int, default=10, help="classes C")
    g.add_argument("--dtype", choices=("float32", "float64"), default="float32", help="the model's float type")
    info.set_defaults(main=_info)
    _matmul_cli.add_parser(sub)
    _solve_cli.add_parsers(sub)
    return p


def _info(args: argparse.Namespace) -> int:
    from . import _early
    from .errors import agreed

    _early.release()  # a few seconds of looking: a stop signal simply ends it
    from .runtime import init

    if args.hidden is not None and min(args.batch_size, args.features, args.classes) < 1:
        raise agreed(ValueError("--batch-size, --features and --classes must be >= 1"))  # same args everywhere
    rt = init(args.device, collectives=args.collectives)
    lines = rt.comm.gather(rt.describe(), root=0)
    if rt.rank == 0:
        print("\n".join(lines), flush=True)
    if args.hidden is None:
        return 0
    from .nn import MLP
    from .train.gemm_threads import MARGIN, plan_gemm_threads

    sizes = [args.features, *args.hidden, args.classes]
    local = args.batch_size // rt.size + (rt.rank < args.batch_size % rt.size)
    from ._memory import node_memory_error
    from .errors import agree

    n_params = sum((a + 1) * b for a, b in zip(sizes[:-1], sizes[1:], strict=False))  # weights, gradients, activations
    need = (2 * n_params + 2 * local * sum(sizes)) * np.dtype(args.dtype).itemsize
    agree(node_memory_error(need, rt.comm, f"info --hidden: the MLP {'-'.join(map(str, sizes))}"), comm=rt.comm)
    model = MLP(sizes, rt.xp, args.dtype)
    plan = plan_gemm_threads(model, max(1, local), rt.comm)
    if rt.rank == 0:
        head = f"GEMM threads of the trainer's step, MLP {'-'.join(map(str, sizes))}, global batch {args.batch_size}"
        if plan is None:
            why = "on a GPU" if rt.xp is not np else "one BLAS thread per rank"
            print(f"{head}: {why}, nothing to choose", flush=True)
        else:
            print(f"{head} (local {local} on rank 0): {plan.summary()}, kept where at least "
                  f"{1 / MARGIN:.2f}x faster\n{plan.describe()}", flush=True)
    return 0


def main(argv=None) -> int:
    """Parse ``argv`` and run the subcommand. Collective over ``MPI.COMM_WORLD``.

    Returns
    -------
    int
        The exit status.
    """
    args = parser().parse_args(argv)
    return args.main(args)


if __name__ == "__main__":
    run(main, prog="hpcgpu")
