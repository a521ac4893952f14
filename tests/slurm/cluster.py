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
    """Start munged, slurmctld and slurmd for a one-node cluster; stop them."""

    def __init__(self, scratch: str, cpus: int = 32, gpus: int = 4):
        self.scratch = os.path.abspath(scratch)
        self.node = socket.gethostname().split(".")[0]
        self.cpus, self.gpus = cpus, gpus
        self.conf = os.path.join(self.scratch, "slurm.conf")
        self.env = dict(os.environ, SLURM_CONF=self.conf)
        self._munge_pid = None

    def _write_config(self) -> None:
        s = self.scratch
        for d in ("state", "spool/slurmd", "run", "log"):
            os.makedirs(os.path.join(s, d), exist_ok=True)
        with open(self.conf, "w") as f:
            f.write(f"""ClusterName=ci
SlurmctldHost={self.node}(127.0.0.1)
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
MinJobAge=5
KillWait=5
GresTypes=gpu
StateSaveLocation={s}/state
SlurmdSpoolDir={s}/spool/slurmd
SlurmctldPidFile={s}/run/slurmctld.pid
SlurmdPidFile={s}/run/slurmd.pid
SlurmctldLogFile={s}/log/slurmctld.log
SlurmdLogFile={s}/log/slurmd.log
MailProg=/bin/true
NodeName={self.node} NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory={_mem_mb()} Gres=gpu:{self.gpus} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")
        # Fake GPUs so that `sbatch --test-only` can judge the GPU scripts: slurmd
        # wants a character device per GPU, and /dev/null's numbers do.
        dev = os.path.join(s, "dev")
        os.makedirs(dev, exist_ok=True)
        for i in range(self.gpus):
            p = os.path.join(dev, f"gpu{i}")
            if not os.path.exists(p):
                os.mknod(p, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        with open(os.path.join(s, "gres.conf"), "w") as f:
            f.write(f"NodeName={self.node} Name=gpu File={dev}/gpu[0-{self.gpus - 1}]\n")

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
        subprocess.run(["slurmd", "-N", self.node, "-f", self.conf], env=self.env, check=True, timeout=30)

        def idle():
            state = self._out("sinfo", "-h", "-N", "-o", "%T")
            if "drain" in state or "down" in state:
                self._out("scontrol", "update", f"NodeName={self.node}", "State=RESUME")
            return state.startswith("idle")

        self._wait(idle, "the node", 60)

    def stop(self) -> None:
        for name in ("slurmd", "slurmctld"):
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
