"""The model description's one error: an argument set megatron-core would refuse, or one we cannot size.
Its own module, so that the description's parts (families, tokenizers, architecture) share it without
importing one another."""

from __future__ import annotations

__all__ = ["ArchitectureError"]


class ArchitectureError(ValueError):
    """An argument set megatron-core would refuse, or one we cannot size."""
