"""Launching a benchmark, whatever runs it: a runner (`base.Backend`, one per backend in
`ckpt_bench.backends`) turns a typed `LaunchConfig` (`config`) into a `Plan`; `lifecycle` carries every plan
out the same way (run directory, passes under `torchrun`, measuring, clean-up, report). `registry` lists the
runners; `repeat`, `emit` (Slurm and Kubernetes jobs), `nodes` (multi-node runs) and `interrupts` (Ctrl-C,
SIGTERM) wrap a launch without touching it.
"""
