"""Stopping a run cleanly: the stop policy lives in ``hpcgpu._stop``, below the trainer and the task farm."""

from __future__ import annotations

from .._stop import EXIT_STOPPED, StopRequest

__all__ = ["StopRequest", "EXIT_STOPPED"]
