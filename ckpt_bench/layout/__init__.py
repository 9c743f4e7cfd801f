"""What a job's checkpoint looks like, rank by rank: the description that the workload's engines write, the
projection prices, `--plan` prints and `model.job` sizes. Beneath both `backends/` and `projection/`; it
imports neither, and nothing here imports torch.

    workload         Workload: a job's model, parallel layout and schedule (DLIO's fields and defaults)
    catalog          the named workloads (MLPerf Storage's llama3, Llama 2)
    dlio_yaml        a DLIO workload YAML -> a Workload
    sources          `--workload NAME|FILE` -> a Workload (catalog, DLIO YAML, Primus/Megatron experiment)
    checkpoint_layout  Layout, RankShare, FileShare, TensorSpec: what each rank holds and writes per save
    dlio_layout      DLIO's formulas: each rank's tensors and files of DLIO's checkpoint
    megatron_shapes  the same job as a Megatron GPT's sharded state (torch_dist's, dcp's)
    megatron_dcp     that state through DCP: its planner's writers
    megatron_fsdp2   the state of a Megatron FSDP2 job (torch_dcp's DTensors)
    megatron_torch   the same Megatron state in Megatron-LM's legacy per-rank files (the torch engine's)
"""
