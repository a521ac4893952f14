"""``[mpiexec -n P] python -m hpcgpu COMMAND``: hpcgpu's command lines.

``info`` prints one line per rank: rank/size, host, node-local rank, device,
array module, MPI library and version, and whether MPI is CUDA-aware and
why: the first thing to run when a job is off. ``matmul`` multiplies two
HDF5 matrices with SUMMA (``python -m hpcgpu matmul --help``). The trainer
is ``python -m hpcgpu.train``.
"""

from __future__ import annotations

import argparse

from . import _matmul_cli
from ._cli import ArgumentParser, run


def parser() -> ArgumentParser:
    """The parser of ``python -m hpcgpu`` and its subcommands."""
    p = ArgumentParser(prog="python -m hpcgpu", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    info = sub.add_parser("info", help="print what each rank sees", description="One line per rank: what it sees.")
    info.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto")
    info.set_defaults(main=_info)
    _matmul_cli.add_parser(sub)
    return p


def _info(args: argparse.Namespace) -> int:
    from .runtime import init

    rt = init(args.device)
    lines = rt.comm.gather(rt.describe(), root=0)
    if rt.rank == 0:
        print("\n".join(lines), flush=True)
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
