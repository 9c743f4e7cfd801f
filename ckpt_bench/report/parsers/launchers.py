"""What launchers write into a training log: a prefix before each line of a rank, and lines of their own.

The prefixes, stripped for every format (`base.LogFormat.feed`), so a format's parser reads the program's
line whatever launched it:

     13: saving checkpoint at iteration     100 to /ckpt        srun --label: the Slurm task, padded
    retrain_ft/0 [default3]:[rank3]: Traceback (most recent ...  nemo-run's log view: the role's last 10
                                                                 characters and the replica; torchrun --tee:
                                                                 `[<role><local rank>]:`; torch's excepthook:
                                                                 `[rank<global rank>]: `
    [rank0]:2025-04-01 00:25:54,090 - root - INFO - Saving ...   torchrun --tee under `--role rank`

The rank a prefix names (the innermost `[<role>N]:`) goes to the parser with the line. nemo-run's prefix
is taken only before a `[`: a torchrun prefix or a launcher's time stamp follow it on every line that can
matter, and a line such as `50/100 done` keeps its words.

The launcher's own lines: NVIDIA's fault-tolerance launcher (ft_launcher, nvidia-resiliency-ext) and
torchelastic print their launch configuration (`min_nodes : 1`, `max_nodes : 1`, `nproc_per_node : 8`:
the world size when the node count is fixed), restart a failed worker group (`[default] Worker group
FAILED. 3/3 attempts left; will restart worker group`) and pass signals on (`Received 15 death signal,
shutting down workers`): `Launcher` reads them, and a restart tells a parser that the processes before
it are gone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

SRUN_LABEL = r"[ \t]*\d+: "
_NEMO_RUN = r"[\w.\-]+/\d+ (?=\[)"
# torchrun's `[default0]:`, torch's excepthook's `[rank3]: `: its one space is the prefix's, always (taken
# by a lookahead and a backreference, so no match gives it back as the indentation of the text after it)
_TORCHRUN = r"\[[A-Za-z_]+\d+\]:(?=(?P<space> ?))(?P=space)"
PREFIX = re.compile(f"(?:{SRUN_LABEL}|{_NEMO_RUN}|{_TORCHRUN})+")
_RANK = re.compile(r"\[[A-Za-z_]+(\d+)\]:")
# The same prefixes in a raw line, for a format's `Grammar`: a line whose text after them is indented
# continues the record above it (a timer's entries). All of them, as one piece (a lookahead and a
# backreference): never fewer, so the space a prefix ends with is never taken for indentation.
PREFIX_BYTES = f"(?=(?P<prefix>(?:{SRUN_LABEL}|{_NEMO_RUN}|{_TORCHRUN})*))(?P=prefix)".encode()

RESTART = re.compile(r"Worker group (?P<state>FAILED|UNHEALTHY)\. (?P<left>\d+)/(?P<most>\d+) attempts left; "
                     r"will restart worker group|(?P<left_>\d+)/(?P<most_>\d+) restart attempts left; restarting")
DEATH_SIGNAL = re.compile(r"Received (?P<signal>\d+) death signal, shutting down workers")
CONFIG = re.compile(r"(?:^|\s)(?P<key>min_nodes|max_nodes|nproc_per_node)\s*:\s*(?P<value>\d+)\s*$")
KEYWORDS = (b"Worker group ", b"restart attempts left", b"death signal", b"_nodes ", b"nproc_per_node ")


def split(line: str) -> tuple[int | None, str]:
    """(the rank the launcher prefix names, or None; the line without the prefix)."""
    match = PREFIX.match(line)
    if match is None:
        return None, line
    ranks = _RANK.findall(match[0])
    return (int(ranks[-1]) if ranks else None), line[match.end():]


@dataclass
class Launcher:
    """What the launcher's own lines said: worker-group restarts and signals, for the notes."""

    restarts: list[str] = field(default_factory=list)  # each restart as the launcher said it
    signals: list[int] = field(default_factory=list)
    config: dict[str, int] = field(default_factory=dict)  # its launch configuration's sizes

    @property
    def world_size(self) -> int | None:
        """Processes per node times nodes, when the launch configuration fixes the node count."""
        nodes, most = self.config.get("min_nodes"), self.config.get("max_nodes")
        per_node = self.config.get("nproc_per_node")
        return nodes * per_node if nodes is not None and nodes == most and per_node is not None else None

    def read(self, message: str) -> bool:
        """Reads a launcher line; whether it says the worker group is restarted (its processes are gone)."""
        if match := CONFIG.search(message):
            self.config[match["key"]] = int(match["value"])
        elif match := RESTART.search(message):
            left, most = match["left"] or match["left_"], match["most"] or match["most_"]
            state = f"worker group {match['state']}, " if match["state"] else ""
            self.restarts.append(f"{state}{left} of {most} restart attempts left")
            return True
        elif match := DEATH_SIGNAL.search(message):
            self.signals.append(int(match["signal"]))
        return False

    @property
    def notes(self) -> list[str]:
        notes = []
        if self.restarts:
            notes.append(f"the launcher restarted the worker group {len(self.restarts)} time"
                         f"{'s' * (len(self.restarts) > 1)} ({'; '.join(self.restarts)}): saves still being "
                         "written by the processes before a restart never finished")
        if self.signals:
            notes.append(f"the launcher passed signal {', '.join(map(str, self.signals))} on to the workers "
                         "(a preemption or a cancelled job)")
        return notes
