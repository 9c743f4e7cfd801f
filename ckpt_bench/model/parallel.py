"""A job's parallel layout as megatron-core 0.16.1 sets it up (`parallel_state.initialize_model_parallel`).

Two rank orders share the world, both megatron's default `tp-cp-ep-dp-pp`:

* dense:  rank = tp_rank + tp·(cp_rank + cp·(dp_rank + dp·pp_rank)),           dp = world / (tp·cp·pp)
* expert: rank = etp_rank + etp·(ep_rank + ep·(edp_rank + edp·pp_rank)),       edp = world / (etp·ep·pp)

With `--use-tp-pp-dp-mapping` (`pp_before_dp`) the order is `tp-cp-ep-pp-dp`: pp varies before dp and edp.

Pipeline stages hold contiguous runs of layers: `decoder_first_pipeline_num_layers` and
`decoder_last_pipeline_num_layers` when given, the rest split evenly (megatron-core refuses a remainder);
`stage_layer_counts` gives any split outright. The embedding lives on the first stage; the final norm, the
output layer and the MTP layers on the last.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

__all__ = ["ParallelError", "Parallelism", "RankCoordinates", "megatron_parallel_sizes"]


def megatron_parallel_sizes(args: Mapping[str, Any]) -> dict[str, Any]:
    """`Parallelism`'s sizes but the world's, from Megatron-LM's arguments (unset: megatron's defaults)."""

    def size(key: str, default: int | None = 1) -> int | None:
        value = args.get(key)
        return default if value is None else int(value)

    return {"tp": size("tensor_model_parallel_size"), "pp": size("pipeline_model_parallel_size"),
            "ep": size("expert_model_parallel_size"), "etp": size("expert_tensor_parallel_size", None),
            "cp": size("context_parallel_size"),
            "first_stage_layers": size("decoder_first_pipeline_num_layers", None),
            "last_stage_layers": size("decoder_last_pipeline_num_layers", None),
            "pp_before_dp": bool(args.get("use_tp_pp_dp_mapping"))}


class ParallelError(ValueError):
    """A layout megatron-core refuses."""


@dataclass(frozen=True, slots=True)
class RankCoordinates:
    """One rank in both of megatron's orders."""

    rank: int
    tp_rank: int
    cp_rank: int
    dp_rank: int
    """Rank in the dense data-parallel × context-parallel group (cp_rank + cp·dp_rank): the group the
    distributed optimizer shards over and the fully-parallel save distributes over."""
    pp_rank: int
    etp_rank: int
    ep_rank: int
    edp_rank: int


@dataclass(frozen=True)
class Parallelism:
    """TP, PP, EP, ETP, CP on `world_size` ranks, and how the decoder's layers fall on pipeline stages."""

    world_size: int
    num_layers: int
    tp: int = 1
    pp: int = 1
    ep: int = 1
    etp: int | None = None
    """Expert tensor parallelism; None: the same as tp (megatron's default)."""
    cp: int = 1
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None
    stage_layer_counts: tuple[int, ...] | None = None
    """Layers per stage given outright (overrides first/last)."""
    pp_before_dp: bool = False
    """Megatron-LM's `--use-tp-pp-dp-mapping`: ranks numbered along tp-cp-ep-pp-dp."""

    def __post_init__(self) -> None:
        for name in ("world_size", "tp", "pp", "ep", "cp"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ParallelError(f"{name} = {value!r}: a positive integer is needed")
        if self.world_size % (self.tp * self.cp * self.pp):
            raise ParallelError(f"world size {self.world_size} is not a multiple of tensor × context × pipeline "
                                f"parallelism = {self.tp} × {self.cp} × {self.pp}")
        if self.world_size % (self.expert_tp * self.ep * self.pp):
            raise ParallelError(f"world size {self.world_size} is not a multiple of expert tensor × expert × "
                                f"pipeline parallelism = {self.expert_tp} × {self.ep} × {self.pp}")
        counts = self.layers_per_stage
        if len(counts) != self.pp or sum(counts) != self.num_layers or min(counts) < 0:
            raise ParallelError(f"the pipeline layout {list(counts)} does not place {self.num_layers} layers on "
                                f"{self.pp} stages")

    @property
    def expert_tp(self) -> int:
        return self.tp if self.etp is None else self.etp

    @property
    def dp(self) -> int:
        """Data-parallel size of the dense parameters (with cp: the dp × cp group's size is dp·cp)."""
        return self.world_size // (self.tp * self.cp * self.pp)

    @property
    def dp_cp(self) -> int:
        return self.dp * self.cp

    @property
    def edp(self) -> int:
        """Data-parallel size of the expert parameters."""
        return self.world_size // (self.expert_tp * self.ep * self.pp)

    @cached_property
    def layers_per_stage(self) -> tuple[int, ...]:
        if self.stage_layer_counts is not None:
            return tuple(self.stage_layer_counts)
        first, last = self.first_stage_layers, self.last_stage_layers
        if self.pp == 1:
            return (self.num_layers,)
        fixed = [count for count in (first, last) if count is not None]
        middle_stages = self.pp - len(fixed)
        rest = self.num_layers - sum(fixed)
        if rest < 0 or (middle_stages and rest % middle_stages) or (not middle_stages and rest):
            given = ", ".join(f"{name} {count}" for name, count in (
                ("decoder_first_pipeline_num_layers", first), ("decoder_last_pipeline_num_layers", last))
                if count is not None)
            raise ParallelError(
                f"num_layers {self.num_layers} cannot be split over {self.pp} pipeline stages"
                f"{' with ' + given if given else ''}: megatron-core needs the remaining layers to divide evenly "
                "(set decoder_first_pipeline_num_layers / decoder_last_pipeline_num_layers)")
        each = rest // middle_stages if middle_stages else 0
        counts = [each] * self.pp
        if first is not None:
            counts[0] = first
        if last is not None:
            counts[-1] = last
        return tuple(counts)

    def stage_layers(self, pp_rank: int) -> range:
        """Global (0-based) indices of the decoder layers on stage `pp_rank`."""
        counts = self.layers_per_stage
        start = sum(counts[:pp_rank])
        return range(start, start + counts[pp_rank])

    # ---- coordinates -----------------------------------------------------------------------------------------

    def _data_and_pipeline(self, rest: int, data: int) -> tuple[int, int]:
        """(data-parallel rank, pipeline rank) from what is left of a rank once tp and cp (or etp and ep)
        are taken off, in this job's order."""
        if self.pp_before_dp:
            return rest // self.pp, rest % self.pp
        return rest % data, rest // data

    def coordinates(self, rank: int) -> RankCoordinates:
        tp_rank, rest = rank % self.tp, rank // self.tp
        cp_rank, rest = rest % self.cp, rest // self.cp
        dp_rank, pp_rank = self._data_and_pipeline(rest, self.dp)
        etp_rank, rest = rank % self.expert_tp, rank // self.expert_tp
        ep_rank, rest = rest % self.ep, rest // self.ep
        edp_rank, _ = self._data_and_pipeline(rest, self.edp)
        return RankCoordinates(rank, tp_rank, cp_rank, cp_rank + self.cp * dp_rank, pp_rank, etp_rank, ep_rank,
                               edp_rank)

    def rank(self, tp_rank: int, dp_cp_rank: int, pp_rank: int) -> int:
        """The rank at (tp_rank, dp_cp_rank, pp_rank): dp_cp_rank = cp_rank + cp·dp_rank."""
        if self.pp_before_dp:
            cp_rank, dp_rank = dp_cp_rank % self.cp, dp_cp_rank // self.cp
            return tp_rank + self.tp * (cp_rank + self.cp * (pp_rank + self.pp * dp_rank))
        return tp_rank + self.tp * (dp_cp_rank + self.dp_cp * pp_rank)

    def data_parallel_group(self, tp_rank: int, pp_rank: int) -> list[int]:
        """The ranks of one dense data-parallel (× context-parallel) group, in group-rank order: the group the
        distributed optimizer shards over and the fully-parallel save distributes over."""
        return [self.rank(tp_rank, d, pp_rank) for d in range(self.dp_cp)]

    def model_parallel_rank(self, tp_rank: int, pp_rank: int) -> int:
        """Rank in the tensor × pipeline group: the dense optimizer's `dp_group_idx`."""
        return tp_rank + self.tp * pp_rank

    def expert_model_parallel_rank(self, etp_rank: int, pp_rank: int) -> int:
        """Rank in the expert-tensor × pipeline group: the expert optimizer's `dp_group_idx`."""
        return etp_rank + self.expert_tp * pp_rank
