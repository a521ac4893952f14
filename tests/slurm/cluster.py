"""A real Slurm (Debian's slurmctld, slurmd, munge) for the tests, private to the test session.

Everything lives under one scratch folder; the daemons are stopped by the
PIDs in their pid files (checked to be this cluster's), never by name. The
configuration rests on what Debian 12's Slurm 22.05 was seen to do as root
without systemd: munged first, then ``slurmctld -i`` until ``scontrol ping``
answers, then slurmd until the node is idle; ``TaskPlugin=task/cgroup,task/affinity``
(a cpuset cgroup per step where cgroup v1's cpuset is writable, task/affinity alone
otherwise) binds each task to the CPUs its step gives it, as sites do (``CPUs=``
is the real cores: with more, every task was bound to all of them); the pip
``mpich`` wheel starts under ``srun --mpi=pmi2`` (hence ``MpiDefault=pmi2``);
``jobcomp/filetxt`` stands in for an accounting
database; ``MinJobAge=5`` (with the default 300, ``sbatch --wait`` polls every
32 s) and ``AuthInfo=cred_expire=10`` (a requeued job reruns about 12 s later,
not 120) keep the tests quick.

Two test sessions on one machine (two clones, or a session beside CI's) each get
a Slurm of their own: configuration, state, spool and logs under their own
scratch folder, their own cluster name, and their own TCP ports, picked free when
the cluster starts (slurmctld and slurmd listen on every address, so fixed ports
would let the second session's clients reach the first session's daemons: jobs
run by another slurmd, whose spool ``scontrol listpids`` does not read).
:meth:`SlurmCluster.start` checks that the controller that answers is its own,
and starts again on other ports if another took them first. A session killed
before its teardown (a timeout's SIGTERM) leaves nothing running: a reaper
started with the daemons cancels the jobs and stops the daemons once the
session's process is gone. Only munged is shared: one per machine, one key,
started once under a lock (as is the package install).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import random
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time

PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge", "libpmix2", "libpmix-dev")
"""libpmix2 and libpmix-dev: Slurm's ``--mpi=pmix`` plugin (Open MPI's way in) opens PMIx at run time by its
unversioned name, ``<pmix>/lib/libpmix.so``, which only the -dev package ships; Debian pulls in neither."""

LOCK = "/run/lock/hpcgpu-slurm.lock" if os.path.isdir("/run/lock") else "/tmp/hpcgpu-slurm.lock"
"""Serializes what test sessions share on a machine: apt-get and munged's start."""

PORT_TRIES = 5
"""Starts on new ports after another Slurm took the chosen ones in between (a race, so rare)."""


@contextlib.contextmanager
def machine_lock():
    """Hold the machine-wide lock (a file lock: released even when the holder is killed)."""
    with open(LOCK, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def install_packages() -> None:
    """apt-get the daemons if they are missing (root only; one session at a time)."""
    def present():
        return all(shutil.which(p) for p in ("slurmctld", "slurmd", "sbatch", "munged")) and _has_libpmix()

    if present():
        return
    with machine_lock():
        if present():  # another session installed them while this one waited
            return
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update", "-q"], check=True, env=env, capture_output=True, timeout=300)
        subprocess.run(["apt-get", "install", "-y", "-q", *PACKAGES], check=True, env=env, capture_output=True,
                       timeout=600)


def _has_libpmix() -> bool:
    """Whether the file Slurm's pmix plugin opens exists: ``libpmix.so`` beside the library ``libpmix.so.N``
    resolves to (Debian: ``/usr/lib/<arch>/pmix2/lib``). Without it every ``srun --mpi=pmix`` fails with
    "can not load PMIx library"."""
    import ctypes.util

    name = ctypes.util.find_library("pmix")
    if name is None:
        return False
    for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib"):
        if os.path.exists(os.path.join(d, name)):
            return os.path.exists(os.path.join(os.path.dirname(os.path.realpath(os.path.join(d, name))),
                                               "libpmix.so"))
    return False


CPUSET_V1 = "/sys/fs/cgroup/cpuset"


def _cpuset_v1() -> bool:
    """Whether cgroup v1's cpuset controller is mounted here and writable (task/cgroup can make a step's set)."""
    return os.path.exists(os.path.join(CPUSET_V1, "cgroup.procs")) and os.access(CPUSET_V1, os.W_OK)


def _mem_mb() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(int(line.split()[1]) / 1024 * 0.9)
    return 1024


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("0.0.0.0", port))  # as slurmctld and slurmd bind
        except OSError:
            return False
    return True


def free_port_pair(rng: random.Random) -> int:
    """A port P with P and P + 1 free here, outside the kernel's ephemeral ports (which clients take)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = map(int, f.read().split()[:2])
    except (OSError, ValueError):
        lo, hi = 32768, 60999
    span = (10000, lo - 1) if lo - 10000 >= 2000 else (hi + 1, 65535) if 65535 - hi >= 2000 else (10000, 65535)
    for _ in range(1000):
        p = rng.randrange(span[0], span[1] - 1)
        if _port_free(p) and _port_free(p + 1):
            return p
    raise RuntimeError("no two free consecutive TCP ports for Slurm")


def _daemon_pid(scratch: str, name: str) -> int | None:
    """The pid in ``run/NAME.pid`` under ``scratch`` if that process runs and is this cluster's (its command line
    names this scratch folder's slurm.conf): a stale pid file's pid may be another process's by now."""
    try:
        with open(os.path.join(scratch, "run", f"{name}.pid")) as f:
            pid = int(f.read().strip())
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read()
    except (OSError, ValueError):
        return None
    return pid if os.path.join(scratch, "slurm.conf").encode() in cmd else None


def stop_daemons(scratch: str, names: list[str]) -> None:
    """SIGTERM the daemons ``names`` (``slurmd-NODE``, ``slurmctld``) of the cluster under ``scratch``; wait
    up to 5 s each for them to go."""
    for name in names:
        pid = _daemon_pid(scratch, name)
        if pid is None:
            continue
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        for _ in range(50):
            if _daemon_pid(scratch, name) is None:
                break
            time.sleep(0.1)


class PortTaken(RuntimeError):
    """Another Slurm took this cluster's ports between their choice and the daemons' start."""


class SlurmCluster:
    """Start munged, slurmctld and slurmd for a cluster of this session's own; stop them.

    By default one node, this machine, at 127.0.0.1. With ``nodes`` (from
    tests/cluster's namespaces): one slurmd in each node's namespaces, at its
    own address and hostname, and slurmctld here at ``ctl_addr`` (an address
    on the nodes' bridge). slurmctld listens on :attr:`port`, slurmd on the
    next; both are picked free at :meth:`start` unless ``port`` is given.
    """

    def __init__(self, scratch: str, cpus: int | None = None, gpus: int = 4, nodes: list | None = None,
                 ctl_addr: str = "127.0.0.1", port: int | None = None):
        self.scratch = os.path.abspath(scratch)
        here = socket.gethostname().split(".")[0]
        self.node = here
        # (name, address, command prefix that runs a command on the node)
        self.nodes = nodes or [(here, "127.0.0.1", [])]
        self.ctl_addr, self.port, self._fixed_port = ctl_addr, port, port
        # The real cores: task/affinity binds each task to CPUs of the machine, and a node configured with more
        # CPUs than it has was seen to bind every task to all of them (binding as no site does)
        self.cpus, self.gpus = cpus or os.cpu_count() or 1, gpus
        # Bound as most sites bind: a cpuset cgroup per step (task/cgroup) where the machine has cgroup v1's cpuset
        # to give (Slurm 22.05's cgroup/v2 wants systemd), and each task's affinity within it (task/affinity)
        self.task_plugin = "task/cgroup,task/affinity" if _cpuset_v1() else "task/affinity"
        self._rng = random.Random()  # seeded from the OS: two sessions do not draw the same ports
        self.name = f"t{self._rng.getrandbits(32):08x}"  # ClusterName: whose controller answers
        # Job ids of its own too: MPICH names a job's shared memory after the PMI job id ("JOBID.STEP"), so two
        # Slurms' job 1 on one machine would join each other's ranks (MPI_Init fails, or hangs).
        self.first_job_id = 1000 * self._rng.randrange(1, 60000)
        self.conf = os.path.join(self.scratch, "slurm.conf")
        self.env = dict(os.environ, SLURM_CONF=self.conf)
        self._reaper = None
        self._starting = False

    def _write_config(self) -> None:
        s = self.scratch
        for d in ("state", "run", "log", *(f"spool/slurmd-{n}" for n, _, _ in self.nodes)):
            os.makedirs(os.path.join(s, d), exist_ok=True)
        with open(self.conf, "w") as f:
            f.write(f"""ClusterName={self.name}
SlurmctldHost={self.node}({self.ctl_addr})
FirstJobId={self.first_job_id}
SlurmctldPort={self.port}
SlurmdPort={self.port + 1}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=cred_expire=10
MpiDefault=pmi2
ProctrackType=proctrack/linuxproc
TaskPlugin={self.task_plugin}
JobAcctGatherType=jobacct_gather/linux
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={s}/log/jobcomp.txt
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
SlurmdTimeout=5
MinJobAge=5
KillWait=5
SchedulerParameters=sched_interval=2
GresTypes=gpu
StateSaveLocation={s}/state
SlurmdSpoolDir={s}/spool/slurmd-%n
SlurmctldPidFile={s}/run/slurmctld.pid
SlurmdPidFile={s}/run/slurmd-%n.pid
SlurmctldLogFile={s}/log/slurmctld.log
SlurmdLogFile={s}/log/slurmd-%n.log
MailProg=/bin/true
""" + "".join(f"NodeName={n} NodeAddr={a} CPUs={self.cpus} RealMemory={_mem_mb() // len(self.nodes)} "
              f"Gres=gpu:{self.gpus} State=UNKNOWN\n" for n, a, _ in self.nodes)
                + "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n")
        if "task/cgroup" in self.task_plugin:
            with open(os.path.join(s, "cgroup.conf"), "w") as f:
                f.write(f"CgroupPlugin=cgroup/v1\nCgroupMountpoint={CPUSET_V1.rsplit('/', 1)[0]}\nConstrainCores=yes\n")
        # Fake GPUs so that `sbatch --test-only` can judge the GPU scripts: slurmd
        # wants a character device per GPU, and /dev/null's numbers do.
        dev = os.path.join(s, "dev")
        os.makedirs(dev, exist_ok=True)
        for i in range(self.gpus):
            p = os.path.join(dev, f"gpu{i}")
            if not os.path.exists(p):
                os.mknod(p, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        with open(os.path.join(s, "gres.conf"), "w") as f:
            for n, _, _ in self.nodes:
                f.write(f"NodeName={n} Name=gpu File={dev}/gpu[0-{self.gpus - 1}]\n")

    def _start_munge(self) -> None:
        with machine_lock():  # two sessions starting at once: one munged, one key
            if subprocess.run(["munge", "-n"], capture_output=True).returncode == 0:
                return  # a munged is already running (another session's, or a previous one's)
            pw = pwd.getpwnam("munge")
            for d in ("/run/munge", "/var/lib/munge", "/var/log/munge", "/etc/munge"):
                os.makedirs(d, exist_ok=True)
                os.chown(d, pw.pw_uid, pw.pw_gid)
            key = "/etc/munge/munge.key"
            if not os.path.exists(key):
                with open(key, "wb") as f:
                    f.write(os.urandom(1024))
            os.chown(key, pw.pw_uid, pw.pw_gid)
            os.chmod(key, 0o400)
            subprocess.run(["runuser", "-u", "munge", "--", "munged"], check=True, capture_output=True, timeout=30)
            self._wait(lambda: subprocess.run(["munge", "-n"], capture_output=True).returncode == 0, "munged", 30)

    def _wait(self, ok, what: str, timeout: float) -> None:
        end = time.time() + timeout
        while time.time() < end:
            if ok():
                return
            time.sleep(0.2)
        raise RuntimeError(f"{what} did not come up in {timeout} s (cluster {self.name}, port {self.port}); "
                           f"logs in {self.scratch}/log:\n{self._log_tails()}")

    def _log_tails(self, lines: int = 5) -> str:
        out = []
        for f in sorted(os.listdir(os.path.join(self.scratch, "log"))):
            if f.endswith(".log"):
                with open(os.path.join(self.scratch, "log", f), errors="replace") as fh:
                    out += [f"{f}: {ln.rstrip()}" for ln in fh.readlines()[-lines:]]
        return "\n".join(out)

    def _out(self, *cmd) -> str:
        return subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=30).stdout.strip()

    def _check_logs(self) -> None:
        """While starting, raise :class:`PortTaken` if a daemon could not listen (another took its port)."""
        if not self._starting:
            return
        for f in os.listdir(os.path.join(self.scratch, "log")):
            if f.endswith(".log"):
                with open(os.path.join(self.scratch, "log", f), errors="replace") as fh:
                    bad = [ln.strip() for ln in fh if "Address already in use" in ln]
                if bad:
                    raise PortTaken(f"{f}: {bad[-1]}")

    def _controller_up(self) -> bool:
        """Whether slurmctld answers, and it is this cluster's (another Slurm on the port would answer too)."""
        self._check_logs()
        if "UP" not in self._out("scontrol", "ping"):
            return False
        for line in self._out("scontrol", "show", "config").splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "ClusterName" and value.strip() != self.name:
                raise PortTaken(f"another Slurm's controller (cluster {value.strip()}) answers on port {self.port}")
        return True

    def start(self) -> None:
        """Start munged (if none runs), slurmctld and the slurmds; return when every node is idle."""
        self._start_munge()
        self._start_reaper()
        for attempt in range(PORT_TRIES):
            self.port = self._fixed_port or free_port_pair(self._rng)
            log = os.path.join(self.scratch, "log")
            if os.path.isdir(log) and os.listdir(log):  # an earlier attempt's: kept beside, not mixed in
                os.rename(log, f"{log}.{attempt}")
            self._write_config()
            self._starting = True
            try:
                subprocess.run(["slurmctld", "-i", "-f", self.conf], env=self.env, check=True, timeout=30)
                self._wait(self._controller_up, "slurmctld", 60)
                for n, _, prefix in self.nodes:
                    subprocess.run([*prefix, "slurmd", "-N", n, "-f", self.conf], env=self.env, check=True,
                                   timeout=30)
                self._wait_idle([n for n, _, _ in self.nodes])
                return
            except PortTaken as e:
                self._stop_daemons()
                if self._fixed_port or attempt == PORT_TRIES - 1:
                    raise RuntimeError(f"Slurm could not listen on port {self.port}: {e}") from e
            finally:
                self._starting = False

    def _start_reaper(self) -> None:
        """A process that waits for this session's end (its stdin closes however the session ends) and then
        cancels this cluster's jobs and stops its daemons; after a normal :meth:`stop` it finds nothing to do."""
        if self._reaper is None:
            self._reaper = subprocess.Popen([sys.executable, os.path.abspath(__file__), "reap", self.scratch],
                                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL, start_new_session=True)

    def _wait_idle(self, names: list) -> None:
        """Wait until every node of ``names`` is idle, returning a down or drained one to service."""

        def idle():
            self._check_logs()
            states = self._out("sinfo", "-h", "-N", "-n", ",".join(names), "-o", "%N %T").splitlines()
            for line in states:
                name, _, state = line.partition(" ")
                if "drain" in state or "down" in state:
                    self._out("scontrol", "update", f"NodeName={name}", "State=RESUME")
            return len(states) == len(names) and all(ln.split()[1].startswith("idle") for ln in states)

        self._wait(idle, "the node" if len(names) == 1 else "the nodes", 90)

    def restart_slurmd(self, name: str, prefix: list) -> None:
        """Start ``name``'s slurmd again (through ``prefix``, the node's command prefix now) after the node
        was lost, and return the node to service."""
        self.nodes = [(n, a, prefix if n == name else p) for n, a, p in self.nodes]
        subprocess.run([*prefix, "slurmd", "-N", name, "-f", self.conf], env=self.env, check=True, timeout=30)
        self._wait_idle([name])

    def _stop_daemons(self) -> None:
        stop_daemons(self.scratch, [f"slurmd-{n}" for n, _, _ in self.nodes] + ["slurmctld"])

    def stop(self) -> None:
        """Cancel the jobs left (a test that timed out leaves its job running), stop the daemons (munged stays:
        other sessions may use it) and the reaper."""
        if _daemon_pid(self.scratch, "slurmctld") is not None:
            cancel_all(self.env)
        self._stop_daemons()
        if self._reaper is not None:
            self._reaper.stdin.close()  # the reaper finds the daemons gone and exits
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._reaper.wait(timeout=30)
            self._reaper = None

    def sbatch(self, script: str, *args, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
        """Submit ``script`` (``sbatch --parsable [args] script``) and return when the job has ended; rc is the
        job's exit code, stdout says ``Submitted batch job N``.

        Polled every 0.2 s with ``scontrol show job`` rather than ``sbatch --wait``, which looks after 2 s and
        again after 4 (a job of one second took 4 s); ``MinJobAge=5`` keeps an ended job visible for 5 s."""
        e = dict(self.env)
        e.update(env or {})
        sub = subprocess.run(["sbatch", "--parsable", *args, script], env=e, capture_output=True, text=True,
                             timeout=60)
        if sub.returncode != 0:
            return sub
        job = sub.stdout.strip().split(";")[0]
        deadline = time.time() + timeout
        while True:
            out = subprocess.run(["scontrol", "-o", "show", "job", job], env=self.env, capture_output=True,
                                 text=True, timeout=30).stdout
            fields = dict(f.split("=", 1) for f in out.split() if "=" in f)
            if fields.get("JobState") in ENDED:
                code, sig = (int(x) for x in fields.get("ExitCode", "0:0").split(":"))
                return subprocess.CompletedProcess(sub.args, code or (128 + sig if sig else 0),
                                                   f"Submitted batch job {job}\n", sub.stderr)
            if time.time() > deadline:  # the job must not run on into the next tests
                subprocess.run(["scancel", job], env=self.env, capture_output=True, timeout=30)
                raise subprocess.TimeoutExpired(sub.args, timeout, output=f"Submitted batch job {job}\n")
            time.sleep(0.2)


ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL",
         "DEADLINE"}
"""Slurm's job states from which a job does not run again."""


def cancel_all(env: dict, wait: float = 30) -> None:
    """Cancel every job of the cluster ``env``'s ``SLURM_CONF`` names; wait up to ``wait`` s for them to go."""
    with contextlib.suppress(Exception):
        subprocess.run(["scancel", "--user", "root"], env=env, capture_output=True, timeout=30)
        end = time.time() + wait
        while time.time() < end and subprocess.run(["squeue", "-h"], env=env, capture_output=True, text=True,
                                                   timeout=30).stdout.strip():
            time.sleep(0.5)


def _reap(scratch: str) -> None:
    """The reaper (``python cluster.py reap SCRATCH``): once stdin closes, cancel the cluster's jobs if its
    controller still runs, then stop its daemons."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C in the session's terminal is the session's
    while sys.stdin.buffer.read(65536):
        pass
    run = os.path.join(scratch, "run")
    names = sorted(f[:-4] for f in os.listdir(run) if f.endswith(".pid")) if os.path.isdir(run) else []
    if _daemon_pid(scratch, "slurmctld") is not None:
        cancel_all(dict(os.environ, SLURM_CONF=os.path.join(scratch, "slurm.conf")))
    stop_daemons(scratch, [n for n in names if n != "slurmctld"] + ["slurmctld"])


if __name__ == "__main__":
    if sys.argv[1:2] == ["reap"] and len(sys.argv) == 3:
        _reap(os.path.abspath(sys.argv[2]))
    else:
        sys.exit("usage: cluster.py reap SCRATCH")
