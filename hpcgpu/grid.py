"""Moved to :mod:`hpcgpu.linalg.grid`; this name is the same module (``hpcgpu.grid is hpcgpu.linalg.grid``)."""

import sys

from .linalg import grid as _module

sys.modules[__name__] = _module
