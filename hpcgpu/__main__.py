"""``[mpiexec -n P] python -m hpcgpu info [--device D]``: one line per rank.

Rank/size, host, node-local rank, device, array module, MPI library and
version, and whether MPI is CUDA-aware and why: the first thing to run when
a job is off.
"""

from __future__ import annotations

from ._cli import ArgumentParser, run


def main(argv=None) -> int:
    p = ArgumentParser(prog="python -m hpcgpu", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    info = sub.add_parser("info", help="print what each rank sees")
    info.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto")
    args = p.parse_args(argv)
    from .runtime import init

    rt = init(args.device)
    lines = rt.comm.gather(rt.describe(), root=0)
    if rt.rank == 0:
        print("\n".join(lines), flush=True)
    return 0


if __name__ == "__main__":
    run(main, prog="hpcgpu")
