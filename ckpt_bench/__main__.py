"""`python -m ckpt_bench ARGS`: `ckpt-launch ARGS`, for a Python whose scripts folder is not on PATH (an image's)."""

from ckpt_bench.cli.launch import main

main()
