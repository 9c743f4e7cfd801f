"""A run directory: everything one benchmark run leaves behind, enough to rebuild its report.

    <runs-dir>/<YYYYmmdd-HHMMSS>-<name>/
        resolved.yaml        the configuration as it was run (variables, presets, overrides applied)
        commands.sh          the exact commands of every pass
        worker.json          the spec the ranks read
        logs/<pass>/         torchrun's per-rank logs (+ console.log, everything as printed);
                             logs/<pass>/node-<R>/ per node in a multi-node run
        comms/<pass>.json    collective bandwidth (--backend comms, or the --preflight pass)
        nodes/<pass>/node-<R>.json  a multi-node run's per-node pass results (bench.launcher.nodes)
        events/rank-R.jsonl  checkpoint events (bench.events)
        integrity/           per-save tensor digests and per-rank load verdicts (bench.integrity)
        measurements.json    optional: report sections a worker measured (Lightning's training-time impact)
        run.json             run facts: backend, config for the report, checkpoint sizes, passes
        report.json          the report

Checkpoint folder sizes are measured into run.json before checkpoints are removed, so
`ckpt_report.py RUN_DIR` rebuilds the same report later.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from bench import integrity
from bench.events import event_files, read_event_files
from bench.report import ReportBuilder

RUN_FILE = "run.json"
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
                from bench.config import ConfigError

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


def build_run_report(run_dir: str | os.PathLike, ckpt_dir: str | os.PathLike | None = None) -> dict:
    """The report of one of our runs, from its run directory alone (or with `ckpt_dir` re-measured)."""
    from bench.checkpoint_dir import iteration_folder_sizes

    run = RunDir(run_dir)
    facts = run.read_run()
    if ckpt_dir is not None:
        folder_sizes = iteration_folder_sizes(ckpt_dir)
    else:
        folder_sizes = {int(k): v for k, v in (facts.get("folder_sizes") or {}).items()} or None
    passes = facts.get("passes", [])
    failed = [p for p in passes if not p["ok"]]

    def run_section(status: str) -> dict:
        return {"dir": str(run.path), "backend": facts.get("backend"), "status": status, "passes": passes}

    if facts.get("checkpoints") is False:
        # A backend without checkpoints (the comms sweep): its report is what its passes measured.
        return {
            "comms": run.comms_results("comms"),
            "config": facts.get("run_info"),
            "environment": facts.get("environment"),
            "notes": facts.get("notes") or [],
            "run": run_section("failed" if failed else "ok"),
        }
    load_ran = any(p["name"] == "load" for p in passes)
    verdicts = run.load_verdicts()
    verifies = facts.get("verifies", True)  # a framework's load pass checks nothing for us
    verification = integrity.combine(verdicts) if (verdicts or (load_ran and verifies)) else None
    builder = ReportBuilder().add_all(read_event_files(event_files(run.events_dir)))
    report = builder.build(
        run_info=facts.get("run_info"),
        folder_sizes=folder_sizes,
        verification=verification,
        environment=facts.get("environment"),
        load_cache=facts.get("load_cache"),
        notes=facts.get("notes"),
    )
    if any(p["name"] == "preflight" for p in passes):
        report["preflight"] = run.comms_results("preflight")  # the fabric, measured just before
    measurements = run.path / MEASUREMENTS_FILE
    if measurements.is_file():  # what a worker measured beyond checkpoints (Lightning: training-time impact)
        report.update(json.loads(measurements.read_text()))
    verified = report["verified"] is not False
    report["run"] = run_section("ok" if not failed and verified else ("failed" if failed else "verification-failed"))
    return report
