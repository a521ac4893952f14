import os
import re
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
STANDIN = os.path.join(HERE, "device", "standin")

from _data import blobs, write_h5  # noqa: E402


def pytest_addoption(parser):
    parser.addoption(
        "--device", choices=("host", "standin"), default="host",
        help="standin: run the whole suite as on a GPU node, with tests/device's CuPy stand-in as `cupy` "
             "(one visible device, so --device auto picks the device path) in this process and in every rank "
             "the tests start; with -m device only the tests whose path differs on a device (make test's "
             "second pass)")


def pytest_configure(config):
    why = _loadgroup_error(config)
    if why:
        raise pytest.UsageError(why)
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        # Every rank the tests start would compile hpcgpu again (0.2 s of CPU a rank start, thousands of starts),
        # and every pytest worker rewrite the test modules' asserts again (2.5 s of CPU a worker): the ranks,
        # subprocesses and workers keep their bytecode in one folder outside the tree, kept for the next pass
        # (Python's bytecode names its source's path, size and time: checkouts and edits do not mix).
        cache = os.path.join(tempfile.gettempdir(), f"hpcgpu-pycache-{os.getuid()}")
        os.makedirs(cache, exist_ok=True)
        os.environ["PYTHONPYCACHEPREFIX"] = cache
        del os.environ["PYTHONDONTWRITEBYTECODE"]
        sys.pycache_prefix, sys.dont_write_bytecode = cache, False
    # The suite oversubscribes the node itself (two workers, each starting ranks): the ranks it starts yield the
    # CPU while they wait in MPI instead of polling (MPICH's heavy yield, Open MPI's yield when idle). The two
    # passes of make test took 15% less time with them, half the kernel time. A variable the caller set is kept;
    # the tests of hpcgpu's own choice of it (tests/test_runtime.py) clear it in their ranks' environment.
    for var in ("MPIR_CVAR_ENABLE_HEAVY_YIELD", "OMPI_MCA_mpi_yield_when_idle"):
        os.environ.setdefault(var, "1")
    _default_stop_signals()
    import _mpi

    _mpi.note_session_start()
    if config.getoption("--device") == "standin":
        # In this process and, through PYTHONPATH, in every rank and subprocess the tests start.
        sys.path.insert(0, STANDIN)
        os.environ["PYTHONPATH"] = STANDIN + os.pathsep + os.environ.get("PYTHONPATH", "")
        for var in ("HPCGPU_STANDIN_FAIL", "HPCGPU_STANDIN_DEVICES", "CUDA_VISIBLE_DEVICES"):
            os.environ.pop(var, None)


def _default_stop_signals():
    """Start the suite's processes from the stop signals' default actions, whatever this one inherited.

    An ignored signal is inherited by every child: the suite run under ``nohup`` (SIGHUP ignored), or from a
    non-interactive shell's background job (SIGINT ignored), gave Intel MPI's ranks an ignored SIGHUP (its Hydra
    passes it on; MPICH's and Open MPI's launchers do not), which hpcgpu rightly leaves ignored: the signal tests
    then failed. Their subject is the actions a job gets by default.
    """
    import signal

    for name in ("SIGHUP", "SIGTERM", "SIGUSR1", "SIGINT"):
        sig = getattr(signal, name)
        if signal.getsignal(sig) is signal.SIG_IGN:
            signal.signal(sig, signal.default_int_handler if name == "SIGINT" else signal.SIG_DFL)


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (``-n N --dist loadgroup``), the tests of tests/slurm and tests/cluster run on one worker:
    they share the session's Slurm and network-namespace nodes, which one worker starts once. The stand-in's pass
    (``--device=standin``) leaves out the tests marked ``host``: their programs run on the host whatever the pass
    (``--device cpu``, the site's build), so there they would repeat the host pass's run; each has a twin marked
    ``device`` where the device path has something to show."""
    if config.getoption("--device") == "standin":
        host = [item for item in items if item.get_closest_marker("host") is not None]
        if host:
            config.hook.pytest_deselected(items=host)
            items[:] = [item for item in items if item.get_closest_marker("host") is None]
    for item in items:
        rel = os.path.relpath(str(item.path), HERE).split(os.sep)[0]
        if rel in ("slurm", "cluster"):
            item.add_marker(pytest.mark.xdist_group("nodes"))


def _loadgroup_error(config) -> str | None:
    """Why ``--dist loadgroup`` would lose the ``xdist_group`` marks, or None. pytest-xdist carries a test's group to
    its scheduler in the node ID (``...@group``); pytest 9.2's structured node IDs drop the suffix silently
    (pytest-xdist issue 1386, unfixed in 3.8): the tests of tests/slurm would start their shared Slurm nodes on every
    worker and the site would be built on each."""
    if config.getoption("dist", default=None) != "loadgroup":  # (no such option without pytest-xdist)
        return None
    from importlib.metadata import version

    def release(name):
        return tuple(int(x) for x in re.findall(r"\d+", version(name))[:2])

    if release("pytest") >= (9, 2) and release("pytest-xdist") <= (3, 8):
        return (f"pytest {version('pytest')} with pytest-xdist {version('pytest-xdist')} ignores xdist_group under "
                "--dist loadgroup (pytest-xdist issue 1386): install pyproject.toml's test extra (pytest < 9.2)")
    return None


def pytest_ignore_collect(collection_path, config):
    """Under --device=standin every test runs but those of the folders that manage a device themselves, which are
    not collected: tests/device poses the stand-in (and its absence) per test in the first pass; tests/slurm runs
    the CPU job scripts (``--device cpu``) and only ``sbatch --test-only`` for the GPU ones; tests/cluster binds
    stand-in GPUs itself. Every other test, marked ``device`` or not, so that one whose code takes the device path
    only on a GPU node (a program's default ``--device auto``) is seen; ``-m device`` narrows the pass to the tests
    whose path is known to differ on a device (make test's second pass; CI's runs them all: .ci/run)."""
    if config.getoption("--device") == "standin":
        rel = os.path.relpath(str(collection_path), HERE)
        return rel.split(os.sep)[0] in ("device", "slurm", "cluster")
    return None


def pytest_report_header(config):
    """The MPI library and launcher, and the device. Under pytest-xdist this process (the controller) only schedules
    and starts the workers, which inherit its environment: it reads the library's version without ``MPI_Init``
    (``_mpi.SINGLETON_VARS``)."""
    import mpi4py

    controller = bool(getattr(config.option, "numprocesses", None)) and "mpi4py.MPI" not in sys.modules
    if controller:
        mpi4py.rc.initialize = mpi4py.rc.finalize = False
    from mpi4py import MPI

    import _mpi

    lib = " ".join(MPI.Get_library_version().splitlines()[0].split())
    import hpcgpu._device as d

    cupy = d.cupy_or_none()
    dev = "no CuPy" if cupy is None else f"cupy {cupy.__version__}, {d.device_count()} device(s)"
    world = (f"world size of this process {MPI.COMM_WORLD.Get_size()}" if MPI.Is_initialized()
             else "MPI not initialized in pytest-xdist's controller")
    return [f"MPI: {lib} (MPI {'%d.%d' % MPI.Get_version()}), launcher {_mpi.mpiexec()}, "
            f"{world}; multi-rank tests start their own ranks",
            f"device: {dev} (--device={config.getoption('--device')})"]


@pytest.fixture(scope="session")
def cluster():
    """Three "nodes" (network + UTS + mount namespaces on a private bridge; tests/cluster); most tests use the
    first two. Skipped without root; CI must have it."""
    sys.path.insert(0, os.path.join(HERE, "cluster"))
    from nodes import NsCluster, available

    why = available()
    if why is not None:
        if os.environ.get("CI"):
            pytest.fail(f"the multi-node tests must run in CI: {why}")
        pytest.skip(why)
    with NsCluster(3) as c:
        yield c


@pytest.fixture
def small_h5(tmp_path):
    X, y = blobs(240)
    Xt, yt = blobs(61, seed=1)
    return write_h5(tmp_path / "small.h5", train__X=X, train__y=y, test__X=Xt, test__y=yt)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """``HPCGPU_TEST_CPU_LOG=FILE``: each test's CPU seconds (this process's, then its reaped children's: the
    launchers and the ranks they reaped, subprocesses; not the fork server's ranks: ``HPCGPU_TEST_FORKSERVER_LOG``)
    and wall seconds, a line each, to find where the suite's time goes (docs/guide/testing.rst)."""
    log = os.environ.get("HPCGPU_TEST_CPU_LOG")
    if not log:
        yield
        return
    import resource
    import time

    def cpu(who):
        r = resource.getrusage(who)
        return r.ru_utime + r.ru_stime

    s, c, t = cpu(resource.RUSAGE_SELF), cpu(resource.RUSAGE_CHILDREN), time.monotonic()
    yield
    with open(log, "a", encoding="utf-8") as f:
        f.write(f"{cpu(resource.RUSAGE_SELF) - s:.3f} {cpu(resource.RUSAGE_CHILDREN) - c:.3f} "
                f"{time.monotonic() - t:.3f} {item.nodeid}\n")
