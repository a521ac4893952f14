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
import codecs
import os
import sys
import traceback
from typing import Callable, Sequence

from mpi4py import MPI

from .errors import AgreedError, abort, write_line
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


PRINTABLE = "hpcgpu.printable"
"""The encoding error handler of hpcgpu's output streams (:func:`_print_anything`)."""


def _printable(err: UnicodeError):
    """The encoding error handler of :data:`PRINTABLE`.

    A path's undecodable bytes as they were (``surrogateescape``), any other character the stream's encoding
    cannot write as a backslash escape (``backslashreplace``).
    """
    if isinstance(err, UnicodeEncodeError):
        bad = err.object[err.start:err.end]
        if all("\udc80" <= c <= "\udcff" for c in bad):
            return bytes(ord(c) - 0xDC00 for c in bad), err.end
    return codecs.backslashreplace_errors(err)


def _print_anything() -> None:
    """Make stdout and stderr write any text: a line that names a path never ends a run.

    A file name that is not valid UTF-8 reaches Python as lone surrogates
    (PEP 383), which a strict stream refuses even under UTF-8; a stream
    whose encoding cannot write a name's characters at all
    (``PYTHONIOENCODING=ascii``, a C locale's ASCII) refuses a valid one.
    The "wrote ..." line after a finished run then raised
    ``UnicodeEncodeError`` and the job ended with status 1 after its work
    was done. :data:`PRINTABLE` writes undecodable bytes back as they were
    (what ``ls`` shows) and the rest as backslash escapes. Streams whose
    errors a user chose other than strict are left as they are.
    """
    try:
        codecs.lookup_error(PRINTABLE)
    except LookupError:
        codecs.register_error(PRINTABLE, _printable)
    for stream in (sys.stdout, sys.stderr):
        if getattr(stream, "errors", None) in ("strict", "surrogateescape") and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors=PRINTABLE)


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

    The stop policy holds from ``main``'s first instant
    (``hpcgpu._stop.guard_request``): a stop signal (SIGINT, SIGTERM,
    SIGUSR1, SIGHUP) while ``main`` loads its data is recorded, and the
    first ``Trainer`` or ``hpcgpu.tasks.map`` it runs stops at its first
    safe point. A second SIGINT at any instant, also after a stop while
    the process ends and MPI finalizes (``hpcgpu._stop.finish``), ends
    the job with one line and status 130. A ``KeyboardInterrupt`` that
    ``main`` raises itself on a rank is one line from that rank, not a
    traceback, and the job is aborted with status 130.
    """
    _print_anything()
    if prog is None:  # the script's name; python -m pkg's package
        path = sys.argv[0] if sys.argv else ""
        script = os.path.basename(path)
        if script == "__main__.py":
            script = os.path.basename(os.path.dirname(os.path.abspath(path)))
        prog = script if script and script != "-c" else "hpcgpu"
    from . import _early
    from ._stop import EXIT_STOPPED, finish_at_exit, guard_request, stop_count, stopped

    finish_at_exit(prog)
    before = stop_count()
    guard = guard_request(prog)
    try:
        try:
            rc = main(argv) if _takes_an_argument(main) or argv is not None else main()
        finally:
            guard.uninstall()
    except SystemExit:
        raise
    except BaseException as exc:  # noqa: BLE001 - the whole point
        if isinstance(exc, AgreedError):
            if world_rank() == 0 and not exc.silent:  # one line, however a library worded it
                write_line(f"{prog}: error: {one_line(exc)}")
            sys.exit(2)
        if isinstance(exc, KeyboardInterrupt) and _early.sigints():  # after a Ctrl-C: the second, every rank's
            _early.end_now(prog)
        if isinstance(exc, KeyboardInterrupt):  # main's own, on this rank alone: the others may wait in MPI
            abort(f"{prog}: KeyboardInterrupt on rank {world_rank()}: ending the job now, without saving "
                  f"(exit {_early.EXIT_INTERRUPTED})", _early.EXIT_INTERRUPTED)
        tb = "".join(traceback.format_exception(exc))
        abort(f"[rank {world_rank()}] error: {type(exc).__name__}: {exc}\n{tb}")
    sys.exit(rc or (EXIT_STOPPED if stopped(before) else 0))
