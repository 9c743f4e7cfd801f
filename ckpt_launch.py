#!/usr/bin/env python3
"""Run a checkpoint benchmark: `python ckpt_launch.py --help` (installed: `ckpt-launch`)."""

from ckpt_bench.cli.launch import main

if __name__ == "__main__":
    main()
