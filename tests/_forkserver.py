"""The suite's fork server: a rank start without NumPy's, h5py's and the MPI library's loading.

A rank of the suite costs about 0.17 s of CPU here before it does anything: 0.07 s NumPy's import, 0.05 s loading
the MPI library (relocations, not ``MPI_Init``), 0.03 s h5py's and the standard library's; the suite starts some
1,700 ranks, and on this 2-core machine those starts were most of its CPU. Each pytest worker keeps one server (this
module, run as a script), which loads those once; :func:`tests._mpi.run` has the MPI's launcher (MPICH's or Intel
MPI's Hydra, Open MPI's) start ``tests/_rank.py`` in place of ``python``, which hands the rank's environment,
directory, streams and PMI socket (Hydra's ``PMI_FD``; Open MPI's ranks find their PMIx server from the environment)
here; the server forks, and the child runs the arguments as ``python ARGS`` would: a fresh ``__main__``, ``sys.argv``
and ``sys.path[0]`` as Python sets them, the rank's CPU set, umask and resource limits, default signal handlers, and
``import hpcgpu`` (and mpi4py's ``MPI_Init``) in the rank as a user's program does them. A child then costs 0.06 s.
It ends as Python's exit would, up to the interpreter's finalization (:func:`_exit`), which it leaves out: freeing
every module's objects wrote to the pages the child shares with the server, 0.05 of the 0.14 CPU seconds of a rank
that only starts hpcgpu, and 45 of the host pass's 469 rank CPU seconds (1,573 ranks).

What differs from a process of its own, and so why a launch is not sent here (:func:`usable`): a variable read at
interpreter start or by NumPy's or h5py's import (``PYTHON*``, the locale's, thread counts, ``HDF5_*``) differing
from the server's; arguments other than ``-m MODULE``, ``-c CODE`` or a script; a test that says ``fork=False``.
The rank's ``/proc/PID/cmdline`` and ``environ`` are the server's (the launcher's process, ``_rank.py``, has the
rank's), its parent is the server, and its hash seed the server's; at its end no object's ``__del__`` runs but a
file's close. The system MPI's CI pass (Open MPI 4, the
Makefile's ``MPI=system``) turns the server off: there every rank starts as a process of its own, so what passes
here passes there. Measured here (CPU seconds a launch of ``import hpcgpu; hpcgpu.init()``, processes of their own
against the server): Open MPI 5 at 1 rank 0.48 against 0.15, at 3 ranks 1.45 against 0.66; Intel MPI 0.41 against
0.12 and 1.10 against 0.47; with ``import torch`` at 3 ranks 10.5 and 14.2 against 1.7.
``HPCGPU_TEST_FORKSERVER=0`` turns the server off.
"""

import os
import sys

STARTUP = ("PYTHON", "LC_", "LANG", "OMP_", "OPENBLAS_", "GOTO_", "MKL_", "BLIS_", "NUMPY_", "HDF5_",
           "MALLOC_", "LD_", "GLIBC_", "TORCH", "PYTORCH_", "JAX_", "XLA_", "TF_", "KMP_", "GOMP_")
"""Prefixes of the variables read when the server started (the interpreter's, the locale's, NumPy's and its BLAS's,
HDF5's, the loader's, PyTorch's, JAX's and their OpenMP's): a launch whose environment differs in one of them starts
its ranks as processes of their own. ``PYTHONPATH`` is set per rank (:func:`run`)."""

LOADED = ("numpy", "h5py", "mpi4py", "ml_dtypes")
"""The packages the server imports (or loads) before it forks."""

AUTOGRAD = ("torch", "jax", "jaxlib")
"""What the second server of a worker imports as well, for the launches that use PyTorch or JAX (:func:`_autograd`):
``import torch`` is 3.8 s of CPU here and ``import jax`` 2 s, each rank. The other launches never start from it, so
that a program which does not import them runs without them, as a user's does."""


AT_START = ("sitecustomize.py", "usercustomize.py", "sitecustomize", "usercustomize")
"""What Python's start imports from sys.path: a PYTHONPATH holding one starts its ranks as processes of their own."""


def _entries(env: dict) -> list:
    return [os.path.abspath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]


def _startup(env: dict) -> dict:
    return {k: v for k, v in env.items() if k.startswith(STARTUP) and k != "PYTHONPATH"}


# -- the client side (in a pytest worker) ---------------------------------------------------------------------------

_SERVERS: dict = {}  # heavy (bool) -> _Server
_CHOSEN = None  # the server usable() chose for the launch it was asked about
RANK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_rank.py")


def enabled() -> bool:
    return os.environ.get("HPCGPU_TEST_FORKSERVER", "1") != "0"


def usable(args, env: dict, default) -> bool:
    """Whether ranks running ``python ARGS`` with ``env`` may start from the server (see the module's text).

    ``default()`` gives the environment of a launch that sets nothing of its own: the server's, asked once.
    """
    if not enabled() or not args:
        return False
    a0 = str(args[0])
    if a0 in ("-m", "-c"):
        if len(args) < 2:
            return False
    elif a0.startswith("-") or not os.path.isfile(a0):
        return False
    heavy = _autograd(args)
    server = _server(default, heavy)
    if server is None or _startup(env) != server.startup:
        return False
    # Another PYTHONPATH (the CuPy stand-in's folder, a user's modules) is the rank's sys.path, unless it would
    # have given another of the modules the server loaded, or code Python runs at its start (sitecustomize).
    added = set(_entries(env)) - server.pythonpath
    shadowed = (*LOADED, *AT_START, *(AUTOGRAD if heavy else ()))
    if any(os.path.exists(os.path.join(d, m)) for d in added for m in shadowed):
        return False
    global _CHOSEN
    _CHOSEN = server
    return True


def _autograd(args) -> bool:
    """Whether ``python ARGS`` names PyTorch or JAX: in ``-c``'s code, a script's text, or a ``.py`` or ``.json``
    file among the arguments (a model of one's own, a model description)."""
    words = ("torch", "jax", "keras")
    texts = [str(a) for a in args]
    for a in texts:
        if a.endswith((".py", ".json")) and os.path.isfile(a):
            try:
                with open(a, encoding="utf-8", errors="replace") as f:
                    texts.append(f.read())
            except OSError:
                pass
    return any(w in t for t in texts for w in words)


class _Server:
    def __init__(self, env: dict, heavy: bool):
        import subprocess
        import tempfile

        self.dir = tempfile.mkdtemp(prefix="hpcgpu-fork-")
        self.path = os.path.join(self.dir, "s")
        self.startup, self.pythonpath = _startup(env), set(_entries(env))
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), self.path, *(["autograd"] * heavy)],
                                     env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, cwd=self.dir)
        self.ready = self.proc.stdout.readline().strip() == b"ready"


def _server(default, heavy: bool):
    """This worker's server (``heavy``: the one with :data:`AUTOGRAD` loaded), started with ``default()``'s
    environment on first use; None where it did not start."""
    if heavy not in _SERVERS:
        if not _SERVERS:
            import atexit

            atexit.register(_stop)
        _SERVERS[heavy] = _Server(default(), heavy)
    server = _SERVERS[heavy]
    return server if server.ready else None


def _stop():
    import shutil

    for server in _SERVERS.values():
        server.proc.stdin.close()
        try:
            server.proc.wait(timeout=10)
        except Exception:
            server.proc.kill()
        shutil.rmtree(server.dir, ignore_errors=True)


def command(python: str, args) -> list:
    """``python ARGS`` as the launcher starts it from the server."""
    return [python, "-I", "-S", RANK, *map(str, args)]


def environment(env: dict) -> dict:
    """``env`` with the server :func:`usable` chose for the launch."""
    return {**env, "HPCGPU_TEST_FORKSERVER": _CHOSEN.path}


# -- the server ------------------------------------------------------------------------------------------------------

class _Run(BaseException):
    """Raised in a forked child to leave the server's loop: the job runs at the top of the script."""

    def __init__(self, job, fds):
        self.job, self.fds = job, fds


def _read_job(conn):
    import marshal
    import socket

    head, fds, _, _ = socket.recv_fds(conn, 4, 8)
    while 0 < len(head) < 4:
        head += conn.recv(4 - len(head))
    if len(head) < 4:
        raise OSError("short request")
    size, body = int.from_bytes(head, "big"), b""
    while len(body) < size:
        more = conn.recv(size - len(body))
        if not more:
            raise OSError("short request")
        body += more
    return marshal.loads(body), fds


def serve(path: str) -> None:
    import selectors
    import signal
    import socket

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    os.set_blocking(wake_r, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *a: None)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, "listen")
    sel.register(wake_r, selectors.EVENT_READ, "wake")
    sel.register(0, selectors.EVENT_READ, "stdin")
    children, conns = {}, {}  # pid -> conn, conn -> pid
    sys.stdout.buffer.write(b"ready\n")
    sys.stdout.flush()

    log = os.environ.get("HPCGPU_TEST_FORKSERVER_LOG")  # each rank's CPU seconds and its test, a line each
    tests = {}

    def reap():
        while True:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            test = tests.pop(pid, "")
            if log:
                with open(log, "a") as f:
                    f.write(f"{usage.ru_utime + usage.ru_stime:.3f} {test}\n")
            conn = children.pop(pid, None)
            if conn is None:
                continue
            conns.pop(conn, None)
            end = (f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status)
                   else f"exit {os.waitstatus_to_exitcode(status)}")
            try:
                sel.unregister(conn)
            except (KeyError, ValueError):
                pass
            try:
                conn.sendall(end.encode() + b"\n")
            except OSError:
                pass
            conn.close()

    while True:
        for key, _ in sel.select():
            what = key.data
            if what == "stdin":
                if not os.read(0, 4096):
                    for pid in children:
                        try:
                            os.kill(pid, signal.SIGKILL)
                        except OSError:
                            pass
                    return
            elif what == "wake":
                try:
                    while os.read(wake_r, 512):
                        pass
                except BlockingIOError:
                    pass
                reap()
            elif what == "listen":
                conn, _ = listener.accept()
                conn.settimeout(10)
                try:
                    job, fds = _read_job(conn)
                except (OSError, ValueError):
                    conn.close()
                    continue
                conn.settimeout(None)
                pid = os.fork()
                if pid == 0:
                    sel.close()
                    listener.close()
                    for c in conns:
                        c.close()
                    conn.close()
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    os.close(wake_r)
                    os.close(wake_w)
                    raise _Run(job, fds)
                for fd in fds:
                    os.close(fd)
                children[pid] = conn
                conns[conn] = pid
                tests[pid] = job["env"].get("PYTEST_CURRENT_TEST", "").split(" ")[0]
                conn.sendall(f"pid {pid}\n".encode())
                sel.register(conn, selectors.EVENT_READ, "conn")
            else:  # a rank's launcher process wrote or went away: it was killed, so is its rank
                conn = key.fileobj
                try:
                    gone = not conn.recv(64)
                except OSError:
                    gone = True
                if gone and conn in conns:
                    try:
                        os.kill(conns[conn], signal.SIGKILL)
                    except OSError:
                        pass
                    sel.unregister(conn)


def _become(job: dict, fds: list) -> None:
    """Make this forked child the process ``python ARGS`` of ``job`` would have been, up to running ARGS."""
    import fcntl
    import resource

    high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 1000) for fd in fds]  # out of the targets' way first
    for fd in fds:
        os.close(fd)
    for fd, target in zip(high, job["fds"], strict=True):
        os.dup2(fd, target)  # inheritable, as the launcher gave them
    for fd in high:
        os.close(fd)
    os.environ.clear()
    os.environ.update(job["env"])
    os.chdir(job["cwd"])
    os.umask(job["umask"])
    os.sched_setaffinity(0, job["cpus"])
    for name, (soft, hard) in job["limits"].items():
        which = getattr(resource, name)
        if resource.getrlimit(which) != (soft, hard):
            try:
                resource.setrlimit(which, (soft, hard))
            except (ValueError, OSError):
                resource.setrlimit(which, (soft, resource.getrlimit(which)[1]))
    os.setpgid(0, 0)
    if "numpy.random" in sys.modules:  # seeded at its import: each rank draws its own unseeded numbers
        sys.modules["numpy.random"].seed()


def _main_module(**attrs):
    import builtins
    import types

    m = types.ModuleType("__main__")
    m.__builtins__ = builtins
    for k, v in attrs.items():
        setattr(m, k, v)
    sys.modules["__main__"] = m
    return m


def run(job: dict, base: list) -> None:
    """Run ``python ARGS`` here, as Python's own start does for a script, ``-m`` and ``-c``; ``base`` is the
    server's ``sys.path`` without its first entry and its PYTHONPATH's."""
    args = job["args"]
    sys.orig_argv[:] = [sys.executable, *args]
    pythonpath = [p for p in job["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    if args[0] == "-m":
        import runpy

        sys.argv[:] = [args[1], *args[2:]]  # runpy puts the module's file in argv[0]
        sys.path[:] = [os.getcwd(), *pythonpath, *base]
        _main_module()
        runpy._run_module_as_main(args[1], alter_argv=True)
    elif args[0] == "-c":
        sys.argv[:] = ["-c", *args[2:]]
        sys.path[:] = ["", *pythonpath, *base]
        m = _main_module(__loader__=None, __spec__=None, __package__=None)
        exec(compile(args[1], "<string>", "exec"), m.__dict__)
    else:
        from importlib.machinery import SourceFileLoader

        script = args[0]
        sys.argv[:] = list(args)
        sys.path[:] = [os.path.dirname(os.path.realpath(script)), *pythonpath, *base]
        m = _main_module(__file__=script, __cached__=None, __loader__=SourceFileLoader("__main__", script),
                         __spec__=None, __package__=None)
        with open(script, "rb") as f:
            code = compile(f.read(), script, "exec")
        exec(code, m.__dict__)


def _close_files() -> None:
    """Close every file object the rank left open, as their deallocation in Python's finalization would (a text
    file's last writes are in its buffer until then): wrappers first, then buffers, then raw files. Only the
    objects made since the fork are walked (the server's are frozen: ``gc.freeze``), a fraction of a millisecond."""
    import gc
    import io

    std = {id(s) for s in (sys.stdin, sys.stdout, sys.stderr, sys.__stdin__, sys.__stdout__, sys.__stderr__)
           if s is not None}
    std |= {id(getattr(s, "buffer", None)) for s in (sys.stdin, sys.stdout, sys.stderr) if s is not None}
    files = [o for o in gc.get_objects() if isinstance(o, io.IOBase) and id(o) not in std]
    layers = (lambda o: not isinstance(o, (io.BufferedIOBase, io.RawIOBase)),
              lambda o: isinstance(o, io.BufferedIOBase), lambda o: isinstance(o, io.RawIOBase))
    for layer in layers:
        for f in files:
            if layer(f):
                try:
                    if not f.closed:
                        f.close()
                except Exception:
                    pass


def _exit(code) -> None:
    """End the rank as Python's own exit would, without Python's finalization.

    What Python's exit does, in its order, up to the finalization: ``SystemExit``'s code (None: 0; an int; else
    printed, 1), the non-daemon threads joined, the ``atexit`` callbacks (hpcgpu's stop policy's among them), the
    standard streams flushed (120 where a flush fails), the files the rank left open closed, ``MPI_Finalize``
    (mpi4py's ``Py_AtExit`` callback, which runs in the finalization), then the C library's ``exit``: its
    ``atexit`` handlers (HDF5 closes what is open) and C stdio's flush. The finalization left out (each module's
    objects freed, each page the server shares with the rank written) was about 0.05 of a rank's 0.14 CPU seconds
    here. An uncaught exception never comes here: it ends the rank through Python's own path.
    """
    import atexit
    import ctypes
    import threading

    if code is None:
        code = 0
    elif not isinstance(code, int):
        try:
            print(code, file=sys.stderr)
        except Exception:
            pass
        code = 1
    threading._shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except Exception:
            code = 120
    _close_files()
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        mpi.Finalize()
    ctypes.CDLL(None).exit(code & 0xFF)


if __name__ == "__main__":
    # What every rank would load: NumPy (with the environment's BLAS threads), h5py and HDF5, the MPI library (its
    # shared object, not MPI_Init: mpi4py's MPI module is imported, and MPI started, in the rank).
    import ctypes
    import importlib.util

    import h5py  # noqa: F401
    import numpy  # noqa: F401

    ctypes.CDLL(importlib.util.find_spec("mpi4py.MPI").origin)
    for name in ("argparse", "base64", "dataclasses", "glob", "hashlib", "hmac", "inspect", "json", "pathlib",
                 "platform", "secrets", "shutil", "socket", "tempfile", "threading", "typing", "ml_dtypes",
                 "numpy.random", "threadpoolctl", *(AUTOGRAD if sys.argv[2:] == ["autograd"] else ())):
        try:
            __import__(name)
        except ImportError:
            pass
    _pythonpath = set(_entries(os.environ))
    _base = [p for p in sys.path[1:] if not p or os.path.abspath(p) not in _pythonpath]
    try:
        # hpcgpu.init's BLAS limit (threadpoolctl's threadpool_limits) walks every shared object of the rank and
        # takes the realpath of each, which threadpoolctl keeps (an lru_cache): walked once here, the children
        # find the server's objects' paths known. 0.03-0.04 s of CPU a rank that starts hpcgpu, of its 0.12.
        import threadpoolctl

        threadpoolctl.ThreadpoolController()
    except Exception:
        pass
    import gc

    gc.freeze()
    try:
        serve(sys.argv[1])
        sys.exit(0)
    except _Run as r:
        _job, _fds = r.job, r.fds
        del r
    _become(_job, _fds)
    try:
        run(_job, _base)
    except SystemExit as e:
        _exit(e.code)
    _exit(0)
