"""A job's parallel layout as megatron-core 0.16.1 sets it up (`parallel_state.initialize_model_parallel`).

Two rank orders share the world, both megatron's default `tp-cp-ep-dp-pp`:

* dense:  rank = tp_rank + tp·(cp_rank + cp·(dp_rank + dp·pp_rank)),           dp = world / (tp·cp·pp)
* expert: rank = etp_rank + etp·(ep_rank + ep·(edp_rank + edp·pp_rank)),       edp = world / (etp·ep·pp)

With `--use-tp-pp-dp-mapping` (`pp_before_dp`) the order is `tp-cp-ep-pp-dp`: pp varies before dp and edp.

Which layers each pipeline rank holds, in one model chunk or several (virtual pipeline stages), is
`pipeline_layout.PipelineLayout`'s: megatron-core's even split, `decoder_first/last_pipeline_num_layers`,
`pipeline_model_parallel_layout`, or `stage_layer_counts` given outright (DLIO's split).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from ckpt_bench.model.pipeline_layout import ModelChunk, ParallelError, PipelineLayout, parse_layout

__all__ = ["PIPELINE_ARGUMENTS", "ParallelError", "Parallelism", "RankCoordinates", "megatron_parallel_sizes",
           "megatron_parallelism", "pipeline_settings"]

#: Megatron-LM's arguments a job's pipeline layout is made from (`megatron_parallel_sizes`).
PIPELINE_ARGUMENTS = ("num_layers", "pipeline_model_parallel_size", "decoder_first_pipeline_num_layers",
                      "decoder_last_pipeline_num_layers", "pipeline_model_parallel_layout",
                      "num_layers_per_virtual_pipeline_stage", "num_virtual_stages_per_pipeline_rank",
                      "account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split",
                      "mtp_num_layers", "overlap_p2p_comm")


def megatron_parallel_sizes(args: Mapping[str, Any]) -> dict[str, Any]:
    """`Parallelism`'s sizes but the world's, from Megatron-LM's arguments (unset: megatron's defaults), and
    its pipeline layout: the virtual stages of `num_virtual_stages_per_pipeline_rank`,
    `num_layers_per_virtual_pipeline_stage` or `pipeline_model_parallel_layout`, as Megatron-LM's
    `validate_args` derives them. Raises ParallelError where it refuses them."""

    def size(key: str, default: int | None = 1) -> int | None:
        value = args.get(key)
        return default if value is None else int(value)

    pp, layout = size("pipeline_model_parallel_size"), args.get("pipeline_model_parallel_layout")
    sizes = {"tp": size("tensor_model_parallel_size"), "pp": pp,
             "ep": size("expert_model_parallel_size"), "etp": size("expert_tensor_parallel_size", None),
             "cp": size("context_parallel_size"),
             "first_stage_layers": size("decoder_first_pipeline_num_layers", None),
             "last_stage_layers": size("decoder_last_pipeline_num_layers", None),
             "account_for_embedding": bool(args.get("account_for_embedding_in_pipeline_split")),
             "account_for_loss": bool(args.get("account_for_loss_in_pipeline_split")),
             "pipeline_layout": None if layout is None else str(layout), "virtual_stages": None,
             "mtp_num_layers": size("mtp_num_layers", 0),
             "pp_before_dp": bool(args.get("use_tp_pp_dp_mapping"))}
    per_stage, stages = size("num_layers_per_virtual_pipeline_stage", None), size(
        "num_virtual_stages_per_pipeline_rank", None)
    given = [name for name, value in (("num_layers_per_virtual_pipeline_stage", per_stage),
                                      ("num_virtual_stages_per_pipeline_rank", stages),
                                      ("pipeline_model_parallel_layout", layout)) if value is not None]
    if len(given) > 1:
        raise ParallelError(f"{' and '.join(given)} are both set: Megatron-LM takes one of them")
    if layout is not None:
        if not isinstance(layout, str):
            raise ParallelError(f"pipeline_model_parallel_layout = {layout!r}: a string such as 'Et|tt|tL' is needed")
        vp = len(parse_layout(layout)) // pp
    elif per_stage is not None:
        if sizes["first_stage_layers"] is not None or sizes["last_stage_layers"] is not None:
            raise ParallelError("num_layers_per_virtual_pipeline_stage with decoder_first/last_pipeline_num_layers: "
                                "Megatron-LM needs num_virtual_stages_per_pipeline_rank for an uneven split")
        layers = size("num_layers") + sizes["account_for_embedding"] + sizes["account_for_loss"]
        if per_stage < 1 or layers % pp or layers // pp % per_stage:
            raise ParallelError(f"num_layers_per_virtual_pipeline_stage {per_stage} does not divide the {layers} "
                                f"layers over {pp} pipeline stages evenly (Megatron-LM needs it to)")
        vp = layers // pp // per_stage
    else:
        if stages is not None and stages < 1:
            raise ParallelError(f"num_virtual_stages_per_pipeline_rank = {stages}: at least 1")
        vp = stages or 1
    if vp > 1:
        if pp < 2 or (pp == 2 and not args.get("overlap_p2p_comm")):
            raise ParallelError(f"{given[0]} makes {vp} virtual pipeline stages on pipeline_model_parallel_size {pp}: "
                                "Megatron-LM's interleaved schedule needs pipeline parallelism above 2, or 2 with "
                                "overlap_p2p_comm")
        sizes["virtual_stages"] = vp
    return sizes


def megatron_parallelism(args: Mapping[str, Any], world_size: int,
                         name: Callable[[str], str | None] = lambda key: None) -> Parallelism:
    """The layout Megatron-LM makes of `args` on `world_size` ranks. Its ParallelError gives the rule refused and,
    after it, the pipeline arguments set, each named by `name` (where it came from: `--pp`, an experiment's
    key; None: the argument's own name)."""
    try:
        return Parallelism(world_size=world_size, num_layers=args["num_layers"], **megatron_parallel_sizes(args))
    except ParallelError as error:
        raise ParallelError(f"{error} (from {pipeline_settings(args, name, str(error))})") from None


def pipeline_settings(args: Mapping[str, Any], name: Callable[[str], str | None] = lambda key: None,
                      said: str = "") -> str:
    """The pipeline arguments `args` sets, each named by `name` with its value (but a value `said` already
    quotes): where a layout came from, for a message. `num_layers` and the pipeline size always; the others
    where set (not 0 or false), `overlap_p2p_comm` and `mtp_num_layers` where `said` names them."""
    parts = []
    for key in PIPELINE_ARGUMENTS:
        value = args.get(key)
        if value in (None, False) or (key in ("overlap_p2p_comm", "mtp_num_layers") and key not in said):
            continue
        shown = "" if isinstance(value, str) and repr(value) in said else f" {value!r}"
        parts.append(f"{name(key) or key}{shown}")
    return ", ".join(parts)


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
    virtual_stages: int | None = None
    """Model chunks per pipeline rank (interleaved schedule); None: one."""
    pipeline_layout: str | None = None
    """`pipeline_model_parallel_layout` (overrides the split arguments; its stage count gives the chunks)."""
    account_for_embedding: bool = False
    """`account_for_embedding_in_pipeline_split`: the embedding takes a layer's place in the even split."""
    account_for_loss: bool = False
    """`account_for_loss_in_pipeline_split`: the loss takes a layer's place in the even split."""
    mtp_num_layers: int = 0
    """The model's MTP layers, which a layout places (`m`)."""
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
        _ = self.pipeline  # checked as megatron-core checks it

    @cached_property
    def pipeline(self) -> PipelineLayout:
        """Every model chunk: which layers, embedding, output layer and MTP layers each pipeline rank builds."""
        if self.pipeline_layout is not None:
            if self.first_stage_layers is not None or self.last_stage_layers is not None or (
                    self.account_for_embedding or self.account_for_loss):
                raise ParallelError("pipeline_model_parallel_layout cannot be set with decoder_first/last_pipeline_"
                                    "num_layers or account_for_*_in_pipeline_split (megatron-core refuses both)")
            layout = PipelineLayout.from_string(self.pipeline_layout, self.pp, self.num_layers, self.mtp_num_layers)
            if self.virtual_stages is not None and self.virtual_stages != layout.vp:
                raise ParallelError(f"pipeline_model_parallel_layout {self.pipeline_layout!r} has {layout.vp} "
                                    f"virtual stages per rank and {self.virtual_stages} are asked for")
            return layout
        if self.stage_layer_counts is not None:
            counts = list(self.stage_layer_counts)
            if len(counts) != self.pp or sum(counts) != self.num_layers or min(counts) < 0:
                raise ParallelError(f"the pipeline layout {counts} does not place {self.num_layers} layers on "
                                    f"{self.pp} stages")
            return PipelineLayout.from_counts(self.pp, counts, self.mtp_num_layers)
        return PipelineLayout.split(self.num_layers, self.pp, self.virtual_stages or 1, first=self.first_stage_layers,
                                    last=self.last_stage_layers, account_for_embedding=self.account_for_embedding,
                                    account_for_loss=self.account_for_loss, mtp_num_layers=self.mtp_num_layers)

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

    @property
    def layers_per_stage(self) -> tuple[int, ...]:
        """Decoder layers per pipeline rank (all its chunks)."""
        return self.pipeline.layers_per_rank

    def chunks(self, pp_rank: int) -> tuple[ModelChunk, ...]:
        """The model chunks of pipeline rank `pp_rank`, by virtual stage (one without virtual stages)."""
        return self.pipeline.rank_chunks(pp_rank)

    def stage_layers(self, pp_rank: int) -> tuple[int, ...]:
        """Global (0-based) indices of the decoder layers on pipeline rank `pp_rank`, chunk after chunk."""
        return tuple(layer for chunk in self.chunks(pp_rank) for layer in chunk.layers)

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
