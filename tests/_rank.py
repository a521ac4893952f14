"""A rank of the suite's launches started from the fork server (tests/_forkserver.py).

The launcher (MPICH's or Intel MPI's Hydra, Open MPI's) starts this in place of ``python ARGS`` as
``python -I -S _rank.py ARGS``: it hands its environment, working directory, umask, CPU set, resource limits and
standard streams (and Hydra's PMI socket, ``PMI_FD``; Open MPI's ranks find their PMIx server from the environment)
to the fork server of the test's pytest worker, which forks a process that has NumPy, h5py and the MPI library
loaded and runs ``ARGS`` there as ``python ARGS`` would. This process stays what the launcher sees: it passes on
every signal it is sent and exits as the rank did (its code, or killed by its signal). Killed itself (SIGKILL), the
fork server kills the rank. Where the server cannot be reached, this process becomes ``python ARGS`` (exec).

Built-in modules only (``marshal``, ``_socket``; no ``json``, ``socket`` or site): it starts in 6 ms.
"""

import _socket
import array
import marshal
import os
import resource
import signal
import sys

LIMITS = ("RLIMIT_FSIZE", "RLIMIT_NOFILE", "RLIMIT_AS", "RLIMIT_DATA", "RLIMIT_CORE", "RLIMIT_STACK", "RLIMIT_CPU")
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2,
             signal.SIGALRM, signal.SIGCONT, signal.SIGTSTP)


class _Lines:
    """The server's answers, a line each."""

    def __init__(self, s):
        self.s, self.buf = s, b""

    def next(self) -> bytes:
        while b"\n" not in self.buf:
            more = self.s.recv(256)
            if not more:
                return b""
            self.buf += more
        line, self.buf = self.buf.split(b"\n", 1)
        return line


def main(args):
    path = os.environ.pop("HPCGPU_TEST_FORKSERVER", "")
    fds = [0, 1, 2]
    if os.environ.get("PMI_FD", "").isdigit():
        fds.append(int(os.environ["PMI_FD"]))
    mask = os.umask(0)
    os.umask(mask)
    job = {"args": args, "env": dict(os.environ), "cwd": os.getcwd(), "umask": mask, "fds": fds,
           "cpus": sorted(os.sched_getaffinity(0)),
           "limits": {n: resource.getrlimit(getattr(resource, n)) for n in LIMITS}}
    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    lines = _Lines(s)
    try:
        s.connect(path)
        body = marshal.dumps(job)
        s.sendmsg([len(body).to_bytes(4, "big")], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, array.array("i", fds))])
        s.sendall(body)
        first = lines.next().split()
    except OSError:
        first = []
    if len(first) != 2 or first[0] != b"pid":
        s.close()
        os.execv(sys.executable, [sys.executable, *args])  # python ARGS itself (the variable is already gone)
    pid = int(first[1])

    def forward(signum, frame):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:  # the rank has ended (its end is on the way): as python ARGS, already gone
            pass

    for sig in FORWARDED:
        signal.signal(sig, forward)
    try:
        end = lines.next().split()  # b"exit N" or b"signal S", written when the server has reaped the rank
    except OSError:
        end = []
    for sig in FORWARDED:  # the rank has ended: a signal now (a launcher ending the others) must not change how
        signal.signal(sig, signal.SIG_IGN)  # this process ends, nor reach a pid that may be another's by now
    if len(end) == 2 and end[0] == b"signal":
        sig = int(end[1])
        signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(int(end[1]) if len(end) == 2 else 70)


if __name__ == "__main__":
    main(sys.argv[1:])
