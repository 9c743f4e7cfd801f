"""The two commands: `ckpt-launch` (`launch`) and `ckpt-report` (`report`). Argument parsing lives here
and nowhere else; what they parse becomes typed configs (`ckpt_bench.benchmark.registry.build_launch`).
"""
