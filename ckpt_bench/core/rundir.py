"""A run directory: everything one benchmark run leaves behind, enough to rebuild its report.

    <runs-dir>/<YYYYmmdd-HHMMSS>-<name>/
        resolved.yaml        the configuration as it was run (variables, presets, overrides applied)
        commands.sh          the exact commands of every pass
        worker.json          the spec the ranks read
        logs/<pass>/         torchrun's per-rank logs (+ console.log, everything as printed);
                             logs/<pass>/node-<R>/ per node in a multi-node run
        comms/<pass>.json    collective bandwidth (--backend comms, or the --preflight pass)
        nodes/<pass>/node-<R>.json  a multi-node run's per-node pass results (ckpt_bench.launcher.nodes)
        events/rank-R.jsonl  checkpoint events (ckpt_bench.core.events)
        integrity/           per-save tensor digests and per-rank load verdicts (ckpt_bench.worker.integrity)
        measurements.json    optional: report sections a worker measured (Lightning's training-time impact)
        run.json             run facts: backend, config for the report, checkpoint sizes, passes
        report.json          the report

Checkpoint folder sizes are measured into run.json before checkpoints are removed, so
`ckpt_report.py RUN_DIR` rebuilds the same report later (`ckpt_bench.report.assembly.run_report`). This module is
the layout only: paths, and reading and writing its files.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

RUN_FILE = "run.json"
# A sweep directory's results (ckpt_bench.sweep.run): `run_results.json`, or `ckpt_bench_results.json` where another
# tool's file takes that name (an s3torchbenchmarking sweep, ckpt_bench.sweep.peers). The first that exists is ours.
SWEEP_RESULTS_FILES = ("ckpt_bench_results.json", "run_results.json")


def sweep_results_file(folder: str | os.PathLike) -> Path | None:
    """Our results file in sweep directory `folder`, or None if it is not one."""
    found = [Path(folder) / name for name in SWEEP_RESULTS_FILES if (Path(folder) / name).is_file()]
    return found[0] if found else None
# Report sections a worker measured beyond checkpoint events, e.g. {"training": {...}} (Lightning).
MEASUREMENTS_FILE = "measurements.json"


class RunDir:
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    @classmethod
    def create(cls, runs_dir: str | os.PathLike, name: str, run_id: str | None = None) -> RunDir:
        """A new run directory: `<runs-dir>/<run_id>` exactly (every node of a multi-node run is given
        the same id), else a fresh `<runs-dir>/<stamp>-<name>`."""
        if run_id is not None:
            path = Path(runs_dir) / run_id
            try:
                path.mkdir(parents=True)
            except FileExistsError:
                from ckpt_bench.core.errors import ConfigError

                raise ConfigError(f"--run-id {run_id}: {path} already exists; give each run a new id") from None
            return cls(path)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "run"
        base = Path(runs_dir) / f"{stamp}-{safe}"
        path, suffix = base, 1
        while True:
            try:
                path.mkdir(parents=True)
                break
            except FileExistsError:
                suffix += 1
                path = base.with_name(f"{base.name}-{suffix}")
        return cls(path)

    @staticmethod
    def is_run_dir(path: str | os.PathLike) -> bool:
        return (Path(path) / RUN_FILE).is_file()

    @property
    def events_dir(self) -> Path:
        return self.path / "events"

    @property
    def integrity_dir(self) -> Path:
        return self.path / "integrity"

    @property
    def logs_dir(self) -> Path:
        return self.path / "logs"

    @property
    def comms_dir(self) -> Path:
        return self.path / "comms"

    def comms_results(self, name: str) -> dict | None:
        path = self.comms_dir / f"{name}.json"
        return json.loads(path.read_text()) if path.is_file() else None

    @property
    def report_path(self) -> Path:
        return self.path / "report.json"

    def write_json(self, name: str, data) -> Path:
        path = self.path / name
        path.write_text(json.dumps(data, indent=2, default=str) + "\n")
        return path

    def read_run(self) -> dict:
        return json.loads((self.path / RUN_FILE).read_text())

    def load_verdicts(self) -> dict[int, dict]:
        return {
            int(path.stem.split("-")[-1]): json.loads(path.read_text())
            for path in self.integrity_dir.glob("load-rank-*.json")
        }
