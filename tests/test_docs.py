"""The documentation: the site builds with no warning (nitpicky for hpcgpu's names), every public
name has a page, every error message in the code has a troubleshooting entry, and every example a guide shows
runs and prints what the guide says it prints."""

import glob
import importlib
import importlib.util
import os
import re
import subprocess
import sys

import pytest

import _mpi

DOCS = os.path.join(_mpi.ROOT, "docs")
sys.path.insert(0, DOCS)
EXAMPLES = sorted(glob.glob(os.path.join(DOCS, "examples", "*.py")))


def _require_sphinx():
    for m in ("sphinx", "numpydoc", "pydata_sphinx_theme"):
        try:
            importlib.import_module(m)
        except ImportError:
            if os.environ.get("CI"):
                pytest.fail(f"the docs build must run in CI: no {m} (pip install -e '.[docs]')")
            pytest.skip(f"no {m}: pip install -e '.[docs]'")


# the tests that read the built site run on one pytest-xdist worker, which builds it once (12 s, not twice)
def ON_THE_SITES_WORKER(fn):  # noqa: N802 - a mark
    """The tests of the built site: one pytest-xdist worker builds it (group ``site``), and the stand-in's pass leaves
    them out (mark ``host``): Sphinx and the pages have no device path, and the build is a third of a minute."""
    return pytest.mark.host(pytest.mark.xdist_group("site")(fn))


@pytest.fixture(scope="session")
def html(tmp_path_factory):
    """Build the site as ``make docs`` does (-W --keep-going -n) into a temporary directory, once a session: a
    module's fixture is set up again whenever another module's test ran between two of its users (the tests of
    the ``site`` group share one pytest-xdist worker, not an uninterrupted turn), and the build is 12 s."""
    _require_sphinx()
    out = tmp_path_factory.mktemp("html")
    cmd = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-n", "-q", "-b", "html",
           "-d", str(out / ".doctrees"), DOCS, str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=_mpi.ROOT)
    assert p.returncode == 0, f"{' '.join(cmd)} exited {p.returncode}:\n{p.stderr[-6000:]}"
    return out


@ON_THE_SITES_WORKER
def test_the_site_builds_without_a_warning(html):
    for page in ("index", "install", "quickstart", "troubleshooting", "performance", "changelog", "api/index"):
        assert (html / f"{page}.html").is_file(), page


@ON_THE_SITES_WORKER
def test_every_public_name_has_a_page(html):
    import _api
    import hpcgpu

    names = [f"hpcgpu.{n}" for n in hpcgpu.__all__ if n != "__version__"]
    for module, _ in _api.MODULES:
        m = importlib.import_module(module)
        names += [f"{module}.{n}" for n in m.__all__ if not (n in hpcgpu.__all__ and getattr(hpcgpu, n) is
                                                                  getattr(m, n))]
    missing = [n for n in names if not (html / "api" / "generated" / f"{n}.html").is_file()]
    assert not missing, missing
    # and a page is the object's documentation, not an empty stub
    page = (html / "api" / "generated" / "hpcgpu.matmul.html").read_text()
    assert 'id="hpcgpu.matmul"' in page and "SUMMA" in page


@ON_THE_SITES_WORKER
def test_every_error_message_has_a_troubleshooting_entry(html):
    import _error_fixes
    import _errors

    found = {m.text: m for m in _errors.find_messages()}
    assert len(found) > 150  # the extractor still finds the messages
    missing = [f"{m.path}:{m.line}: {t}" for t, m in found.items() if t not in _error_fixes.FIXES]
    stale = [t for t in _error_fixes.FIXES if t not in found]
    assert not missing, "messages without a troubleshooting entry (docs/_error_fixes.py):\n" + "\n".join(missing)
    assert not stale, "entries for messages the code no longer prints:\n" + "\n".join(stale)
    assert all(v.strip() for v in _error_fixes.FIXES.values())
    page = re.sub(r"<[^>]+>", "", (html / "troubleshooting.html").read_text())
    for text in ("--epochs must be &gt;= 1, got …", "is not the same directory on every node"):
        assert text in page, text


def test_the_extractor_sees_each_kind_of_message(tmp_path):
    import _errors

    pkg = tmp_path / "hpcgpu"
    pkg.mkdir()
    (pkg / "m.py").write_text(
        "import sys\n"
        "def f(x, parser):\n"
        "    checks = [(x > 0, f'--x must be > 0, got {x}')]\n"
        "    if x: raise ValueError(f'{x}: not a readable HDF5 file')\n"
        "    err = OSError('cannot write ' + str(x))\n"
        "    parser.error('give A, B and -o C')\n"
        "    print(f'prog: error: {x}', file=sys.stderr)\n"
        "    print('not an error message at all')\n"
        "    raise agreed(RuntimeError(f'rank {x} {x} lost'))\n")
    got = {m.text for m in _errors.find_messages(str(tmp_path))}
    assert got == {"--x must be > 0, got …", "…: not a readable HDF5 file", "cannot write …",
                   "give A, B and -o C", "prog: error: …", "rank … … lost"}, got


def _how(path):
    first = open(path, encoding="utf-8").readline().strip()
    m = re.fullmatch(r"# run: (python|mpiexec -n (\d+))", first)
    assert m, f"{path}: the first line must be '# run: python' or '# run: mpiexec -n N', not {first!r}"
    return int(m.group(2) or 0)


def _cases():
    """Each example; those that start ranks are marked mpi (so they run under every MPI)."""
    for p in EXAMPLES:
        marks = [pytest.mark.mpi] if _how(p) else []
        for module in ("torch", "jax"):  # an example of an autograd adapter, where its framework is installed
            if re.search(rf"^import {module}\b", open(p, encoding="utf-8").read(), re.M) and \
                    importlib.util.find_spec(module) is None:
                marks.append(pytest.mark.skip(reason=f"{module} is not installed"))
        yield pytest.param(p, marks=marks, id=os.path.basename(p)[:-3])


@pytest.mark.parametrize("path", list(_cases()))
def test_a_guide_example_prints_what_the_guide_shows(path):
    n = _how(path)
    expected = open(path[:-3] + ".out", encoding="utf-8").read()
    env = {"OMP_NUM_THREADS": "1"}
    if n:  # a latency-bound example (1,200 steps of a small model at 3 ranks on 2 cores) took over 120 s at load 36
        p = _mpi.run(n, [path], timeout=360, cwd=_mpi.ROOT, env=env)
    else:
        p = subprocess.run([sys.executable, path], capture_output=True, text=True, timeout=120, cwd=_mpi.ROOT,
                           env={**os.environ, **env})
    assert p.returncode == 0, p.stderr
    assert p.stdout == expected, f"{path} printed:\n{p.stdout}\nthe guide shows:\n{expected}"


def test_every_environment_variable_is_read_in_one_place_and_documented():
    """Each ``HPCGPU_*`` name the package mentions is in :data:`hpcgpu._options.VARIABLES`, and the install
    page's table lists exactly those (a new variable cannot slip in unread or undocumented)."""
    from hpcgpu import _options

    pkg = os.path.join(_mpi.ROOT, "hpcgpu")
    named = set()
    for path in glob.glob(os.path.join(pkg, "**", "*.py"), recursive=True):
        named |= set(re.findall(r"HPCGPU_[A-Z_]*[A-Z]", open(path, encoding="utf-8").read()))
    assert named == set(_options.VARIABLES)
    page = open(os.path.join(DOCS, "install.rst"), encoding="utf-8").read()
    table = page[page.index("Environment variables\n"):]
    assert set(re.findall(r"\* - ``(HPCGPU_[A-Z_]+)``", table)) == set(_options.VARIABLES)


@pytest.mark.parametrize("raw, want", [("1", True), (" Yes ", True), ("off", False), ("", None)])
def test_a_switch_reads_the_usual_words(monkeypatch, raw, want):
    from hpcgpu import _options

    monkeypatch.setenv("HPCGPU_CUDA_AWARE_MPI", raw)
    assert _options.switch("HPCGPU_CUDA_AWARE_MPI") is want
    assert _options.switch("HPCGPU_CUDA_AWARE_MPI", False) is False  # the argument wins


def test_a_bad_switch_or_duration_is_a_one_line_error_naming_the_variable(monkeypatch):
    from hpcgpu import _options

    monkeypatch.setenv("HPCGPU_CUDA_AWARE_MPI", "maybe")
    with pytest.raises(ValueError, match=r"^HPCGPU_CUDA_AWARE_MPI must be 0 or 1 .*got 'maybe'$"):
        _options.switch("HPCGPU_CUDA_AWARE_MPI")
    monkeypatch.setenv("HPCGPU_STALL_TIMEOUT", "5min")
    with pytest.raises(ValueError, match=r"^HPCGPU_STALL_TIMEOUT must be seconds, got '5min'$"):
        _options.seconds("HPCGPU_STALL_TIMEOUT", None, 0.0, "--stall-timeout")
    monkeypatch.setenv("HPCGPU_STALL_TIMEOUT", "inf")
    with pytest.raises(ValueError, match=r"^HPCGPU_STALL_TIMEOUT must be >= 0 seconds"):
        _options.seconds("HPCGPU_STALL_TIMEOUT", None, 0.0, "--stall-timeout")
    with pytest.raises(ValueError, match=r"^--stall-timeout must be >= 0 seconds, got -1"):
        _options.seconds("HPCGPU_STALL_TIMEOUT", -1, 0.0, "--stall-timeout")
    assert _options.seconds("HPCGPU_STALL_TIMEOUT", 2, 0.0, "--stall-timeout") == 2.0
