"""A real one-node Slurm (Debian's slurmctld, slurmd, munge) for the tests.

Everything lives under one scratch folder; the daemons are stopped by the
PIDs in their pid files, never by name. See ../shared/notes/slurm-on-one-machine.md
for the facts this configuration rests on.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import stat
import subprocess
import time

PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge", "libpmix2")
"""libpmix2: Slurm's ``--mpi=pmix`` plugin loads it at run time (Open MPI's way in); Debian does not pull it in."""


def install_packages() -> None:
    """apt-get the daemons if they are missing (root only)."""
    if all(shutil.which(p) for p in ("slurmctld", "slurmd", "sbatch", "munged")) and _has_libpmix():
        return
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update", "-q"], check=True, env=env, capture_output=True, timeout=300)
    subprocess.run(["apt-get", "install", "-y", "-q", *PACKAGES], check=True, env=env, capture_output=True,
                   timeout=600)


def _has_libpmix() -> bool:
    import ctypes.util

    return ctypes.util.find_library("pmix") is not None


def _mem_mb() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(int(line.split()[1]) / 1024 * 0.9)
    return 1024


class SlurmCluster:
    """Start munged, slurmctld and slurmd for a cluster; stop them.

    By default one node, this machine, at 127.0.0.1. With ``nodes`` (from
    tests/cluster's namespaces): one slurmd in each node's namespaces, at its
    own address and hostname, and slurmctld here at ``ctl_addr`` (an address
    on the nodes' bridge), on ``port`` and ``port + 1``.
    """

    def __init__(self, scratch: str, cpus: int = 32, gpus: int = 4, nodes: list | None = None,
                 ctl_addr: str = "127.0.0.1", port: int = 6817):
        self.scratch = os.path.abspath(scratch)
        here = socket.gethostname().split(".")[0]
        self.node = here
        # (name, address, command prefix that runs a command on the node)
        self.nodes = nodes or [(here, "127.0.0.1", [])]
        self.ctl_addr, self.port = ctl_addr, port
        self.cpus, self.gpus = cpus, gpus
        self.conf = os.path.join(self.scratch, "slurm.conf")
        self.env = dict(os.environ, SLURM_CONF=self.conf)
        self._munge_pid = None

    def _write_config(self) -> None:
        s = self.scratch
        for d in ("state", "run", "log", *(f"spool/slurmd-{n}" for n, _, _ in self.nodes)):
            os.makedirs(os.path.join(s, d), exist_ok=True)
        with open(self.conf, "w") as f:
            f.write(f"""ClusterName=ci
SlurmctldHost={self.node}({self.ctl_addr})
SlurmctldPort={self.port}
SlurmdPort={self.port + 1}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=cred_expire=10
MpiDefault=pmi2
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
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
        if subprocess.run(["munge", "-n"], capture_output=True).returncode == 0:
            return  # a munged is already running (a previous session's, say)
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
        self._wait(lambda: subprocess.run(["munge", "-n"], capture_output=True).returncode == 0, "munged", 20)

    def _wait(self, ok, what: str, timeout: float) -> None:
        end = time.time() + timeout
        while time.time() < end:
            if ok():
                return
            time.sleep(0.3)
        raise RuntimeError(f"{what} did not come up in {timeout} s; logs in {self.scratch}/log")

    def _out(self, *cmd) -> str:
        return subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=30).stdout.strip()

    def start(self) -> None:
        self._write_config()
        self._start_munge()
        subprocess.run(["slurmctld", "-i", "-f", self.conf], env=self.env, check=True, timeout=30)
        self._wait(lambda: "UP" in self._out("scontrol", "ping"), "slurmctld", 30)
        for n, _, prefix in self.nodes:
            subprocess.run([*prefix, "slurmd", "-N", n, "-f", self.conf], env=self.env, check=True, timeout=30)
        self._wait_idle([n for n, _, _ in self.nodes])

    def _wait_idle(self, names: list) -> None:
        """Wait until every node of ``names`` is idle, returning a down or drained one to service."""

        def idle():
            states = self._out("sinfo", "-h", "-N", "-n", ",".join(names), "-o", "%N %T").splitlines()
            for line in states:
                name, _, state = line.partition(" ")
                if "drain" in state or "down" in state:
                    self._out("scontrol", "update", f"NodeName={name}", "State=RESUME")
            return len(states) == len(names) and all(ln.split()[1].startswith("idle") for ln in states)

        self._wait(idle, "the node" if len(names) == 1 else "the nodes", 60)

    def restart_slurmd(self, name: str, prefix: list) -> None:
        """Start ``name``'s slurmd again (through ``prefix``, the node's command prefix now) after the node
        was lost, and return the node to service."""
        self.nodes = [(n, a, prefix if n == name else p) for n, a, p in self.nodes]
        subprocess.run([*prefix, "slurmd", "-N", name, "-f", self.conf], env=self.env, check=True, timeout=30)
        self._wait_idle([name])

    def stop(self) -> None:
        for name in [f"slurmd-{n}" for n, _, _ in self.nodes] + ["slurmctld"]:
            pidfile = os.path.join(self.scratch, "run", f"{name}.pid")
            try:
                with open(pidfile) as f:
                    pid = int(f.read().strip())
            except (OSError, ValueError):
                continue
            try:
                os.kill(pid, 15)
            except ProcessLookupError:
                continue
            for _ in range(50):
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.1)

    def sbatch(self, script: str, *args, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
        """``sbatch --wait [args] script``: returns when the job has ended; rc is the job's."""
        e = dict(self.env)
        e.update(env or {})
        return subprocess.run(["sbatch", "--wait", *args, script], env=e, capture_output=True, text=True,
                               timeout=timeout)
