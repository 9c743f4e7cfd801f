"""`--plan` lists the files each engine really writes (issue 30, item 8): DCP's `__<rank>_<thread>.distcp`
and its `.metadata`, not DLIO's `.pt` names; the names the DCP engine wrote in a real run (tiny DLIO
workload, 2 ranks, --thread-count 2) were exactly these."""

from __future__ import annotations

import json

from helpers import ROOT, launch

from ckpt_bench.backends.workload.engines import ENGINES

TINY = ROOT / "tests" / "fixtures" / "workloads" / "dlio_tiny_zero3.yaml"


def test_plan_of_the_dcp_engine_lists_dcps_files():
    result = launch("--workload", TINY, "--nproc-per-node", "2", "--engine", "dcp", "--thread-count", "2", "--plan",
                    "--format", "json")
    assert result.returncode == 0, result.stderr
    files = [rank["files"] for rank in json.loads(result.stdout)["ranks"]]
    assert files == [["__0_0.distcp", "__0_1.distcp", ".metadata"], ["__1_0.distcp", "__1_1.distcp"]]


def test_engines_that_write_the_states_own_files_keep_their_names():
    dlio = ["zero_pp_rank_0_mp_rank_0_model_states.pt", "zero_pp_rank_0_mp_rank_0_optim_states.pt"]
    assert ENGINES["torch-save"].files_written(0, dlio, 1) == dlio
    assert ENGINES["dcp"].files_written(3, dlio, 1) == ["__3_0.distcp"]
