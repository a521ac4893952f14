"""Block ownership arithmetic shared by the data sharding and the process grid."""

from __future__ import annotations


def block_range(n: int, parts: int, i: int) -> tuple[int, int]:
    """Rows ``[start, stop)`` of part ``i`` when ``n`` rows split into ``parts``.

    Balanced: part sizes differ by at most one, the larger ones last
    (``start = n * i // parts``). Parts may be empty when ``parts > n``.
    """
    if parts <= 0 or not 0 <= i < parts:
        raise ValueError(f"part {i} of {parts} does not exist")
    return n * i // parts, n * (i + 1) // parts


def block_starts(n: int, parts: int) -> list[int]:
    """``[block_range(n, parts, i)[0] for i in range(parts)] + [n]``."""
    return [n * i // parts for i in range(parts)] + [n]
