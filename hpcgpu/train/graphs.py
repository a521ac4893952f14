"""Deprecated name of :mod:`hpcgpu.train.cuda_graphs` (renamed for what it holds); it goes in the next release."""

import sys
import warnings

from . import cuda_graphs as _new

warnings.warn("hpcgpu.train.graphs is now hpcgpu.train.cuda_graphs; the old name goes in the next release",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _new
