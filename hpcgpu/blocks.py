"""The former name of :mod:`hpcgpu.linalg.blocks`: the same module object."""

import sys

from .linalg import blocks as _module

sys.modules[__name__] = _module
