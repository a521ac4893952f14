"""The guard every hpcgpu command line runs under.

An error every rank agreed on (an :class:`hpcgpu.errors.AgreedError`, made
by :func:`hpcgpu.errors.agreed` or :func:`hpcgpu.errors.agree`) is bad input:
rank 0 prints one line and all ranks exit with status 2. Anything else is
unexpected on one rank while the others may wait in a collective: that rank
prints ``[rank r] error: ...`` with its traceback and aborts the whole job,
so nobody burns an allocation on a hang (mpi4py's ``run.py`` does the same).
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from typing import Callable, Sequence

from mpi4py import MPI

from .errors import AgreedError, abort
from .io import one_line


def add_collectives(p, default: str = "auto") -> None:
    """The ``--collectives`` option of every program that runs collectives on device buffers."""
    p.add_argument("--collectives", choices=("auto", "nccl", "mpi"), default=default,
                   help="how device buffers travel between ranks: nccl (each rank on a GPU of its own, no host "
                        "round trip), mpi (CUDA-aware, or staged through pinned host memory); auto: nccl where it "
                        "can serve")


def hidden_widths(text: str) -> tuple:
    """``--hidden``'s type: ``"256,256"`` -> ``(256, 256)``; ``""`` or ``"none"`` -> ``()``."""
    text = text.strip()
    if text in ("", "none"):
        return ()
    try:
        sizes = tuple(int(t) for t in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected widths like 256,256, got {text!r}") from None
    if any(s < 1 for s in sizes):
        raise argparse.ArgumentTypeError(f"widths must be >= 1, got {text!r}")
    return sizes


def world_rank() -> int:
    """This process's rank in ``MPI.COMM_WORLD``."""
    return MPI.COMM_WORLD.Get_rank()


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` with each option's default, said once: not where the help already says it, nor "None"."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "default" in text or action.default in (None, False, argparse.SUPPRESS) or not action.option_strings:
            return text
        value = action.default
        if isinstance(value, (tuple, list)):  # --hidden's (256, 256) is written 256,256
            value = ",".join(map(str, value)) or "none"
        return f"{text} (default: {str(value).replace('%', '%%')})"


class ArgumentParser(argparse.ArgumentParser):
    """argparse, printing help and usage errors from rank 0 only.

    Every rank parses the same arguments, so every rank exits 2 together.
    Help names each default once (:class:`HelpFormatter`); a description
    taken from a docstring loses its reStructuredText quotes.
    """

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        if kwargs.get("description"):
            kwargs["description"] = kwargs["description"].replace("``", "")
        super().__init__(*args, **kwargs)

    def _print_message(self, message, file=None):
        if world_rank() == 0:
            super()._print_message(message, file)

    def error(self, message):
        """One line, not the whole usage: a job log of P ranks stays readable."""
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _takes_an_argument(fn) -> bool:
    """Whether ``fn`` can be called with one positional argument (True when its signature cannot be read)."""
    import inspect

    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in params)


def _print_paths_as_bytes() -> None:
    """Make stdout and stderr write a path's undecodable bytes back as they were.

    A file name that is not valid UTF-8 reaches Python as lone surrogates
    (PEP 383). Under a UTF-8 locale Python's stdout encodes strictly, and with
    ``PYTHONIOENCODING=utf-8`` (set by some images, the GPU node's among them)
    so does the C locale's: the "wrote ..." line after a finished run then
    raised ``UnicodeEncodeError`` and aborted the job. ``surrogateescape``
    writes the name's original bytes, which is what ``ls`` shows.
    """
    for stream in (sys.stdout, sys.stderr):
        if getattr(stream, "errors", None) == "strict" and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="surrogateescape")


def run(main: Callable[[Sequence[str] | None], int | None], argv=None, prog: str | None = None) -> None:
    """Call ``main(argv)`` under the error contract's guard and exit with its status.

    Collective in effect: every rank calls it. An :class:`hpcgpu.AgreedError`
    (bad input every rank agreed on) makes rank 0 print ``PROG: error:
    MESSAGE`` on one line and every rank exit with status 2; any other
    exception on a rank prints ``[rank r] error: ...`` with its traceback and
    aborts the whole job (``MPI_Abort``), so no rank hangs in a collective.
    A science code's program runs under it as the command lines do:
    ``hpcgpu.run_guarded(main, prog="my_sim")``.

    Parameters
    ----------
    main : callable
        ``main(argv) -> int or None``, or ``main() -> int or None`` (a
        function that takes no argument is called without one): the exit
        status (None is 0).
    argv : list of str, optional
        Passed to ``main`` (which must then take it).
    prog : str, optional
        Names the program in the error line; by default the script's file
        name (``sys.argv[0]``'s), or ``hpcgpu`` where there is none.

    Notes
    -----
    A ``main`` that returns normally (None or 0) after a :class:`hpcgpu.Trainer`
    it ran stopped at a stop signal or file (its ``stopped_by``, its
    checkpoint written), and no later ``fit`` of that trainer ran to its end,
    exits with status 3, as the command lines do, so a job script that
    requeues on 3 does so for a library program too; a status ``main``
    returns itself is kept.
    """
    _print_paths_as_bytes()
    if prog is None:  # the script's name; python -m pkg's package
        path = sys.argv[0] if sys.argv else ""
        script = os.path.basename(path)
        if script == "__main__.py":
            script = os.path.basename(os.path.dirname(os.path.abspath(path)))
        prog = script if script and script != "-c" else "hpcgpu"
    from ._stop import EXIT_STOPPED, stop_count, stopped

    before = stop_count()
    try:
        rc = main(argv) if _takes_an_argument(main) or argv is not None else main()
    except SystemExit:
        raise
    except BaseException as exc:  # noqa: BLE001 - the whole point
        if isinstance(exc, AgreedError):
            if world_rank() == 0 and not exc.silent:  # one line, however a library worded it
                print(f"{prog}: error: {one_line(exc)}", file=sys.stderr, flush=True)
            sys.exit(2)
        tb = "".join(traceback.format_exception(exc))
        abort(f"[rank {world_rank()}] error: {type(exc).__name__}: {exc}\n{tb}")
    sys.exit(rc or (EXIT_STOPPED if stopped(before) else 0))
