"""Stand-in for nvmath-python 1.0: only ``nvmath.bindings.cublas``, the part hpcgpu uses.

With ``HPCGPU_STANDIN_FAIL=nvmath`` (read by the CuPy stand-in at ``import cupy``)
importing it fails as it does where nvmath-python is not installed.
"""

from __future__ import annotations

from cupy import _standin

if "nvmath" in _standin.FAIL:
    raise ModuleNotFoundError("No module named 'nvmath'", name="nvmath")

__version__ = "1.0.0"
