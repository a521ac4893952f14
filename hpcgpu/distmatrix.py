"""The former name of :mod:`hpcgpu.linalg.distmatrix`: the same module object."""

import sys

from .linalg import distmatrix as _module

sys.modules[__name__] = _module
