"""A run directory: everything one benchmark run leaves behind, enough to rebuild its report.

    <runs-dir>/<YYYYmmdd-HHMMSS>-<name>/
        resolved.yaml        the configuration as it was run (variables, presets, overrides applied)
        commands.sh          the exact commands of every pass
        worker.json          the spec the ranks read
        logs/<pass>/         torchrun's per-rank logs (+ console.log, everything as printed)
        events/rank-R.jsonl  checkpoint events (bench.events)
        integrity/           per-save tensor digests and per-rank load verdicts (bench.integrity)
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


class RunDir:
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    @classmethod
    def create(cls, runs_dir: str | os.PathLike, name: str) -> RunDir:
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
    load_ran = any(p["name"] == "load" for p in passes)
    verdicts = run.load_verdicts()
    verification = integrity.combine(verdicts) if (verdicts or load_ran) else None
    builder = ReportBuilder().add_all(read_event_files(event_files(run.events_dir)))
    report = builder.build(
        run_info=facts.get("run_info"),
        folder_sizes=folder_sizes,
        verification=verification,
        environment=facts.get("environment"),
        load_cache=facts.get("load_cache"),
        notes=facts.get("notes"),
    )
    failed = [p for p in passes if not p["ok"]]
    verified = report["verified"] is not False
    report["run"] = {
        "dir": str(run.path),
        "backend": facts.get("backend"),
        "status": "ok" if not failed and verified else ("failed" if failed else "verification-failed"),
        "passes": passes,
    }
    return report
