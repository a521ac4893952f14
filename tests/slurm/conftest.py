import os
import shutil
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cluster import SlurmCluster, install_packages  # noqa: E402


def _running(cluster):
    """Start ``cluster``, yield it to the session, stop it (also when its start fails)."""
    try:
        cluster.start()
    except Exception:
        cluster.stop()
        raise
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def slurm(tmp_path_factory):
    """A running one-node Slurm of this session's own (its ports, state and spool; tests/slurm/cluster.py).
    Skipped without root (or without apt and Slurm); CI must have it."""
    why = None
    if os.geteuid() != 0:
        why = "needs root to start slurmctld, slurmd and munged"
    elif not shutil.which("apt-get") and not shutil.which("slurmctld"):
        why = "needs apt-get (or Slurm installed)"
    if why is None:
        try:
            install_packages()
        except Exception as e:  # noqa: BLE001
            why = f"cannot install Slurm: {e}"
    if why is not None:
        if os.environ.get("CI"):
            pytest.fail(f"Slurm tests must run in CI: {why}")
        pytest.skip(why)
    cluster = SlurmCluster(str(tmp_path_factory.mktemp("slurm")))
    yield from _running(cluster)


@pytest.fixture(scope="session")
def slurm_wide(slurm, tmp_path_factory):
    """A one-node Slurm whose node claims 32 CPUs and 4 GPUs, for ``sbatch --test-only`` of the GPU scripts
    as they are. Never runs a job: task binding on CPUs the machine lacks binds every task to all of them."""
    cluster = SlurmCluster(str(tmp_path_factory.mktemp("slurm-wide")), cpus=32)
    yield from _running(cluster)


@pytest.fixture(scope="session")
def slurm2(cluster, tmp_path_factory):
    """A two-node Slurm on tests/cluster's nodes: a slurmd in each node's namespaces, slurmctld on this
    machine's bridge address (on ports of its own, like the one-node cluster's)."""
    c = SlurmCluster(str(tmp_path_factory.mktemp("slurm2")), gpus=2,
                     nodes=[(h, cluster.addr[h], cluster.prefix(h)) for h in cluster.nodes[:2]],
                     ctl_addr=cluster.gateway)
    yield from _running(c)
