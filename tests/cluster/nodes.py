"""A cluster of N "nodes" on this machine: each a network, UTS and mount namespace of its own.

Each node has its own hostname (``node1`` ...), its own loopback and one
interface ``eth0`` with a private address (``10.77.X.1K/24``) on a bridge
made for the purpose, and its own ``/etc/hosts`` naming the nodes. MPI between
two nodes must therefore use the network (TCP over the bridge), never shared
memory, and ``Split_type(COMM_TYPE_SHARED)`` sees one node per namespace set.

    python tests/cluster/nodes.py up [N]       # print the directory; ``down DIR`` removes it
    tests/cluster/nsrun NODE CMD...              # run CMD on NODE (Hydra's -launcher-exec)

Root is needed. Everything made is listed under the cluster's directory in
``/run`` and removed by :meth:`NsCluster.down`, which also kills what still
runs in the namespaces. Two clusters (two test sessions) do not collide: each
takes a number no other bridge here has (the bridge's creation is the claim),
and its bridge, veth names and subnet carry it. Used as a context manager, a
cluster is also removed when its session is killed before ``down`` (a reaper
process waits for the session's end).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
NSRUN = os.path.join(HERE, "nsrun")


def _sh(*cmd, check=True, **kw):
    return subprocess.run(list(cmd), check=check, capture_output=True, text=True, timeout=60, **kw)


def available() -> str | None:
    """``None`` when namespaces can be made here, else why not."""
    if os.geteuid() != 0:
        return "needs root (network, UTS and mount namespaces, a bridge)"
    for tool in ("ip", "unshare", "nsenter", "mount"):
        if not shutil.which(tool):
            return f"needs {tool}"
    return None


class NsCluster:
    """N nodes on a private bridge; a context manager (``down`` on exit, even after a failure).

    Parameters
    ----------
    n : int
        Number of nodes (2 or 3).
    """

    def __init__(self, n: int = 2):
        self.n = n
        self.dir = f"/run/hpcgpu-cluster-{os.getpid()}"
        self.nodes = [f"node{i + 1}" for i in range(n)]
        self._number(os.getpid() % 200 + 20)
        self._claimed = False  # whether the bridge hpcgbr{id} is this cluster's (down removes only then)
        self._holders: list = []
        self._reaper = None
        self._started = time.time()

    def _number(self, k: int) -> None:
        """Take number ``k``: the bridge's, veths' and subnet's names."""
        self.id = k
        self.bridge = f"hpcgbr{k}"
        self.addr = {h: f"10.77.{k}.{11 + i}" for i, h in enumerate(self.nodes)}
        self.gateway = f"10.77.{k}.1"  # this machine's address on the bridge (slurmctld listens there)

    def _claim_bridge(self) -> None:
        """Make the bridge under the first free number from :attr:`id` on (220 numbers, 20-239): another
        session's cluster, or one a killed session left, keeps its own."""
        start = self.id
        for k in [*range(start, 240), *range(20, start)]:
            self._number(k)
            p = _sh("ip", "link", "add", self.bridge, "type", "bridge", check=False)
            if p.returncode == 0:
                self._claimed = True
                with open(os.path.join(self.dir, "id"), "w") as f:  # for `down DIR`
                    f.write(f"{k}\n")
                return
            if "exists" not in p.stderr:
                raise RuntimeError(f"ip link add {self.bridge} type bridge: {p.stderr.strip()}")
        raise RuntimeError("no free bridge number in 20-239 (hpcgbrN): clusters left by killed sessions? "
                           "`python tests/cluster/nodes.py down /run/hpcgpu-cluster-PID` removes one")

    # ---- making it ---------------------------------------------------------------------------------
    def up(self) -> NsCluster:
        os.makedirs(self.dir, exist_ok=True)
        self._claim_bridge()
        with open(os.path.join(self.dir, "nodes"), "w") as f:  # before any node: what `down DIR` removes
            f.write("\n".join(self.nodes) + "\n")
        with open(os.path.join(self.dir, "hosts"), "w") as f:
            f.write("127.0.0.1 localhost\n" + "".join(f"{a} {h}\n" for h, a in self.addr.items()))
        _sh("ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge)  # this host, as the nodes see it
        _sh("ip", "link", "set", self.bridge, "up")
        for i, h in enumerate(self.nodes):
            self._make_node(i, h)
        return self

    def _make_node(self, i: int, h: str) -> None:
        # The node's "init": it holds the namespaces for the cluster's lifetime; everything on the
        # node is entered through it (nsenter --target PID), which works from inside another node too.
        holder = subprocess.Popen(
            ["unshare", "--uts", "--net", "--mount", "--propagation", "private", "sh", "-c",
             f"hostname {h} && mount --bind {self.dir}/hosts /etc/hosts && exec sleep infinity"],
            start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._holders.append(holder)
        with open(os.path.join(self.dir, f"{h}.pid"), "w") as f:
            f.write(f"{holder.pid}\n")
        deadline = time.time() + 60  # reached only on failure
        while self.run(h, "hostname", check=False).stdout.strip() != h:
            if time.time() > deadline or holder.poll() is not None:
                raise RuntimeError(f"node {h} did not come up")
            time.sleep(0.02)
        outer, inner = f"hpcg{self.id}h{i + 1}", f"hpcg{self.id}n{i + 1}"
        _sh("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
        _sh("ip", "link", "set", outer, "master", self.bridge)
        _sh("ip", "link", "set", outer, "up")
        _sh("ip", "link", "set", inner, "netns", str(holder.pid))
        self.run(h, "ip", "link", "set", inner, "name", "eth0")
        self.run(h, "ip", "addr", "add", f"{self.addr[h]}/24", "dev", "eth0")
        self.run(h, "ip", "link", "set", "eth0", "up")
        self.run(h, "ip", "link", "set", "lo", "up")

    def revive(self, host: str) -> None:
        """Make ``host`` again after :meth:`kill_node` (its namespaces went with its last process)."""
        i = self.nodes.index(host)
        _sh("ip", "link", "del", f"hpcg{self.id}h{i + 1}", check=False)
        self._make_node(i, host)

    def holder(self, host: str) -> int:
        """The pid of the process that holds ``host``'s namespaces."""
        with open(os.path.join(self.dir, f"{host}.pid")) as f:
            return int(f.read())

    # ---- using it ----------------------------------------------------------------------------------
    def prefix(self, host: str) -> list[str]:
        """The command prefix that runs a command on ``host``."""
        return ["nsenter", "--target", str(self.holder(host)), "--net", "--uts", "--mount", "--"]

    def run(self, host: str, *cmd, check=True, **kw) -> subprocess.CompletedProcess:
        return _sh(*self.prefix(host), *cmd, check=check, **kw)

    def env(self) -> dict:
        """What ``tests/cluster/nsrun`` needs to find the nodes."""
        return {"HPCGPU_CLUSTER_DIR": self.dir}

    def tx_bytes(self, host: str) -> int:
        """Bytes sent on ``host``'s eth0 so far."""
        return int(self.run(host, "cat", "/sys/class/net/eth0/statistics/tx_bytes").stdout)

    def pids(self, host: str) -> list[int]:
        """Processes running in ``host``'s network namespace (its holder included)."""
        target = os.stat(f"/proc/{self.holder(host)}/ns/net").st_ino
        if target == os.stat("/proc/self/ns/net").st_ino:  # the holder is gone and its pid is another's now
            raise ProcessLookupError(f"{host}'s holder no longer runs")
        out = []
        for d in os.listdir("/proc"):
            if d.isdigit():
                with contextlib.suppress(OSError):
                    if os.stat(f"/proc/{d}/ns/net").st_ino == target:
                        out.append(int(d))
        return out

    def kill_node(self, host: str) -> int:
        """SIGKILL every process on ``host`` at once (a node lost); how many."""
        pids = self.pids(host)
        for p in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
        return len(pids)

    # ---- removing it -------------------------------------------------------------------------------
    def _remove_orphan_segments(self) -> None:
        """Remove the shared-memory files that ranks killed here left in /dev/shm (MPICH's ``mpich_shm_*``,
        Open MPI's ``sm_segment.*``): made since the cluster came up and open in no process."""
        if not shutil.which("fuser"):
            return
        try:
            names = [os.path.join("/dev/shm", f) for f in os.listdir("/dev/shm")]
        except OSError:
            return
        for path in names:
            with contextlib.suppress(OSError):
                if os.stat(path).st_mtime >= self._started and \
                        subprocess.run(["fuser", "-s", path], timeout=30).returncode != 0:
                    os.remove(path)

    def down(self) -> None:
        for h in self.nodes:
            with contextlib.suppress(Exception):
                self.kill_node(h)  # the holder too: the namespaces go with their last process
        self._remove_orphan_segments()
        if self._claimed:  # else hpcgbr{id} may be another cluster's
            for i in range(self.n):
                _sh("ip", "link", "del", f"hpcg{self.id}h{i + 1}", check=False)
            _sh("ip", "link", "del", self.bridge, check=False)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        # A reaper: once this process has ended, however it ended (its end closes the reaper's stdin), it
        # removes the cluster if it is still there; after __exit__ it finds nothing to do.
        self._reaper = subprocess.Popen([sys.executable, os.path.abspath(__file__), "reap", self.dir],
                                        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        start_new_session=True)
        try:
            return self.up()
        except BaseException:
            self.__exit__()
            raise

    def __exit__(self, *exc):
        try:
            self.down()
        finally:
            if self._reaper is not None:
                self._reaper.stdin.close()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._reaper.wait(timeout=60)
                self._reaper = None
        return False

    @classmethod
    def at(cls, path: str) -> NsCluster:
        """The cluster whose directory is ``path`` (made by another process), to remove it."""
        c = cls()
        c.dir = path
        try:
            with open(os.path.join(path, "nodes")) as f:
                c.nodes = [ln.strip() for ln in f if ln.strip()]
        except FileNotFoundError:
            c.nodes = []
        c.n = len(c.nodes)
        try:
            with open(os.path.join(path, "id")) as f:
                c._number(int(f.read()))
            c._claimed = True
        except (OSError, ValueError):
            # No number recorded: made by an older nodes.py (the number its pid gave, the bridge made after the
            # nodes file), or by this one before it claimed a bridge (no nodes file yet either).
            c._number(int(path.rsplit("-", 1)[1]) % 200 + 20)
            c._claimed = bool(c.nodes)
        return c


if __name__ == "__main__":
    if sys.argv[1:2] == ["up"]:
        c = NsCluster(int(sys.argv[2]) if len(sys.argv) > 2 else 2)
        try:
            c.up()
        except BaseException:
            c.down()
            raise
        print(c.dir)
    elif sys.argv[1:2] == ["down"]:
        NsCluster.at(sys.argv[2]).down()
    elif sys.argv[1:2] == ["reap"]:  # see __enter__
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C in the session's terminal is the session's
        while sys.stdin.buffer.read(65536):
            pass
        if os.path.isdir(sys.argv[2]):
            NsCluster.at(sys.argv[2]).down()
    else:
        sys.exit(__doc__)
