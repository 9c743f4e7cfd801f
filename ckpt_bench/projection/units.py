"""Sizes and counts as the projection writes them for a reader."""

from __future__ import annotations

__all__ = ["GB", "gb", "plural"]

GB = 1e9


def gb(size: float) -> str:
    """Bytes in decimal units a reader takes in at a glance: 10,117 GB, 240.3 GB, 37.76 MB, 46.02 kB."""
    for unit, scale in (("GB", GB), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            value = size / scale
            return f"{value:,.0f} {unit}" if value >= 1000 else f"{value:.4g} {unit}"
    return f"{size:,.0f} B"


def plural(count: int, word: str) -> str:
    return f"{count:,} {word}{'' if count == 1 else 's'}"
