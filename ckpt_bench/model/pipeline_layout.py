"""Which decoder layers, embedding, output layer and MTP layers each pipeline rank's model chunks hold, as
megatron-core 0.16.1 lays them out (`transformer/pipeline_parallel_layer_layout.py`,
`transformer_block.get_num_layers_to_build`, `transformer_layer.get_transformer_layer_offset`).

With virtual pipeline stages (interleaved 1F1B: `num_virtual_stages_per_pipeline_rank`,
`num_layers_per_virtual_pipeline_stage`, or a layout of more stages than ranks) each pipeline rank builds
`vp` model chunks, one GPTModel each. The chunks take the layers in turn, virtual stage after virtual stage:
chunk (pp_rank p, vp_stage v) is the (v·pp + p)-th run of layers. The embedding is built by chunk (0, 0),
the final norm and the output layer by (pp − 1, vp − 1); the MTP layers by the last chunk, or where
`pipeline_model_parallel_layout` puts them (`m`). Decoder layers keep their global index: the layer axis of
`torch_dist` and `decoder.layers.<i>` keys are global, Megatron's legacy files number them per chunk.

Three ways to split, each checked as megatron-core checks it (`ParallelError`, one line):

* evenly: num_layers (+1 for each of `account_for_embedding/loss_in_pipeline_split`) divided by pp, each
  rank's share by vp;
* `decoder_first/last_pipeline_num_layers`: those on the first/last rank, the rest evenly on the middle
  ranks, each rank's share divided by vp;
* `pipeline_model_parallel_layout`, a string of stages split by `|`, read in layer order (stage k is chunk
  (k mod pp, k div pp)): `E` embedding, `t` transformer layer, `m` MTP layer, `L` loss; `x*n` and `(...)*n`
  repeat, commas are cosmetic (`"Et*3|(tt|)*2,m|L"`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["LAYOUT_LETTERS", "ModelChunk", "ParallelError", "PipelineLayout", "parse_layout"]

#: The letters of `pipeline_model_parallel_layout` (megatron-core's `LayerType`s).
LAYOUT_LETTERS = {"E": "embedding", "t": "transformer layer", "m": "MTP layer", "L": "loss"}

# megatron-core's two unrolling rules, applied in this order, each once over the string: `(...)*n`, then `x*n`.
_REPEATS = (re.compile(r"\(([^)]+)\)\*(\d+)"), re.compile(r"(.)\*(\d+)"))


class ParallelError(ValueError):
    """A layout megatron-core refuses."""


@dataclass(frozen=True, slots=True)
class ModelChunk:
    """What one pipeline rank builds for one virtual stage: a GPTModel of its own (`model<vp_stage>` in
    Megatron-LM's checkpoint dict when there are several)."""

    pp_rank: int
    vp_stage: int
    layers: range
    """Global (0-based) indices of its decoder layers."""
    mtp_layers: int = 0
    """MTP layers it builds (all of them, or none)."""
    embedding: bool = False
    """The word (and position) embeddings: `pre_process`, chunk (0, 0)."""
    loss: bool = False
    """The final norm and the output layer: `post_process`, chunk (pp − 1, vp − 1)."""


def parse_layout(text: str) -> list[str]:
    """`pipeline_model_parallel_layout` as megatron-core's `parse_str_to_list` reads it: the stages (in layer
    order) as strings of layout letters. Raises ParallelError naming the value and what is valid."""
    unrolled = text.replace(",", "")
    for pattern in _REPEATS:
        unrolled = pattern.sub(lambda match: match.group(1) * int(match.group(2)), unrolled)
    stages = unrolled.split("|")
    for stage in stages:
        bad = next((letter for letter in stage if letter not in LAYOUT_LETTERS), None)
        if bad is not None:
            letters = ", ".join(f"{letter} ({what})" for letter, what in LAYOUT_LETTERS.items())
            raise ParallelError(f"pipeline_model_parallel_layout {text!r}: {bad!r} is not a layer; the letters are "
                                f"{letters}, stages split by |, x*n and (...)*n repeat")
    return stages


@dataclass(frozen=True)
class PipelineLayout:
    """Every model chunk of a job, in layer order (virtual stage after virtual stage, pipeline rank within)."""

    pp: int
    chunks: tuple[ModelChunk, ...]

    @property
    def vp(self) -> int:
        """Model chunks per pipeline rank (1 without virtual stages)."""
        return len(self.chunks) // self.pp

    def rank_chunks(self, pp_rank: int) -> tuple[ModelChunk, ...]:
        """The chunks of pipeline rank `pp_rank`, by virtual stage."""
        return self.chunks[pp_rank::self.pp]

    @property
    def layers_per_rank(self) -> tuple[int, ...]:
        return tuple(sum(len(chunk.layers) for chunk in self.rank_chunks(p)) for p in range(self.pp))

    @classmethod
    def from_counts(cls, pp: int, counts: list[int], mtp_num_layers: int = 0) -> PipelineLayout:
        """Chunks holding `counts` decoder layers each, in layer order; the MTP layers on the last chunk."""
        chunks, start, last = [], 0, len(counts) - 1
        for index, count in enumerate(counts):
            chunks.append(ModelChunk(index % pp, index // pp, range(start, start + count),
                                     mtp_layers=mtp_num_layers if index == last else 0, embedding=index == 0,
                                     loss=index == last))
            start += count
        return cls(pp, tuple(chunks))

    @classmethod
    def split(cls, num_layers: int, pp: int, vp: int = 1, *, first: int | None = None, last: int | None = None,
              account_for_embedding: bool = False, account_for_loss: bool = False,
              mtp_num_layers: int = 0) -> PipelineLayout:
        """megatron-core's split without a layout string: `first`/`last` layers on the first/last pipeline rank
        (`decoder_first/last_pipeline_num_layers`), the rest evenly; each rank's share divided evenly over its
        `vp` chunks. `account_for_embedding/loss` count the embedding/the loss as a layer of the split."""
        if (first is not None or last is not None) and (account_for_embedding or account_for_loss):
            raise ParallelError("decoder_first/last_pipeline_num_layers cannot be set with "
                                "account_for_embedding/loss_in_pipeline_split (megatron-core refuses both)")
        if pp == 1:
            per_rank = [num_layers]
        elif first is None and last is None:
            slots = num_layers + account_for_embedding + account_for_loss
            if slots % pp:
                raise ParallelError(f"num_layers {num_layers}{_accounted(account_for_embedding, account_for_loss)} "
                                    f"cannot be split over {pp} pipeline stages: megatron-core needs it to divide "
                                    "evenly (set decoder_first_pipeline_num_layers / decoder_last_pipeline_num_layers "
                                    "or pipeline_model_parallel_layout)")
            per_rank = [slots // pp] * pp
        else:
            per_rank = cls._uneven(num_layers, pp, first, last)
        for rank, count in enumerate(per_rank):
            if count % vp:
                raise ParallelError(f"pipeline rank {rank} holds {count} layers, which do not divide into {vp} "
                                    "virtual pipeline stages (megatron-core needs each rank's layers to)")
        counts = [per_rank[index % pp] // vp for index in range(pp * vp)]
        counts[0] -= account_for_embedding
        counts[-1] -= account_for_loss
        if min(counts) < 0:
            raise ParallelError(f"the first or last virtual stage holds {per_rank[0] // vp} layer slots, too few "
                                "for the embedding or loss it accounts for")
        return cls.from_counts(pp, counts, mtp_num_layers)

    @staticmethod
    def _uneven(num_layers: int, pp: int, first: int | None, last: int | None) -> list[int]:
        given = ", ".join(f"{name} {count}" for name, count in (
            ("decoder_first_pipeline_num_layers", first), ("decoder_last_pipeline_num_layers", last))
            if count is not None)
        for count in (first, last):
            if count is not None and count <= 0:
                raise ParallelError(f"{given}: megatron-core needs at least 1 layer on the first/last stage")
        middle_stages = pp - (first is not None) - (last is not None)
        rest = num_layers - (first or 0) - (last or 0)
        if rest < 0 or bool(rest) != bool(middle_stages) or (middle_stages and rest % middle_stages):
            raise ParallelError(f"num_layers {num_layers} cannot be split over {pp} pipeline stages with {given}: "
                                "megatron-core needs the remaining layers to divide evenly over the middle stages")
        each = rest // middle_stages if middle_stages else 0
        counts = [each] * pp
        if first is not None:
            counts[0] = first
        if last is not None:
            counts[-1] = last
        return counts

    @classmethod
    def from_string(cls, text: str, pp: int, num_layers: int, mtp_num_layers: int = 0) -> PipelineLayout:
        """`pipeline_model_parallel_layout`, checked as megatron-core's `validate_layer_layout` checks it."""
        stages = parse_layout(text)

        def refuse(why: str) -> ParallelError:
            return ParallelError(f"pipeline_model_parallel_layout {text!r}: {why}")

        if len(stages) % pp:
            raise refuse(f"{len(stages)} stages do not divide over pipeline_model_parallel_size {pp}")
        flat = "".join(stages)
        if not flat.startswith("E") or flat.count("E") != 1:
            raise refuse("the embedding E must come first, once")
        if not flat.endswith("L") or flat.count("L") != 1:
            raise refuse("the loss L must come last, once")
        if flat.count("t") != num_layers:
            raise refuse(f"it places {flat.count('t')} transformer layers (t) and the model has {num_layers} "
                         "(num_layers)")
        if flat.count("m") != mtp_num_layers:
            raise refuse(f"it places {flat.count('m')} MTP layers (m) and the model has {mtp_num_layers} "
                         "(mtp_num_layers)")
        if "m" in flat and "t" in flat[flat.index("m"):]:
            raise refuse("transformer layers (t) must all come before the MTP layers (m)")
        vp = len(stages) // pp
        for index, stage in enumerate(stages):
            if "m" in stage and (index // pp != vp - 1 or stage.count("m") != mtp_num_layers):
                raise refuse("the MTP layers (m) must all be in one stage, the last virtual stage of its rank")
        chunks, start = [], 0
        for index, stage in enumerate(stages):
            count = stage.count("t")
            chunks.append(ModelChunk(index % pp, index // pp, range(start, start + count), mtp_layers=stage.count("m"),
                                     embedding=index == 0, loss=index == len(stages) - 1))
            start += count
        return cls(pp, tuple(chunks))


def _accounted(embedding: bool, loss: bool) -> str:
    parts = [name for name, on in (("the embedding", embedding), ("the loss", loss)) if on]
    return f" (+1 for {' and '.join(parts)}, account_for_*_in_pipeline_split)" if parts else ""
