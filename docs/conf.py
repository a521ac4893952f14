"""Sphinx configuration for hpcgpu's documentation (``make docs``; offline: no intersphinx)."""

import importlib
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import hpcgpu  # noqa: E402

project = "hpcgpu"
author = "the hpcgpu developers"
copyright = "2026, the hpcgpu developers"
release = hpcgpu.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "numpydoc",
]

templates_path = ["_templates"]
exclude_patterns = ["_build", "_data", "_generated", "examples/*.out", "**/.ipynb_checkpoints"]
root_doc = "index"

# Every public name gets its own page (api/ is written by _api.py before the build reads it).
autosummary_generate = True
autosummary_imported_members = False
autodoc_default_options = {"members": False}
autodoc_typehints = "none"  # numpydoc's Parameters sections say the types
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False
numpydoc_validation_checks = set()

# Warnings are errors in the test command (-W --keep-going); nitpicky for hpcgpu's own names. Names from
# other projects (numpy, mpi4py, h5py, the standard library) cannot resolve without intersphinx (no network
# at build time), so only those are let through.
nitpicky = True
nitpick_ignore_regex = [(r"py:.*", r"(?!hpcgpu\b).*")]

html_theme = "pydata_sphinx_theme"
html_title = f"hpcgpu {release}"
# collapse_navigation: each page's sidebar lists its own section's pages only (not every section's tree, expandable):
# the site's build, which the test suite runs, took 37 s instead of 42.5 here (pydata-sphinx-theme renders the
# whole navigation tree into each of its 230 pages otherwise).
html_theme_options = {
    "navigation_with_keys": False,
    "collapse_navigation": True,
    "show_toc_level": 2,
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version"],
}
html_static_path = ["_static"]
html_css_files = ["hpcgpu.css"]
# The top-level pages have no sub-pages: no empty navigation column beside them.
html_sidebars = {p: [] for p in ("index", "install", "quickstart", "troubleshooting", "performance", "changelog")}
html_show_sourcelink = False


# The API pages must exist before Sphinx looks for its source files (before any event).
import _api  # noqa: E402

_api.write_api_pages(os.path.join(HERE, "api"))

# The troubleshooting page's list of every error message, from the source (docs/_errors.py).
import _errors  # noqa: E402

os.makedirs(os.path.join(HERE, "_generated"), exist_ok=True)
_errors.write(os.path.join(HERE, "_generated", "errors.rst"))


def _prepare(app):
    import _plots

    _plots.make_plots(os.path.join(HERE, "_plots"))


def _same_object(app, env, node, contnode):
    """Resolve ``hpcgpu.train.data.load_split`` (where an object is defined) to the name it is documented
    under (``hpcgpu.train.load_split``): each object is described once, under its public name."""
    target = node.get("reftarget", "")
    if node.get("refdomain") != "py" or not target.startswith("hpcgpu."):
        return None
    parts = target.split(".")
    for cut in range(len(parts), 1, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut - 1]))
            obj = getattr(obj, parts[cut - 1])
        except (ImportError, AttributeError):
            continue
        name = _CANONICAL.get(id(obj))
        if name is None or name == ".".join(parts[:cut]):
            return None
        new = ".".join([name, *parts[cut:]])
        return env.get_domain("py").resolve_xref(env, node["refdoc"], app.builder, node["reftype"], new,
                                                 node.copy(), contnode)
    return None


_CANONICAL = _api.canonical()


def _public_bases(app, name, obj, options, bases):
    """A class's private base (``hpcgpu.nn._flat.FlatParams``, ``distmatrix._Elementwise``) is an implementation
    detail: not shown."""
    bases[:] = [b for b in bases if not any(part.startswith("_") for part in [*b.__module__.split("."), b.__name__])]


def setup(app):
    app.connect("builder-inited", _prepare)
    app.connect("autodoc-process-bases", _public_bases)
    app.connect("missing-reference", _same_object)
