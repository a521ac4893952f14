"""Stand-in for the parts of ``cupyx`` hpcgpu uses: ``errstate``/``geterr`` (``linalg``) and ``cupyx.scipy.linalg``.

Mirrored from CuPy's ``cupyx/_errstate.py`` (thread-local, ``linalg`` in ``{"ignore", "raise"}``, "ignore" by
default). Put beside the ``cupy`` stand-in (tests/device/standin) so that ``import cupyx`` finds it.
"""

from __future__ import annotations

import contextlib
import threading

_STATE = threading.local()


def geterr() -> dict:
    """The current error handling: ``{"divide": None, "over": None, "under": None, "invalid": None, "linalg": ...}``.

    Returns
    -------
    dict
    """
    return {"divide": None, "over": None, "under": None, "invalid": None,
            "linalg": getattr(_STATE, "linalg", "ignore")}


@contextlib.contextmanager
def errstate(*, divide=None, over=None, under=None, invalid=None, linalg=None):
    """Set how linear algebra failures are reported inside the block: ``"ignore"`` or ``"raise"``.

    Parameters
    ----------
    divide, over, under, invalid : None
        Not supported by CuPy either (``NotImplementedError`` when given).
    linalg : {None, "ignore", "raise"}
    """
    if any(v is not None for v in (divide, over, under, invalid)):
        raise NotImplementedError()
    if linalg not in (None, "ignore", "raise"):
        raise ValueError(f"linalg must be one of ignore or raise, got {linalg!r}")
    old = getattr(_STATE, "linalg", "ignore")
    if linalg is not None:
        _STATE.linalg = linalg
    try:
        yield
    finally:
        _STATE.linalg = old
