"""A free port we picked can be taken by another process before torchrun listens on it (several runs on
one host: a sweep beside a test suite): the pass runs again on another port; a port the user gave is theirs
and is never changed (issue 22, reliability)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest

from ckpt_bench.benchmark import lifecycle
from ckpt_bench.core.rundir import RunDir
from ckpt_bench.launcher.base import WorkerPass
from ckpt_bench.launcher.interrupts import Interrupts
from ckpt_bench.launcher.torchrun import PassResult, Topology, lost_its_port

# torchrun's own last line when its TCPStore could not listen (a real run's console.log, 2026-11-24).
TAKEN = ("torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. "
         "port: 39159, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use\n")


@dataclass
class FakeTorchrun:
    """torchrun as far as the lifecycle sees it: the first `taken` attempts find their port taken."""

    taken: int
    ports: list[int]

    def __call__(self, name, topology, log_dir: Path, module, args, show, env, on_start=None) -> PassResult:
        self.ports.append(topology.master_port)
        log_dir.mkdir(parents=True, exist_ok=True)
        lost = len(self.ports) <= self.taken
        (log_dir / "console.log").write_text(TAKEN if lost else "[default0]:saved\n")
        return PassResult(name, ["torchrun"], 1 if lost else 0, log_dir)


def _run_passes(tmp_path, monkeypatch, taken: int, port_is_ours: bool):
    torchrun = FakeTorchrun(taken, [])
    fresh = iter(range(41001, 41010))
    monkeypatch.setattr(lifecycle, "run_pass", torchrun)
    monkeypatch.setattr(lifecycle, "free_port", lambda: next(fresh))
    launch = SimpleNamespace(topology=Topology(nproc_per_node=1, master_port=41000, port_is_ours=port_is_ours))
    plan = SimpleNamespace(checkpoints=None, passes=[WorkerPass("save", [])], show_progress=lambda line: False,
                           worker_module="ckpt_bench.backends.dcp.worker")
    _commands, summaries = lifecycle.run_passes(plan, launch, RunDir(tmp_path), tmp_path / "worker.json",
                                                Interrupts())
    return torchrun.ports, summaries, launch.topology.master_port


@pytest.mark.parametrize(("taken", "ports", "ok"), [
    (1, [41000, 41001], True),  # taken once: the pass runs again on a fresh port, which later passes keep
    (5, [41000, 41001, 41002], False),  # taken every time: PORT_ATTEMPTS tries, then the failure stands
])
def test_a_pass_whose_picked_port_was_taken_runs_again_on_another(tmp_path, monkeypatch, taken, ports, ok):
    tried, summaries, kept = _run_passes(tmp_path, monkeypatch, taken, port_is_ours=True)
    assert tried == ports and summaries[0].ok is ok and kept == ports[-1]


def test_a_port_the_user_gave_is_never_changed(tmp_path, monkeypatch):
    tried, summaries, kept = _run_passes(tmp_path, monkeypatch, taken=1, port_is_ours=False)
    assert tried == [41000] and not summaries[0].ok and kept == 41000


def test_only_a_taken_port_counts(tmp_path):
    failed = PassResult("save", ["torchrun"], 1, tmp_path)
    (tmp_path / "console.log").write_text("RuntimeError: CUDA out of memory\n")
    assert not lost_its_port(failed)
    (tmp_path / "console.log").write_text(TAKEN)
    assert lost_its_port(failed) and not lost_its_port(PassResult("save", ["torchrun"], 0, tmp_path))
