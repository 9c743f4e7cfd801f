"""The save and load passes of several workload runs in one torchrun, one run after the other on the same
ranks and process group, through the workload worker's own `run_pass`: a test's matrix of engines and states
costs one process start-up, not two per run.

    python -m torch.distributed.run --nproc-per-node 2 tests/workload_runs.py RUN/worker.json ...

Each run's outcome is `RUN/outcome-rank-R.json`: "ok", or its error in one line. A run that fails on every rank
(as a worker's own mistake does, before any collective) leaves the next runs to go on; one that fails on some
ranks only leaves the others waiting in a collective, and the caller's timeout ends them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ckpt_bench.backends.workload.spec import WorkloadSpec
from ckpt_bench.backends.workload.worker import run_pass
from ckpt_bench.worker.entry import WorkerContext, error_text, exit_process


def main(specs: list[str]) -> None:
    context = None
    for path in specs:
        spec = WorkloadSpec.from_file(path)
        context = context or WorkerContext.join(spec.dist_backend)
        try:
            for phase in ("save", "load"):
                run_pass(spec, phase, context)
            outcome = "ok"
        except Exception as error:  # noqa: BLE001  (the run's outcome, for its test)
            outcome = error_text(error)
        Path(path).with_name(f"outcome-rank-{context.rank}.json").write_text(json.dumps(outcome))


if __name__ == "__main__":
    main(sys.argv[1:])
    exit_process(0)  # without tearing the process group down: see exit_process
