"""Each rank's coordinates (`ckpt_bench.model.parallel`, what `--plan`'s layout prints and every size is
laid out by) group the ranks as megatron-core's own RankGenerator does, in both of Megatron-LM's orders."""

from __future__ import annotations

import pytest
from megatron.core.parallel_state import RankGenerator

from ckpt_bench.model.parallel import Parallelism


def groups_of(coordinates: list, fixed: tuple[str, ...]) -> list[list[int]]:
    """Ranks that share every coordinate named in `fixed`: one group per value tuple."""
    groups: dict[tuple, list[int]] = {}
    for c in coordinates:
        groups.setdefault(tuple(getattr(c, name) for name in fixed), []).append(c.rank)
    return sorted(groups.values())


@pytest.mark.parametrize("tp,pp,cp,ep,etp,world,mapping", [
    (2, 2, 1, 2, None, 16, False), (1, 1, 1, 8, None, 16, False), (2, 1, 2, 4, 1, 16, False),
    (4, 2, 1, 2, 2, 32, True), (1, 4, 1, 1, None, 8, True), (2, 2, 2, 2, None, 32, True),
])
def test_coordinates_match_megatron_core(tp, pp, cp, ep, etp, world, mapping):
    parallel = Parallelism(world_size=world, num_layers=pp * 2, tp=tp, pp=pp, ep=ep, etp=etp, cp=cp,
                           pp_before_dp=mapping)
    coordinates = [parallel.coordinates(rank) for rank in range(world)]
    order = "tp-cp-ep-pp-dp" if mapping else "tp-cp-ep-dp-pp"
    dense = RankGenerator(tp=tp, ep=1, dp=parallel.dp, pp=pp, cp=cp, order=order)
    expert = RankGenerator(tp=parallel.expert_tp, ep=ep, dp=parallel.edp, pp=pp, cp=1, order=order)
    assert groups_of(coordinates, ("cp_rank", "dp_rank", "pp_rank")) == sorted(dense.get_ranks("tp"))
    assert groups_of(coordinates, ("tp_rank", "cp_rank", "pp_rank")) == sorted(dense.get_ranks("dp"))
    assert groups_of(coordinates, ("tp_rank", "cp_rank", "dp_rank")) == sorted(dense.get_ranks("pp"))
    assert groups_of(coordinates, ("tp_rank", "pp_rank")) == sorted(dense.get_ranks("dp-cp"))
    assert groups_of(coordinates, ("etp_rank", "edp_rank", "pp_rank")) == sorted(expert.get_ranks("ep"))
    assert groups_of(coordinates, ("ep_rank", "edp_rank", "pp_rank")) == sorted(expert.get_ranks("tp"))
    assert groups_of(coordinates, ("etp_rank", "ep_rank", "pp_rank")) == sorted(expert.get_ranks("dp"))
    for c in coordinates:  # and the inverse that lays shards on ranks
        assert parallel.rank(c.tp_rank, c.dp_rank, c.pp_rank) == c.rank
