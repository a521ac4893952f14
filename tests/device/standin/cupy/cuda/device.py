"""Stand-in for ``cupy.cuda.device``."""

from __future__ import annotations

from cupy import _standin
from cupy.cuda import runtime

__all__ = ["Device", "get_cublas_handle", "get_device_id", "get_compute_capability"]

_compute_capabilities: dict[int, str] = {}


class Device:
    """A CUDA device (no check of the ordinal until it is used, as in CuPy).

    Parameters
    ----------
    device : int, optional
        Ordinal; the current device by default.
    """

    def __init__(self, device: int | None = None):
        self.id = runtime.getDevice() if device is None else int(device)
        self._prev: list[int] = []

    def use(self) -> Device:
        """Make this the current device (``cudaSetDevice``: creates its context).

        Returns
        -------
        Device
        """
        runtime.setDevice(self.id)
        return self

    def __enter__(self):
        prev = runtime.getDevice()
        self._prev.append(prev)
        if self.id != prev:
            runtime.setDevice(self.id)
        return self

    def __exit__(self, *exc):
        # As CuPy: cudaSetDevice(previous), which creates the previous device's context too.
        runtime.setDevice(self._prev.pop())
        return False

    def synchronize(self) -> None:
        """Wait for all work on this device; as CuPy, sets it and then the previous device again."""
        prev = runtime.getDevice()
        try:
            runtime.setDevice(self.id)
            runtime.deviceSynchronize()
        finally:
            runtime.setDevice(prev)

    @property
    def pci_bus_id(self) -> str:
        """The PCI bus id as CUDA gives it (``cudaDeviceGetPCIBusId``), e.g. ``'0000:03:00.0'``: the physical
        device's, whatever ``CUDA_VISIBLE_DEVICES`` numbers it."""
        physical = _standin.VISIBLE[self.id] if 0 <= self.id < len(_standin.VISIBLE) else self.id
        return f"0000:{3 + physical:02X}:00.0"

    @property
    def compute_capability(self) -> str:
        """E.g. ``'90'``. The first query sets this device and then the previous one (contexts), as CuPy."""
        if self.id in _compute_capabilities:
            return _compute_capabilities[self.id]
        prev = runtime.getDevice()
        try:
            runtime.setDevice(self.id)
            major, minor = _standin.COMPUTE_CAPABILITY
            _compute_capabilities[self.id] = f"{major}{minor}"
            return _compute_capabilities[self.id]
        finally:
            runtime.setDevice(prev)

    @property
    def mem_info(self) -> tuple[int, int]:
        """``(free, total)`` bytes."""
        with self:
            return runtime.memGetInfo()

    @property
    def cublas_handle(self) -> int:
        """A (fake) cuBLAS handle; loading cuBLAS can fail (``HPCGPU_STANDIN_FAIL=cublas``)."""
        from cupy.cuda import cublas  # noqa: F401  (ImportError when libcublas is missing)

        _standin.ensure_context(self.id)
        return 0xCB000 + self.id

    def __int__(self):
        return self.id

    def __index__(self):
        return self.id

    def __eq__(self, other):
        return isinstance(other, Device) and other.id == self.id

    def __hash__(self):
        return hash(("Device", self.id))

    def __repr__(self):
        return f"<CUDA Device {self.id}>"


def get_device_id() -> int:
    """The current device ordinal.

    Returns
    -------
    int
    """
    return runtime.getDevice()


def get_compute_capability() -> str:
    """Compute capability of the current device, e.g. ``'90'``.

    Returns
    -------
    str
    """
    return Device().compute_capability


def get_cublas_handle() -> int:
    """cuBLAS handle of the current device.

    Returns
    -------
    int
    """
    return Device().cublas_handle
