"""Lint: ruff is clean, and every public docstring documents every parameter (numpydoc)."""

import dataclasses
import importlib
import inspect
import os
import pkgutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INSTALL = "pip install -e '.[test]'"
RUFF_TIMEOUT = 120  # seconds
# PR01: parameters not documented; PR02: unknown parameters documented; GL08: no docstring.
CHECKS = ("PR01", "PR02", "GL08")


def _require(name):
    """Import ``name``, or fail (never skip): the lint tools are part of the test extra."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        pytest.fail(f"{name} is not importable ({e}); install the test extra: {INSTALL}", pytrace=False)


def test_ruff_passes():
    _require("ruff")
    cmd = [sys.executable, "-m", "ruff", "check", ROOT]
    try:
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=RUFF_TIMEOUT)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{' '.join(cmd)} did not finish in {RUFF_TIMEOUT} s\n{e.stdout or ''}{e.stderr or ''}")
    assert p.returncode == 0, f"{' '.join(cmd)} exited with {p.returncode}:\n{p.stdout}{p.stderr}"


def _public_objects(package):
    """``(qualified name, object)`` of every public function, class and class member to check.

    Modules with a ``_``-prefixed part are private; of a public module, the
    names in ``__all__`` defined there (not re-exported); of a public class,
    the methods, properties, class and static methods defined in its body
    whose names do not start with ``_``.
    """
    def onerror(name):
        raise ImportError(f"cannot import {name} while walking {package.__name__}") from sys.exc_info()[1]

    for info in pkgutil.walk_packages(package.__path__, package.__name__ + ".", onerror=onerror):
        if any(part.startswith("_") for part in info.name.split(".")[1:]):
            continue
        mod = importlib.import_module(info.name)
        for name in getattr(mod, "__all__", ()):
            obj = getattr(mod, name)
            if getattr(obj, "__module__", None) != mod.__name__:
                continue
            qual = f"{mod.__name__}.{name}"
            if inspect.isfunction(obj):
                yield qual, obj
            elif inspect.isclass(obj):
                yield qual, obj
                for attr, value in vars(obj).items():
                    if not attr.startswith("_") and (
                        inspect.isfunction(value) or isinstance(value, (property, classmethod, staticmethod))
                    ):
                        yield f"{qual}.{attr}", value


def _is_record(cls):
    """Whether ``cls`` is a dataclass or a NamedTuple: its fields are its constructor's parameters."""
    return dataclasses.is_dataclass(cls) or (issubclass(cls, tuple) and hasattr(cls, "_fields"))


def _attribute_names(cls):
    """Names documented in the Attributes section of ``cls``'s docstring (``rows, cols : slice`` gives two)."""
    from numpydoc.docscrape import NumpyDocString

    doc = NumpyDocString(inspect.getdoc(cls) or "")
    return {n.strip() for item in doc["Attributes"] for n in item.name.split(",") if n.strip()}


def _undocumented(cls):
    """Parameters of ``cls``'s constructor documented neither under Parameters nor under Attributes."""
    from numpydoc.docscrape import get_doc_object
    from numpydoc.validate import Validator

    v = Validator(get_doc_object(cls))
    documented = {p.replace("\\", "") for p in v.doc_all_parameters} | _attribute_names(cls)
    return [p for p in v.signature_parameters if p not in documented and not p.startswith("_")]  # _private: internal


def _docstring_errors(package):
    from numpydoc.validate import validate

    errors = []
    for qual, obj in sorted(dict(_public_objects(package)).items()):
        result = validate(qual)
        where = f"{os.path.relpath(result['file'], ROOT)}:{result['file_line']}" if result["file"] else "?"
        for code, msg in result["errors"]:
            if code not in CHECKS:
                continue
            if code == "PR01" and inspect.isclass(obj) and _is_record(obj):
                # A dataclass's or NamedTuple's fields may be documented as Attributes instead.
                missing = _undocumented(obj)
                if not missing:
                    continue
                msg = f"Parameters {missing} documented neither under Parameters nor under Attributes"
            errors.append(f"{where}: {qual}: {code} {msg}")
    return errors


def test_public_docstrings_document_every_parameter():
    _require("numpydoc")
    import hpcgpu

    errors = _docstring_errors(hpcgpu)
    assert not errors, f"{len(errors)} docstring error(s) (numpydoc {CHECKS}):\n" + "\n".join(errors)
