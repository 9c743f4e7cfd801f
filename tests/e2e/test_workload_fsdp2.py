"""FSDP2's share of a Megatron experiment (`layout/megatron_fsdp2.py`) against a real FSDP2 save on CPU
ranks: 3 ranks, so that parameters split unevenly (torch.chunk's rows), SwiGLU's fc1 sharded as one tensor."""

import json
import subprocess
import sys
from pathlib import Path

from helpers import assert_one_line_error, launch

from ckpt_bench.layout.megatron_fsdp2 import fsdp2_chunk, layout
from ckpt_bench.layout.sources import from_megatron_args

ARGS = {"num_layers": 2, "hidden_size": 64, "ffn_hidden_size": 160, "num_attention_heads": 4, "seq_length": 32,
        "max_position_embeddings": 32, "vocab_size": 500, "use_torch_fsdp2": True, "bf16": True, "swiglu": True,
        "normalization": "RMSNorm", "add_bias_linear": False, "position_embedding_type": "rope",
        "untie_embeddings_and_output_weights": True}
RANKS = 3


def test_fsdp2_chunks_as_torch_chunk():
    assert [fsdp2_chunk(512, 3, r) for r in range(3)] == [(0, 171), (171, 171), (342, 170)]
    assert [fsdp2_chunk(2, 4, r) for r in range(4)] == [(0, 1), (1, 1), (2, 0), (2, 0)]


def test_an_empty_chunk_lies_at_the_end_of_its_rows_as_torch_places_it():
    """More ranks than some parameters have rows (Llama 3.1 70B's 128,256-token embedding over 1,024 ranks: 126
    rows a rank, the last six ranks none): each empty chunk at the row count, never at rank 0's offset, so that no
    rank's rows share DCP's index with another chunk (its planner would keep one and lose rank 0's rows)."""
    from ckpt_bench.layout.megatron_fsdp2 import parameter_groups, rank_state
    from ckpt_bench.layout.megatron_shapes import MegatronGPT

    ranks = 48  # the vocabulary padded to 512 rows: 11 a rank, the last rank none (and the 64-row weights: 16 ranks)
    gpt = MegatronGPT(from_megatron_args("fsdp2", ARGS, "test"), ranks)
    parameters = parameter_groups(gpt.model_shards(gpt.coordinates(0)))
    chunks = {}
    for rank in range(ranks):
        for shard in rank_state(gpt, gpt.coordinates(rank), parameters):
            axis = shard.prepend_axis_num  # a layer's index first, then the rows FSDP2 splits
            chunks.setdefault((shard.key, shard.global_offset[:axis]), []).append(
                (shard.global_offset, shard.local_shape[0], shard.global_shape[axis], axis))
    assert chunks["embedding.word_embeddings.weight", ()][-1][:2] == ((512, 0), 0)
    for key, held in chunks.items():
        filled = [offset for offset, rows, _, _ in held if rows]
        empty = {offset for offset, rows, _, _ in held if not rows}
        assert len(set(filled)) == len(filled) and not empty & set(filled), key  # DCP's index: one chunk each
        assert all(offset[axis] == total for offset in empty for _, _, total, axis in held[:1]), key
        assert sum(rows for _, rows, _, _ in held) == held[0][2], key


def test_each_rank_holds_and_writes_what_a_real_fsdp2_save_does(tmp_path):
    script = Path(__file__).with_name("fsdp2_save.py")
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(RANKS),
         "--log-dir", str(tmp_path / "torchrun"), str(script),  # else torchrun leaves /tmp/torchelastic_* behind
         json.dumps(ARGS), str(tmp_path / "ckpt")], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    real = {rank: json.loads((tmp_path / f"rank-{rank}.json").read_text()) for rank in range(RANKS)}
    planned = layout(from_megatron_args("fsdp2", ARGS, "test"), RANKS)
    # bf16 weights: 2 of the 14 bytes a parameter costs (its fp32 copy and Adam's two moments mirror its chunk).
    weights = [share.bytes * 2 // 14 for share in planned.ranks]
    assert weights == [real[rank]["parameter_bytes"] for rank in range(RANKS)]
    assert len(set(weights)) > 1  # an uneven split, as torch.chunk makes it
    for rank in range(RANKS):  # DCP's file: the rank's shards and a little framing
        assert weights[rank] <= real[rank]["file_bytes"] <= weights[rank] + 64 * 1024


def test_an_fsdp2_experiment_is_planned_as_it_shards_and_never_run_as_ddp(tmp_path):
    """`use_torch_fsdp2` (18 of Primus's MI300X examples): --plan gives each rank an even share of the whole
    checkpoint; a run, whose engines would allocate DDP's state, is refused in one line, as is an engine that does
    not lay FSDP2 out."""
    common = ("--workload", "ckpt_bench/configs/tiny_gpt.yaml", "--set", "use_torch_fsdp2=true",
              "--nproc-per-node", "4")
    plan = json.loads(launch(*common, "--plan", "--format", "json").stdout)
    assert plan["rank_bytes"]["min"] == plan["rank_bytes"]["max"] == plan["total_bytes"] // 4
    assert_one_line_error(launch(*common, runs_dir=tmp_path), "use_torch_fsdp2 is sized by --plan")
    assert_one_line_error(launch(*common, "--engine", "torch", "--plan"), "the torch engine does not lay out")
