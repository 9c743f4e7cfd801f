"""Each rank's coordinates (`--plan`'s layout) as megatron-core's own RankGenerator groups the ranks."""

from __future__ import annotations

import pytest
from megatron.core.parallel_state import RankGenerator

from ckpt_bench.backends.megatron.layout import rank_coordinates


def groups_of(layout: list[dict], varying: str, fixed: tuple[str, ...]) -> list[list[int]]:
    """Ranks that share every coordinate of `fixed` (and of `varying`'s siblings): one group per value tuple."""
    groups: dict[tuple, list[int]] = {}
    for rank in layout:
        groups.setdefault(tuple(rank[name] for name in fixed), []).append(rank["rank"])
    return sorted(groups.values())


@pytest.mark.parametrize("tp,pp,cp,ep,etp,world,mapping", [
    (2, 2, 1, 2, None, 16, False), (1, 1, 1, 8, None, 16, False), (2, 1, 2, 4, 1, 16, False),
    (4, 2, 1, 2, 2, 32, True), (1, 4, 1, 1, None, 8, True),
])
def test_coordinates_match_megatron_core(tp, pp, cp, ep, etp, world, mapping):
    dp = world // (tp * pp * cp)
    args = {"expert_tensor_parallel_size": etp, "use_tp_pp_dp_mapping": mapping}
    layout = rank_coordinates(args, {"tp": tp, "pp": pp, "cp": cp, "ep": ep, "dp": dp}, world)
    order = "tp-cp-ep-pp-dp" if mapping else "tp-cp-ep-dp-pp"
    dense = RankGenerator(tp=tp, ep=1, dp=dp, pp=pp, cp=cp, order=order)
    etp = etp or tp
    expert = RankGenerator(tp=etp, ep=ep, dp=world // (etp * ep * pp), pp=pp, cp=1, order=order)
    assert groups_of(layout, "tp", ("cp", "dp", "pp")) == sorted(dense.get_ranks("tp"))
    assert groups_of(layout, "dp", ("tp", "cp", "pp")) == sorted(dense.get_ranks("dp"))
    assert groups_of(layout, "pp", ("tp", "cp", "dp")) == sorted(dense.get_ranks("pp"))
    assert groups_of(layout, "cp", ("tp", "dp", "pp")) == sorted(dense.get_ranks("cp"))
    assert groups_of(layout, "ep", ("etp", "edp", "pp")) == sorted(expert.get_ranks("ep"))
    assert groups_of(layout, "etp", ("ep", "edp", "pp")) == sorted(expert.get_ranks("tp"))
    assert groups_of(layout, "edp", ("etp", "ep", "pp")) == sorted(expert.get_ranks("dp"))
