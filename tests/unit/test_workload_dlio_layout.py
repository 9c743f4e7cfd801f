"""DLIO's layout, its YAML reader and the catalog (ckpt_bench.layout.dlio_layout, dlio_yaml,
catalog) against DLIO's own numbers (no DLIO needed here).

Where the expected numbers come from (DLIO = argonne-lcf/dlio_benchmark at commit e1919d7):

* MLPERF_PER_RANK: DLIO's own ``PyTorchCheckpointing.__init__`` + ``save_checkpoint`` run for every rank of each
  MLPerf Storage llama3 workload (mlcommons/storage configs/dlio/workload/llama3_*.yaml, unchanged) at its CLOSED
  rank count, in one process with a fake MPI communicator and ``get_tensor_core``/``save_state`` stubbed to record
  lengths instead of allocating: the per-rank sum of numel × element size of every tensor DLIO passed to
  torch.save. Files, tensor names, lengths and dtypes matched ours for every rank; the lists below are the per-rank
  byte counts, run-length encoded in rank order as (bytes, number of consecutive ranks).
* REAL_RUNS: real DLIO runs (``mpirun -np N dlio_benchmark workload=...``) of tests/fixtures/workloads/*.yaml:
  the tensor bytes of every .pt file they wrote (torch.load, numel × element_size) and summary.json's
  ``metric.checkpoint_size_GB``.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ckpt_bench.layout import catalog, dlio_layout, dlio_yaml
from ckpt_bench.layout.checkpoint_layout import Layout, TensorSpec
from ckpt_bench.layout.workload import DLIO_APPLIES_FSYNC, Workload, WorkloadError, num_parameters

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "workloads"
GIB = 2**30

MLPERF_PER_RANK = {
    "llama3-8b": [(14053202944, 8)],
    "llama3-70b": [(15287602688, 64)],
    "llama3-405b": [
        (13226441600, 8),  # stage 0: embedding + 4 blocks, dp rank 0 (model + optimizer)
        (12701105024, 232),  # stages 1-29: 4 blocks
        (11904121728, 8),  # stage 30: 3 blocks
        (12429491072, 8),  # stage 31: 3 blocks + lm_head + final norm
        (9513171840, 256),  # dp rank 1: optimizer only (ZeRO-1)
    ],
    "llama3-1t": [(19290292860, 8), (18460733052, 496), (19290344604, 8), (13865244924, 512)],
}
MLPERF_TOTAL = {
    "llama3-8b": 112425623552,  # 104.70 GiB
    "llama3-70b": 978406572032,  # 911.21 GiB
    "llama3-405b": 5682508791808,  # 5292.25 GiB
    "llama3-1t": 16564174094592,  # 15426.59 GiB
}

# (fixture, ranks run) -> ({file: tensor bytes DLIO wrote}, summary.json checkpoint_size_GB)
REAL_RUNS = {
    ("dlio_tiny_zero3", 2): (
        {
            "zero_pp_rank_0_mp_rank_0_model_states.pt": 28448256,
            "zero_pp_rank_0_mp_rank_0_optim_states.pt": 170720256,
            "zero_pp_rank_1_mp_rank_0_model_states.pt": 28448256,
            "zero_pp_rank_1_mp_rank_0_optim_states.pt": 170720256,
        },
        0.37098026275634766,
    ),
    ("dlio_tiny_zero3", 3): (
        {
            "zero_pp_rank_0_mp_rank_0_model_states.pt": 18965488,
            "zero_pp_rank_0_mp_rank_0_optim_states.pt": 113823744,
            "zero_pp_rank_1_mp_rank_0_model_states.pt": 18965488,
            "zero_pp_rank_1_mp_rank_0_optim_states.pt": 113823744,
            "zero_pp_rank_2_mp_rank_0_model_states.pt": 18965488,
            "zero_pp_rank_2_mp_rank_0_optim_states.pt": 113823744,
        },
        0.37100882828235626,
    ),
    ("dlio_tiny_tp2", 2): (
        {
            "model_0_model_states.pt": 28452864,
            "model_1_model_states.pt": 28452864,
            "zero_pp_rank_0_mp_rank_0_optim_states.pt": 170720256,
            "zero_pp_rank_0_mp_rank_1_optim_states.pt": 170720256,
        },
        0.3709888458251953,
    ),
    ("dlio_tiny_pp2", 2): (
        {
            "layer_0-model_0_model_states.pt": 16385024,
            "layer_1-model_0_model_states.pt": 6031360,
            "layer_2-model_0_model_states.pt": 6031360,
            "layer_3-model_0_model_states.pt": 6031360,
            "layer_4-model_1_model_states.pt": 6031360,
            "layer_5-model_1_model_states.pt": 6031360,
            "layer_6-model_1_model_states.pt": 16385024,
            "layer_7-model_1_model_states.pt": 1024,
            "zero_pp_rank_0_mp_rank_0_optim_states.pt": 188814336,
            "zero_pp_rank_0_mp_rank_1_optim_states.pt": 188814336,
        },
        0.41030025482177734,
    ),
    ("dlio_tiny_pp2_zero2", 4): (
        {
            "layer_0-model_0_model_states.pt": 16385024,
            "layer_1-model_0_model_states.pt": 6031360,
            "layer_2-model_0_model_states.pt": 6031360,
            "layer_3-model_0_model_states.pt": 6031360,
            "layer_4-model_1_model_states.pt": 6031360,
            "layer_5-model_1_model_states.pt": 6031360,
            "layer_6-model_1_model_states.pt": 16385024,
            "layer_7-model_1_model_states.pt": 1024,
            "zero_pp_rank_0_mp_rank_0_optim_states.pt": 94422528,
            "zero_pp_rank_0_mp_rank_1_optim_states.pt": 94422528,
            "zero_pp_rank_1_mp_rank_0_optim_states.pt": 94422528,
            "zero_pp_rank_1_mp_rank_1_optim_states.pt": 94422528,
        },
        0.468963623046875,  # more than written: DLIO counts the model ZeRO-2's dp rank 1 holds and does not write
    ),
    ("dlio_tiny_zero0_notype", 2): (
        {
            "model_states-0.pt": 10240,
            "zero_pp_rank_0_mp_rank_0_model_states.pt": 11602432,
            "zero_pp_rank_0_mp_rank_0_optim_states.pt": 69629952,
        },
        0.06485748291015625,  # DLIO counts model_size_bytes in place of the layers for a non-transformer
    ),
    ("dlio_tiny_subset", 2): (
        {
            "zero_pp_rank_0_mp_rank_0_model_states.pt": 14224128,
            "zero_pp_rank_0_mp_rank_0_optim_states.pt": 85375488,
            "zero_pp_rank_1_mp_rank_0_model_states.pt": 14224128,
            "zero_pp_rank_1_mp_rank_0_optim_states.pt": 85375488,
        },
        0.18551874160766602,
    ),
}


def _rle(values):
    return [(value, len(list(group))) for value, group in itertools.groupby(values)]


def _fixture_layout(name: str, ranks: int) -> Layout:
    workload = dlio_yaml.load_dlio_yaml(FIXTURES / f"{name}.yaml")
    if workload.subset:
        return dlio_layout.layout(workload, run_ranks=range(ranks))
    return dlio_layout.layout(workload, world_size=ranks)


# ---------------------------------------------------------------------------------------------------------------
# MLPerf Storage llama3 shapes, every rank
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(MLPERF_PER_RANK))
def test_mlperf_per_rank_bytes_match_dlio(name):
    layout = dlio_layout.layout(catalog.get_workload(name))
    assert len(layout.ranks) == layout.world_size == sum(count for _, count in MLPERF_PER_RANK[name])
    assert _rle([r.bytes for r in layout.ranks]) == MLPERF_PER_RANK[name]
    assert [r.bytes for r in layout.ranks] == [r.resident_bytes for r in layout.ranks]  # ZeRO 1/3: all written
    assert layout.total_bytes == layout.run_bytes == layout.dlio_reported_bytes == MLPERF_TOTAL[name]
    for rank in layout.ranks:
        assert rank.bytes == sum(f.nbytes for f in rank.files)


def test_mlperf_totals_in_gib():
    gib = {name: round(dlio_layout.layout(catalog.get_workload(name)).total_bytes / GIB, 1) for name in MLPERF_TOTAL}
    assert gib == {"llama3-8b": 104.7, "llama3-70b": 911.2, "llama3-405b": 5292.2, "llama3-1t": 15426.6}


def test_mlperf_catalog_entries():
    expected = {  # name: (world, tp, pp, zero, layers, hidden, ffn, heads, kv heads)
        "llama3-8b": (8, 1, 1, 3, 32, 4096, 14336, 32, 8),
        "llama3-70b": (64, 8, 1, 3, 80, 8192, 28672, 128, 8),
        "llama3-405b": (512, 8, 32, 1, 126, 16384, 53248, 128, 8),
        "llama3-1t": (1024, 8, 64, 1, 128, 25872, 98304, 192, 32),
    }
    for name, values in expected.items():
        w = catalog.get_workload(name)
        got = (w.world_size, w.tensor_parallelism, w.pipeline_parallelism, w.zero_stage, w.num_layers)
        got += (w.hidden_size, w.ffn_hidden_size, w.num_attention_heads, w.num_kv_heads)
        assert got == values, name
        assert (w.vocab_size, w.model_datatype, w.optimizer_datatype) == (128256, "fp16", "fp32")
        assert (w.num_checkpoints_write, w.num_checkpoints_read, w.time_between_checkpoints) == (10, 10, 5.0)
        assert w.fsync is True and w.model_type == "transformer"
    # what DLIO's own log prints as "Total number of parameters in the model"
    assert num_parameters(catalog.get_workload("llama3-8b")) == 8030261248
    # the real Llama 2 parameter counts: DLIO's formula expresses these models exactly
    assert num_parameters(catalog.get_workload("llama2-7b")) == 6738415616
    assert num_parameters(catalog.get_workload("llama2-70b")) == 68976648192
    assert not any("moe" in name for name in catalog.CATALOG)


def test_llama3_405b_files():
    layout = dlio_layout.layout(catalog.get_workload("llama3-405b"))
    first = layout.ranks[0]
    assert (first.tp_rank, first.pp_rank, first.dp_rank, first.mp_rank) == (0, 0, 0, 0)
    assert [f.name for f in first.files] == [
        *(f"layer_{i}-model_0_model_states.pt" for i in range(5)),
        "zero_pp_rank_0_mp_rank_0_optim_states.pt",
    ]
    assert [t.numel for t in first.files[0].tensors] == [16384 * 128256 // 8]
    last_stage = layout.ranks[255]  # tp 7, stage 31: blocks 124-126, lm_head 127, final norm 128
    assert (last_stage.tp_rank, last_stage.pp_rank, last_stage.mp_rank) == (7, 31, 255)
    assert [f.name for f in last_stage.files][:-1] == [f"layer_{i}-model_255_model_states.pt" for i in range(124, 129)]
    second_replica = layout.ranks[256]
    assert [f.name for f in second_replica.files] == ["zero_pp_rank_1_mp_rank_0_optim_states.pt"]
    optimizer = second_replica.files[0]
    assert optimizer.kind == "optimizer"
    assert [(t.name, t.numel, t.dtype) for t in optimizer.tensors] == [
        (str(i), n, "fp32") for i, n in enumerate([405853388800 // 512, 5 * 16384] * 3)
    ]
    paths = list(layout.files(step=3))
    assert len(paths) == 1544
    assert paths[0][:2] == (0, "global_epoch1_step3/layer_0-model_0_model_states.pt")


def test_llama3_8b_zero3_files():
    layout = dlio_layout.layout(catalog.get_workload("llama3-8b"))
    rank = layout.ranks[5]
    assert [f.name for f in rank.files] == [
        "zero_pp_rank_5_mp_rank_0_model_states.pt",
        "zero_pp_rank_5_mp_rank_0_optim_states.pt",
    ]
    model = rank.files[0]
    assert model.tensors[0] == TensorSpec("0.0", 4096 * 128256 // 8, "fp16")
    assert model.tensors[0].shape == (65667072,) and model.tensors[0].torch_dtype == "float16"
    assert [t.name for t in model.tensors[-2:]] == ["33.0", "34.0"]  # lm_head, final norm
    assert len(model.tensors) == 1 + 32 * 6 + 2


def test_subset_is_first_ranks_of_full_job():
    workload = catalog.get_workload("llama3-405b")
    full = dlio_layout.layout(workload)
    subset = dlio_layout.layout(workload, run_ranks=range(8))
    assert subset.is_subset and not full.is_subset
    assert subset.ranks == full.ranks[:8]
    assert subset.total_bytes == full.total_bytes
    assert subset.run_bytes == subset.dlio_reported_bytes == 105811532800  # DLIO, subset mode, data 2, -np 8
    one_t = dlio_layout.layout(catalog.get_workload("llama3-1t"), run_ranks=range(8))
    assert one_t.run_bytes == 154322342880  # DLIO, subset mode, data 2, -np 8


def test_layout_is_fast_and_torch_free():
    workload = catalog.get_workload("llama3-1t")
    start = time.perf_counter()
    layout = dlio_layout.layout(workload)
    assert time.perf_counter() - start < 0.5
    assert len(layout.ranks) == 1024
    code = (
        "import sys; from ckpt_bench.layout import catalog, dlio_layout, dlio_yaml;"
        " print('torch' in sys.modules)"
    )
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, check=True)
    assert result.stdout.strip() == "False"


def test_fsync_is_what_the_workload_asks_and_dlio_never_applies():
    assert catalog.get_workload("llama3-70b").fsync is True
    assert DLIO_APPLIES_FSYNC is False


# ---------------------------------------------------------------------------------------------------------------
# Small workloads, against the files real DLIO wrote
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "ranks"), list(REAL_RUNS))
def test_fixture_files_match_real_dlio(name, ranks):
    files, checkpoint_size_gb = REAL_RUNS[(name, ranks)]
    layout = _fixture_layout(name, ranks)
    ours = {f.name: f.nbytes for r in layout.ranks for f in r.files}
    assert ours == files
    assert layout.run_bytes == sum(files.values())
    assert layout.dlio_reported_bytes == layout.mlperf_checkpoint_bytes == checkpoint_size_gb * GIB


def test_fixture_tensors_match_real_dlio():
    # ZeRO-3 on 3 ranks: vocab 16001 × hidden 512 / 3 floors; names are "<layer>.<index>"
    model = _fixture_layout("dlio_tiny_zero3", 3).ranks[2].files[0]
    assert model.name == "zero_pp_rank_2_mp_rank_0_model_states.pt"
    block = [(170, "0"), (131072, "1"), (87381, "2"), (170, "3"), (524288, "4"), (262144, "5")]
    expected = [("0.0", 2730837)]
    expected += [(f"{layer}.{index}", n) for layer in range(1, 5) for n, index in block]
    expected += [("5.0", 2730837), ("6.0", 170)]
    assert [(t.name, t.numel) for t in model.tensors] == expected
    assert {t.dtype for t in model.tensors} == {"fp16"}
    optimizer = _fixture_layout("dlio_tiny_zero3", 3).ranks[2].files[1]
    assert [(t.name, t.numel, t.dtype) for t in optimizer.tensors] == [
        (str(i), n, "fp32") for i, n in enumerate([9482752, 2560] * 3)
    ]
    # PP2, 5 blocks split 3 + 2; bf16; per-layer files keyed by tensor index
    pp2 = _fixture_layout("dlio_tiny_pp2", 2)
    last = pp2.ranks[1].files[3]
    assert last.name == "layer_7-model_1_model_states.pt"
    assert [(t.name, t.numel, t.dtype) for t in last.tensors] == [("0", 512, "bf16")]
    block3 = pp2.ranks[0].files[3]
    assert [(t.name, t.numel) for t in block3.tensors] == [
        ("0", 512),
        ("1", 393216),
        ("2", 262144),
        ("3", 512),
        ("4", 1572864),
        ("5", 786432),
    ]
    # no model.type: DLIO adds a 10240-byte int8 "model_states" file; ZeRO-0 rank 1 writes nothing
    zero0 = _fixture_layout("dlio_tiny_zero0_notype", 2)
    states = zero0.ranks[0].files[0]
    assert (states.name, states.kind, states.tensors) == (
        "model_states-0.pt",
        "model_states",
        (TensorSpec("a", 10240, "int8"),),
    )
    assert zero0.ranks[1].files == () and zero0.ranks[1].bytes == 0


def test_zero2_holds_more_than_it_writes():
    layout = _fixture_layout("dlio_tiny_pp2_zero2", 4)
    replica1 = layout.ranks[2]
    assert replica1.dp_rank == 1 and [f.kind for f in replica1.files] == ["optimizer"]
    assert replica1.resident_bytes - replica1.bytes == layout.ranks[0].bytes - replica1.bytes > 0


def test_fixture_yaml_fields():
    w = dlio_yaml.load_dlio_yaml(FIXTURES / "dlio_tiny_zero3.yaml")
    assert (w.name, w.zero_stage, w.vocab_size, w.world_size, w.subset) == ("tiny_zero3", 3, 16001, None, False)
    assert (w.fsync, w.time_between_checkpoints, w.checkpoint_folder) == (True, 0.0, "checkpoints/tiny_zero3")
    subset = dlio_yaml.load_dlio_yaml(FIXTURES / "dlio_tiny_subset.yaml")
    assert (subset.world_size, subset.subset) == (4, True)
    zero0 = dlio_yaml.load_dlio_yaml(FIXTURES / "dlio_tiny_zero0_notype.yaml")  # dataset/reader keys: accepted, ignored
    assert (zero0.model_type, zero0.model_size_bytes, zero0.model_datatype) == (None, 10240, "fp16")
    assert dlio_yaml.load_dlio_yaml(FIXTURES / "dlio_tiny_tp2.yaml", world_size=2).world_size == 2


def test_empty_layer_dicts_are_kept():
    # ZeRO-3 over 16 ranks of a hidden size of 8: the norms floor to 0 elements, the final-norm layer is empty
    w = Workload(
        model_type="transformer",
        num_layers=2,
        hidden_size=8,
        ffn_hidden_size=16,
        num_attention_heads=1,
        num_kv_heads=1,
        vocab_size=4,
        zero_stage=3,
    )
    layout = dlio_layout.layout(w, world_size=16)
    model = layout.ranks[3].files[0]
    assert [(t.name, t.numel) for t in model.tensors] == [
        ("0.0", 2),
        ("1.1", 12),
        ("1.2", 4),
        ("1.4", 16),
        ("1.5", 8),
        ("2.1", 12),
        ("2.2", 4),
        ("2.4", 16),
        ("2.5", 8),
        ("3.0", 2),
    ]
    assert model.empty_dicts == ("4",)
    assert list(model.state_tree()) == ["0", "1", "2", "3", "4"] and model.state_tree()["4"] == {}
    assert layout.total_bytes == 26880  # DLIO's own code, same workload, 16 ranks


# ---------------------------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------------------------


def test_world_size_errors():
    workload = catalog.get_workload("llama3-405b")
    with pytest.raises(WorkloadError, match=r"world_size = 500 .* multiple of .* = 256 \(e\.g\. 256 or 512\)"):
        dlio_layout.layout(workload, world_size=500)
    with pytest.raises(WorkloadError, match=r"\[512\].*distinct rank of the job's 0\.\.511"):
        dlio_layout.layout(workload, run_ranks=[512])
    with pytest.raises(WorkloadError, match=r"\[1, 1\]"):
        dlio_layout.layout(workload, run_ranks=[1, 1])
    with pytest.raises(WorkloadError, match="no world size"):
        dlio_layout.layout(dlio_yaml.load_dlio_yaml(FIXTURES / "dlio_tiny_tp2.yaml"))
    with pytest.raises(WorkloadError, match="unknown workload 'llama3-7b'; the catalog has llama3-8b"):
        catalog.get_workload("llama3-7b")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"zero_stage": 3}, "DLIO refuses ZeRO-3 with pipeline_parallelism 32"),
        ({"pipeline_parallelism": 200, "world_size": 1600}, "at most num_layers = 126"),
        ({"model_datatype": "float16"}, "model_datatype = 'float16' .* use one of int8, uint8, fp16, bf16"),
        ({"zero_stage": 4}, "zero_stage = 4 .* 0, 1, 2 and 3"),
        ({"num_checkpoints_read": 11}, "at most num_checkpoints_write = 10"),
        ({"world_size": 100}, "world_size = 100 .* multiple of tensor × pipeline parallelism = 256"),
        ({"tensor_parallelism": 0}, "tensor_parallelism = 0 .* at least 1"),
        ({"num_layers": 0}, "writes nothing"),
    ],
)
def test_workload_checks(changes, message):
    with pytest.raises(WorkloadError, match=message):
        catalog.get_workload("llama3-405b").replace(**changes)


def _yaml(tmp_path, text):
    path = tmp_path / "w.yaml"
    path.write_text(text)
    return path


BASE = """
model:
  name: t
  type: transformer
  num_layers: 2
  parallelism: {tensor: 1, pipeline: 1, zero_stage: 1}
  transformer: {vocab_size: 100, hidden_size: 64, ffn_hidden_size: 128, num_attention_heads: 4, num_kv_heads: 4}
framework: pytorch
workflow: {generate_data: False, train: False, checkpoint: True}
checkpoint: {num_checkpoints_write: 2, num_checkpoints_read: 1}
"""


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            ("  type: transformer", "  type: transformer\n  model_size: 100"),
            r"unknown key model\.model_size .*model_size_bytes",
        ),
        (
            ("num_kv_heads: 4}", "num_kv_heads: 4, kv_heads: 2}"),
            r"unknown key model\.transformer\.kv_heads.*hidden_size",
        ),
        (("framework: pytorch", "framework: pytorch\nmodel_extra: 1"), r"unknown key model_extra: DLIO reads no"),
        (("train: False", "train: True"), r"workflow\.train = True.*checkpoint-only"),
        (("train: False, ", ""), r"workflow\.train is absent \(DLIO's default: True\)"),
        (("checkpoint: True", "checkpoint: False"), r"workflow\.checkpoint = False"),
        (("framework: pytorch", "framework: tensorflow"), "framework = 'tensorflow'"),
        (("framework: pytorch", ""), r"framework = 'tensorflow' \(DLIO default\)"),
        (("zero_stage: 1}", "zero_stage: 1}\n  layer_parameters: [1, 2]"), r"model\.layer_parameters is not supported"),
        (("zero_stage: 1}", "zero_stage: 1, data: 2}"), r"model\.parallelism\.data = 2 with checkpoint\.mode default"),
        (("num_checkpoints_read: 1}", "num_checkpoints_read: 1, mode: subset}"), "subset needs model.parallelism.data"),
        (("num_checkpoints_read: 1}", "num_checkpoints_read: 3}"), "at most num_checkpoints_write = 2"),
        (("framework: pytorch", "framework: pytorch\ndataset: {num_files_train: 4}\nreader: {batch_size: 2}"), None),
    ],
)
def test_yaml_errors(tmp_path, edit, message):
    old, new = edit
    assert old in BASE
    path = _yaml(tmp_path, BASE.replace(old, new, 1))
    if message is None:
        assert dlio_yaml.load_dlio_yaml(path, world_size=2).world_size == 2
        return
    with pytest.raises(WorkloadError, match=message) as info:
        dlio_yaml.load_dlio_yaml(path)
    assert str(path) in str(info.value)


def test_yaml_not_a_mapping(tmp_path):
    with pytest.raises(WorkloadError, match="is a mapping"):
        dlio_yaml.load_dlio_yaml(_yaml(tmp_path, "- just\n- a list\n"))
    with pytest.raises(WorkloadError, match="cannot read"):
        dlio_yaml.load_dlio_yaml(tmp_path / "missing.yaml")
