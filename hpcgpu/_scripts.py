"""The console scripts pyproject.toml installs: each records stop signals first, as ``python -m`` does."""

from __future__ import annotations

from . import _early

__all__ = ["hpcgpu_train"]


def hpcgpu_train() -> None:
    """``hpcgpu-train``: :func:`hpcgpu._early.catch`, then ``python -m hpcgpu.train``'s guarded main."""
    _early.catch("hpcgpu.train")
    from .train.__main__ import cli

    cli()
