"""Stand-in for ``cupy.cuda.runtime`` (``cupy_backends.cuda.api.runtime``)."""

from __future__ import annotations

from cupy import _standin
from cupy._standin import CUDARuntimeError

__all__ = [
    "CUDARuntimeError", "getDeviceCount", "getDevice", "setDevice", "getDeviceProperties",
    "runtimeGetVersion", "driverGetVersion", "deviceSynchronize", "memGetInfo", "is_hip",
]

is_hip = False
errorMemoryAllocation = 2
errorInvalidDevice = 101
errorNoDevice = 100


def getDeviceCount() -> int:
    """Number of visible devices; raises ``CUDARuntimeError`` when there is none.

    Returns
    -------
    int
    """
    return _standin.device_count()


def getDevice() -> int:
    """This thread's current device.

    Returns
    -------
    int
    """
    _standin.device_count()
    return _standin.current_device()


def setDevice(device: int) -> None:
    """Make ``device`` current (creates its context, as CUDA 12 does).

    Parameters
    ----------
    device : int
    """
    _standin.set_current_device(device)


def getDeviceProperties(device: int) -> dict:
    """Properties of ``device`` (no context is created).

    Parameters
    ----------
    device : int

    Returns
    -------
    dict
        ``name`` (bytes), ``totalGlobalMem``, ``major``, ``minor``, ...
    """
    i = _standin.check_device(device)
    major, minor = _standin.COMPUTE_CAPABILITY
    return {
        "name": b"Stand-in GPU",
        "totalGlobalMem": _standin.DEVICE_MEMORY,
        "major": major,
        "minor": minor,
        "multiProcessorCount": 132,
        "warpSize": 32,
        "maxThreadsPerBlock": 1024,
        "pciBusID": _standin.VISIBLE[i] + 1,
        "pciDeviceID": 0,
        "pciDomainID": 0,
        "unifiedAddressing": 1,
        "managedMemory": 1,
    }


def runtimeGetVersion() -> int:
    """CUDA runtime version CuPy was built with (12.8).

    Returns
    -------
    int
    """
    return _standin.RUNTIME_VERSION


def driverGetVersion() -> int:
    """CUDA version of the driver (11.4 in the ``driver`` failure mode).

    Returns
    -------
    int
    """
    return _standin.DRIVER_VERSION


def deviceSynchronize() -> None:
    """Wait for all work of the current device: every stream's kernels land."""
    dev = _standin.ensure_context()
    _standin.device_synchronize(dev)


def memGetInfo() -> tuple[int, int]:
    """``(free, total)`` bytes of the current device.

    Returns
    -------
    tuple of int
    """
    dev = _standin.ensure_context()
    used = _standin._device_bytes["used"].get(dev, 0)
    return (_standin.DEVICE_MEMORY - used, _standin.DEVICE_MEMORY)


def eventQuery(event: int) -> int:  # noqa: N802 - CUDA's name, as CuPy spells it
    """``cudaEventQuery`` of the event whose ``ptr`` is ``event``: 0 (done) or 600 (not ready); never blocks.

    The stand-in's kernels compute when they are launched, so recorded work
    is done (it lands, for MPI and host reads, only at a synchronize: this
    query lands nothing, so a watchdog thread may call it). Safe from any
    thread.

    Raises
    ------
    CUDARuntimeError
        ``cudaErrorInvalidResourceHandle`` for a pointer of no live event.
    """
    from cupy.cuda.stream import event_of_ptr

    event_of_ptr(event)
    return 0
