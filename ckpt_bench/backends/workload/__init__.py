"""The workload backend: a real job's checkpoint at its real size, without its GPUs and without training.
What the checkpoint looks like (the workload, each rank's layout, the sources of both) is `ckpt_bench.layout`;
this package runs it.

    spec             WorkloadSpec: the plan as the launcher writes it and every rank reads it
    launcher         options, checks, `--plan`, the Plan
    engines/         torch-save, torch_dist, torch, dcp: one file each, listed in engines/__init__.ENGINES
    worker           the ranks: allocate once, save and load through the engine, DLIO's timing as events
"""
