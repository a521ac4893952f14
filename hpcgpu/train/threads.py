"""Deprecated name of :mod:`hpcgpu.train.gemm_threads` (renamed for what it holds); it goes in the next release."""

import sys
import warnings

from . import gemm_threads as _new

warnings.warn("hpcgpu.train.threads is now hpcgpu.train.gemm_threads; the old name goes in the next release",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _new
