"""The entry policy every torchrun worker shares: arguments, exit codes, one line naming the rank.

    python -m torch.distributed.run ... -m bench.<backend>.worker --spec worker.json --phase save|load

Exit codes: 0 ok; 3 the checkpoint loaded but differs from what was saved
(bench.integrity.VerificationFailed); 1 anything else, with the traceback and a last line
`[rank R] <phase> failed: ...` on stderr, which the launcher shows with the rank's log tail.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Callable
from typing import TypeVar

import torch.distributed as dist

from bench.integrity import EXIT_VERIFICATION_FAILED, VerificationFailed

Spec = TypeVar("Spec")


def worker_main(
    description: str,
    load_spec: Callable[[str], Spec],
    run: Callable[[Spec, str], None],
    argv: list[str] | None = None,
) -> int:
    """Parse `--spec/--phase`, call `run(load_spec(spec_path), phase)`, map its outcome to an exit code.
    A spec that cannot be read fails like any other error: one line naming the rank, exit 1."""
    parser = argparse.ArgumentParser(description=description.split("\n\n")[0])
    parser.add_argument("--spec", required=True, help="JSON spec written by the launcher")
    parser.add_argument("--phase", required=True, choices=("save", "load"))
    options = parser.parse_args(argv)
    rank = os.environ.get("RANK", "?")
    try:
        run(load_spec(options.spec), options.phase)
        # Every rank reaches teardown together: a rank that destroys its process group while a peer
        # is still inside a collective (e.g. Lightning's own teardown) can abort at exit.
        if dist.is_initialized():
            dist.barrier()
    except VerificationFailed as error:
        print(f"[rank {rank}] verification failed: {error}", file=sys.stderr, flush=True)
        return EXIT_VERIFICATION_FAILED
    except Exception as error:
        traceback.print_exc()
        print(f"[rank {rank}] {options.phase} failed: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
        return 1
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return 0
