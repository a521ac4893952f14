"""Every error message hpcgpu can print, found in its source, for the troubleshooting page.

A message is the text given to an exception's constructor (``ValueError(f"--epochs must be >= 1, got
{n}")``, also ``type(e)(...)``), to an argparse ``error()``, to ``matmul``'s ``_error()``, to ``abort()``,
to ``print(..., file=sys.stderr)``, ``sys.stderr.write()`` or ``write_line()`` (to stderr), assigned to a
``fatal`` (the task farm's outcome), listed as ``(condition, message)`` in a ``checks`` table, or returned by one of
:data:`MESSAGE_FUNCTIONS` (functions that make a message for their caller to raise or print). The parts filled in at run
time become ``…``. Each message's cause and fix are in ``_error_fixes.FIXES``; ``tests/test_docs.py``
checks that every message found here has one and that no entry there is stale, so the page cannot fall
behind the code.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOLE = "…"

# Groups of the page, by the module a message comes from (first match wins).
GROUPS = [
    ("Training: options", ("hpcgpu/train/config.py", "hpcgpu/train/precision.py", "hpcgpu/_cli.py",
                           "hpcgpu/watchdog.py", "hpcgpu/optim.py")),
    ("Training: data", ("hpcgpu/train/data.py", "hpcgpu/datasets.py")),
    ("Training: checkpoints, resume and divergence", ("hpcgpu/train/checkpoint.py", "hpcgpu/train/trainer.py")),
    ("Training: the model and its gradient (library use)", ("hpcgpu/train/", "hpcgpu/nn/")),
    ("Linear algebra: matrix multiply, distributed matrices, factorizations", ("hpcgpu/linalg/",
                                                                                "hpcgpu/_partition.py")),
    ("Task farm", ("hpcgpu/tasks/",)),
    ("Files and directories", ("hpcgpu/io.py",)),
    ("Launch, runtime and GPUs", ("hpcgpu/runtime.py", "hpcgpu/_device.py", "hpcgpu/__main__.py")),
    ("Collectives", ("hpcgpu/comm.py", "hpcgpu/errors.py")),
    ("Run report and performance model", ("hpcgpu/report.py", "hpcgpu/scaling.py", "hpcgpu/timing.py",
                                          "hpcgpu/energy.py")),
]


MESSAGE_FUNCTIONS = {"_mismatch", "_judge", "_stale_stop_file"}
"""Functions whose returned strings are messages (the task farm's result schema check, the stall report, the
stop file's warning)."""


@dataclass(frozen=True)
class Message:
    """One message: its text with ``…`` for the parts filled in, and where it is made."""

    text: str
    path: str
    line: int
    kind: str

    @property
    def group(self) -> str:
        for title, prefixes in GROUPS:
            if any(self.path == p or (p.endswith("/") and self.path.startswith(p)) for p in prefixes):
                return title
        return "Other"


def _text(node) -> str | None:
    """The static text of a message expression, ``…`` where a value goes; None if it has none."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else HOLE for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _text(node.left), _text(node.right)
        if left is None and right is None:
            return None
        return (left if left is not None else HOLE) + (right if right is not None else HOLE)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        return _text(node.left)
    return None


def _is_exception(func) -> str | None:
    name = getattr(func, "id", None) or getattr(func, "attr", None) or ""
    if name.endswith(("Error", "Exception")) or name in ("TaskTimeout", "SchemaError", "ArgumentTypeError"):
        return name
    if name in ("error", "_error", "abort", "_abort"):
        return name + "()"
    if isinstance(func, ast.Call):  # type(e)(message): an error of the same type as the one caught
        return "type()"
    if isinstance(func, ast.Attribute) and func.attr == "write" and ast.unparse(func.value) == "sys.stderr":
        return "stderr"
    return None


def _to_stderr(call) -> bool:
    """``print(..., file=sys.stderr)``, or ``write_line(...)`` (hpcgpu.errors': stderr unless given a stream)."""
    name = getattr(call.func, "id", None) or getattr(call.func, "attr", None)
    if name == "print":
        return any(k.arg == "file" and "stderr" in ast.unparse(k.value) for k in call.keywords)
    if name == "write_line":
        stream = [*call.args[1:], *(k.value for k in call.keywords if k.arg == "stream")]
        return not stream or "stderr" in ast.unparse(stream[0])
    return False


def _normal(text: str) -> str:
    text = " ".join(text.split())
    while HOLE + HOLE in text:
        text = text.replace(HOLE + HOLE, HOLE)
    return text.strip()


def _found_in(node, rel: str):
    """The messages ``node`` makes: ``(text, line, kind)`` with the raw text."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in MESSAGE_FUNCTIONS:
        for r in ast.walk(node):
            if isinstance(r, ast.Return) and r.value is not None:
                yield _text(r.value), r.lineno, "returned"
    elif isinstance(node, ast.Assign):
        names = {getattr(t, "attr", getattr(t, "id", None)) for t in node.targets}
        if "fatal" in names:  # the task farm's outcome
            yield _text(node.value), node.lineno, "fatal"
        if "checks" in names:  # [(condition, message), ...]
            for elt in getattr(node.value, "elts", []):
                if isinstance(elt, ast.Tuple) and len(elt.elts) == 2:
                    yield _text(elt.elts[1]), elt.lineno, "check"
    elif isinstance(node, ast.Call) and node.args:
        kind = _is_exception(node.func)
        if kind is None and _to_stderr(node):
            kind = "stderr"
        if kind is not None:
            yield _text(node.args[0]), node.lineno, kind


def find_messages(root: str = ROOT) -> list[Message]:
    """Every message in ``hpcgpu/`` (one entry per distinct text), sorted by group then text."""
    found: dict[str, Message] = {}
    for d, _, files in os.walk(os.path.join(root, "hpcgpu")):
        for f in sorted(files):
            if not f.endswith(".py"):
                continue
            path = os.path.join(d, f)
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            tree = ast.parse(open(path, encoding="utf-8").read(), rel)
            for node in ast.walk(tree):
                for text, line, kind in _found_in(node, rel):
                    if text is None:
                        continue
                    text = _normal(text)
                    # A message that is only a value ("{e}") or too short to say anything is not one to list.
                    if len(text.replace(HOLE, "").strip(" :.,()")) >= 4:
                        found.setdefault(text, Message(text, rel, line, kind))
    order = {title: i for i, (title, _) in enumerate(GROUPS)}
    return sorted(found.values(), key=lambda m: (order.get(m.group, len(order)), m.path, m.text))


def _literal(text: str) -> str:
    # An inline literal cannot hold a backquote pair; none of hpcgpu's messages has one.
    return "``" + text.replace("``", "` `") + "``"


def render(messages, fixes) -> str:
    """The generated part of the troubleshooting page (reStructuredText)."""
    out, group = [], None
    for m in messages:
        if m.group != group:
            group = m.group
            out += ["", group, "-" * len(group), ""]
        fix = fixes.get(m.text, "*(no entry yet)*")
        out += [f".. rubric:: {_literal(m.text)}", "", fix.strip(), "", f"*From* ``{m.path}``.", ""]
    return "\n".join(out) + "\n"


def write(path: str) -> None:
    """Write the generated page part to ``path`` (only when it changes)."""
    from _error_fixes import FIXES

    text = render(find_messages(), FIXES)
    if not os.path.exists(path) or open(path, encoding="utf-8").read() != text:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)


if __name__ == "__main__":
    for m in find_messages():
        print(f"{m.group} | {m.path}:{m.line} | {m.text}")
