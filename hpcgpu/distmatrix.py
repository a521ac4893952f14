"""Moved to :mod:`hpcgpu.linalg.distmatrix`; this name is the same module (``hpcgpu.distmatrix is hpcgpu.linalg.distmatrix``)."""

import sys

from .linalg import distmatrix as _module

sys.modules[__name__] = _module
