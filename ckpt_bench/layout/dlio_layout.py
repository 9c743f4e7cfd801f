"""What every rank of a DLIO ``torch.save`` checkpoint holds and writes, computed without torch.

DLIO (argonne-lcf/dlio_benchmark, the engine behind MLPerf Storage's checkpointing benchmark) builds no model:
each rank allocates flat 1-D tensors whose lengths follow from a few formulas over the workload's transformer
shape and parallel layout, and ``torch.save``s dicts of them. This module derives the same tensors (our own
implementation of those formulas, checked tensor by tensor against DLIO at commit e1919d7), so that an engine
can allocate exactly them and write, rank by rank, the tensor bytes DLIO writes.

The formulas in words (h hidden size, f ffn hidden size, V vocabulary, L layers, kv = (h // heads) * kv_heads;
every division floors, applied one after the other in the order written):

* parameter count P = 2·V·h + L·(2h + h·(h + 2kv) + h² + 3·h·f) + h: embedding and an untied lm_head, per layer
  two norms, fused QKV, output projection, gated MLP (2·h·f) and down projection (h·f), a final norm;
* DLIO's "layers" are 0 (embedding), 1..L (blocks), L+1 (lm_head), L+2 (final norm). Blocks go to pipeline
  stages in contiguous runs, the first ``L % pp`` stages taking one more; stage 0 also holds layer 0 and the
  last stage layers L+1 and L+2;
* a layer's tensors: embedding / lm_head [h·V / tp]; final norm [h]; block [h, h·(h+2kv) / tp, h·h / tp, h,
  2·h·f / tp, h·f / tp]. With ZeRO-3 each is further divided by the data-parallel size dp. A tensor that floors
  to 0 elements is left out (its key is skipped; the others keep their index as key);
* optimizer state: six tensors [n, 5h, n, 5h, n, 5h] of the optimizer datatype, n = P // (dp·tp·pp) with
  ZeRO ≥ 1 and P // (tp·pp) without; every rank gets the same n, whatever its pipeline stage;
* rank coordinates: tp rank = r % tp, pipeline rank = (r // tp) % pp, model-parallel rank mp = r % (tp·pp),
  data-parallel rank = r // (tp·pp);
* who writes what, per save, into ``<checkpoint_folder>/global_epoch1_step<k>/``:

  - ZeRO 0: only the first data-parallel replica (rank < tp·pp) writes:
    ``zero_pp_rank_<dp>_mp_rank_<mp>_model_states.pt`` (``{layer: {index: tensor}}``) and
    ``zero_pp_rank_<dp>_mp_rank_<mp>_optim_states.pt`` (``{index: tensor}``); the other ranks hold nothing;
  - ZeRO 1 and 2: every rank writes its optimizer file; the model is written by data-parallel rank 0 alone,
    one ``layer_<i>-model_<mp>_model_states.pt`` (``{index: tensor}``) per layer when pp > 1, else one
    ``model_<mp>_model_states.pt`` (``{layer: {index: tensor}}``). ZeRO-1 ranks of dp rank > 0 do not allocate
    the model; ZeRO-2 ranks do, and write nothing of it;
  - ZeRO 3 (pp must be 1): every rank writes its model shard and its optimizer shard, named as for ZeRO 0;
  - a model that is not ``type: transformer`` and has ``model_size_bytes`` > 0 (DLIO's default is 10240!) adds
    ``model_states-<rank>.pt`` = ``{"a": int8[model_size_bytes]}`` on every writing rank, written first.

Loads read the same names from steps 1..num_checkpoints_read. Subset mode (``checkpoint.mode: subset`` with
``model.parallelism.data``; mlpstorage uses it when fewer processes run than the workload's world size) keeps the
job's data-parallel size and runs only ranks 0..N-1: they hold exactly what the same ranks of the full job hold.

Everything here is plain Python: no torch import, and the 1,024-rank llama3-1t layout takes milliseconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ckpt_bench.layout.checkpoint_layout import FileShare, Layout, RankShare, TensorSpec, ranks_that_run
from ckpt_bench.layout.workload import Workload, WorkloadError, is_int, num_parameters
from ckpt_bench.model.tensors import ParameterCounts

__all__ = ["layout"]


def _layer_range(pp_rank: int, num_layers: int, pp: int) -> tuple[int, int]:
    """DLIO's inclusive layer range of a pipeline stage (0 = embedding, L+1 = lm_head, L+2 = final norm)."""
    per_stage, remainder = divmod(num_layers, pp)
    if pp_rank < remainder:
        start = pp_rank * (per_stage + 1) + 1
        end = start + per_stage
    else:
        start = remainder * (per_stage + 1) + (pp_rank - remainder) * per_stage + 1
        end = start + per_stage - 1
    if pp_rank == pp - 1:
        end = num_layers + 2
    if pp_rank == 0:
        start = 0
    return start, end


def _layer_numels(w: Workload, layer: int, dp: int) -> list[int]:
    """Element counts of one layer's tensors on one rank, DLIO's order and floor divisions."""
    h, tp = w.hidden_size, w.tensor_parallelism
    shard = dp if w.zero_stage == 3 else 1
    if layer == 0 or layer == w.num_layers + 1:  # embedding, lm_head
        return [h * w.vocab_size // tp // shard]
    if layer == w.num_layers + 2:  # final norm
        return [h // shard]
    kv = (h // w.num_attention_heads) * w.num_kv_heads
    f = w.ffn_hidden_size
    return [
        h // shard,  # input norm
        h * (h + 2 * kv) // tp // shard,  # fused QKV
        h * h // tp // shard,  # attention output
        h // shard,  # post-attention norm
        h * 2 * f // tp // shard,  # gated MLP in
        h * f // tp // shard,  # MLP out
    ]


def _layer_tensors(w: Workload, layer: int, dp: int, prefix: str) -> tuple[tuple[TensorSpec, ...], bool]:
    numels = _layer_numels(w, layer, dp)
    specs = tuple(
        TensorSpec(f"{prefix}{index}", numel, w.model_datatype) for index, numel in enumerate(numels) if numel > 0
    )
    return specs, not specs


def _optimizer_tensors(w: Workload, dp: int) -> tuple[TensorSpec, ...]:
    if w.num_layers <= 0:
        return ()
    divisor = dp * w.model_parallelism if w.zero_stage > 0 else w.model_parallelism
    n = num_parameters(w) // divisor
    if n <= 0:
        return ()
    numels = [n, 5 * w.hidden_size] * 3
    return tuple(TensorSpec(str(i), numel, w.optimizer_datatype) for i, numel in enumerate(numels) if numel > 0)


@dataclass
class _Stage:
    """What every rank of one pipeline stage holds: computed once per stage, shared by its ranks."""

    layers: list[int]
    per_layer: list[tuple[tuple[TensorSpec, ...], bool]]  # flat keys ("i"): the per-layer files (ZeRO 1/2, pp > 1)
    nested: tuple[TensorSpec, ...]  # nested keys ("layer.i"): the one-file model
    nested_empty: tuple[str, ...]
    model_bytes: int = field(init=False)

    def __post_init__(self) -> None:
        self.model_bytes = sum(t.nbytes for t in self.nested)


def _stage(w: Workload, pp_rank: int, dp: int) -> _Stage:
    if w.num_layers <= 0:
        return _Stage([], [], (), ())
    start, end = _layer_range(pp_rank, w.num_layers, w.pipeline_parallelism)
    layers = list(range(start, end + 1))
    per_layer = [_layer_tensors(w, layer, dp, "") for layer in layers]
    nested: list[TensorSpec] = []
    empty: list[str] = []
    for layer in layers:
        specs, is_empty = _layer_tensors(w, layer, dp, f"{layer}.")
        nested.extend(specs)
        if is_empty:
            empty.append(str(layer))
    return _Stage(layers, per_layer, tuple(nested), tuple(empty))


def _refuse_beyond_dlio(workload: Workload) -> None:
    """DLIO's formulas know one dense MLP and standard attention per block: a MoE's experts and router, MLA's
    projections, MTP layers have no honest place in its files, so such a model is refused, not approximated."""
    from ckpt_bench.model.job import TrainingJob

    arch = TrainingJob.from_dict(workload.megatron).architecture
    beyond = [what for what, present in (("experts", arch.moe), ("multi-latent attention", arch.mla),
                                         ("MTP layers", arch.mtp_num_layers)) if present]
    if beyond:
        raise WorkloadError(
            f"workload {workload.name!r} is a {arch.kind} model: DLIO's formulas (the torch-save engine) know one "
            f"dense MLP and standard attention per block and cannot express its {' and '.join(beyond)}; use "
            "--engine dcp (its sharded state through PyTorch DCP), torch_dist or torch (Megatron-LM's own formats)")


def layout(workload: Workload, world_size: int | None = None, run_ranks: Sequence[int] | None = None) -> Layout:
    """Every rank's files and tensors for one save of ``workload``.

    ``world_size``: ranks of the whole job (default ``workload.world_size``); it must be a multiple of tp·pp.
    ``run_ranks``: lay out only these ranks of that job (`checkpoint_layout.ranks_that_run`: DLIO's subset mode
    runs its first N; they hold what the same ranks of the full job hold); :attr:`Layout.total_bytes` still
    counts the whole job.
    """
    w = workload
    if w.megatron is not None:
        _refuse_beyond_dlio(w)
    world = w.world_size if world_size is None else world_size
    if world is None:
        raise WorkloadError(
            f"workload {w.name!r} has no world size: pass world_size= (DLIO takes it from mpirun -np),"
            f" a multiple of tensor × pipeline parallelism = {w.model_parallelism}"
        )
    if not is_int(world) or world < 1:
        raise WorkloadError(f"world_size = {world!r} is not valid; it must be a positive integer")
    mp = w.model_parallelism
    if world % mp:
        lower, upper = (world // mp) * mp, (world // mp + 1) * mp
        near = f"{lower} or {upper}" if lower else f"{upper}"
        raise WorkloadError(
            f"world_size = {world} cannot hold workload {w.name!r}: it must be a multiple of tensor × pipeline"
            f" parallelism = {w.tensor_parallelism} × {w.pipeline_parallelism} = {mp} (e.g. {near})"
        )
    running = ranks_that_run(world, run_ranks)

    dp = world // mp
    tp, pp, zero = w.tensor_parallelism, w.pipeline_parallelism, w.zero_stage
    stages = [_stage(w, p, dp) for p in range(pp)]
    optimizer = _optimizer_tensors(w, dp)
    optimizer_bytes = sum(t.nbytes for t in optimizer)
    states = (TensorSpec("a", w.model_size_bytes, "int8"),) if w._writes_model_states else ()
    states_bytes = w.model_size_bytes if states else 0

    def rank_bytes(rank: int) -> tuple[int, int, int, int]:
        """(written, resident, allocated model, optimizer) tensor bytes of ``rank``."""
        if zero == 0 and rank >= mp:
            return 0, 0, 0, 0
        stage = stages[(rank // tp) % pp]
        dp_rank = rank // mp
        holds_model = not (zero == 1 and dp_rank != 0)
        writes_model = dp_rank == 0 if zero in (1, 2) else True
        model = stage.model_bytes if holds_model else 0
        written = states_bytes + (stage.model_bytes if writes_model else 0) + optimizer_bytes
        return written, states_bytes + model + optimizer_bytes, model, optimizer_bytes

    totals = [rank_bytes(r) for r in range(world)]
    total_bytes = sum(t[0] for t in totals)
    run = [totals[rank] for rank in running]
    model_reported = states_bytes if states else sum(t[2] for t in run)
    reported = model_reported + sum(t[3] for t in run)

    ranks: list[RankShare] = []
    for rank in running:
        tp_rank, pp_rank, dp_rank, mp_rank = rank % tp, (rank // tp) % pp, rank // mp, rank % mp
        written, resident = totals[rank][:2]
        files: list[FileShare] = []
        if not (zero == 0 and rank >= mp):
            stage = stages[pp_rank]
            if states:
                files.append(FileShare(f"model_states-{rank}.pt", "model_states", states))
            if stage.layers:
                if zero in (1, 2):
                    if dp_rank == 0:
                        if pp > 1:
                            for layer, (specs, _) in zip(stage.layers, stage.per_layer, strict=True):
                                files.append(
                                    FileShare(f"layer_{layer}-model_{mp_rank}_model_states.pt", "model", specs)
                                )
                        else:
                            files.append(
                                FileShare(f"model_{mp_rank}_model_states.pt", "model", stage.nested, stage.nested_empty)
                            )
                else:
                    files.append(
                        FileShare(
                            f"zero_pp_rank_{dp_rank}_mp_rank_{mp_rank}_model_states.pt",
                            "model",
                            stage.nested,
                            stage.nested_empty,
                        )
                    )
            if optimizer:
                files.append(
                    FileShare(f"zero_pp_rank_{dp_rank}_mp_rank_{mp_rank}_optim_states.pt", "optimizer", optimizer)
                )
        ranks.append(RankShare(rank, tuple(files), written, resident, tp_rank, pp_rank, dp_rank, mp_rank))

    return Layout(
        workload=w,
        world_size=world,
        data_parallelism=dp,
        ranks=tuple(ranks),
        total_bytes=total_bytes,
        dlio_reported_bytes=reported,
        parameters=ParameterCounts(num_parameters(w), num_parameters(w)) if w.num_layers > 0 else None,
        job_rank_bytes=tuple(t[0] for t in totals),
    )


def dlio_tensor_name(file: FileShare, tensor_name: str) -> str:
    """A tensor's name across the job: its file's name (unique per rank) and its key path, keys joined by dots
    (as `integrity.iter_tensors` names what a load returns, whatever the file's separator)."""
    return f"{file.name}/{tensor_name.replace(file.separator, '.')}"
