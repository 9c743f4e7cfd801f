"""Where ckpt-bench keeps what it computed once and can reuse: `$CKPT_BENCH_CACHE`, else
`$XDG_CACHE_HOME/ckpt-bench`, else `~/.cache/ckpt-bench`; one folder each kind. An entry is one JSON file named
by the hash of what it depends on; a cache that cannot be read or written is recomputed, never an error."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path


def cache_dir(kind: str) -> Path:
    """The folder of one kind of entry (`rank-costs`, `megatron-lm-parsers`)."""
    if os.environ.get("CKPT_BENCH_CACHE"):
        return Path(os.environ["CKPT_BENCH_CACHE"]) / kind
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "ckpt-bench" / kind


def key_of(facts: dict) -> str:
    """An entry's name: the hash of the facts its value depends on."""
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:32]


def read_json(path: Path):
    """The entry's value, or None where there is none or it cannot be read."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def write_json(path: Path, value) -> None:
    """Write the entry whole (a reader beside never sees half of it), readable by all as a plain file would be
    (a cache folder may be shared); where it cannot be written, nothing, and no half-written file left."""
    written = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", delete=False) as file:
            written = Path(file.name)
            json.dump(value, file)
        written.chmod(0o644)
        os.replace(written, path)
    except OSError:
        pass  # no cache: computed again next time
    finally:
        if written is not None:
            written.unlink(missing_ok=True)  # gone once replaced; else the half-written file
