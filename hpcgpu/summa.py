"""The former name of :mod:`hpcgpu.linalg.summa`: the same module object."""

import sys

from .linalg import summa as _module

sys.modules[__name__] = _module
