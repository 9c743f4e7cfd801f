"""Byte units, binary as the report states them (`units.bandwidth`: MiB/s = bytes / 2**20 / s)."""

KIB = 1 << 10
MIB = 1 << 20
GIB = 1 << 30
