"""The house's shape: imports run one way, ``import hpcgpu`` stays light, the library door has no traps."""

import ast
import os
import re
import subprocess
import sys

import pytest

import _mpi

PACKAGE = os.path.join(_mpi.ROOT, "hpcgpu")


def _import_graph() -> dict:
    """hpcgpu's modules and the hpcgpu modules each imports, anywhere in it (functions included)."""
    mods = {}
    for dp, _, files in os.walk(PACKAGE):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(dp, f)
                name = os.path.relpath(path[:-3], _mpi.ROOT).replace(os.sep, ".").removesuffix(".__init__")
                mods[name] = path
    edges = {}
    for name, path in mods.items():
        package = name if path.endswith("__init__.py") else name.rsplit(".", 1)[0]
        deps = set()
        for node in ast.walk(ast.parse(open(path).read())):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")
                target = ".".join(base[: len(base) - node.level + 1] + ([node.module] if node.module else [])) \
                    if node.level else (node.module or "")
                for alias in node.names:
                    full = f"{target}.{alias.name}"
                    deps.add(full if full in mods else target)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names)
        edges[name] = {d for d in deps if d in mods and d != name}
    return edges


def _cycles(edges: dict) -> list:
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in edges:
        if v not in index:
            visit(v)
    return out


LAYOUT = os.path.join(_mpi.ROOT, "docs", "layout.rst")


def _layers() -> list:
    """docs/layout.rst's layers, bottom first: each the module names of one entry of its "Layers" section."""
    text = open(LAYOUT, encoding="utf-8").read()
    section = text.split("\nLayers\n------\n", 1)[1].split("\n----", 1)[0]
    return [re.findall(r"``(hpcgpu[\w.]*)``", line) for line in section.splitlines() if line.startswith("``hpcgpu")]


def _layer_of(module: str, layers: list) -> int | None:
    """The index of the entry that names ``module``, or its nearest package (the longest name wins; ``hpcgpu``
    itself stands for its ``__init__`` only)."""
    best = None
    for i, names in enumerate(layers):
        for n in names:
            inside = module == n or (n != "hpcgpu" and module.startswith(n + "."))
            if inside and (best is None or len(n) > len(best[1])):
                best = (i, n)
    return None if best is None else best[0]


def _layer_errors(edges: dict, layers: list) -> list:
    """What breaks the map: a module it misses, a name that is no module, an import that goes up."""
    errors = [f"{m} is in no layer of docs/layout.rst" for m in sorted(edges) if _layer_of(m, layers) is None]
    errors += [f"docs/layout.rst names {n}, which is no module of hpcgpu" for names in layers for n in names
               if n not in edges]
    for m, deps in sorted(edges.items()):
        here = _layer_of(m, layers)
        errors += [f"{m} imports {d}, a layer above it" for d in sorted(deps)
                   if here is not None and (_layer_of(d, layers) or 0) > here]
    return errors


def test_the_import_graph_has_no_cycle_and_follows_the_map_of_layers():
    edges = _import_graph()
    assert _cycles(edges) == []
    layers = _layers()
    assert len(layers) >= 8 and ["hpcgpu.runtime"] in layers, layers
    assert _layer_errors(edges, layers) == []
    # SUMMA works on blocks; the matrix type is above it
    assert "hpcgpu.linalg.distmatrix" not in edges["hpcgpu.linalg.summa"]


def test_the_map_of_layers_catches_an_upward_import_a_missing_module_and_a_stale_name():
    edges = {m: set(d) for m, d in _import_graph().items()}
    layers = _layers()
    edges["hpcgpu.linalg.grid"].add("hpcgpu.runtime")  # the grid reaching up to the runtime
    edges["hpcgpu.train.newpart"] = set()  # a module the map does not name (under hpcgpu.train: it does)
    edges["hpcgpu.newtop"] = set()
    stale = [*layers[:1], [*layers[1], "hpcgpu.gone"], *layers[2:]]
    assert _layer_errors(edges, stale) == ["hpcgpu.newtop is in no layer of docs/layout.rst",
                                           "docs/layout.rst names hpcgpu.gone, which is no module of hpcgpu",
                                           "hpcgpu.linalg.grid imports hpcgpu.runtime, a layer above it"]


def test_import_hpcgpu_loads_neither_the_trainer_nor_the_task_farm():
    code = ("import sys, hpcgpu\n"
            "heavy = sorted(m for m in sys.modules if m.startswith(('hpcgpu.train', 'hpcgpu.tasks', 'hpcgpu.nn')))\n"
            "print(heavy)\n"
            "print(hpcgpu.Trainer.__module__, hpcgpu.tasks.map.__module__, hpcgpu.nn.Dense.__name__)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=_mpi.environment())
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["[]", "hpcgpu.train.trainer hpcgpu.tasks Dense"]


def test_import_hpcgpu_changes_no_signal_handler_reads_no_command_line_and_starts_no_mpi(tmp_path):
    """Whatever the command line looks like (here a script named like the console script ``hpcgpu-train``), an
    import of hpcgpu, hpcgpu.train and hpcgpu.tasks leaves every signal handler as it was and MPI uninitialized:
    the programs record stop signals themselves, first thing in their ``__main__`` (hpcgpu._early)."""
    script = tmp_path / "hpcgpu-train"
    script.write_text("import signal, sys\n"
                      "before = [signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)]\n"
                      "import hpcgpu, hpcgpu.train, hpcgpu.tasks\n"
                      "after = [signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)]\n"
                      "print(before == after, 'mpi4py.MPI' in sys.modules)\n"
                      "hpcgpu.Allreduce, hpcgpu.tasks.map, hpcgpu.train.Trainer, hpcgpu.grid.ProcessGrid\n"
                      "print('mpi4py.MPI' in sys.modules)\n")
    p = subprocess.run([sys.executable, str(script), "--data", "x.h5"], capture_output=True, text=True, timeout=120,
                       env=_mpi.environment())
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["True", "False", "True"]


def test_import_star_of_the_task_farm_leaves_the_builtin_map():
    namespace = {}
    exec("from hpcgpu.tasks import *", namespace)
    assert "map" not in namespace
    import hpcgpu.tasks

    assert callable(hpcgpu.tasks.map)


def test_a_collective_before_init_needs_a_communicator():
    code = ("import numpy as np, hpcgpu\n"
            "try:\n"
            "    hpcgpu.Allreduce(np.ones(2))\n"
            "except RuntimeError as e:\n"
            "    print(e)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=_mpi.environment())
    assert p.stdout.strip() == "no default communicator yet: call hpcgpu.init() first (collective), or pass comm="


@pytest.mark.mpi
def test_two_equal_grids_multiply_and_init_can_leave_the_blas_alone():
    """Matrices on two grids made alike from one communicator multiply (the grids are equal, not identical);
    init(blas_threads=None) leaves the science code's BLAS threads as they were."""
    code = ("import numpy as np, hpcgpu\n"
            "from hpcgpu import _blas\n"
            "_blas.set_threads(2)\n"
            "rt = hpcgpu.init('cpu', blas_threads=None)\n"
            "assert _blas.threads() == 2 and rt.blas_threads.startswith('2 (left as the process had them'), "
            "rt.blas_threads\n"
            "g1, g2 = hpcgpu.ProcessGrid(comm=rt.comm), hpcgpu.ProcessGrid(comm=rt.comm)\n"
            "assert g1 is not g2 and g1.same_as(g2)\n"
            "g3 = hpcgpu.ProcessGrid((1, rt.size), comm=rt.comm)\n"
            "assert not g1.same_as(g3)  # 3 x 1 and 1 x 3\n"
            "try:\n"
            "    hpcgpu.matmul(hpcgpu.DistMatrix.random((3, 3), g1), hpcgpu.DistMatrix.random((3, 3), g3))\n"
            "    raise SystemExit('matrices on different grids multiplied')\n"
            "except hpcgpu.AgreedError as e:\n"
            "    assert 'different process grids ((3, 1) and (1, 3))' in str(e), e\n"
            "a = hpcgpu.DistMatrix.random((7, 5), g1, seed=1)\n"
            "b = hpcgpu.DistMatrix.random((5, 4), g2, seed=2)\n"
            "c = (a @ b).gather()\n"
            "A, B = a.gather(), b.gather()\n"
            "if rt.rank == 0:\n"
            "    assert np.allclose(c, A @ B, rtol=1e-12)\n"
            "    print('ok')\n")
    p = _mpi.run(3, ["-c", code], env=_mpi.blas_threads(1), timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "ok"


def test_run_guarded_takes_a_main_with_or_without_argv():
    """``def main():`` and ``def main(argv):`` both run under the guard, and their return value is the exit
    status (a main without argv was called with one, and every rank aborted on a TypeError)."""
    import hpcgpu

    def bare():
        return 3

    def with_argv(argv):
        return len(argv or [])

    for main, argv, code in [(bare, None, 3), (with_argv, ["a", "b"], 2), (with_argv, None, 0),
                             (lambda *args: 5, None, 5)]:
        with pytest.raises(SystemExit) as e:
            hpcgpu.run_guarded(main, argv)
        assert e.value.code == code, main


def test_run_guarded_names_the_script_in_its_error_line(tmp_path):
    """Without ``prog=``, the one line of an agreed error begins with the script's file name, not hpcgpu's."""
    import subprocess
    import sys

    script = tmp_path / "my_sim.py"
    script.write_text("import hpcgpu\nfrom hpcgpu import optim\n\n\ndef main():\n    optim.SGD(lr=-1)\n\n\n"
                      "hpcgpu.run_guarded(main)\n")
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "HPCGPU_DEVICE": "cpu"})
    assert (p.returncode, p.stderr) == (2, "my_sim.py: error: lr must be a positive number, got -1\n"), p.stderr
