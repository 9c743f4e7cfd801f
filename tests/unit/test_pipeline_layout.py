"""ckpt_bench.model.pipeline_layout against megatron-core 0.16.1's own functions (the installed megatron-core, the
same release as the snapshot): which decoder layers each (pipeline rank, virtual stage) builds, for the even
split, decoder_first/last_pipeline_num_layers, account_for_*_in_pipeline_split and layout strings; and the
layouts megatron-core refuses, refused here too, in one line."""

from __future__ import annotations

import pytest

from ckpt_bench.model.architecture import ArchitectureError
from ckpt_bench.model.job import TrainingJob
from ckpt_bench.model.parallel import ParallelError, Parallelism
from ckpt_bench.model.pipeline_layout import PipelineLayout

torch = pytest.importorskip("torch")
pytest.importorskip("megatron.core")

from megatron.core import parallel_state  # noqa: E402
from megatron.core.transformer import TransformerConfig  # noqa: E402
from megatron.core.transformer.enums import LayerType  # noqa: E402
from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout  # noqa: E402
from megatron.core.transformer.transformer_block import get_num_layers_to_build  # noqa: E402
from megatron.core.transformer.transformer_layer import get_transformer_layer_offset  # noqa: E402


@pytest.fixture
def virtual_stages():
    """megatron-core reads the virtual pipeline size from parallel_state's global: set it, and put it back."""
    before = parallel_state.get_virtual_pipeline_model_parallel_world_size()
    yield parallel_state.set_virtual_pipeline_model_parallel_world_size
    parallel_state.set_virtual_pipeline_model_parallel_world_size(before)


def megatron_chunks(config: TransformerConfig, pp: int, vp: int | None) -> list[tuple[int, int, list[int]]]:
    """(pp_rank, vp_stage, global layers) of every chunk, in layer order, from megatron-core's functions."""
    chunks = []
    for v in range(vp or 1):
        for p in range(pp):
            stage = v if vp else None
            if config.pipeline_model_parallel_layout is not None:
                layers = config.pipeline_model_parallel_layout.get_layer_id_list(vp_stage=stage, pp_rank=p)
            else:
                offset = get_transformer_layer_offset(config, stage, p)
                layers = list(range(offset, offset + get_num_layers_to_build(config, stage, p)))
            chunks.append((p, v, layers))
    return chunks


def ours(layout: PipelineLayout) -> list[tuple[int, int, list[int]]]:
    return [(c.pp_rank, c.vp_stage, list(c.layers)) for c in layout.chunks]


SPLITS = [  # num_layers, pp, vp, first, last, account for embedding, loss
    (8, 2, 2, None, None, False, False),
    (24, 4, 3, None, None, False, False),
    (14, 4, 2, 2, 4, False, False),
    (12, 3, 2, None, 4, False, False),
    (6, 2, None, 1, None, False, False),
    (14, 4, 2, None, None, True, True),
    (7, 4, None, None, None, True, False),
]


@pytest.mark.parametrize(("layers", "pp", "vp", "first", "last", "embedding", "loss"), SPLITS)
def test_the_split_is_megatron_cores(virtual_stages, layers, pp, vp, first, last, embedding, loss):
    virtual_stages(vp)
    config = TransformerConfig(
        num_layers=layers, hidden_size=64, num_attention_heads=4, pipeline_model_parallel_size=pp,
        virtual_pipeline_model_parallel_size=vp, num_layers_in_first_pipeline_stage=first,
        num_layers_in_last_pipeline_stage=last, account_for_embedding_in_pipeline_split=embedding,
        account_for_loss_in_pipeline_split=loss, pipeline_dtype=torch.bfloat16)
    layout = PipelineLayout.split(layers, pp, vp or 1, first=first, last=last, account_for_embedding=embedding,
                                  account_for_loss=loss)
    assert ours(layout) == megatron_chunks(config, pp, vp)


@pytest.mark.parametrize(("layers", "pp", "vp", "first", "last"), [
    (10, 3, 2, None, 4),  # 3 layers on the middle rank, 2 virtual stages
    (9, 2, None, None, None),  # 9 layers on 2 ranks
    (8, 3, None, 9, None),  # more layers on the first stage than the model has
])
def test_splits_megatron_core_refuses_are_refused(virtual_stages, layers, pp, vp, first, last):
    virtual_stages(vp)
    with pytest.raises((AssertionError, ValueError)):
        config = TransformerConfig(num_layers=layers, hidden_size=64, num_attention_heads=4,
                                   pipeline_model_parallel_size=pp, virtual_pipeline_model_parallel_size=vp,
                                   num_layers_in_first_pipeline_stage=first, num_layers_in_last_pipeline_stage=last,
                                   pipeline_dtype=torch.bfloat16)
        megatron_chunks(config, pp, vp)
    with pytest.raises(ParallelError):
        PipelineLayout.split(layers, pp, vp or 1, first=first, last=last)


LAYOUTS = [  # layout, pp, num_layers, mtp_num_layers
    ("Et|tt|t|tL", 2, 5, 0),
    ("Ettt|(tt|)*3,m|L", 3, 9, 1),
    ("E|t*3|tt|ttL", 2, 7, 0),
    ("Et*1|t*1|t*2|t*2|t*2|t*1,L", 2, 9, 0),
    ("Et*5|t*6|t*6|t*6|t*6|t*6|t*6|t*6|t*6|t*6|t*6|t*6|t*6|t*6|t*6|t*5,L", 16, 94, 0),  # Primus's qwen3_235B_A22B
    ("Ettt|tmL", 2, 4, 1),
]


@pytest.mark.parametrize(("text", "pp", "layers", "mtp"), LAYOUTS)
def test_layout_strings_are_read_as_megatron_core_reads_them(virtual_stages, text, pp, layers, mtp):
    theirs = PipelineParallelLayerLayout(text, pp)
    theirs.validate_layer_layout(layers, mtp)
    vp = theirs.virtual_pipeline_model_parallel_size
    virtual_stages(vp if vp > 1 else None)
    layout = PipelineLayout.from_string(text, pp, layers, mtp)
    assert layout.vp == vp
    for chunk in layout.chunks:
        stage = chunk.vp_stage if vp > 1 else None
        assert list(chunk.layers) == theirs.get_layer_id_list(vp_stage=stage, pp_rank=chunk.pp_rank)
        assert chunk.mtp_layers == theirs.get_num_layers_to_build(LayerType.mtp, vp_stage=stage, pp_rank=chunk.pp_rank)
    assert layout.chunks[0].embedding and layout.chunks[-1].loss
    assert sum(c.embedding for c in layout.chunks) == sum(c.loss for c in layout.chunks) == 1


@pytest.mark.parametrize(("text", "pp", "layers", "mtp"), [
    ("Et|tX|L", 2, 2, 0),  # not a layer letter
    ("Et|t|tL", 2, 3, 0),  # 3 stages on 2 ranks
    ("tE|tL", 2, 2, 0),  # the embedding not first
    ("Et|tt|L", 3, 2, 0),  # 3 transformer layers, the model has 2
    ("Etm|tL", 2, 2, 1),  # a transformer layer after the MTP layer
    ("Et|m|t|L", 2, 2, 1),  # MTP not in its rank's last virtual stage
    ("EtL|tL", 2, 2, 0),  # two losses
])
def test_layouts_megatron_core_refuses_are_refused_in_one_line(virtual_stages, text, pp, layers, mtp):
    with pytest.raises((AssertionError, ValueError)):
        PipelineParallelLayerLayout(text, pp).validate_layer_layout(layers, mtp)
    with pytest.raises(ParallelError, match=r"^pipeline_model_parallel_layout '.*': ") as error:
        PipelineLayout.from_string(text, pp, layers, mtp)
    assert "\n" not in str(error.value)


TINY = dict(num_layers=8, hidden_size=64, num_attention_heads=4, vocab_size=1000, position_embedding_type="rope",
            pipeline_model_parallel_size=4)


@pytest.mark.parametrize(("args", "chunks"), [
    (dict(num_virtual_stages_per_pipeline_rank=2), 2),
    (dict(num_layers_per_virtual_pipeline_stage=1), 2),
    (dict(num_layers_per_virtual_pipeline_stage=2), 1),
    (dict(pipeline_model_parallel_layout="Et|t|t|t|t|t|t|tL"), 2),
])
def test_megatron_lm_arguments_give_the_virtual_stages(args, chunks):
    job = TrainingJob.from_megatron_args({**TINY, **args})
    assert job.parallelism(4).pipeline.vp == chunks
    assert TrainingJob.from_dict(job.as_dict()) == job


@pytest.mark.parametrize(("args", "needle"), [
    (dict(num_virtual_stages_per_pipeline_rank=2, pipeline_model_parallel_layout="Et|t|t|t|t|t|t|tL"),
     "are both set"),
    (dict(num_layers_per_virtual_pipeline_stage=3), "does not divide the 8 layers over 4 pipeline stages"),
    (dict(num_virtual_stages_per_pipeline_rank=2, pipeline_model_parallel_size=2),
     "needs pipeline parallelism above 2"),
    (dict(num_virtual_stages_per_pipeline_rank=3, decoder_first_pipeline_num_layers=2), "do not divide into 3 virtual"),
    (dict(pipeline_model_parallel_layout="Et|t|t|t|t|t|t|tL", decoder_first_pipeline_num_layers=2),
     "cannot be set with"),
    (dict(pipeline_model_parallel_layout=["E", "t"]), "a string such as"),
])
def test_virtual_stages_megatron_lm_refuses(args, needle):
    with pytest.raises((ArchitectureError, ParallelError), match=needle):
        TrainingJob.from_megatron_args({**TINY, **args}).parallelism(4)


def test_pp2_with_virtual_stages_needs_overlap_p2p_comm_and_then_holds_its_chunks():
    job = TrainingJob.from_megatron_args({**TINY, "pipeline_model_parallel_size": 2, "overlap_p2p_comm": True,
                                          "num_virtual_stages_per_pipeline_rank": 2})
    parallel = job.parallelism(4)
    assert [list(c.layers) for c in parallel.chunks(1)] == [[2, 3], [6, 7]]
    assert parallel.stage_layers(1) == (2, 3, 6, 7) and parallel.layers_per_stage == (4, 4)
    with pytest.raises(ParallelError, match="world size 3"):
        Parallelism(world_size=3, num_layers=8, pp=2, virtual_stages=2)
