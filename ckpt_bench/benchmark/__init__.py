"""A benchmark from options to the written report, above everything it calls: `registry` lists the runners
(every backend and framework) and builds the typed `LaunchConfig`; `lifecycle` carries a runner's plan out
(run directory, passes under `torchrun`, measuring, the projection, clean-up, report.json and report.html);
`repeat` runs it several times; `emit` writes it as a Slurm or Kubernetes job instead, checked first.
The runner's contract the backends implement (`launcher.base`), torchrun and the host's resources stay in
`ckpt_bench.launcher`, beneath the backends.
"""
