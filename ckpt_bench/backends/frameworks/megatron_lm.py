"""`--framework megatron-lm --megatron-path DIR`: Megatron-LM's own `pretrain_gpt.py` under our torchrun
runner (per-rank logs, the failing rank named), the resolved experiment as Megatron-LM flags, mock
data unless the experiment names `data_path`. See `ckpt_bench.backends.frameworks.common`."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

from ckpt_bench.backends.frameworks.common import (
    FrameworkConfig,
    framework_plan,
    known_megatron_flags,
    megatron_arguments,
    pass_args,
    record_events,
    resolve_for_framework,
)
from ckpt_bench.core.options import Flag
from ckpt_bench.core.rundir import RunDir
from ckpt_bench.launcher import nodes
from ckpt_bench.launcher.base import Backend, Plan, WorkerPass
from ckpt_bench.launcher.config import LaunchConfig

# torchrun's --tee prefix on a rank's line in console.log.
_TEE = re.compile(r"^\[default\d+\]:")


@dataclass
class MegatronLMConfig(FrameworkConfig):
    """The Megatron experiment's options and Megatron-LM's checkout."""

    megatron_path: str | None = Flag(("--megatron-path",), "Megatron-LM checkout.").field()

    def __post_init__(self) -> None:
        super().__post_init__()
        self.root = self.checkout("megatron_path", "pretrain_gpt.py", MegatronLMBackend.name)


def _pythonpath(root: Path) -> str:
    return os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p)


class MegatronLMBackend(Backend[MegatronLMConfig]):
    name = "megatron-lm"
    title = "Megatron-LM (--framework megatron-lm): the real pretrain_gpt.py, timed from its logs"
    Config = MegatronLMConfig
    framework = True

    def plan(self, launch: LaunchConfig[MegatronLMConfig]) -> Plan:
        config = launch.options
        root = config.root
        experiment, args, sizes = resolve_for_framework(launch, "--framework megatron-lm")
        known = known_megatron_flags(root)
        # The load reads a cold checkpoint, as ours do: the lifecycle evicts it first.
        passes = [WorkerPass(phase, [], spec=False, evict_before=phase == "load",
                             env={"CUDA_DEVICE_MAX_CONNECTIONS": "1", "PYTHONPATH": _pythonpath(root)})
                  for phase in ("save", "load")]
        notes: list[str] = []

        def bind(run: RunDir, checkpoint_dir: str | None) -> None:
            skipped: set[str] = set()
            for worker_pass in passes:
                worker_pass.args, left_out = megatron_arguments(pass_args(args, checkpoint_dir, worker_pass.name),
                                                                known)
                skipped.update(left_out)
            if skipped:
                notes[:] = [f"not Megatron-LM arguments, left out: {', '.join(sorted(skipped))}"]

        def collect(run: RunDir) -> list[str]:
            # Megatron-LM's stdout as a user sees it: node 0's ranks' lines, torchrun's prefixes removed.
            logs = []
            node0 = replace(launch.topology, node_rank=0)
            for worker_pass in passes:
                console = nodes.log_dir(run, worker_pass.name, node0) / "console.log"
                if console.is_file():
                    log = console.with_name("megatron.log")
                    with open(console, encoding="utf-8", errors="replace") as lines:
                        log.write_text("".join(_TEE.sub("", line) for line in lines))
                    logs.append(log)
            return notes + record_events(run, logs)

        return framework_plan(launch, experiment, args, sizes, passes, bind, collect,
                              worker_module=str(root / "pretrain_gpt.py"))
