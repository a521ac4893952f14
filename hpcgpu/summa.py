"""Moved to :mod:`hpcgpu.linalg.summa`; this name is the same module (``hpcgpu.summa is hpcgpu.linalg.summa``)."""

import sys

from .linalg import summa as _module

sys.modules[__name__] = _module
