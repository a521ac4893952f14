"""Moved to :mod:`hpcgpu.linalg.blocks`; this name is the same module (``hpcgpu.blocks is hpcgpu.linalg.blocks``)."""

import sys

from .linalg import blocks as _module

sys.modules[__name__] = _module
