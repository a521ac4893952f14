"""Write the API reference's pages (docs/api/): one for the package, one per public submodule.

Every name in ``hpcgpu.__all__`` is documented as ``hpcgpu.NAME``; a submodule's page lists the
names of its ``__all__`` that the package does not re-export (those are on the package's page), so
that no object is described twice. autosummary then gives each name a page of its own.
"""

import importlib
import os

import hpcgpu

# The public submodules, in the order of the reference's table of contents.
MODULES = [
    ("hpcgpu.runtime", "Runtime: communicator, rank-to-GPU binding, the array module"),
    ("hpcgpu.comm", "Collectives on host and device buffers"),
    ("hpcgpu.errors", "Errors agreed by every rank"),
    ("hpcgpu.linalg", "Distributed linear algebra: factorizations and solvers"),
    ("hpcgpu.linalg.grid", "2-D process grids"),
    ("hpcgpu.linalg.distmatrix", "Distributed matrices"),
    ("hpcgpu.linalg.blocks", "Block layouts: moving a matrix between them"),
    ("hpcgpu.linalg.summa", "SUMMA and 2.5-D matrix multiply"),
    ("hpcgpu.train", "Data- and tensor-parallel trainer"),
    ("hpcgpu.nn", "Models: layers with their own backward pass, losses, a model of one's own"),
    ("hpcgpu.optim", "Optimizers (SGD, Adam, AdamW) and learning-rate schedules"),
    ("hpcgpu.tasks", "Task farm"),
    ("hpcgpu.timing", "Time per phase and traces"),
    ("hpcgpu.energy", "Energy counters"),
    ("hpcgpu.report", "Run report"),
    ("hpcgpu.scaling", "Performance model"),
    ("hpcgpu.io", "Files: atomic outputs, shared directories"),
    ("hpcgpu.datasets", "Bundled and downloadable data sets"),
    ("hpcgpu.watchdog", "Stall watchdog"),
]


def _kind(obj):
    if isinstance(obj, type):
        return "exceptions" if issubclass(obj, BaseException) else "classes"
    if callable(obj):
        return "functions"
    return "data"


def _section(title, names, prefix):
    if not names:
        return ""
    lines = [title, "-" * len(title), "", ".. autosummary::", "   :toctree: generated", "   :nosignatures:", ""]
    lines += [f"   {prefix}{n}" for n in names]
    return "\n".join(lines) + "\n\n"


def _groups(module, names):
    out = {"classes": [], "functions": [], "exceptions": [], "data": []}
    for n in names:
        out[_kind(getattr(module, n))].append(n)
    return out


def _page(title, module_name, names, intro=""):
    module = importlib.import_module(module_name)
    g = _groups(module, names)
    text = f"{title}\n{'=' * len(title)}\n\n.. automodule:: {module_name}\n   :no-members:\n\n"
    if intro:
        text += intro + "\n\n"
    text += f".. currentmodule:: {module_name}\n\n"
    for key, heading in (("classes", "Classes"), ("functions", "Functions"), ("exceptions", "Exceptions"),
                         ("data", "Constants")):
        text += _section(heading, g[key], "")
    return text


PUBLIC_BEYOND_ALL = {"hpcgpu.tasks": ["map"]}
"""Public names a module leaves out of ``__all__`` (``import *`` would shadow a builtin), documented all the same."""


def _public(module) -> list:
    return list(module.__all__) + PUBLIC_BEYOND_ALL.get(module.__name__, [])


def canonical():
    """``{id(object): documented name}`` for every object the reference documents."""
    top = {n: getattr(hpcgpu, n) for n in hpcgpu.__all__ if n != "__version__"}
    names = {id(o): f"hpcgpu.{n}" for n, o in top.items()}
    for name, _ in MODULES:
        module = importlib.import_module(name)
        for n in _public(module):
            names.setdefault(id(getattr(module, n)), f"{name}.{n}")
    return names


def write_api_pages(outdir):
    """Write ``outdir/index.rst`` and one page per module; files are rewritten only when they change."""
    os.makedirs(outdir, exist_ok=True)
    top = {n: getattr(hpcgpu, n) for n in hpcgpu.__all__ if n != "__version__"}
    pages = {"hpcgpu": _page("hpcgpu", "hpcgpu", list(top))}
    for name, title in MODULES:
        module = importlib.import_module(name)
        own = [n for n in _public(module) if not (n in top and top[n] is getattr(module, n))]
        also = sorted(n for n in module.__all__ if n in top and top[n] is getattr(module, n))
        intro = ""
        if also:
            intro = "Also from this module, documented with the package: " + ", ".join(
                f":{'class' if isinstance(top[n], type) else 'func'}:`hpcgpu.{n}`" for n in also) + "."
        pages[name] = _page(f"{name} — {title}", name, own, intro)
    index = ["API reference", "=============", "",
             "Every public name: the package's own (``hpcgpu.__all__``), then each public submodule's.", "",
             ".. toctree::", "   :maxdepth: 1", ""]
    index += [f"   {n}" for n in pages]
    pages["index"] = "\n".join(index) + "\n"
    for name, text in pages.items():
        path = os.path.join(outdir, f"{name}.rst")
        if not os.path.exists(path) or open(path).read() != text:
            with open(path, "w") as f:
                f.write(text)
