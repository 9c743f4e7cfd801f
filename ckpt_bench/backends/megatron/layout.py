"""Where each rank sits in a Megatron job: its tensor, context, data, pipeline and expert coordinates, as
megatron-core's `parallel_state.initialize_model_parallel` assigns them (its `RankGenerator`).

Ranks are numbered along the order `tp-cp-ep-dp-pp` (Megatron-LM's default; `tp-cp-ep-pp-dp` with
`--use-tp-pp-dp-mapping`), the first token varying fastest. Attention and dense layers use the sizes
(tp, cp, dp, pp) with ep 1; expert layers their own (etp, ep, edp, pp) with cp 1, where etp is
`expert_tensor_parallel_size` (default: tp) and edp = world / (etp x ep x pp).
"""

from __future__ import annotations

from collections.abc import Mapping


def _order(args: Mapping) -> list[str]:
    return ["tp", "cp", "ep", "pp", "dp"] if args.get("use_tp_pp_dp_mapping") else ["tp", "cp", "ep", "dp", "pp"]


def _coordinates(rank: int, order: list[str], sizes: Mapping[str, int]) -> dict[str, int]:
    found = {}
    for token in order:
        found[token] = rank % sizes[token]
        rank //= sizes[token]
    return found


def rank_coordinates(args: Mapping, sizes: Mapping[str, int], world_size: int) -> list[dict[str, int]]:
    """Each rank's coordinates: tp, cp, dp, pp (attention and dense layers) and etp, ep, edp (experts);
    `sizes` are rules.check's {tp, pp, ep, cp, dp}."""
    order = _order(args)
    dense = {"tp": sizes["tp"], "cp": sizes["cp"], "ep": 1, "dp": sizes["dp"], "pp": sizes["pp"]}
    etp = args.get("expert_tensor_parallel_size") or sizes["tp"]
    expert = {"tp": etp, "cp": 1, "ep": sizes["ep"], "dp": world_size // (etp * sizes["ep"] * sizes["pp"]),
              "pp": sizes["pp"]}
    layout = []
    for rank in range(world_size):
        attention = _coordinates(rank, order, dense)
        experts = _coordinates(rank, order, expert)
        layout.append({"rank": rank, "tp": attention["tp"], "cp": attention["cp"], "dp": attention["dp"],
                       "pp": attention["pp"], "etp": experts["tp"], "ep": experts["ep"], "edp": experts["dp"]})
    return layout
