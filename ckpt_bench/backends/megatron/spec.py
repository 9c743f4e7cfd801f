"""The Megatron backend's worker.json: `MegatronSpec`, built by its launcher and read by its ranks (no
torch here: the launcher builds it).

    {
      "megatron": {
        "arguments": {<Megatron-LM argument name>: value, ...},
        "training_impact": false,             # true: time the save pass's iterations without and with saves
        "load_layout": {"tensor_model_parallel_size": 1, ...} | null,  # the load pass's parallel sizes
        "storage": {"storage": "disk" | "msc", ...},  # CheckpointStorage.describe(): msc turns MSC on
        "load_tier": "persistent" | "non_persistent" | null   # the tier the load reads; null: Megatron-LM's choice
      },
      "checkpoint_dir": ..., "events_dir": ..., "integrity_dir": ..., "run_dir": ..., "warm_load": false
    }

Keys of "arguments" are Megatron-LM's own argument names (as in Primus YAML overrides), so a config
written for Megatron-LM means the same here. `MEGATRON_DEFAULTS` (`ckpt_bench.core.megatron_arguments`)
fills what is missing. The launcher has refused names no Megatron-LM knows and put the ones this worker
does not act on into the report's notes; they show in the arguments dump too. The arguments the worker
acts on:

    model        num_layers hidden_size ffn_hidden_size num_attention_heads group_query_attention
                 num_query_groups seq_length max_position_embeddings vocab_size
                 make_vocab_size_divisible_by position_embedding_type rotary_percent rotary_base
                 normalization norm_epsilon swiglu
                 untie_embeddings_and_output_weights add_bias_linear hidden_dropout
                 attention_dropout init_method_std num_experts moe_router_topk moe_grouped_gemm
                 bf16 fp16
    parallelism  tensor_model_parallel_size pipeline_model_parallel_size
                 expert_model_parallel_size context_parallel_size sequence_parallel
    training     micro_batch_size global_batch_size train_iters seed log_interval
    optimizer    optimizer lr weight_decay adam_beta1 adam_beta2 adam_eps sgd_momentum clip_grad
                 use_distributed_optimizer accumulate_allreduce_grads_in_fp32
    checkpoint   save load save_interval ckpt_format (torch_dist | torch) async_save
                 use_persistent_ckpt_worker ckpt_fully_parallel_save ckpt_fully_parallel_load
                 ckpt_assume_constant_structure dist_ckpt_optim_fully_reshardable
                 dist_ckpt_strictness save_retain_interval
                 non_persistent_save_interval non_persistent_ckpt_type (global | local)
                 non_persistent_local_ckpt_algo replication replication_jump replication_factor

A rank turns the spec into Megatron-LM's `args`, derived values added and validated, with
`ckpt_bench.backends.megatron.worker_args.megatron_args`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ckpt_bench.core.worker_spec import WorkerSpec


@dataclass(kw_only=True)
class MegatronSpec(WorkerSpec):
    """What every rank of a Megatron run trains, saves and loads: built by the launcher, read by the ranks."""

    section: ClassVar[str] = "megatron"

    arguments: dict
    """Megatron-LM arguments by name: the experiment with the command line's overrides. `save` and `load`
    are the run's checkpoint folder (`checkpoint_dir`) where the lifecycle made one."""
    training_impact: bool = False
    """Train the save pass's iterations twice in the same processes, without and then with saves."""
    load_layout: dict | None = None
    """The load pass's parallel sizes (Megatron-LM argument -> size) where --load-* changes them; None: as
    saved."""
    storage: dict | None = None
    """`CheckpointStorage.describe()` of where the checkpoints go: an `msc` one is reached through multi-storage-client
    (megatron-core's MSC path), any other through the file system, MSC turned off."""
    load_tier: str | None = None
    """With non-persistent checkpoints, the tier the load reads (`persistent` or `non_persistent`); None: as
    Megatron-LM chooses (the non-persistent checkpoint when it is not older than the persistent one)."""
