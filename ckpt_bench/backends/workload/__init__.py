"""The workload backend: a real job's checkpoint at its real size, without its GPUs and without training.

    workload         Workload: a job's model, parallel layout and schedule (DLIO's fields and defaults)
    catalog          the named workloads (MLPerf Storage's llama3, Llama 2)
    dlio_yaml        a DLIO workload YAML -> a Workload
    checkpoint_layout  Layout, RankShare, FileShare, TensorSpec: what each rank holds and writes per save
    dlio_layout      DLIO's formulas: each rank's tensors and files of DLIO's checkpoint
    megatron_shapes  the same job as a Megatron GPT's sharded state (torch_dist's, dcp's), torch-free
    megatron_torch   the same Megatron state in Megatron-LM's legacy per-rank files (the torch engine's)
    sources          `--workload NAME|FILE` -> a Workload (catalog, DLIO YAML, Primus/Megatron experiment)
    spec             WorkloadSpec: the plan as the launcher writes it and every rank reads it
    launcher         options, checks, `--plan`, the Plan
    engines/         torch-save, torch_dist, torch, dcp: one file each, listed in engines/__init__.ENGINES
    worker           the ranks: allocate once, save and load through the engine, DLIO's timing as events
"""
