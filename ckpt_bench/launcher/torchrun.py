"""Running one pass of a benchmark under torchrun, and telling the user what happened.

We do not reimplement process launching: `python -m torch.distributed.run` starts the ranks, keeps
one log per rank (`--log-dir`, `--redirects 3 --tee 3`) and reports which rank failed. This module
builds that command, streams the ranks' output (showing rank 0's progress lines), and on failure
names the failing rank with the tail of its own log.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ckpt_bench.core import progress
from ckpt_bench.launcher import oom
from ckpt_bench.launcher.guard import guarded
from ckpt_bench.report.schema import FailedRank, PassSummary

# torchrun's --tee prefixes every line with `[<role><local_rank>]:`.
_TEE_PREFIX = re.compile(r"^\[default(\d+)\]:(.*)$")
# The failure summary torchrun prints: `rank       : 1 (local_rank: 1)` / `exitcode   : 3 (pid: ...)`,
# the first observed failure last, under `Root Cause (first observed failure):`.
_FAILED_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)")
_EXIT_CODE = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")
_ROOT_CAUSE = re.compile(r"^Root Cause \(first observed failure\)")
# A rank's own words for why it died: the line our workers print (`[rank 0] save failed: ZeroDivisionError: ...`,
# ckpt_bench.worker.entry), else the exception line that ends the last Python traceback in its stderr
# (torch prefixes a rank's lines with `[rank0]: ` on some paths).
_WORKER_FAILED = re.compile(r"^\[rank \d+\] \w+ failed: (?P<exception>.+)$", re.MULTILINE)
_RANK_PREFIX = re.compile(r"^\[rank\d+\]:\s?")
_TRACEBACK = "Traceback (most recent call last):"
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(: .*)?$")
STDERR_READ = 1 << 20  # of a rank's stderr log, the end read for its exception
# Storage failures that deserve a line of their own: a pattern in a failing rank's log -> what it means
# (with the path when the error names one).
_PATH = r"(?:: '(?P<path>[^']+)')?"
STORAGE_FAILURES = (
    (re.compile(r"No space left on device" + _PATH), "No space left on device"),
    (re.compile(r"Disk quota exceeded" + _PATH), "disk quota exceeded"),
    (re.compile(r"Read-only file system" + _PATH), "read-only file system"),
    (re.compile(r"Permission denied" + _PATH), "permission denied"),
    (re.compile(r"NoSuchBucket"), "the bucket does not exist"),
    (re.compile(r"AccessDenied|InvalidAccessKeyId|SignatureDoesNotMatch|ExpiredToken"), "access denied"),
    (re.compile(r"(?i)connection refused|could not connect to the endpoint|error trying to connect|dispatch failure|"
                r"connection reset|tcp connect error|timed out"), "endpoint unreachable"),
    # s3torchconnector's client (the CRT) closes a connection that moves no bytes for a while and, its
    # retries spent (minutes), fails the request with this code: an endpoint that accepted the upload
    # and never answered it.
    (re.compile(r"AWS_ERROR_HTTP_CHANNEL_THROUGHPUT_FAILURE|failure to meet throughput minimum"),
     "the endpoint stopped answering (the S3 client gave up after its retries: no bytes moved)"),
    (re.compile(r"CRT error \d+: [\w-]+: (?P<code>AWS_[A-Z_]+)"), "S3 client error"),
)


def storage_failure(text: str) -> str | None:
    """What a rank's log says went wrong with the storage, in a few words, or None."""
    for pattern, meaning in STORAGE_FAILURES:
        match = pattern.search(text)
        if match:
            found = match.groupdict()
            if found.get("code"):
                return f"{meaning} {found['code']}"
            return f"{meaning} on {found['path']}" if found.get("path") else meaning
    return None


def exception_in(stderr: str) -> str | None:
    """`Type: message` of the exception a rank's stderr says it died of, or None."""
    ours = _WORKER_FAILED.findall(stderr)
    if ours:
        return ours[-1].strip()
    lines = [_RANK_PREFIX.sub("", line) for line in stderr.splitlines()]
    starts = [i for i, line in enumerate(lines) if line.strip() == _TRACEBACK]
    if not starts:
        return None
    return next((line.strip() for line in lines[starts[-1] + 1:] if _EXCEPTION_LINE.match(line)), None)


def elastic_error(error_file: Path) -> str | None:
    """The message of torchelastic's error file (TORCHELASTIC_ERROR_FILE), which a rank whose entry point is
    wrapped in torch's `@record` writes when it raises: `Type: message`, or None."""
    try:
        message = json.loads(error_file.read_text(errors="replace"))["message"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    text = message.get("message") if isinstance(message, dict) else message
    return text.strip().splitlines()[0] if isinstance(text, str) and text.strip() else None


@dataclass
class Topology:
    nnodes: int = 1
    nproc_per_node: int = 2
    node_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int | None = None
    rdzv_endpoint: str | None = None  # c10d rendezvous (host:port) instead of a fixed master
    rdzv_id: str | None = None  # names one rendezvous of the c10d backend (we use one per pass)
    port_is_ours: bool = False  # master_port was a free port we picked (`free_port`), not the user's

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node


def signal_name(exit_code: int | None) -> str | None:
    """A negative exit code is the signal that ended the process: -9 -> SIGKILL."""
    if exit_code is None or exit_code >= 0:
        return None
    try:
        return signal.Signals(-exit_code).name
    except ValueError:
        return f"signal {-exit_code}"


@dataclass
class RankFailure:
    rank: int
    local_rank: int
    exit_code: int | None
    log_tail: str = ""
    first: bool = False  # torchrun's root cause: the first failure it observed
    killed_by: str | None = None  # who sent a root cause's SIGKILL, as far as we know (ckpt_bench.launcher.oom)
    exception: str | None = None  # `Type: message` of what the rank died of, as its error file or stderr says

    @property
    def signal(self) -> str | None:
        return signal_name(self.exit_code)

    @property
    def cause(self) -> str:
        """Why this rank ended: the first failure, or stopped by torchrun because another rank failed."""
        if self.first:
            return "first failure"
        return "stopped by torchrun after the first failure" if self.signal in ("SIGTERM", "SIGKILL") else "failed"

    def failed_rank(self) -> FailedRank:
        """As a pass summary lists it (`PassSummary.failed_ranks`)."""
        return FailedRank(self.rank, self.local_rank, self.exit_code, self.signal, self.cause, self.killed_by,
                          self.exception)

    def describe(self) -> str:
        how = self.killed_by or (f"killed by {self.signal}" if self.signal else f"exit code {self.exit_code}")
        return f"rank {self.rank} failed ({self.cause}; {how})" + (f": {self.exception}" if self.exception else "")


@dataclass
class PassResult:
    name: str
    command: list[str]
    exit_code: int
    log_dir: Path
    failures: list[RankFailure] = field(default_factory=list)
    # What went wrong with the storage, when known: from a failing rank's log (the first failure's
    # first), else from the storage itself (the lifecycle asks it).
    cause: str | None = None

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def console_tail(self, lines: int = 8) -> str:
        """The last lines the pass printed (its console.log): what says why a pass failed where no rank did (a
        framework's launcher script that stopped before its ranks started)."""
        return _tail(self.log_dir / "console.log", lines)

    def summary(self) -> PassSummary:
        return PassSummary(
            name=self.name, exit_code=self.exit_code, ok=self.ok, cause=self.cause,
            failed_ranks=[failure.failed_rank() for failure in self.failures], log_dir=str(self.log_dir),
        )


def lost_its_port(result: PassResult) -> bool:
    """Whether a pass failed only because another process took the free port we had picked before
    torchrun could listen on it (no rank started; torchrun's TCPStore says EADDRINUSE)."""
    if result.ok or result.failures:
        return False
    try:
        return "EADDRINUSE" in (result.log_dir / "console.log").read_text(errors="replace")
    except OSError:
        return False


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def torchrun_command(topology: Topology, log_dir: Path, module: str, args: Sequence[str]) -> list[str]:
    """`module` is a module name (`-m`), or a script path ending in `.py` (e.g. `pretrain_gpt.py`)."""
    command = [
        sys.executable, "-m", "torch.distributed.run",
        "--nnodes", str(topology.nnodes),
        "--nproc-per-node", str(topology.nproc_per_node),
    ]
    if topology.rdzv_endpoint:
        command += ["--rdzv-backend", "c10d", "--rdzv-endpoint", topology.rdzv_endpoint]
        if topology.rdzv_id:
            command += ["--rdzv-id", topology.rdzv_id]
    else:
        command += [
            "--node-rank", str(topology.node_rank),
            "--master-addr", topology.master_addr,
            "--master-port", str(topology.master_port),
        ]
    command += ["--log-dir", str(log_dir), "--redirects", "3", "--tee", "3"]
    command += [module] if module.endswith(".py") else ["-m", module]
    return [*command, *args]


def _rank_log(log_dir: Path, local_rank: int, stream: str) -> Path | None:
    """torchrun writes `<log_dir>/<run_id>/attempt_<k>/<local_rank>/<stream>.log`; take the newest."""
    found = sorted(log_dir.glob(f"*/attempt_*/{local_rank}/{stream}.log"), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def _end(path: Path | None, size: int = STDERR_READ) -> str:
    """The last `size` bytes of a log, as text ('' where there is none)."""
    if path is None or not path.is_file():
        return ""
    with open(path, "rb") as handle:
        handle.seek(max(0, path.stat().st_size - size))
        return handle.read().decode("utf-8", errors="replace")


def _tail(path: Path | None, lines: int = 20) -> str:
    if path is None or not path.is_file():
        return ""
    with open(path, encoding="utf-8", errors="replace") as handle:
        return "".join(handle.readlines()[-lines:])


class ConsoleLog:
    """A pass's `console.log`, written as the pass prints. A disk that refuses it (full, read-only) costs the
    rest of the log, said once on stderr, never the pass: the lines are still read and shown."""

    def __init__(self, path: Path):
        self.path = path
        self._file = None

    def __enter__(self) -> ConsoleLog:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "w", encoding="utf-8")  # closed in __exit__
        except OSError as error:
            self._refused(error)
        return self

    def write(self, line: str) -> None:
        if self._file is not None:
            try:
                self._file.write(line)
            except OSError as error:
                self._refused(error)

    def _refused(self, error: OSError) -> None:
        print(f"could not write {self.path} ({error.strerror or error}): the rest of this pass's output is not "
              "kept there", file=sys.stderr, flush=True)
        self.__exit__()

    def __exit__(self, *exc) -> None:
        handle, self._file = self._file, None
        if handle is not None:
            try:
                handle.close()  # buffered lines reach the disk here: it may refuse them now
            except OSError as error:
                self._refused(error)


def run_pass(
    name: str,
    topology: Topology,
    log_dir: Path,
    module: str,
    args: Sequence[str],
    show_progress: Callable[[str], bool],
    env: dict[str, str] | None = None,
    on_start: Callable[[subprocess.Popen], None] | None = None,
) -> PassResult:
    """Run one pass; print rank 0's lines for which `show_progress` is true to stderr as it goes."""
    progress.show(f"starting {topology.nproc_per_node} rank(s) per node: {module}", name)
    return run_command(name, torchrun_command(topology, log_dir, module, args), log_dir, show_progress, env,
                       on_start=on_start)


def run_command(
    name: str,
    command: list[str],
    log_dir: Path,
    show_progress: Callable[[str], bool],
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    on_start: Callable[[subprocess.Popen], None] | None = None,
) -> PassResult:
    """Run a command that starts ranks itself: torchrun, or a framework's launcher script around it.

    Its output goes to `<log_dir>/console.log`; lines of local rank 0 (torchrun's `--tee` prefix) or,
    from a launcher that prints its ranks' lines bare, any line, are shown when `show_progress` says.
    The command runs in a session of its own: a terminal's Ctrl-C reaches the launcher only, which
    stops the run in order (`ckpt_bench.launcher.interrupts`, through `on_start`, which is given the
    guard). It runs under `ckpt_bench.launcher.guard`, so nothing of it outlives the launcher.
    """
    failures: list[RankFailure] = []
    pending: dict | None = None
    root_cause = False
    oom_kills_before = oom.oom_kills()
    with (
        ConsoleLog(log_dir / "console.log") as console,
        subprocess.Popen(
            guarded(command), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
            env=env, bufsize=1, cwd=cwd, start_new_session=True,
        ) as process,
    ):
        assert process.stdout is not None
        if on_start is not None:
            on_start(process)
        for line in process.stdout:
            console.write(line)
            tee = _TEE_PREFIX.match(line)
            if tee:
                said = progress.from_rank(tee.group(2))
                if said is not None or (tee.group(1) == "0" and show_progress(tee.group(2))):
                    progress.show(said or tee.group(2).strip(), name)
                continue
            said = progress.from_rank(line)
            if said is not None or (not line.startswith("[default") and show_progress(line)):
                progress.show(said or line.strip(), name)
            if _ROOT_CAUSE.match(line):
                root_cause = True
                continue
            failed = _FAILED_RANK.match(line)
            if failed:
                pending = {"rank": int(failed.group(1)), "local_rank": int(failed.group(2))}
                continue
            code = _EXIT_CODE.match(line)
            if code and pending is not None:
                failures.append(RankFailure(exit_code=int(code.group(1)), first=root_cause, **pending))
                pending = None
        exit_code = process.wait()
    failures.sort(key=lambda failure: not failure.first)  # the cause first, then who was stopped for it
    for failure in failures:
        if failure.first and failure.signal == "SIGKILL":
            failure.killed_by = oom.sigkill_cause(oom_kills_before, oom.oom_kills())
    for failure in failures:
        stderr = _rank_log(log_dir, failure.local_rank, "stderr")
        failure.log_tail = _tail(stderr) or _tail(_rank_log(log_dir, failure.local_rank, "stdout"))
        if failure.signal is None:  # a signal is the cause itself: a traceback before it is not
            error_file = stderr.with_name("error.json") if stderr is not None else None
            failure.exception = (error_file and elastic_error(error_file)) or exception_in(_end(stderr))
    cause = next(filter(None, (storage_failure(f.log_tail) for f in failures)), None)
    return PassResult(name, command, exit_code, log_dir, failures, cause)
