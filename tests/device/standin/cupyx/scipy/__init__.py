"""Stand-in for ``cupyx.scipy`` (only ``cupyx.scipy.linalg``)."""
