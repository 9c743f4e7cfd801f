"""A Primus log's save times on the finest clock it has (issue 38, item 6): rank 0's save lines carry 1 s line
prefixes, the last rank's `save-checkpoint` timer 10 us. With `async_save True` in the arguments and no save
scheduled async (Megatron-LM ran them synchronously), the completion came from the prefixes: 138.000 s, below
the 138.05 s the timer gave the same save's block time. A save is complete no sooner than its call returned.
(Constructed in the format of tests/fixtures/logs/primus_run.)"""

from __future__ import annotations

import json

from helpers import ckpt_report

PREFIX = "[alice/llm][pre_trainer][ip-10.1.2.3]"
RANK0 = f"""[20250601 09:59:51]{PREFIX}[rank-0/2][DEBUG]    [arguments.py:812]: ------------------------ arguments ---
  async_save ...................................... True
  ckpt_format ..................................... torch_dist
-------------------- end of arguments ---------------------
[20250601 10:00:00]{PREFIX}[rank-0/2][DEBUG]    [---checkpointing.py:411] : saving checkpoint at iteration     100 to /ckpt/llama in torch_dist format
[20250601 10:02:18]{PREFIX}[rank-0/2][DEBUG]    [---checkpointing.py:411] :   successfully saved checkpoint from iteration     100 to /ckpt/llama [ t 1/1, p 1/1 ]
"""  # noqa: E501
LAST_RANK = f"""[20250601 10:02:18]{PREFIX}[rank-1/2][INFO]     [----------timers.py:430] : (min, max) time across ranks (ms):
    save-checkpoint ................................: (138040.12, 138050.34)
"""  # noqa: E501


def test_a_save_is_complete_no_sooner_than_its_timer_says_it_returned(tmp_path):
    folder = tmp_path / "logs" / "pre_trainer"
    for rank, name, text in ((0, "debug.log", RANK0), (1, "info.log", LAST_RANK)):
        (folder / f"rank-{rank}").mkdir(parents=True)
        (folder / f"rank-{rank}" / name).write_text(text)
    result = ckpt_report(tmp_path, "--format", "json")
    assert result.returncode == 0, result.stderr
    (save,) = json.loads(result.stdout)["saves"]
    assert (save["block_time"], save["total_time"]) == (138.05, 138.05)  # 3 digits, as every time
