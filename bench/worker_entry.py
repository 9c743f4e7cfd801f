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

from bench.integrity import EXIT_VERIFICATION_FAILED, VerificationFailed


def worker_main(description: str, run: Callable[[str, str], None], argv: list[str] | None = None) -> int:
    """Parse `--spec/--phase`, call `run(spec_path, phase)`, and map its outcome to an exit code."""
    parser = argparse.ArgumentParser(description=description.split("\n\n")[0])
    parser.add_argument("--spec", required=True, help="JSON spec written by the launcher")
    parser.add_argument("--phase", required=True, choices=("save", "load"))
    options = parser.parse_args(argv)
    rank = os.environ.get("RANK", "?")
    try:
        run(options.spec, options.phase)
    except VerificationFailed as error:
        print(f"[rank {rank}] verification failed: {error}", file=sys.stderr, flush=True)
        return EXIT_VERIFICATION_FAILED
    except Exception as error:
        traceback.print_exc()
        print(f"[rank {rank}] {options.phase} failed: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
        return 1
    finally:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
    return 0
