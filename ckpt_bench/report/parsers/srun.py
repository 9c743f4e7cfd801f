"""Megatron-LM stdout captured with `srun --label`: every line starts with the Slurm task that wrote it.

     0: [2026-05-14 10:00:00.123456] saving checkpoint at iteration     100 to /ckpt in torch_dist format
     0:   [2026-05-14 10:00:01.200000] scheduled an async checkpoint save at iteration     100 to /ckpt
    13: (min, max) time across ranks (ms):
    13:     save-checkpoint ................................: (1180.00, 1234.50)

Slurm pads the task number to the width of the largest one (` 0: ` beside `13: `). With one task per
GPU the task is the rank: rank 0 prints the save lines and the arguments dump, the last rank the
timers. The label is a launcher prefix, stripped as every launcher's is (`launchers`), and the message
read by Megatron's grammar (`MegatronParser`), so the clocks are Megatron's: its timestamps (1 us), else
its timers (10 us as printed). A record's continuation lines are those whose text after the label is
indented (a timer's entries below its header): a timer block is read as Slurm passes it on, a task's
one write, its lines one after another. This format only names such logs in the report.
"""

from __future__ import annotations

import re

from ckpt_bench.report.parsers.launchers import SRUN_LABEL
from ckpt_bench.report.parsers.megatron import MegatronParser

LABEL = re.compile(SRUN_LABEL)


class SrunMegatronParser(MegatronParser):
    """Megatron stdout with a task label on every line."""

    format = "megatron-srun-label"

    @classmethod
    def sniff(cls, first_lines: list[str]) -> bool:
        """Most lines carry a label (a few of srun's own, or of the batch script, may not)."""
        lines = [line for line in first_lines if line.strip()]
        labelled = sum(1 for line in lines if LABEL.match(line))
        return labelled >= 2 and labelled >= 0.8 * len(lines)
