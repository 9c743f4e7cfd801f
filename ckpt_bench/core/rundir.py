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

Every file of a run directory is written whole or not at all (`write_atomic`: a temporary file renamed
over the name), so a full disk never leaves a 0-byte or truncated report behind; `RunDir.write` turns
a refusal into one line on stderr and returns False, so the launcher goes on (removes the checkpoints,
prints the report) when its own disk fails.

Checkpoint folder sizes are measured into run.json before checkpoints are removed, so
`ckpt_report.py RUN_DIR` rebuilds the same report later (`ckpt_bench.report.assembly.run_report`). This module is
the layout only: paths, and reading and writing its files.
"""

from __future__ import annotations

import errno
import json
import os
import re
import sys
import time
from pathlib import Path

from ckpt_bench.core.errors import ConfigError
from ckpt_bench.core.run_facts import RunFacts

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
# Old checkpoints a Megatron worker deleted after its saves (retention, non-persistent clean-up), each timed.
DELETIONS_FILE = "deletions.json"
# A run id names a folder inside --runs-dir: a name, never a path (no `/`, not `.` or `..`).
RUN_ID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,199}$")


def write_atomic(path: str | os.PathLike, text: str) -> None:
    """`path` holds `text` whole, or keeps what it held: a temporary file beside it is written, fsynced and
    renamed over it, so a full disk or a killed process never leaves a 0-byte or truncated file, and a
    reader on another node never sees half of one. Creates the folder if needed. Raises OSError (the
    temporary file removed)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(scratch, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(scratch, path)
    except BaseException:
        scratch.unlink(missing_ok=True)
        raise


def check_run_id(run_id: str) -> None:
    """Refuse a run id that is not a plain folder name (it would put the run outside --runs-dir)."""
    if not RUN_ID.match(run_id) or run_id in (".", ".."):
        raise ConfigError(f"--run-id {run_id!r}: a run id is a folder name inside --runs-dir: letters, digits, "
                          "'.', '_' and '-' (not starting with '.' or '-'), at most 200 characters")


def _cannot_create(flag: str, folder: Path, error: OSError) -> ConfigError:
    """One line for a folder we cannot create a run directory in (a file, read-only, no permission)."""
    reason = error.strerror or str(error)
    if error.errno == errno.ENOTDIR or (folder.exists() and not folder.is_dir()):
        reason = "it is a file, not a folder"
    return ConfigError(f"{flag} {folder}: cannot create a run directory there ({reason}); give a folder you can "
                       "write to")


class RunDir:
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    @classmethod
    def create(cls, runs_dir: str | os.PathLike, name: str, run_id: str | None = None) -> RunDir:
        """A new run directory: `<runs-dir>/<run_id>` exactly (every node of a multi-node run is given
        the same id), else a fresh `<runs-dir>/<stamp>-<name>`. A runs folder that cannot hold it (a file,
        read-only, not ours to write) is a ConfigError: one line, nothing created."""
        runs_dir = Path(runs_dir)
        try:
            if run_id is not None:
                check_run_id(run_id)
                path = runs_dir / run_id
                try:
                    path.mkdir(parents=True)
                except FileExistsError:
                    raise ConfigError(f"--run-id {run_id}: {path} already exists; give each run a new id") from None
                return cls(path)
            stamp = time.strftime("%Y%m%d-%H%M%S")
            safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name).lstrip(".") or "run"
            base = runs_dir / f"{stamp}-{safe}"
            path, suffix = base, 1
            while True:
                try:
                    path.mkdir(parents=True)
                    return cls(path)
                except FileExistsError:
                    suffix += 1
                    path = base.with_name(f"{base.name}-{suffix}")
        except ConfigError:
            raise
        except OSError as error:
            raise _cannot_create("--runs-dir", runs_dir, error) from None

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

    def write(self, name: str, text: str) -> bool:
        """`<run dir>/<name>` written whole (`write_atomic`). A disk that refuses (full, read-only, gone) is
        one line on stderr and False: the launcher's own writes never end a run in a traceback."""
        path = self.path / name
        try:
            write_atomic(path, text)
            return True
        except OSError as error:
            print(f"could not write {path}: {error.strerror or error}", file=sys.stderr, flush=True)
            return False

    def write_json(self, name: str, data) -> bool:
        return self.write(name, json.dumps(data, indent=2, default=str) + "\n")

    def read_run(self) -> RunFacts:
        return RunFacts.from_json(json.loads((self.path / RUN_FILE).read_text()))

    def load_verdicts(self) -> tuple[dict[int, dict], list[str]]:
        """Each rank's load verdict, and the verdict files that could not be read (a rank that wrote its
        own on a disk that was filling leaves it empty): the report names those, never a traceback."""
        verdicts, unreadable = {}, []
        for path in sorted(self.integrity_dir.glob("load-rank-*.json")):
            try:
                verdicts[int(path.stem.split("-")[-1])] = json.loads(path.read_text())
            except (OSError, ValueError) as error:
                unreadable.append(f"{path}: {error}")
        return verdicts, unreadable
