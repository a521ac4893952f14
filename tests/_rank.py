"""A rank of the suite's launches started from the fork server (tests/_forkserver.py).

The launcher (MPICH's Hydra) starts this in place of ``python ARGS`` as ``python -I -S _rank.py ARGS``: it hands
its environment, working directory, umask, CPU set, resource limits and standard streams (and Hydra's PMI socket,
``PMI_FD``) to the fork server of the test's pytest worker, which forks a process that has NumPy, h5py and the MPI
library loaded and runs ``ARGS`` there as ``python ARGS`` would. This process stays what the launcher sees: it
passes on every signal it is sent and exits as the rank did (its code, or killed by its signal). Killed itself
(SIGKILL), the fork server kills the rank. Where the server cannot be reached, this process becomes ``python ARGS``
(exec).

Standard library only, no site: it starts in 10 ms.
"""

import json
import os
import resource
import signal
import socket
import struct
import sys

LIMITS = ("RLIMIT_FSIZE", "RLIMIT_NOFILE", "RLIMIT_AS", "RLIMIT_DATA", "RLIMIT_CORE", "RLIMIT_STACK", "RLIMIT_CPU")
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2,
             signal.SIGALRM, signal.SIGCONT, signal.SIGTSTP)


def _fallback(args):
    os.environ.pop("HPCGPU_TEST_FORKSERVER", None)
    os.execv(sys.executable, [sys.executable, *args])


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
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        body = json.dumps(job).encode()
        socket.send_fds(s, [struct.pack("!I", len(body)) + body], fds)
        f = s.makefile("rb")
        first = f.readline().split()
    except OSError:
        first = []
    if len(first) != 2 or first[0] != b"pid":
        s.close()
        os.environ["HPCGPU_TEST_FORKSERVER"] = path
        _fallback(args)
    pid = int(first[1])
    for sig in FORWARDED:
        signal.signal(sig, lambda signum, frame: os.kill(pid, signum))
    end = f.readline().split()  # b"exit N" or b"signal S", written when the server has reaped the rank
    if len(end) == 2 and end[0] == b"signal":
        sig = int(end[1])
        signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(int(end[1]) if len(end) == 2 else 70)


if __name__ == "__main__":
    main(sys.argv[1:])
