"""The whole job's save and restart from a few hosts: what a 1,024-GPU job's checkpoint will take on this
storage, term by term, and which limit binds (docs/projection.md).

    section = projection(job, options, report)   # report.json's `projection`, --plan's too
    inputs = projection_inputs(job, options)     # a run's: projection.json in its run directory ...
    add_projection(report, run_dir)               # ... its report's section (ckpt_report.py RUN too)

`job` is the job's checkpoint at its full size (`JobCheckpoint`: what each rank writes and reads, where the
ranks sit; a backend that knows its job's size makes one), `options` the figures given (`ProjectionOptions`),
`report` a run's report when the hosts that ran measured their client rates (a subset of whole hosts).

Each name is imported from its module when first asked for: a report of logs (`ckpt_report.py`) needs the
options' flags alone, and its start-up is part of how fast it reads a log tree (docs/logs.md).
"""

from __future__ import annotations

import importlib

__all__ = ["PROJECTION_FILE", "JobCheckpoint", "ProjectionOptions", "add_projection", "projection",
           "projection_inputs", "purchase"]

#: Each name -> the module defining it.
_HOMES = {"JobCheckpoint": "job", "ProjectionOptions": "inputs", "PROJECTION_FILE": "section",
          "add_projection": "section", "projection": "section", "projection_inputs": "section",
          "purchase": "section"}


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])
