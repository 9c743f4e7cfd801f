"""The named workloads of ``--workload NAME``: MLPerf Storage's four llama3 checkpoint workloads and Llama 2
7B and 70B, each a `Workload` with its layout and schedule."""

from __future__ import annotations

from ckpt_bench.layout.workload import TRANSFORMER, Workload, WorkloadError

__all__ = ["CATALOG", "get_workload"]

# MLPerf Storage's four llama3 checkpoint workloads: the shapes and layouts of mlcommons/storage
# configs/dlio/workload/llama3_{8b,70b,405b,1t}.yaml, at the rank counts of its CLOSED division (mlpstorage
# config.py LLM_ALLOWED_VALUES; Submission_guidelines.md table 2: TP×PP×DP 1×1×8, 8×1×8, 8×32×2, 8×64×2).
# Note that MLPerf's "70B" has 128 heads (head size 64, so K/V of 512 columns), not Llama 3 70B's 64: 69.88 B
# parameters rather than 70.55 B. Its "1T" has a head size of 25872 // 192 = 134.
_MLPERF = dict(
    model_type=TRANSFORMER,
    vocab_size=128256,
    model_datatype="fp16",
    optimizer_datatype="fp32",
    num_checkpoints_write=10,
    num_checkpoints_read=10,
    time_between_checkpoints=5.0,
    fsync=True,
)

# Llama 2 7B and 70B with their real shapes (32000 vocabulary, SwiGLU, untied lm_head, RMSNorm without bias:
# DLIO's count gives their exact parameter counts, 6,738,415,616 and 68,976,648,192). The layouts are ours:
# llama2-7b uses DLIO's own llama_7b.yaml layout (TP1 PP1 ZeRO-1) on one 8-rank node; llama2-70b uses DLIO's
# llama_70b.yaml layout (TP8 PP4 ZeRO-1) with two data-parallel replicas (64 ranks).
#
# No MoE: DLIO's formulas know one dense MLP per block. Setting ffn_hidden_size to experts × expert size would
# match a MoE's parameter count, but not its tensors (one per expert, plus the router), nor expert parallelism,
# so the per-rank files would not be those of any MoE training job. Left out on purpose.
_LLAMA2 = dict(
    model_type=TRANSFORMER,
    vocab_size=32000,
    model_datatype="fp16",
    optimizer_datatype="fp32",
    num_checkpoints_write=10,
    num_checkpoints_read=10,
    time_between_checkpoints=5.0,
    fsync=True,
)

CATALOG: dict[str, Workload] = {
    "llama3-8b": Workload(
        name="llama3-8b",
        num_layers=32,
        hidden_size=4096,
        ffn_hidden_size=14336,
        num_attention_heads=32,
        num_kv_heads=8,
        tensor_parallelism=1,
        pipeline_parallelism=1,
        zero_stage=3,
        world_size=8,
        checkpoint_folder="checkpoints/llama_8b",
        **_MLPERF,
    ),
    "llama3-70b": Workload(
        name="llama3-70b",
        num_layers=80,
        hidden_size=8192,
        ffn_hidden_size=28672,
        num_attention_heads=128,
        num_kv_heads=8,
        tensor_parallelism=8,
        pipeline_parallelism=1,
        zero_stage=3,
        world_size=64,
        checkpoint_folder="checkpoints/llama_70b",
        **_MLPERF,
    ),
    "llama3-405b": Workload(
        name="llama3-405b",
        num_layers=126,
        hidden_size=16384,
        ffn_hidden_size=53248,
        num_attention_heads=128,
        num_kv_heads=8,
        tensor_parallelism=8,
        pipeline_parallelism=32,
        zero_stage=1,
        world_size=512,
        checkpoint_folder="checkpoints/llama_405b",
        **_MLPERF,
    ),
    "llama3-1t": Workload(
        name="llama3-1t",
        num_layers=128,
        hidden_size=25872,
        ffn_hidden_size=98304,
        num_attention_heads=192,
        num_kv_heads=32,
        tensor_parallelism=8,
        pipeline_parallelism=64,
        zero_stage=1,
        world_size=1024,
        checkpoint_folder="checkpoints/llama_1t",
        **_MLPERF,
    ),
    "llama2-7b": Workload(
        name="llama2-7b",
        num_layers=32,
        hidden_size=4096,
        ffn_hidden_size=11008,
        num_attention_heads=32,
        num_kv_heads=32,
        tensor_parallelism=1,
        pipeline_parallelism=1,
        zero_stage=1,
        world_size=8,
        checkpoint_folder="checkpoints/llama2_7b",
        **_LLAMA2,
    ),
    "llama2-70b": Workload(
        name="llama2-70b",
        num_layers=80,
        hidden_size=8192,
        ffn_hidden_size=28672,
        num_attention_heads=64,
        num_kv_heads=8,
        tensor_parallelism=8,
        pipeline_parallelism=4,
        zero_stage=1,
        world_size=64,
        checkpoint_folder="checkpoints/llama2_70b",
        **_LLAMA2,
    ),
}


def get_workload(name: str) -> Workload:
    """The catalog workload ``name`` (e.g. ``"llama3-405b"``)."""
    try:
        return CATALOG[name]
    except KeyError:
        raise WorkloadError(f"unknown workload {name!r}; the catalog has {', '.join(CATALOG)}") from None
