"""What every runner is launched through, beneath the backends that implement it: a runner (`base.Backend`,
one per backend in `ckpt_bench.backends`) turns a typed `LaunchConfig` (`config`) into a `Plan`; `torchrun`
runs a pass, `resources` checks what a run needs of the host, `run_info` says what the run is, `nodes`
(multi-node runs), `hosts_baseline` and `interrupts` (Ctrl-C, SIGTERM) serve the lifecycle. The lifecycle that
carries a plan out, and the registry of runners, stand above the backends in `ckpt_bench.benchmark`.
"""
