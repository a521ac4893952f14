"""Deprecated name of :mod:`hpcgpu.train.console` (renamed for what it holds); it goes in the next release."""

import warnings

from .console import Console
from .console import Console as Report

__all__ = ["Console", "Report"]

warnings.warn("hpcgpu.train.report is now hpcgpu.train.console (Report is Console); the old name goes in the next "
              "release", DeprecationWarning, stacklevel=2)
