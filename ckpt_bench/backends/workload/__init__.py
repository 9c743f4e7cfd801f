"""The workload backend: a real job's checkpoint at its real size, without its GPUs and without training.

    shapes           what each rank of a DLIO checkpoint holds (DLIO's formulas; the MLPerf llama3 catalog;
                     DLIO workload YAMLs), torch-free
    megatron_shapes  the same job as a Megatron GPT's sharded state (the torch_dist engine's), torch-free
    sources          `--workload NAME|FILE` -> a Workload (catalog, DLIO YAML, Primus/Megatron experiment)
    spec             WorkloadSpec: the plan as the launcher writes it and every rank reads it
    launcher         options, checks, `--plan`, the Plan
    engines/         torch-save, torch_dist, dcp: one file each, listed in engines/__init__.ENGINES
    worker           the ranks: allocate once, save and load through the engine, DLIO's timing as events
"""
