"""The former name of :mod:`hpcgpu.linalg.grid`: the same module object."""

import sys

from .linalg import grid as _module

sys.modules[__name__] = _module
