"""The verification verdicts (ckpt_bench.worker.integrity): a rank that saved nothing has nothing to differ,
and a run is verified only where some rank checked a tensor."""

from __future__ import annotations

from ckpt_bench.worker import integrity


def test_a_rank_that_saved_nothing_does_not_fail_the_run():
    writer = integrity.compare({"a": "1", "b": "2"}, {"a": "1", "b": "2"})
    idle = integrity.compare({}, {})  # a DLIO ZeRO-0 data-parallel rank: its layout writes nothing
    assert idle == {"verified": True, "tensors_checked": 0, "mismatched": 0, "first_mismatch": None}
    combined = integrity.combine({0: writer, 1: idle})
    assert combined["verified"] is True and combined["tensors_checked"] == 2 and combined["ranks_checked"] == 2


def test_a_run_where_no_rank_saved_a_tensor_is_not_verified():
    assert integrity.combine({0: integrity.compare({}, {}), 1: integrity.compare({}, {})}) == {
        "verified": False, "reason": "no rank saved a tensor to check"}


def test_a_tensor_missing_after_the_load_is_a_mismatch():
    verdict = integrity.compare({"a": "1"}, {})
    assert verdict["verified"] is False and verdict["first_mismatch"] == "a (missing after load)"
    assert integrity.combine({0: verdict})["first_mismatch"] == {"rank": 0, "tensor": "a (missing after load)"}
